//! Invariant 1 of docs/ARCHITECTURE.md at the vendor: a lease covers the vendor's whole work, even when the caller has
//! gone. The fake vendor, like a real one, keeps working on (and counting) a request whose
//! client disconnected, so a lease released when the caller's deadline passes shows up there
//! as `cap + 1` and a 429.

mod common;

use std::time::Duration;

use common::{Stack, json_of};
use tonic::Code;
use voxpool_fake_vendors::{FakeConfig, FakeVendor, Latency, VendorKind};
use voxpool_proto::synthesis::v1 as pb;
use voxpool_synthesis::adapters::registry::{self, AdapterOptions};

/// The vendor's cap per key, and the pool's configured capacity.
const CAP: u32 = 3;
/// How long the vendor works on every request.
const VENDOR_LATENCY: Duration = Duration::from_millis(400);
/// Every caller's deadline: well before the vendor answers.
const CALLER_DEADLINE: Duration = Duration::from_millis(150);

fn pool(base_url: &str) -> String {
    let mut t = String::from("[[pools]]\nid = \"p\"\nprovider = \"openai\"\nmodel = \"m1\"\n");
    t.push_str(&format!(
        "[[pools.upstreams]]\nid = \"u0\"\nbase_url = \"{base_url}\"\n"
    ));
    for k in 0..2 {
        t.push_str(&format!(
            "[[pools.upstreams.keys]]\nid = \"k{k}\"\ncapacity = {CAP}\ncredential = {{ file = \"{{dir}}/u0-k{k}\" }}\n"
        ));
    }
    t
}

#[tokio::test]
async fn callers_whose_deadline_ends_before_the_vendor_answers_never_push_a_key_over_its_cap() {
    let fake = FakeVendor::start(
        FakeConfig::new(VendorKind::OpenAi)
            .cap(CAP)
            .latency(Latency::Fixed(VENDOR_LATENCY)),
    )
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
        text: "Hello there.".into(),
        ..Default::default()
    };

    // 24 callers, 8 calls each, every call abandoned at its deadline.
    let mut callers = Vec::new();
    for _ in 0..24 {
        let mut client = stack.synthesis.clone();
        let request = request.clone();
        callers.push(tokio::spawn(async move {
            let mut codes = Vec::new();
            for _ in 0..8 {
                let mut call = tonic::Request::new(request.clone());
                call.set_timeout(CALLER_DEADLINE);
                codes.push(match client.synthesize(call).await {
                    Ok(_) => Code::Ok,
                    Err(status) => status.code(),
                });
            }
            codes
        }));
    }
    let mut codes = Vec::new();
    for caller in callers {
        codes.extend(caller.await.expect("caller task"));
    }
    // The pool drains once the vendor has finished the abandoned work...
    stack.wait_until_idle("p").await;
    let stats = fake.stats();
    let sent: u64 = stats.values().map(|k| k.total_requests).sum();
    let refused: u64 = stats.values().map(|k| k.rejected_over_cap).sum();
    println!("vendor requests: {sent}, vendor 429s: {refused}");
    // Ended at its deadline: the server's DEADLINE_EXCEEDED (sent 50 ms early), or, when a
    // busy machine delays that answer past the deadline itself, the client's own timer
    // (CANCELLED "Timeout expired"). Never audio: the vendor answers after every deadline.
    assert!(
        codes
            .iter()
            .all(|c| matches!(c, Code::DeadlineExceeded | Code::Cancelled)),
        "every call ends at its deadline, before the vendor answers: {codes:?}"
    );

    assert!(
        sent >= u64::from(CAP),
        "the callers reached the vendor: {stats:?}"
    );
    for (key, k) in &stats {
        // ...and at no instant did the vendor see more than the cap on a key.
        assert!(
            k.peak_concurrency <= u64::from(CAP),
            "key {key} saw {} concurrent requests at the vendor (cap {CAP}): {k:?}",
            k.peak_concurrency
        );
        assert_eq!(k.rejected_over_cap, 0, "key {key} answered 429s: {k:?}");
        assert_eq!(k.in_flight, 0, "the vendor finished every request of {key}");
    }
    for key in stack.pool_status("p").await.keys {
        assert_eq!(
            key.consecutive_failures, 0,
            "abandoned calls that the vendor served are successes for {}",
            key.key_id
        );
    }
}

/// A caller that leaves while its Acquire waits in the scheduler's line, when the grant
/// happens but its answer is lost on the way back: synthesis frees that lease by the Acquire's
/// idempotency key instead of leaving the slot held until its TTL (60 s here).
#[tokio::test]
async fn a_grant_whose_caller_left_before_the_answer_is_released_long_before_its_ttl() {
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::OpenAi).cap(CAP))
        .await
        .expect("fake vendor starts");
    let (gate, gate_rx) = tokio::sync::watch::channel(true);
    let mut text = pool(&fake.base_url());
    text = text.replacen(&format!("capacity = {CAP}"), "capacity = 1", 2);
    let stack = Stack::start_with(
        &text,
        registry::builtin(&AdapterOptions::default()),
        common::Opts {
            lease_ttl: Duration::from_secs(60),
            scheduler_gate: Some(gate_rx),
            ..common::Opts::default()
        },
    )
    .await;
    // Hold both slots directly, so the synthesis call waits in the line.
    let mut direct = stack.scheduler.clone();
    let mut held = Vec::new();
    for _ in 0..2 {
        let lease = direct
            .acquire(voxpool_proto::scheduler::v1::AcquireRequest {
                pool: "p".into(),
                lease_ttl_ms: 60_000,
                ..Default::default()
            })
            .await
            .expect("slot")
            .into_inner();
        held.push(lease);
    }
    let voice = common::snapshot("openai", "p", "alloy", "{}");
    let mut client = stack.synthesis.clone();
    let call = tokio::spawn(async move {
        client
            .synthesize(pb::SynthesizeRequest {
                voice: Some(pb::synthesize_request::Voice::SnapshotJson(json_of(&voice))),
                text: "Hello there.".into(),
                ..Default::default()
            })
            .await
    });
    let waiting = |s: &voxpool_proto::scheduler::v1::PoolStatus| s.waiters == 1;
    while !waiting(&stack.pool_status("p").await) {
        tokio::task::yield_now().await;
    }
    // The answer to the coming grant is lost in transit...
    gate.send(false).expect("gate");
    direct
        .release(voxpool_proto::scheduler::v1::ReleaseRequest {
            lease_id: held[0].lease_id.clone(),
            ..Default::default()
        })
        .await
        .expect("release");
    while stack.pool_status("p").await.waiters != 0 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        stack.in_flight("p").await,
        2,
        "granted to the waiting Acquire"
    );
    // ...and the caller goes away.
    call.abort();
    assert!(call.await.is_err_and(|e| e.is_cancelled()));
    stack.wait_until_idle_but(1, "p").await;
    gate.send(true).expect("gate");
}
