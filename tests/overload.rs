//! Long texts under overload (docs/SYNTHESIS.md, "Admission"): 20 requests of 17,500
//! characters (five chunks each) arrive at once on a pool of 4 slots whose vendor takes 2 s a
//! call, each with a 10 s deadline. The ones that can finish are admitted and every one of them
//! completes whole; the rest are refused at once, RESOURCE_EXHAUSTED `DEADLINE_UNREACHABLE`,
//! before any vendor call (the fake counts every call it gets); over HTTP, with the same deadline
//! in `X-Voxpool-Timeout`, the refusal is a 429 `deadline_unreachable` with `Retry-After`. A
//! deadline too short to even freeze the voice is a timeout (504), never a catalog outage.

use std::time::Duration;

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
};
use voxpool_domain::contract::SynthesisReason;
use voxpool_e2e::{
    speech::{HTTP_KEY, Options, SpeechStack, long_text},
    synthesis_client,
};
use voxpool_fake_vendors::{FakeConfig, FakeVendor, Latency, VendorKind};
use voxpool_proto::synthesis::v1::SynthesizeResponse;

const REQUESTS: usize = 20;
const CHUNKS: usize = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_texts_over_capacity_are_admitted_while_they_can_finish_and_refused_at_once_after() {
    let fake = FakeVendor::start(FakeConfig {
        latency: Latency::Fixed(Duration::from_secs(2)),
        ..FakeConfig::new(VendorKind::OpenAi).cap(4)
    })
    .await
    .expect("fake vendor");
    let stack = one_key_of_four_slots(&fake).await;
    let text = long_text(17_500);
    let calls = || -> u64 { fake.stats().values().map(|k| k.total_requests).sum() };
    // One request alone teaches synthesis the pool's pace (five calls).
    let audio_whole = synthesis_client(&stack.synthesis.addr)
        .await
        .synthesize(stack.request(&text))
        .await
        .expect("a request alone completes")
        .into_inner()
        .audio
        .len();
    assert_eq!(calls(), CHUNKS as u64, "the text is {CHUNKS} chunks");

    let mut finished = burst(&stack, &text, REQUESTS, Duration::from_secs(10)).await;
    let (mut admitted, mut refused) = (0u64, 0u64);
    let mut probed = None;
    for _ in 0..REQUESTS {
        if whole_or_refused(finished.recv().await, audio_whole) {
            admitted += 1;
        } else {
            refused += 1;
            // The backlog only grows until a chunk ends: the same request over HTTP, with
            // the same deadline in X-Voxpool-Timeout, is refused the same way.
            if probed.is_none() {
                probed = Some(http_probe(&stack.http_host(), &stack.pack, &text, "10").await);
            }
        }
    }
    let answer = probed.expect("at least one refusal");
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(
        answer.contains("\"code\":\"deadline_unreachable\""),
        "{answer}"
    );
    assert!(
        answer.to_ascii_lowercase().contains("\r\nretry-after: "),
        "{answer}"
    );
    eprintln!("{admitted} admitted, {refused} refused");
    assert!(admitted >= 1, "nothing was admitted");
    assert!(
        refused >= 1,
        "nothing was refused: the pool was not overloaded"
    );
    assert_eq!(
        calls(),
        CHUNKS as u64 * (1 + admitted),
        "only admitted requests reach the vendor ({admitted} admitted, {refused} refused)"
    );
}

/// An engine that shares two processors among its eight slots (a local engine, a GPU server):
/// its throughput stops growing at two calls. Once one long text has shown the pool
/// saturating, a burst of long texts is admitted only as far as the engine can finish them:
/// every admitted one completes whole, the rest are refused up front.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_engine_that_shares_its_processors_admitted_long_texts_still_complete() {
    let fake = FakeVendor::start(FakeConfig {
        latency: Latency::Shared {
            alone: Duration::from_millis(400),
            cores: 2,
        },
        ..FakeConfig::new(VendorKind::OpenAi).cap(8)
    })
    .await
    .expect("fake vendor");
    let stack = SpeechStack::start(&Options {
        base_url: &fake.base_url(),
        keys: 1,
        capacity: 8,
        synthesis: "default_deadline_ms = 60000",
        synthesis_log: "error",
    })
    .await;
    let text = long_text(17_500);
    // One request alone runs four chunks at once and then one: the pool is seen at 4 calls
    // doing no more than at 2.
    let audio_whole = synthesis_client(&stack.synthesis.addr)
        .await
        .synthesize(stack.request(&text))
        .await
        .expect("a request alone completes")
        .into_inner()
        .audio
        .len();
    // The engine does 17,500 characters a second (two processors, 0.4 s per 3,500-character
    // chunk): a second per request, so a 6 s deadline fits five of 16. Read as eight
    // independent slots at the pace of the request alone, the pool would do 16 in 6 s: every
    // one would be admitted and most cut at their deadline.
    let requests = 16;
    let mut finished = burst(&stack, &text, requests, Duration::from_secs(6)).await;
    let (mut admitted, mut refused) = (0, 0);
    for _ in 0..requests {
        if whole_or_refused(finished.recv().await, audio_whole) {
            admitted += 1;
        } else {
            refused += 1;
        }
    }
    eprintln!("{admitted} admitted, {refused} refused");
    assert!(admitted >= 1, "nothing was admitted");
    assert!(
        refused >= 1,
        "every request was admitted: the engine's two processors were read as eight slots"
    );
}

/// `requests` copies of `text` sent at once, each with `deadline`; their answers as they come.
async fn burst(
    stack: &SpeechStack,
    text: &str,
    requests: usize,
    deadline: Duration,
) -> tokio::sync::mpsc::UnboundedReceiver<Result<SynthesizeResponse, tonic::Status>> {
    let (results, finished) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..requests {
        let mut client = synthesis_client(&stack.synthesis.addr).await;
        let mut request = tonic::Request::new(stack.request(text));
        request.set_timeout(deadline);
        let results = results.clone();
        tokio::spawn(async move {
            let _ = results.send(
                client
                    .synthesize(request)
                    .await
                    .map(tonic::Response::into_inner),
            );
        });
    }
    finished
}

/// True for an answer with the whole audio; false for a refusal up front. Anything else — an
/// admitted request cut short, another error — fails the test.
fn whole_or_refused(
    answer: Option<Result<SynthesizeResponse, tonic::Status>>,
    audio_whole: usize,
) -> bool {
    match answer.expect("every request answers") {
        Ok(answer) => {
            assert_eq!(
                answer.audio.len(),
                audio_whole,
                "an admitted request came back cut"
            );
            true
        }
        Err(status) => {
            assert_eq!(
                SynthesisReason::of(&status),
                Some(SynthesisReason::DeadlineUnreachable),
                "a request was neither completed nor refused up front: {status:?}"
            );
            assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
            assert!(
                status.message().contains("refused before any vendor call"),
                "{status:?}"
            );
            false
        }
    }
}

/// A speech stack over `fake` with one key of 4 slots.
async fn one_key_of_four_slots(fake: &FakeVendor) -> SpeechStack {
    SpeechStack::start(&Options {
        base_url: &fake.base_url(),
        keys: 1,
        capacity: 4,
        synthesis: "default_deadline_ms = 60000",
        synthesis_log: "error",
    })
    .await
}

/// One speech request over HTTP for `text` with `X-Voxpool-Timeout: timeout`; the whole answer.
async fn http_probe(host: &str, voice: &str, text: &str, timeout: &str) -> String {
    let body = serde_json::json!({"model": "tts-1", "voice": voice, "input": text, "response_format": "pcm"})
        .to_string();
    let mut tcp = TcpStream::connect(host).await.expect("connect");
    let head = format!(
        "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {HTTP_KEY}\r\n\
         Content-Type: application/json\r\nX-Voxpool-Timeout: {timeout}\r\nConnection: close\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.expect("request");
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).await.expect("answer");
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_too_short_to_freeze_the_voice_is_a_timeout_not_a_catalog_outage() {
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::OpenAi))
        .await
        .expect("fake vendor");
    let stack = one_key_of_four_slots(&fake).await;
    let answer = http_probe(&stack.http_host(), &stack.pack, "Too late.", "0.01").await;
    assert!(answer.starts_with("HTTP/1.1 504"), "{answer}");
    assert!(!answer.contains("catalog_unavailable"), "{answer}");
    assert_eq!(
        fake.stats().values().map(|k| k.total_requests).sum::<u64>(),
        0
    );
}
