//! Vendor streaming end to end, through the real adapters and their streaming fakes: the first
//! `SynthesizeStream` message arrives while the vendor is still sending (first bytes at 0.2 s,
//! the rest over 1.5 s) and the bytes are the vendor's; an 8-chunk text runs on 8 leases at
//! once and its audio is in text order (per-chunk markers in the fake's audio); a vendor stream
//! that breaks after audio went out ends the stream with what was delivered; cancelling a
//! stream frees every lease at once, at the vendor too.

mod common;

use std::time::Duration;

use common::{Stack, json_of};
use futures::StreamExt;
use voxpool_fake_vendors::{FakeConfig, FakeVendor, Step, Streaming, VendorKind, audio::marker};
use voxpool_proto::synthesis::v1 as pb;
use voxpool_synthesis::{
    adapters::{
        TextLimit,
        registry::{self, AdapterOptions},
    },
    text,
};

/// A pool of one key (`u0/k0`, whose secret is `secret-u0-k0`) at `base_url`.
fn pool(provider: &str, base_url: &str, capacity: u32, extra: &str) -> String {
    format!(
        "[[pools]]\nid = \"p\"\nprovider = \"{provider}\"\nmodel = \"m1\"\n\
         [[pools.upstreams]]\nid = \"u0\"\nbase_url = \"{base_url}\"\n\
         [[pools.upstreams.keys]]\nid = \"k0\"\ncapacity = {capacity}\n\
         credential = {{ file = \"{{dir}}/u0-k0\" }}\n{extra}"
    )
}

const FAKE_KEY: &str = "secret-u0-k0";

fn pcm(provider: &str, voice_id: &str, text: &str) -> pb::SynthesizeRequest {
    let voice = common::snapshot(provider, "p", voice_id, "{}");
    pb::SynthesizeRequest {
        voice: Some(pb::synthesize_request::Voice::SnapshotJson(json_of(&voice))),
        text: text.into(),
        format: pb::AudioFormat::Pcm as i32,
        ..Default::default()
    }
}

async fn stack(toml: &str) -> Stack {
    Stack::start(toml, registry::builtin(&AdapterOptions::default())).await
}

/// Waits (bounded) until `done` holds.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what}: not within 5 s");
}

#[tokio::test]
async fn the_first_message_arrives_while_the_vendor_is_still_sending() {
    let fake = FakeVendor::start(
        FakeConfig::new(VendorKind::OpenAi).streaming(Streaming::new(
            Duration::from_millis(200),
            Duration::from_millis(1500),
            8,
        )),
    )
    .await
    .expect("fake");
    let stack = stack(&pool("openai", &fake.base_url(), 4, "")).await;
    let request = pcm("openai", "alloy", "Hello there, I am speaking now.");
    let mut stream = stack
        .synthesis
        .clone()
        .synthesize_stream(request.clone())
        .await
        .expect("stream")
        .into_inner();
    let first = stream.next().await.expect("a message").expect("audio");
    assert!(!first.audio.is_empty());
    assert_eq!(
        fake.key_stats(FAKE_KEY).in_flight,
        1,
        "the vendor is still sending when the caller has its first audio"
    );
    assert_eq!(stack.in_flight("p").await, 1, "and the lease is still held");
    let mut streamed = first.audio;
    while let Some(msg) = stream.next().await {
        streamed.extend(msg.expect("message").audio);
    }
    fake.set_streaming(None);
    let whole = stack.synthesize(request).await.expect("unary").audio;
    assert_eq!(
        streamed, whole,
        "the streamed bytes are the vendor's answer"
    );
    stack.wait_until_idle("p").await;
}

#[tokio::test]
async fn an_eight_chunk_text_runs_on_eight_leases_and_its_audio_is_in_text_order() {
    let fake = FakeVendor::start(
        FakeConfig::new(VendorKind::DashScope)
            .markers(true)
            .streaming(Streaming::new(
                Duration::from_millis(200),
                Duration::from_millis(400),
                4,
            )),
    )
    .await
    .expect("fake");
    let toml = pool(
        "dashscope",
        &fake.base_url(),
        8,
        "[synthesis]\nmax_parallel_chunks = 8\n",
    );
    let stack = stack(&toml).await;
    // Eight blocks of ~1900 characters, each opening with its own sentence: eight chunks of
    // DashScope's 2000-character limit, each with its own marker.
    let filler = "The river runs past the old mill and on toward the sea. ".repeat(33);
    let text: String = (1..=8)
        .map(|n| format!("Chunk number {n} begins right here. {filler}"))
        .collect();
    let chunks = text::split(&text, TextLimit::Chars(2000));
    assert_eq!(
        chunks.len(),
        8,
        "{:?}",
        chunks.iter().map(|c| c.len()).collect::<Vec<_>>()
    );
    let resp = stack
        .synthesize(pcm("dashscope", "longxiaochun_v2", &text))
        .await
        .expect("synthesized");
    let mut at = 0;
    for (i, chunk) in chunks.iter().enumerate() {
        let m = marker(chunk);
        let found = resp.audio[at..]
            .windows(m.len())
            .position(|w| w == m.as_slice())
            .unwrap_or_else(|| panic!("chunk {} not found after byte {at}", i + 1));
        at += found + m.len();
    }
    assert_eq!(resp.attempts.len(), 8);
    assert_eq!(
        fake.key_stats(FAKE_KEY).peak_concurrency,
        8,
        "all eight chunks were at the vendor at once"
    );
    stack.wait_until_idle("p").await;
}

#[tokio::test]
async fn a_vendor_stream_that_breaks_after_audio_went_out_ends_with_the_delivery() {
    let fake = FakeVendor::start(
        FakeConfig::new(VendorKind::OpenAi).streaming(Streaming::new(
            Duration::from_millis(100),
            Duration::from_millis(600),
            6,
        )),
    )
    .await
    .expect("fake");
    fake.script([Step::BreakAfterFirstPiece]);
    let stack = stack(&pool("openai", &fake.base_url(), 4, "")).await;
    let mut stream = stack
        .synthesis
        .clone()
        .synthesize_stream(pcm("openai", "alloy", "This sentence breaks."))
        .await
        .expect("stream")
        .into_inner();
    let mut delivered = 0;
    let err = loop {
        match stream.next().await.expect("the stream ends with an error") {
            Ok(msg) => delivered += msg.audio.len(),
            Err(status) => break status,
        }
    };
    assert!(delivered > 0, "the first piece went out before the break");
    common::assert_stream_broken(&err, delivered);
    assert_eq!(
        fake.key_stats(FAKE_KEY).total_requests,
        1,
        "no second call: the chunk is not spliced from two renditions"
    );
    stack.wait_until_idle("p").await;
}

#[tokio::test]
async fn cancelling_a_stream_frees_every_lease_at_once() {
    // Streams that would run for a minute: only cutting them ends them in time.
    let fake = FakeVendor::start(
        FakeConfig::new(VendorKind::OpenAi).streaming(Streaming::new(
            Duration::from_millis(100),
            Duration::from_secs(60),
            4,
        )),
    )
    .await
    .expect("fake");
    let stack = stack(&pool("openai", &fake.base_url(), 4, "")).await;
    let sentence = "A long sentence that keeps the vendor busy for a while today. ";
    let text = sentence.repeat(280);
    let chunks = text::split(&text, TextLimit::Chars(4096));
    assert!(chunks.len() >= 4, "{} chunks", chunks.len());
    let mut stream = stack
        .synthesis
        .clone()
        .synthesize_stream(pcm("openai", "alloy", &text))
        .await
        .expect("stream")
        .into_inner();
    stream.next().await.expect("a message").expect("audio");
    until("four calls at the vendor", || {
        fake.key_stats(FAKE_KEY).in_flight == 4
    })
    .await;
    assert_eq!(stack.in_flight("p").await, 4);
    drop(stream);
    stack.wait_until_idle("p").await;
    until("the vendor sees every call closed", || {
        fake.key_stats(FAKE_KEY).in_flight == 0
    })
    .await;
}
