//! Long texts under overload (docs/SYNTHESIS.md, "Admission"): 20 requests of 17,500
//! characters (five chunks each) arrive at once on a pool of 4 slots whose vendor takes 2 s a
//! call, each with a 10 s deadline. The ones that can finish are admitted and every one of them
//! completes whole; the rest are refused at once, RESOURCE_EXHAUSTED `DEADLINE_UNREACHABLE`,
//! before any vendor call (the fake counts every call it gets).

use std::time::Duration;

use voxpool_domain::contract::SynthesisReason;
use voxpool_e2e::{
    speech::{Options, SpeechStack, long_text},
    synthesis_client,
};
use voxpool_fake_vendors::{FakeConfig, FakeVendor, Latency, VendorKind};

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
    let stack = SpeechStack::start(&Options {
        base_url: &fake.base_url(),
        keys: 1,
        capacity: 4,
        synthesis: "default_deadline_ms = 60000",
        synthesis_log: "error",
    })
    .await;
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

    let mut tasks = Vec::new();
    for _ in 0..REQUESTS {
        let mut client = synthesis_client(&stack.synthesis.addr).await;
        let mut request = tonic::Request::new(stack.request(&text));
        request.set_timeout(Duration::from_secs(10));
        tasks.push(tokio::spawn(async move {
            client.synthesize(request).await.map(|r| r.into_inner())
        }));
    }
    let (mut admitted, mut refused) = (0u64, 0u64);
    for task in tasks {
        match task.await.expect("request task") {
            Ok(answer) => {
                assert_eq!(
                    answer.audio.len(),
                    audio_whole,
                    "an admitted request came back cut"
                );
                admitted += 1;
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
                refused += 1;
            }
        }
    }
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
