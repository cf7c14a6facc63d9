//! Invariant 1 of docs/ARCHITECTURE.md at the vendor under mass cancellation: 120 callers each start a stream, take
//! its first audio, and cancel it 0.2 s later, again and again. A cut-off call keeps its lease
//! until its vendor connection is closed and the pool's `cancel_grace_ms` (default) passed, so
//! the streaming fake, which counts a call until it sees the connection close, never sees a
//! key above its cap: no vendor 429s.

mod common;

use std::time::Duration;

use common::{Stack, json_of};
use futures::StreamExt;
use voxpool_fake_vendors::{FakeConfig, FakeVendor, Streaming, VendorKind};
use voxpool_proto::synthesis::v1 as pb;
use voxpool_synthesis::adapters::registry::{self, AdapterOptions};

/// The vendor's cap per key, and each key's configured capacity.
const CAP: u32 = 10;
const KEYS: usize = 3;
const CALLERS: usize = 120;
const ROUNDS: usize = 10;
/// How long a caller listens after its first audio before it cancels.
const LISTEN: Duration = Duration::from_millis(200);

fn pool(base_url: &str) -> String {
    let mut t = String::from("[[pools]]\nid = \"p\"\nprovider = \"openai\"\nmodel = \"m1\"\n");
    t.push_str(&format!(
        "[[pools.upstreams]]\nid = \"u0\"\nbase_url = \"{base_url}\"\n"
    ));
    for k in 0..KEYS {
        t.push_str(&format!(
            "[[pools.upstreams.keys]]\nid = \"k{k}\"\ncapacity = {CAP}\ncredential = {{ file = \"{{dir}}/u0-k{k}\" }}\n"
        ));
    }
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_cancelled_streams_never_takes_a_key_over_its_cap_at_the_vendor() {
    // Streams that would run for 5 s: every call ends by its caller's cancel.
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::OpenAi).cap(CAP).streaming(
        Streaming::new(Duration::from_millis(50), Duration::from_secs(5), 20),
    ))
    .await
    .expect("fake vendor starts");
    let stack = Stack::start(
        &pool(&fake.base_url()),
        registry::builtin(&AdapterOptions::default()),
    )
    .await;
    let voice = common::snapshot("openai", "p", "alloy", "{}");
    let request = pb::SynthesizeRequest {
        voice: Some(pb::synthesize_request::Voice::SnapshotJson(json_of(&voice))),
        text: "Hello there, this stream is cancelled soon.".into(),
        format: pb::AudioFormat::Pcm as i32,
        ..Default::default()
    };

    let mut callers = Vec::new();
    for _ in 0..CALLERS {
        let mut client = stack.synthesis.clone();
        let request = request.clone();
        callers.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let mut stream = client
                    .synthesize_stream(request.clone())
                    .await?
                    .into_inner();
                match stream.next().await {
                    Some(Ok(first)) => assert!(!first.audio.is_empty(), "audio first"),
                    Some(Err(status)) => return Err(status),
                    None => panic!("the stream ended without audio"),
                }
                // The caller listens a moment, then hangs up mid-stream.
                tokio::time::sleep(LISTEN).await;
                drop(stream);
            }
            Ok::<(), tonic::Status>(())
        }));
    }
    for caller in callers {
        caller
            .await
            .expect("caller task")
            .expect("every stream started with audio");
    }
    stack.wait_until_idle("p").await;
    let stats = fake.stats();
    let sent: u64 = stats.values().map(|k| k.total_requests).sum();
    let refused: u64 = stats.values().map(|k| k.rejected_over_cap).sum();
    let peak = stats.values().map(|k| k.peak_concurrency).max();
    println!(
        "vendor requests: {sent}, vendor 429s: {refused}, highest concurrency on a key: {peak:?}"
    );
    assert!(
        sent >= (CALLERS * ROUNDS) as u64,
        "every round reached the vendor: {stats:?}"
    );
    for (key, k) in &stats {
        assert!(
            k.peak_concurrency <= u64::from(CAP),
            "key {key} saw {} concurrent requests at the vendor (cap {CAP}): {k:?}",
            k.peak_concurrency
        );
        assert_eq!(k.rejected_over_cap, 0, "key {key} answered 429s: {k:?}");
    }
}
