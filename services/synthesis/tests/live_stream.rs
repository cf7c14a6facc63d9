//! Audio goes out as the vendor sends it: the first bytes before the vendor has finished,
//! chunks of long text side by side on several leases and emitted in text order, a stream that
//! breaks after audio went out ends with what was delivered, and cancelling cuts every call.
//! Synchronization is by the scripted adapter's signals (a call started, a call dropped) and
//! its gate (the vendor has not finished until the test opens it), never by sleeps.

mod common;

use std::time::Duration;

use common::{
    Stack, pool_toml, request,
    scripted::{RATE, Scripted, Signals, Step, samples_for},
    snapshot,
};
use futures::StreamExt;
use tonic::Code;
use voxpool_proto::{scheduler::v1::Outcome, synthesis::v1 as pb};
use voxpool_synthesis::{adapters::TextLimit, audio::wav, text};

const LIMIT: TextLimit = TextLimit::Chars(40);
/// Eight sentences of under 40 characters: eight chunks.
const EIGHT: &str = "One is the first sentence here. Two is the next one to come. Three is here in the middle. Four follows on right after. Five is the middle one of all. Six is after the fifth one. Seven is near the very end. Eight is the end of it all.";

/// Waits (bounded) for `n` signals on `rx`.
async fn signals(rx: &mut tokio::sync::mpsc::UnboundedReceiver<()>, n: usize, what: &str) {
    for i in 0..n {
        tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("only {i} of {n} {what} within 10 s"))
            .expect("signal channel open");
    }
}

fn pcm(snapshot_text: &str) -> pb::SynthesizeRequest {
    pb::SynthesizeRequest {
        format: pb::AudioFormat::Pcm as i32,
        ..request(&snapshot("openai", "p", "alloy", "{}"), snapshot_text)
    }
}

async fn open(stack: &Stack, req: pb::SynthesizeRequest) -> tonic::Streaming<pb::AudioChunk> {
    stack
        .synthesis
        .clone()
        .synthesize_stream(req)
        .await
        .expect("stream")
        .into_inner()
}

async fn rest(mut stream: tonic::Streaming<pb::AudioChunk>) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(msg) = stream.next().await {
        out.extend(msg.expect("message").audio);
    }
    out
}

#[tokio::test]
async fn the_first_audio_goes_out_before_the_vendor_has_finished() {
    let text = "A single sentence.";
    let (adapter, Signals { mut started, .. }) =
        Scripted::new("openai", LIMIT, vec![Step::FirstThenGate]);
    let stack = Stack::start(&pool_toml("p", "openai", 1, 1, 2), adapter.registry()).await;
    let mut stream = open(&stack, pcm(text)).await;
    signals(&mut started, 1, "calls started").await;
    let first = stream.next().await.expect("a message").expect("audio");
    let samples = samples_for(text);
    assert_eq!(
        first.audio,
        samples[..samples.len() / 2],
        "the vendor's first half arrives while the vendor is still working (gate closed)"
    );
    assert!(!first.r#final);
    assert_eq!(
        stack.in_flight("p").await,
        1,
        "the lease is held until the vendor finishes"
    );
    adapter.open_gate();
    let mut all = first.audio;
    all.extend(rest(stream).await);
    assert_eq!(all, samples, "the streamed bytes are the vendor's bytes");
    stack.wait_until_idle("p").await;
}

#[tokio::test]
async fn wav_with_the_streaming_header_starts_before_the_vendor_has_finished() {
    let text = "A single sentence.";
    let (adapter, Signals { mut started, .. }) =
        Scripted::new("openai", LIMIT, vec![Step::FirstThenGate]);
    let stack = Stack::start(&pool_toml("p", "openai", 1, 1, 2), adapter.registry()).await;
    let req = pb::SynthesizeRequest {
        format: pb::AudioFormat::Wav as i32,
        wav_streaming_header: true,
        ..request(&snapshot("openai", "p", "alloy", "{}"), text)
    };
    let mut stream = open(&stack, req).await;
    signals(&mut started, 1, "calls started").await;
    let first = stream.next().await.expect("a message").expect("audio");
    assert_eq!(&first.audio[0..4], b"RIFF");
    assert_eq!(
        &first.audio[4..8],
        &u32::MAX.to_le_bytes(),
        "RIFF size unknown"
    );
    assert_eq!(
        &first.audio[40..44],
        &u32::MAX.to_le_bytes(),
        "data size unknown"
    );
    adapter.open_gate();
    let mut all = first.audio;
    all.extend(rest(stream).await);
    let header = wav::header(&all).expect("a WAV").expect("a full header");
    assert_eq!(header.spec.sample_rate, RATE);
    assert_eq!(&all[header.data_start..], samples_for(text));
}

#[tokio::test]
async fn the_streaming_header_is_refused_for_formats_other_than_wav() {
    let (adapter, _) = Scripted::new("openai", LIMIT, vec![]);
    let stack = Stack::start(&pool_toml("p", "openai", 1, 1, 2), adapter.registry()).await;
    let req = pb::SynthesizeRequest {
        wav_streaming_header: true,
        ..pcm("Hello.")
    };
    let err = stack.synthesize(req).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("wav_streaming_header"),
        "{}",
        err.message()
    );
    assert!(adapter.calls().is_empty(), "refused before any lease");
}

#[tokio::test]
async fn eight_chunks_run_on_eight_leases_at_once_and_come_out_in_text_order() {
    let pieces = text::split(EIGHT, LIMIT);
    assert_eq!(pieces.len(), 8, "{pieces:?}");
    let (adapter, Signals { mut started, .. }) =
        Scripted::new("openai", LIMIT, vec![Step::Gate; 8]);
    let toml = format!(
        "{}\n[synthesis]\nmax_parallel_chunks = 8\n",
        pool_toml("p", "openai", 1, 2, 4)
    );
    let stack = Stack::start(&toml, adapter.registry()).await;
    let stream = open(&stack, pcm(EIGHT)).await;
    // Every chunk's call is under way before any vendor answers: one at a time would stall
    // here on the first closed gate.
    signals(&mut started, 8, "calls started").await;
    assert_eq!(stack.in_flight("p").await, 8);
    for _ in 0..8 {
        adapter.open_gate();
    }
    let expected: Vec<u8> = pieces.iter().flat_map(|p| samples_for(p)).collect();
    assert_eq!(
        rest(stream).await,
        expected,
        "each chunk's audio (derived from its text) in text order"
    );
    stack.wait_until_idle("p").await;
}

#[tokio::test]
async fn by_default_four_chunks_run_at_once() {
    let (adapter, Signals { mut started, .. }) =
        Scripted::new("openai", LIMIT, vec![Step::Gate; 8]);
    let stack = Stack::start(&pool_toml("p", "openai", 1, 2, 4), adapter.registry()).await;
    let unary = {
        let stack_synthesis = stack.synthesis.clone();
        tokio::spawn(async move { stack_synthesis.clone().synthesize(pcm(EIGHT)).await })
    };
    signals(&mut started, 4, "calls started").await;
    assert_eq!(
        stack.in_flight("p").await,
        4,
        "synthesis.max_parallel_chunks = 4 leases at once"
    );
    for _ in 0..8 {
        adapter.open_gate();
    }
    let resp = unary
        .await
        .expect("task")
        .expect("synthesized")
        .into_inner();
    let pieces = text::split(EIGHT, LIMIT);
    let expected: Vec<u8> = pieces.iter().flat_map(|p| samples_for(p)).collect();
    assert_eq!(resp.audio, expected, "unary output is in text order too");
    assert_eq!(resp.attempts.len(), 8);
}

#[tokio::test]
async fn a_stream_that_breaks_after_audio_went_out_ends_with_what_was_delivered() {
    let text = "A single sentence.";
    let (adapter, _) = Scripted::new(
        "openai",
        LIMIT,
        vec![Step::FirstThenFail(Outcome::UpstreamError)],
    );
    let stack = Stack::start(&pool_toml("p", "openai", 1, 2, 2), adapter.registry()).await;
    let mut stream = open(&stack, pcm(text)).await;
    let first = stream.next().await.expect("a message").expect("audio");
    let half = samples_for(text).len() / 2;
    assert_eq!(first.audio.len(), half);
    let err = stream
        .next()
        .await
        .expect("an end")
        .expect_err("the stream ends with an error");
    let metadata = common::assert_stream_broken(&err, half);
    assert_eq!(metadata["delivered_messages"], "1");
    assert_eq!(metadata["complete_chunks"], "0");
    assert!(err.message().contains("after"), "{}", err.message());
    assert_eq!(
        adapter.calls().len(),
        1,
        "no failover after audio went out: the chunk would be spliced from two calls"
    );
    stack.wait_until_idle("p").await;
}

#[tokio::test]
async fn a_unary_call_whose_vendor_breaks_mid_audio_fails_over_cleanly() {
    let text = "A single sentence.";
    let (adapter, _) = Scripted::new(
        "openai",
        LIMIT,
        vec![Step::FirstThenFail(Outcome::UpstreamError), Step::Audio],
    );
    let stack = Stack::start(&pool_toml("p", "openai", 1, 2, 2), adapter.registry()).await;
    let resp = stack.synthesize(pcm(text)).await.expect("synthesized");
    assert_eq!(
        resp.audio,
        samples_for(text),
        "the broken call's half is dropped, not spliced"
    );
    assert_eq!(resp.attempts.len(), 2);
    assert_eq!(resp.attempts[0].outcome, Outcome::UpstreamError as i32);
    assert_ne!(resp.attempts[0].key_id, resp.attempts[1].key_id);
}

#[tokio::test]
async fn cancelling_the_stream_cuts_every_call_and_releases_every_lease() {
    let (
        adapter,
        Signals {
            mut started,
            mut dropped,
        },
    ) = Scripted::new("openai", LIMIT, vec![Step::FirstThenBlock; 8]);
    let stack = Stack::start(&pool_toml("p", "openai", 1, 2, 4), adapter.registry()).await;
    let mut stream = open(&stack, pcm(EIGHT)).await;
    signals(&mut started, 4, "calls streaming").await;
    let first = stream.next().await.expect("a message").expect("audio");
    assert!(!first.audio.is_empty());
    assert_eq!(stack.in_flight("p").await, 4);
    drop(stream);
    // The vendors never finish on their own: only the cut-off ends these calls.
    signals(&mut dropped, 4, "calls cut off").await;
    stack.wait_until_idle("p").await;
    assert_eq!(adapter.calls().len(), 4, "no further chunk started");
}

#[tokio::test]
async fn an_exact_wav_stream_whose_vendor_breaks_fails_over_since_nothing_went_out() {
    let text = "A single sentence.";
    let (adapter, _) = Scripted::new(
        "openai",
        LIMIT,
        vec![Step::FirstThenFail(Outcome::UpstreamError), Step::Audio],
    );
    let stack = Stack::start(&pool_toml("p", "openai", 1, 2, 2), adapter.registry()).await;
    let req = pb::SynthesizeRequest {
        format: pb::AudioFormat::Wav as i32,
        ..request(&snapshot("openai", "p", "alloy", "{}"), text)
    };
    let wav = rest(open(&stack, req).await).await;
    let header = wav::header(&wav).expect("a WAV").expect("a header");
    assert_eq!(
        header.data_len,
        Some(samples_for(text).len() as u32),
        "exact sizes"
    );
    assert_eq!(
        &wav[header.data_start..],
        samples_for(text),
        "the second call's audio, whole"
    );
    assert_eq!(adapter.calls().len(), 2, "the broken call failed over");
}
