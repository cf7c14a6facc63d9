//! One conformance suite, run for every cloud adapter against its fake vendor: success returns
//! audio; each vendor error shape is classified as docs/VENDORS.md says; timeouts and refused
//! connections are TIMEOUT; credentials never reach a failure message; and concurrent calls on
//! one key beyond the fake's cap are RATE_LIMITED while the fake never admits more than the cap.

use std::{sync::Arc, time::Duration};

use voxpool_domain::contract::Outcome;
use voxpool_domain::{secret::Secret, snapshot::Snapshot};
use voxpool_fake_vendors::{FakeConfig, FakeVendor, Fault, Step, VendorKind};
use voxpool_synthesis::adapters::{
    AudioFormat, KeyCredential, UpstreamTarget, Utterance, VendorAdapter, VendorAudio,
    VendorFailure, VendorRequest, azure::Azure, dashscope::DashScope, elevenlabs::ElevenLabs, http,
    minimax::MiniMax, openai::OpenAi, volcengine::Volcengine,
};

/// Text with every XML special character, so the Azure fake's SSML check proves escaping.
const TEXT: &str = "Tom & Jerry say \"hi\" <3 'ok'";

fn adapter(kind: VendorKind) -> Arc<dyn VendorAdapter> {
    let client = http::build_client().expect("client");
    match kind {
        VendorKind::OpenAi => Arc::new(OpenAi::new(client)),
        VendorKind::Azure => Arc::new(Azure::new(client)),
        VendorKind::Volcengine => Arc::new(Volcengine::new(client)),
        VendorKind::ElevenLabs => Arc::new(ElevenLabs::new(client)),
        VendorKind::MiniMax => Arc::new(MiniMax::new(client)),
        VendorKind::DashScope => Arc::new(DashScope::new(client)),
        VendorKind::SelfHosted(_) => unreachable!("this suite covers the cloud vendors"),
    }
}

/// A voice with params each vendor can express, so the fakes validate real wire values.
fn voice(kind: VendorKind) -> Snapshot {
    let extra = |s: &mut Snapshot, k: &str, v: &str| {
        s.extra.insert(k.to_owned(), v.to_owned());
    };
    match kind {
        VendorKind::OpenAi => {
            let mut s = voxpool_fake_vendors::snapshot("openai", "gpt-4o-mini-tts", "alloy");
            s.params.rate = Some(1.25);
            extra(&mut s, "instructions", "warm");
            s
        }
        VendorKind::Azure => {
            let mut s = voxpool_fake_vendors::snapshot("azure", "neural", "en-US-JennyNeural");
            s.params.pitch_pct = Some(10.0);
            s.params.rate = Some(1.2);
            s.params.volume_pct = Some(-20.0);
            extra(&mut s, "style", "cheerful");
            s
        }
        VendorKind::Volcengine => {
            let mut s = voxpool_fake_vendors::snapshot("volcengine", "", "BV001_streaming");
            s.params.pitch_pct = Some(10.0);
            s.params.rate = Some(1.1);
            s.params.volume_pct = Some(20.0);
            s
        }
        VendorKind::ElevenLabs => {
            let mut s = voxpool_fake_vendors::snapshot(
                "elevenlabs",
                "eleven_multilingual_v2",
                "21m00Tcm4TlvDq8ikWAM",
            );
            s.params.rate = Some(1.1);
            extra(&mut s, "stability", "0.5");
            s
        }
        VendorKind::MiniMax => {
            let mut s = voxpool_fake_vendors::snapshot("minimax", "speech-02-hd", "male-qn-qingse");
            s.params.pitch_pct = Some(12.246);
            s.params.rate = Some(1.2);
            s.params.volume_pct = Some(50.0);
            s
        }
        VendorKind::DashScope => {
            let mut s =
                voxpool_fake_vendors::snapshot("dashscope", "cosyvoice-v2", "longxiaochun_v2");
            s.params.pitch_pct = Some(20.0);
            s.params.rate = Some(1.2);
            s.params.volume_pct = Some(-40.0);
            s
        }
        VendorKind::SelfHosted(_) => unreachable!("this suite covers the cloud vendors"),
    }
}

fn secret_for(kind: VendorKind, key: &str) -> String {
    format!("sk-{kind}-{key}-0123456789abcdef")
}

/// The key the fake counts a credential under (Volcengine: the appid, others: the secret).
fn fake_key_for(kind: VendorKind, key: &str) -> String {
    if kind == VendorKind::Volcengine {
        key.to_owned()
    } else {
        secret_for(kind, key)
    }
}

/// An adapter wired to its fake.
struct Harness {
    kind: VendorKind,
    fake: FakeVendor,
    adapter: Arc<dyn VendorAdapter>,
    voice: Snapshot,
    upstream: UpstreamTarget,
}

impl Harness {
    async fn start(config: FakeConfig) -> Arc<Self> {
        let kind = config.vendor;
        let fake = FakeVendor::start(config).await.expect("fake starts");
        let upstream = UpstreamTarget {
            id: "acct".into(),
            base_url: Some(fake.base_url()),
            ..UpstreamTarget::default()
        };
        Arc::new(Self {
            kind,
            adapter: adapter(kind),
            voice: voice(kind),
            upstream,
            fake,
        })
    }

    fn secret(&self, key: &str) -> String {
        secret_for(self.kind, key)
    }

    fn credential(&self, key: &str) -> KeyCredential {
        KeyCredential {
            key_id: format!("acct/{key}"),
            app_id: key.to_owned(),
            secret: Some(Secret::new(self.secret(key))),
        }
    }

    fn fake_key(&self, key: &str) -> String {
        fake_key_for(self.kind, key)
    }

    async fn call_with(
        &self,
        key: &str,
        format: AudioFormat,
        timeout: Duration,
    ) -> Result<VendorAudio, VendorFailure> {
        let credential = self.credential(key);
        let attempt_id = format!("attempt-{}", rand::random::<u64>());
        let request = VendorRequest {
            utterance: &Utterance {
                text: TEXT.to_owned(),
                voice: Arc::new(self.voice.clone()),
                pool_model: "pool-model".to_owned(),
                format,
                sample_rate_hz: None,
                reference: None,
                seed: None,
            },
            key: &credential,
            upstream: &self.upstream,
            timeout,
            attempt_id: &attempt_id,
            gate: Default::default(),
        };
        self.adapter.synthesize(request).await
    }

    async fn call(&self, key: &str) -> Result<VendorAudio, VendorFailure> {
        self.call_with(key, AudioFormat::Wav, Duration::from_secs(10))
            .await
    }

    fn assert_clean(&self, key: &str, failure: &VendorFailure) {
        let secret = self.secret(key);
        assert!(
            !failure.message.contains(&secret),
            "{}: secret in {:?}",
            self.kind,
            failure.message
        );
        assert!(
            !format!("{failure:?}").contains(&secret),
            "{}: secret in Debug",
            self.kind
        );
        assert!(
            failure.message.starts_with(self.kind.as_str()),
            "{}: {:?}",
            self.kind,
            failure.message
        );
    }

    async fn expect_failure(&self, key: &str) -> VendorFailure {
        match self.call(key).await {
            Ok(audio) => panic!(
                "{}: expected a failure, got {} bytes of audio",
                self.kind,
                audio.bytes.len()
            ),
            Err(f) => {
                self.assert_clean(key, &f);
                f
            }
        }
    }
}

/// What the vendor's refusal over its cap is: a concurrency refusal where the vendor names
/// concurrency (ElevenLabs `too_many_concurrent_requests`, Volcengine 3003), a rate limit
/// where its error does not tell them apart (OpenAI, Azure, MiniMax 1002, DashScope).
fn refusal(kind: VendorKind) -> Outcome {
    match kind {
        VendorKind::ElevenLabs | VendorKind::Volcengine => Outcome::ConcurrencyLimited,
        VendorKind::OpenAi | VendorKind::Azure | VendorKind::MiniMax | VendorKind::DashScope => {
            Outcome::RateLimited
        }
        VendorKind::SelfHosted(_) => unreachable!("this suite covers the cloud vendors"),
    }
}

/// What docs/VENDORS.md says each injected fault must become for `kind`.
fn expected(kind: VendorKind, fault: &Fault) -> Outcome {
    match (kind, fault) {
        (_, Fault::RateLimited { .. }) => refusal(kind),
        // ElevenLabs' `system_busy` is a 429 telling the caller to back off: overload, not a
        // fault of the key.
        (VendorKind::ElevenLabs, Fault::Busy) => Outcome::RateLimited,
        (_, Fault::Busy | Fault::ServerError) => Outcome::UpstreamError,
        (_, Fault::Unauthorized) => Outcome::KeyInvalid,
        // Azure has no quota error distinct from an auth failure (403).
        (VendorKind::Azure, Fault::QuotaExhausted) => Outcome::KeyInvalid,
        (_, Fault::QuotaExhausted) => Outcome::QuotaExhausted,
        (_, Fault::InvalidText) => Outcome::ClientError,
        // Azure documents no error bodies on 200: a document instead of audio is an upstream fault.
        (VendorKind::Azure, Fault::ErrorIn200) => Outcome::UpstreamError,
        (_, Fault::ErrorIn200) => refusal(kind),
    }
}

async fn success_returns_audio_in_every_supported_format(kind: VendorKind) {
    let h = Harness::start(FakeConfig::new(kind)).await;
    let mut served = 0;
    for format in [
        AudioFormat::Wav,
        AudioFormat::Mp3,
        AudioFormat::Pcm,
        AudioFormat::OggOpus,
    ] {
        if h.adapter.check(&h.voice, format, None).is_err() {
            continue;
        }
        let audio = h
            .call_with("k1", format, Duration::from_secs(10))
            .await
            .unwrap_or_else(|f| panic!("{kind} {format:?}: {f:?}"));
        assert_eq!(audio.format, format);
        assert!(
            voxpool_synthesis::audio::sniff(format, &audio.bytes).is_ok(),
            "{kind} {format:?}: not audio"
        );
        if format == AudioFormat::Wav {
            let wav = hound::WavReader::new(std::io::Cursor::new(exact_wav(&audio)))
                .expect("a readable WAV");
            assert_eq!(Some(wav.spec().sample_rate), audio.sample_rate_hz, "{kind}");
            assert!(wav.len() > 0);
        }
        served += 1;
    }
    assert!(served >= 2, "{kind}: only {served} formats served");
    let stats = h.fake.key_stats(&h.fake_key("k1"));
    assert_eq!((stats.total_requests, stats.successes), (served, served));
}

async fn every_vendor_error_shape_is_classified(kind: VendorKind) {
    let h = Harness::start(FakeConfig::new(kind)).await;
    let faults = [
        Fault::RateLimited {
            retry_after_secs: Some(3),
        },
        Fault::Busy,
        Fault::ServerError,
        Fault::Unauthorized,
        Fault::QuotaExhausted,
        Fault::InvalidText,
        Fault::ErrorIn200,
    ];
    h.fake.script(faults.iter().cloned().map(Step::Fail));
    for fault in &faults {
        let failure = h.expect_failure("k1").await;
        assert_eq!(
            failure.outcome,
            expected(kind, fault),
            "{kind} {fault:?}: {failure:?}"
        );
        if let Fault::RateLimited { .. } = fault {
            assert_eq!(failure.retry_after_ms, Some(3000), "{kind}: {failure:?}");
        }
    }
    // The script is used up: the next call is served.
    h.call("k1")
        .await
        .unwrap_or_else(|f| panic!("{kind}: {f:?}"));
}

async fn an_unknown_key_is_key_invalid_and_never_echoed(kind: VendorKind) {
    let h = Harness::start(FakeConfig::new(kind).valid_keys([fake_key_for(kind, "good")])).await;
    let failure = h.expect_failure("bad").await;
    assert_eq!(failure.outcome, Outcome::KeyInvalid, "{kind}: {failure:?}");
    h.call("good")
        .await
        .unwrap_or_else(|f| panic!("{kind}: {f:?}"));
}

async fn a_slow_vendor_beyond_the_timeout_is_timeout(kind: VendorKind) {
    let h = Harness::start(FakeConfig::new(kind)).await;
    h.fake.pause();
    let Err(failure) = h
        .call_with("k1", AudioFormat::Wav, Duration::from_millis(300))
        .await
    else {
        panic!("{kind}: a held request answered")
    };
    assert_eq!(failure.outcome, Outcome::Timeout, "{kind}: {failure:?}");
    h.assert_clean("k1", &failure);
}

async fn a_refused_connection_is_timeout(kind: VendorKind) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let h = Harness::start(FakeConfig::new(kind)).await;
    let credential = h.credential("k1");
    let upstream = UpstreamTarget {
        id: "gone".into(),
        base_url: Some(format!("http://{addr}")),
        ..UpstreamTarget::default()
    };
    let request = VendorRequest {
        utterance: &Utterance {
            text: TEXT.to_owned(),
            voice: Arc::new(h.voice.clone()),
            pool_model: "pool-model".to_owned(),
            format: AudioFormat::Wav,
            sample_rate_hz: None,
            reference: None,
            seed: None,
        },
        key: &credential,
        upstream: &upstream,
        timeout: Duration::from_secs(5),
        attempt_id: "refused",
        gate: Default::default(),
    };
    let failure = h
        .adapter
        .synthesize(request)
        .await
        .expect_err("nothing listens");
    assert_eq!(failure.outcome, Outcome::Timeout, "{kind}: {failure:?}");
    assert_eq!(failure.http_status, None);
    h.assert_clean("k1", &failure);
}

async fn calls_beyond_the_cap_are_rate_limited_and_never_admitted(kind: VendorKind) {
    const CAP: u32 = 3;
    const CALLS: u64 = 10;
    let h = Harness::start(FakeConfig::new(kind).cap(CAP).retry_after_secs(1)).await;
    // Hold admitted requests so all CALLS overlap; refused ones answer at once.
    h.fake.pause();
    let calls: Vec<_> = (0..CALLS)
        .map(|_| {
            let h = Arc::clone(&h);
            tokio::spawn(async move { h.call("shared-key").await })
        })
        .collect();
    h.fake.wait_for_requests(CALLS).await;
    let during = h.fake.key_stats(&h.fake_key("shared-key"));
    assert_eq!(
        during.admitted_in_flight,
        u64::from(CAP),
        "{kind}: {during:?}"
    );
    h.fake.resume();
    let (mut ok, mut limited) = (0, 0);
    for call in calls {
        match call.await.expect("task") {
            Ok(_) => ok += 1,
            Err(f) => {
                assert_eq!(f.outcome, refusal(kind), "{kind}: {f:?}");
                assert_eq!(f.retry_after_ms, Some(1000), "{kind}: {f:?}");
                h.assert_clean("shared-key", &f);
                limited += 1;
            }
        }
    }
    let stats = h.fake.key_stats(&h.fake_key("shared-key"));
    assert_eq!(
        (ok, limited),
        (u64::from(CAP), CALLS - u64::from(CAP)),
        "{kind}: {stats:?}"
    );
    assert_eq!(stats.peak_admitted, u64::from(CAP), "{kind}: {stats:?}");
    assert!(
        stats.peak_concurrency >= u64::from(CAP),
        "{kind}: {stats:?}"
    );
    assert_eq!(stats.total_requests, CALLS);
    assert_eq!(stats.rejected_over_cap, CALLS - u64::from(CAP));
    assert_eq!(
        (stats.in_flight, stats.admitted_in_flight),
        (0, 0),
        "{kind}: slots leaked {stats:?}"
    );
}

async fn the_cap_is_per_key(kind: VendorKind) {
    let h = Harness::start(FakeConfig::new(kind).cap(1)).await;
    h.fake.pause();
    let calls: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|key| {
            let h = Arc::clone(&h);
            tokio::spawn(async move { h.call(key).await })
        })
        .collect();
    h.fake.wait_for_requests(2).await;
    h.fake.resume();
    for call in calls {
        call.await
            .expect("task")
            .unwrap_or_else(|f| panic!("{kind}: {f:?}"));
    }
    for key in ["a", "b"] {
        let stats = h.fake.key_stats(&h.fake_key(key));
        assert_eq!(
            (
                stats.peak_concurrency,
                stats.successes,
                stats.rejected_over_cap
            ),
            (1, 1, 0),
            "{kind} {key}"
        );
    }
}

async fn sequential_calls_never_overlap_at_the_vendor(kind: VendorKind) {
    let h = Harness::start(FakeConfig::new(kind).cap(1)).await;
    for _ in 0..5 {
        h.call("k1")
            .await
            .unwrap_or_else(|f| panic!("{kind}: {f:?}"));
    }
    let stats = h.fake.key_stats(&h.fake_key("k1"));
    assert_eq!(
        (
            stats.total_requests,
            stats.peak_concurrency,
            stats.successes
        ),
        (5, 1, 5),
        "{kind}"
    );
}

macro_rules! suite {
    ($($vendor:ident => $kind:expr),* $(,)?) => {$(
        mod $vendor {
            use super::*;

            #[tokio::test]
            async fn success_returns_audio_in_every_supported_format() {
                super::success_returns_audio_in_every_supported_format($kind).await;
            }

            #[tokio::test]
            async fn every_vendor_error_shape_is_classified() {
                super::every_vendor_error_shape_is_classified($kind).await;
            }

            #[tokio::test]
            async fn an_unknown_key_is_key_invalid_and_never_echoed() {
                super::an_unknown_key_is_key_invalid_and_never_echoed($kind).await;
            }

            #[tokio::test]
            async fn a_slow_vendor_beyond_the_timeout_is_timeout() {
                super::a_slow_vendor_beyond_the_timeout_is_timeout($kind).await;
            }

            #[tokio::test]
            async fn a_refused_connection_is_timeout() {
                super::a_refused_connection_is_timeout($kind).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn calls_beyond_the_cap_are_rate_limited_and_never_admitted() {
                super::calls_beyond_the_cap_are_rate_limited_and_never_admitted($kind).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn the_cap_is_per_key() {
                super::the_cap_is_per_key($kind).await;
            }

            #[tokio::test]
            async fn sequential_calls_never_overlap_at_the_vendor() {
                super::sequential_calls_never_overlap_at_the_vendor($kind).await;
            }
        }
    )*};
}

suite! {
    openai => VendorKind::OpenAi,
    azure => VendorKind::Azure,
    volcengine => VendorKind::Volcengine,
    elevenlabs => VendorKind::ElevenLabs,
    minimax => VendorKind::MiniMax,
    dashscope => VendorKind::DashScope,
}

/// The caller's view of an adapter's WAV: a streaming adapter's header may carry unknown
/// sizes (the vendor streamed PCM, or espeak-ng wrote placeholders); the service's joiner gives
/// callers one header whose sizes match the bytes.
fn exact_wav(audio: &VendorAudio) -> Vec<u8> {
    let mut joiner = voxpool_synthesis::audio::Joiner::new(AudioFormat::Wav);
    let mut out = joiner.push(audio).expect("a WAV piece");
    out.extend(joiner.finish().expect("a WAV"));
    out
}
