//! Every streaming adapter against its streaming fake: the first audio reaches the sink while
//! the vendor is still sending (the fake still counts the call in flight), the streamed bytes
//! equal the vendor's unstreamed answer, a stream that breaks after its first piece fails with
//! audio already written, and a call dropped mid-stream leaves the vendor at once.
//! Volcengine runs its V3 stream (`params.api = "v3"`); V1 does not stream.

use std::{sync::Arc, time::Duration};

use voxpool_domain::{secret::Secret, snapshot::Snapshot};
use voxpool_fake_vendors::{FakeConfig, FakeVendor, Step, Streaming, VendorKind};
use voxpool_synthesis::adapters::{
    AudioFormat, AudioSink, KeyCredential, UpstreamTarget, Utterance, VendorAdapter, VendorRequest,
    azure::Azure, dashscope::DashScope, elevenlabs::ElevenLabs, http, minimax::MiniMax,
    openai::OpenAi, volcengine::Volcengine,
};

const TEXT: &str = "A live character starts speaking.";

/// First bytes after 200 ms, the rest over 1.5 s (the streaming vendor).
fn streaming() -> Streaming {
    Streaming::new(Duration::from_millis(200), Duration::from_millis(1500), 6)
}

/// A call running in a task: its result (the failure's message) and the bytes it wrote.
type CallTask = tokio::task::JoinHandle<(Result<(), String>, u64)>;

struct Harness {
    fake: FakeVendor,
    adapter: Arc<dyn VendorAdapter>,
    voice: Snapshot,
    upstream: UpstreamTarget,
    key: KeyCredential,
    /// What the fake counts the key under.
    fake_key: String,
}

impl Harness {
    async fn start(kind: VendorKind, config: impl FnOnce(FakeConfig) -> FakeConfig) -> Self {
        let fake = FakeVendor::start(config(FakeConfig::new(kind)))
            .await
            .expect("fake starts");
        let client = http::build_client().expect("client");
        let (adapter, voice): (Arc<dyn VendorAdapter>, Snapshot) = match kind {
            VendorKind::OpenAi => (
                Arc::new(OpenAi::new(client)),
                voxpool_fake_vendors::snapshot("openai", "tts-1", "alloy"),
            ),
            VendorKind::Azure => (
                Arc::new(Azure::new(client)),
                voxpool_fake_vendors::snapshot("azure", "neural", "en-US-JennyNeural"),
            ),
            VendorKind::Volcengine => (
                Arc::new(Volcengine::new(client)),
                voxpool_fake_vendors::snapshot(
                    "volcengine",
                    "seed-tts-1.0",
                    "zh_female_shuangkuaisisi_moon_bigtts",
                ),
            ),
            VendorKind::ElevenLabs => (
                Arc::new(ElevenLabs::new(client)),
                voxpool_fake_vendors::snapshot(
                    "elevenlabs",
                    "eleven_multilingual_v2",
                    "21m00Tcm4TlvDq8ikWAM",
                ),
            ),
            VendorKind::MiniMax => (
                Arc::new(MiniMax::new(client)),
                voxpool_fake_vendors::snapshot("minimax", "speech-02-hd", "male-qn-qingse"),
            ),
            VendorKind::DashScope => (
                Arc::new(DashScope::new(client)),
                voxpool_fake_vendors::snapshot("dashscope", "cosyvoice-v2", "longxiaochun_v2"),
            ),
            VendorKind::SelfHosted(_) => {
                unreachable!(
                    "the streaming harness covers the cloud vendors (selfhosted.rs covers the servers)"
                )
            }
        };
        let mut upstream = UpstreamTarget {
            id: "acct".into(),
            base_url: Some(fake.base_url()),
            ..UpstreamTarget::default()
        };
        if kind == VendorKind::Volcengine {
            upstream.params.insert("api".into(), "v3".into());
        }
        let secret = format!("sk-{kind}-stream-0123456789abcdef");
        let fake_key = if kind == VendorKind::Volcengine {
            "app1".to_owned()
        } else {
            secret.clone()
        };
        Self {
            fake,
            adapter,
            voice,
            upstream,
            key: KeyCredential {
                key_id: "acct/app1".into(),
                app_id: "app1".into(),
                secret: Some(Secret::new(secret)),
            },
            fake_key,
        }
    }

    fn in_flight(&self) -> u64 {
        self.fake.key_stats(&self.fake_key).in_flight
    }

    /// Starts one PCM call in a task; returns its task and the sink's receiver.
    fn start_call(
        self: &Arc<Self>,
    ) -> (CallTask, tokio::sync::mpsc::UnboundedReceiver<bytes::Bytes>) {
        let (sink, rx) = AudioSink::new();
        let me = self.clone();
        let task = tokio::spawn(async move {
            let request = VendorRequest {
                utterance: &Utterance {
                    text: TEXT.to_owned(),
                    voice: Arc::new(me.voice.clone()),
                    pool_model: "pool-model".to_owned(),
                    format: AudioFormat::Pcm,
                    sample_rate_hz: None,
                    reference: None,
                    seed: None,
                },
                key: &me.key,
                upstream: &me.upstream,
                timeout: Duration::from_secs(20),
                attempt_id: "stream-test",
                gate: Default::default(),
            };
            let result = me.adapter.stream(request, &sink).await;
            (result.map(|_| ()).map_err(|f| f.message), sink.written())
        });
        (task, rx)
    }
}

/// Waits (bounded) until the fake counts nothing in flight for the key.
async fn until_idle(h: &Harness) {
    for _ in 0..500 {
        if h.in_flight() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the vendor still counts {} calls after 5 s", h.in_flight());
}

async fn first_audio_arrives_while_the_vendor_is_still_sending(kind: VendorKind) {
    let h = Arc::new(Harness::start(kind, |c| c.streaming(streaming())).await);
    let (task, mut rx) = h.start_call();
    let first = rx.recv().await.expect("first audio");
    assert!(!first.is_empty());
    assert_eq!(
        h.in_flight(),
        1,
        "{kind}: the vendor is still sending when the first audio is in the sink"
    );
    let mut streamed = first.to_vec();
    let (result, _) = task.await.expect("task");
    result.unwrap_or_else(|m| panic!("{kind}: {m}"));
    while let Ok(piece) = rx.try_recv() {
        streamed.extend_from_slice(&piece);
    }
    // The same request unstreamed: the vendor's whole answer at once.
    h.fake.set_streaming(None);
    let (task, mut rx) = h.start_call();
    task.await.expect("task").0.expect("unstreamed call");
    let mut whole = Vec::new();
    while let Ok(piece) = rx.try_recv() {
        whole.extend_from_slice(&piece);
    }
    assert_eq!(
        streamed, whole,
        "{kind}: the streamed bytes are the vendor's"
    );
}

async fn a_stream_that_breaks_after_its_first_piece_fails_with_audio_written(kind: VendorKind) {
    let h = Arc::new(Harness::start(kind, |c| c.streaming(streaming())).await);
    h.fake.script([Step::BreakAfterFirstPiece]);
    let (task, _rx) = h.start_call();
    let (result, written) = task.await.expect("task");
    assert!(result.is_err(), "{kind}: a broken stream is a failure");
    assert!(
        written > 0,
        "{kind}: the first piece was written before the break"
    );
}

async fn a_call_dropped_mid_stream_leaves_the_vendor_at_once(kind: VendorKind) {
    let h = Arc::new(
        Harness::start(kind, |c| {
            c.streaming(Streaming::new(
                Duration::from_millis(100),
                Duration::from_secs(60),
                4,
            ))
        })
        .await,
    );
    let (task, mut rx) = h.start_call();
    rx.recv().await.expect("first audio");
    assert_eq!(h.in_flight(), 1);
    task.abort();
    // Without the connection closing, the fake would count it for a minute.
    until_idle(&h).await;
}

macro_rules! suite {
    ($($vendor:ident => $kind:expr),* $(,)?) => {$(
        mod $vendor {
            use super::*;

            #[tokio::test]
            async fn first_audio_arrives_while_the_vendor_is_still_sending() {
                super::first_audio_arrives_while_the_vendor_is_still_sending($kind).await;
            }

            #[tokio::test]
            async fn a_stream_that_breaks_after_its_first_piece_fails_with_audio_written() {
                super::a_stream_that_breaks_after_its_first_piece_fails_with_audio_written($kind)
                    .await;
            }

            #[tokio::test]
            async fn a_call_dropped_mid_stream_leaves_the_vendor_at_once() {
                super::a_call_dropped_mid_stream_leaves_the_vendor_at_once($kind).await;
            }
        }
    )*};
}

suite! {
    openai => VendorKind::OpenAi,
    azure => VendorKind::Azure,
    volcengine_v3 => VendorKind::Volcengine,
    elevenlabs => VendorKind::ElevenLabs,
    minimax => VendorKind::MiniMax,
    dashscope => VendorKind::DashScope,
}
