//! Long text: split at sentence boundaries, chunks synthesized in order and joined; the stream
//! sends the same bytes in order with `final` on the last message.

mod common;

use common::{
    Stack, pool_toml, request,
    scripted::{RATE, Scripted, Step, samples_for},
    snapshot,
};
use futures::StreamExt;
use tonic::Code;
use voxpool_proto::{scheduler::v1::Outcome, synthesis::v1 as pb};
use voxpool_synthesis::{
    adapters::TextLimit,
    audio::wav::{self, WavSpec},
    stream::MAX_MESSAGE_BYTES,
    text,
};

const LIMIT: TextLimit = TextLimit::Chars(40);
const TEXT: &str = "The first sentence is here. A second one follows it. Then a third, with a clause. And the end.";

async fn collect(stack: &Stack, req: pb::SynthesizeRequest) -> Vec<pb::AudioChunk> {
    let mut stream = stack
        .synthesis
        .clone()
        .synthesize_stream(req)
        .await
        .expect("stream")
        .into_inner();
    let mut out = Vec::new();
    while let Some(msg) = stream.next().await {
        out.push(msg.expect("stream message"));
    }
    out
}

fn check_order(chunks: &[pb::AudioChunk]) {
    for (i, c) in chunks.iter().enumerate() {
        assert_eq!(c.seq, i as i32);
        assert_eq!(
            c.r#final,
            i + 1 == chunks.len(),
            "only the last message is final"
        );
        assert!(c.audio.len() <= MAX_MESSAGE_BYTES);
    }
}

#[tokio::test]
async fn long_text_is_split_synthesized_in_order_and_joined_into_one_wav() {
    let (adapter, _) = Scripted::new("openai", LIMIT, vec![]);
    let stack = Stack::start(&pool_toml("p", "openai", 1, 2, 2), adapter.registry()).await;
    let resp = stack
        .synthesize(request(&snapshot("openai", "p", "alloy", "{}"), TEXT))
        .await
        .expect("synthesized");

    let pieces = text::split(TEXT, LIMIT);
    assert!(pieces.len() >= 3, "{pieces:?}");
    let mut sent: Vec<String> = adapter.calls().iter().map(|c| c.text.clone()).collect();
    sent.sort();
    let mut expected_pieces = pieces.clone();
    expected_pieces.sort();
    assert_eq!(
        sent, expected_pieces,
        "every chunk, split at sentence ends, goes to the vendor once (side by side)"
    );
    let samples: Vec<u8> = pieces.iter().flat_map(|p| samples_for(p)).collect();
    let expected = wav::write(
        WavSpec {
            channels: 1,
            sample_rate: RATE,
            bits_per_sample: 16,
        },
        &samples,
    )
    .expect("wav");
    assert_eq!(
        resp.audio, expected,
        "one header whose sizes match the joined data"
    );
    assert_eq!(resp.attempts.len(), pieces.len());
    assert_eq!(stack.in_flight("p").await, 0);
}

#[tokio::test]
async fn stream_sends_chunks_in_order_and_concatenates_to_the_unary_audio() {
    for format in [pb::AudioFormat::Pcm, pb::AudioFormat::Wav] {
        let (adapter, _) = Scripted::new("openai", LIMIT, vec![]);
        let stack = Stack::start(&pool_toml("p", "openai", 1, 1, 2), adapter.registry()).await;
        let req = pb::SynthesizeRequest {
            format: format as i32,
            ..request(&snapshot("openai", "p", "alloy", "{}"), TEXT)
        };
        let unary = stack.synthesize(req.clone()).await.expect("unary").audio;
        let chunks = collect(&stack, req).await;
        check_order(&chunks);
        if format == pb::AudioFormat::Pcm {
            assert!(
                chunks.len() >= 3,
                "PCM goes out per text chunk: {} messages",
                chunks.len()
            );
        }
        let joined: Vec<u8> = chunks.iter().flat_map(|c| c.audio.clone()).collect();
        assert_eq!(joined, unary, "{format:?}: stream = unary");
        assert_eq!(stack.in_flight("p").await, 0);
    }
}

#[tokio::test]
async fn large_audio_is_streamed_in_bounded_messages() {
    let (adapter, _) = Scripted::new("openai", TextLimit::Chars(4096), vec![]);
    let stack = Stack::start(&pool_toml("p", "openai", 1, 1, 2), adapter.registry()).await;
    let text = "word ".repeat(400);
    let req = pb::SynthesizeRequest {
        format: pb::AudioFormat::Pcm as i32,
        ..request(&snapshot("openai", "p", "alloy", "{}"), &text)
    };
    let chunks = collect(&stack, req).await;
    check_order(&chunks);
    assert!(
        chunks.len() >= 3,
        "{} messages for {} bytes",
        chunks.len(),
        text.len() * 80
    );
    let joined: Vec<u8> = chunks.iter().flat_map(|c| c.audio.clone()).collect();
    assert_eq!(joined, samples_for(&text));
}

#[tokio::test]
async fn a_failure_on_a_later_chunk_fails_over_for_that_chunk_only() {
    let steps = vec![
        Step::Audio,
        Step::Fail(Outcome::UpstreamError, Some(502), "bad gateway"),
    ];
    let (adapter, _) = Scripted::new("openai", LIMIT, steps);
    // One chunk at a time, so the script's second step meets the second chunk.
    let toml = format!(
        "{}\n[synthesis]\nmax_parallel_chunks = 1\n",
        pool_toml("p", "openai", 2, 1, 1)
    );
    let stack = Stack::start(&toml, adapter.registry()).await;
    let resp = stack
        .synthesize(request(&snapshot("openai", "p", "alloy", "{}"), TEXT))
        .await
        .expect("synthesized");
    let pieces = text::split(TEXT, LIMIT);
    assert_eq!(resp.attempts.len(), pieces.len() + 1);
    assert_eq!(resp.attempts[1].outcome, Outcome::UpstreamError as i32);
    assert_eq!(resp.attempts[2].outcome, Outcome::Success as i32);
    let calls = adapter.calls();
    assert_eq!(
        calls[1].text, calls[2].text,
        "the failed chunk is retried, not skipped"
    );
    assert_ne!(calls[1].key_id, calls[2].key_id);
    assert_eq!(
        calls[2].sample_rate_hz,
        Some(RATE),
        "every chunk of split text asks for one explicit rate"
    );
}

#[tokio::test]
async fn ogg_opus_that_needs_several_chunks_is_refused_up_front() {
    let (adapter, _) = Scripted::new("openai", LIMIT, vec![]);
    let stack = Stack::start(&pool_toml("p", "openai", 1, 1, 1), adapter.registry()).await;
    let req = pb::SynthesizeRequest {
        format: pb::AudioFormat::OggOpus as i32,
        ..request(&snapshot("openai", "p", "alloy", "{}"), TEXT)
    };
    let err = stack.synthesize(req).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("OGG_OPUS audio cannot be joined"),
        "{}",
        err.message()
    );
    assert!(adapter.calls().is_empty());
}
