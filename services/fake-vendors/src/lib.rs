//! Fake TTS vendor servers: one per vendor wire format of docs/VENDORS.md (same paths, same auth
//! headers, request bodies validated, the vendor's own error shapes), for adapter tests and for
//! load experiments (`voxpool-fake-vendor`).
//!
//! Each fake binds a listener (tests: `127.0.0.1:0`, see [`FakeVendor::start`]) and enforces a
//! **per-key concurrency cap** (key = the credential presented, or the Volcengine `appid`),
//! answering the excess with that vendor's rate-limit error (OpenAI 429
//! `rate_limit_exceeded`, Volcengine HTTP 200 code 3003, ElevenLabs 429
//! `too_many_concurrent_requests`, MiniMax `base_resp` 1002, DashScope 429 `Throttling`, Azure
//! 429). It counts per key the total requests and the **highest concurrency seen** ([`KeyStats`];
//! the measuring side of invariant 1 of docs/ARCHITECTURE.md), adds latency ([`Latency`]) and injects faults at random
//! ([`FaultRates`]) or from a script ([`Step`]). Audio is small and real ([`audio`]).
//!
//! With [`Streaming`] on ([`FakeConfig::streaming`], [`FakeVendor::set_streaming`]), each fake
//! streams the way its vendor does: OpenAI, Azure and ElevenLabs `/stream` send the audio body
//! in paced chunks; MiniMax `stream: true` and DashScope SSE send paced events; Volcengine V3
//! (`/api/v3/tts/unidirectional`) sends paced JSON lines. A streamed request stays counted at
//! its key until its body stream ends or the client drops it; [`Step::BreakAfterFirstPiece`]
//! (or [`FaultRates::mid_stream_break`]) breaks an answer after its first piece. With
//! [`FakeConfig::markers`] the audio payload starts with [`audio::marker`] of the request text.
//!
//! Every fake also answers `GET /_fake/stats` with the per-key counters as JSON, so a separate
//! process (a load experiment) can read what the vendor side saw.
//!
//! Invalid-key answers echo the presented key in their message on purpose (OpenAI, Volcengine):
//! adapter tests then prove that failures never carry the credential.

pub mod audio;
mod azure;
mod billing;
mod control;
mod dashscope;
mod elevenlabs;
mod engine;
mod knobs;
mod lock;
mod minimax;
mod openai;
pub mod selfhosted;
mod stream;
mod volcengine;
mod volcengine_v3;
mod wire;
mod xml;

use std::{collections::BTreeMap, fmt, io, net::SocketAddr, str::FromStr, sync::Arc};

use axum::routing::get;
pub use control::{KeyStats, RecordedRequest};
use control::{Settings, Shared};
pub use knobs::{Fault, FaultRates, Latency, Step, Streaming};
pub use selfhosted::ServerProfile;
use tokio::{net::TcpListener, task::JoinHandle};
use voxpool_domain::snapshot::Snapshot;
use wire::{
    bare_503, bearer, header_str, internal, json, number_in, only_fields, record, render,
    required_str, with_retry_after,
};

/// Which vendor's wire format a fake speaks (the provider ids of docs/API.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VendorKind {
    /// OpenAI-compatible `/v1/audio/speech`.
    OpenAi,
    /// Azure Speech `/cognitiveservices/v1`.
    Azure,
    /// Volcengine `/api/v1/tts` and the V3 stream `/api/v3/tts/unidirectional`.
    Volcengine,
    /// ElevenLabs `/v1/text-to-speech/{voice_id}` and `/v1/text-to-speech/{voice_id}/stream`.
    ElevenLabs,
    /// MiniMax `/v1/t2a_v2` (`stream` false or true).
    MiniMax,
    /// DashScope `/api/v1/services/audio/tts/SpeechSynthesizer`.
    DashScope,
    /// A self-hosted zero-shot server of one wire profile ([`selfhosted`]).
    SelfHosted(ServerProfile),
}

impl VendorKind {
    /// Every self-hosted server profile, as kinds (`selfhosted-vllm-omni`, …).
    pub const SELF_HOSTED: [VendorKind; 5] = [
        VendorKind::SelfHosted(ServerProfile::VllmOmni),
        VendorKind::SelfHosted(ServerProfile::CosyVoice),
        VendorKind::SelfHosted(ServerProfile::FishSpeech),
        VendorKind::SelfHosted(ServerProfile::IndexTtsVllm),
        VendorKind::SelfHosted(ServerProfile::GptSovits),
    ];

    /// Every cloud vendor.
    pub const ALL: [VendorKind; 6] = [
        VendorKind::OpenAi,
        VendorKind::Azure,
        VendorKind::Volcengine,
        VendorKind::ElevenLabs,
        VendorKind::MiniMax,
        VendorKind::DashScope,
    ];

    /// The provider id (`openai`, `azure`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            VendorKind::OpenAi => "openai",
            VendorKind::Azure => "azure",
            VendorKind::Volcengine => "volcengine",
            VendorKind::ElevenLabs => "elevenlabs",
            VendorKind::MiniMax => "minimax",
            VendorKind::DashScope => "dashscope",
            VendorKind::SelfHosted(ServerProfile::VllmOmni) => "selfhosted-vllm-omni",
            VendorKind::SelfHosted(ServerProfile::CosyVoice) => "selfhosted-cosyvoice",
            VendorKind::SelfHosted(ServerProfile::FishSpeech) => "selfhosted-fish-speech",
            VendorKind::SelfHosted(ServerProfile::IndexTtsVllm) => "selfhosted-index-tts-vllm",
            VendorKind::SelfHosted(ServerProfile::GptSovits) => "selfhosted-gpt-sovits",
        }
    }
}

impl fmt::Display for VendorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for VendorKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        VendorKind::ALL
            .into_iter()
            .chain(VendorKind::SELF_HOSTED)
            .find(|v| v.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown vendor {s:?}; expected one of {}, {}",
                    VendorKind::ALL.map(VendorKind::as_str).join(", "),
                    VendorKind::SELF_HOSTED.map(VendorKind::as_str).join(", ")
                )
            })
    }
}

/// How a fake behaves.
#[derive(Clone, Debug)]
pub struct FakeConfig {
    /// The wire format.
    pub vendor: VendorKind,
    /// Concurrent requests allowed per key; 0 = unlimited.
    pub cap: u32,
    /// Latency of admitted requests.
    pub latency: Latency,
    /// Random faults.
    pub faults: FaultRates,
    /// `Retry-After` seconds sent with rate-limit answers (cap and random ones).
    pub retry_after_secs: Option<u64>,
    /// When set, only these keys are accepted (others get the vendor's auth error).
    pub valid_keys: Option<Vec<String>>,
    /// Length of the returned audio, in ms.
    pub tone_ms: u32,
    /// Streamed delivery of admitted answers (`None`: the latency, then the whole answer).
    pub streaming: Option<Streaming>,
    /// Start each audio payload with [`audio::marker`] of the request's input text.
    pub markers: bool,
    /// Generation time per character of text, waited before a self-hosted fake's whole
    /// (unstreamed) answer on top of its latency: a GPU server's time grows with its text.
    pub per_char: std::time::Duration,
}

impl FakeConfig {
    /// Defaults: cap 10 per key, no latency, no faults, any key, 200 ms of audio, no streaming,
    /// no markers.
    pub fn new(vendor: VendorKind) -> Self {
        Self {
            vendor,
            cap: 10,
            latency: Latency::default(),
            faults: FaultRates::default(),
            retry_after_secs: None,
            valid_keys: None,
            tone_ms: 200,
            streaming: None,
            markers: false,
            per_char: std::time::Duration::ZERO,
        }
    }

    /// Sets the generation time per character of a self-hosted fake's unstreamed answer.
    pub fn per_char(mut self, per_char: std::time::Duration) -> Self {
        self.per_char = per_char;
        self
    }

    /// Sets the length of the returned audio, in ms.
    pub fn tone_ms(mut self, tone_ms: u32) -> Self {
        self.tone_ms = tone_ms;
        self
    }

    /// Streams admitted answers on this timeline (replaces the latency; see [`Streaming`]).
    pub fn streaming(mut self, streaming: Streaming) -> Self {
        self.streaming = Some(streaming);
        self
    }

    /// Turns the text markers in the audio on or off ([`audio::marker`]).
    pub fn markers(mut self, on: bool) -> Self {
        self.markers = on;
        self
    }

    /// Sets the per-key cap.
    pub fn cap(mut self, cap: u32) -> Self {
        self.cap = cap;
        self
    }

    /// Sets the latency.
    pub fn latency(mut self, latency: Latency) -> Self {
        self.latency = latency;
        self
    }

    /// Sets the random fault rates.
    pub fn faults(mut self, faults: FaultRates) -> Self {
        self.faults = faults;
        self
    }

    /// Sets the `Retry-After` of rate-limit answers.
    pub fn retry_after_secs(mut self, secs: u64) -> Self {
        self.retry_after_secs = Some(secs);
        self
    }

    /// Accepts only these keys.
    pub fn valid_keys<I: IntoIterator<Item = S>, S: Into<String>>(mut self, keys: I) -> Self {
        self.valid_keys = Some(keys.into_iter().map(Into::into).collect());
        self
    }

    fn settings(&self) -> Settings {
        Settings {
            cap: self.cap,
            latency: self.latency,
            faults: self.faults,
            retry_after_secs: self.retry_after_secs,
            valid_keys: self
                .valid_keys
                .as_ref()
                .map(|k| k.iter().cloned().collect()),
            tone_ms: self.tone_ms,
            streaming: self.streaming,
            markers: self.markers,
            per_char: self.per_char,
        }
    }
}

/// A running fake vendor. Dropping it stops the server (held requests are released first).
pub struct FakeVendor {
    vendor: VendorKind,
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl fmt::Debug for FakeVendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeVendor")
            .field("vendor", &self.vendor)
            .field("addr", &self.addr)
            .finish()
    }
}

impl FakeVendor {
    /// Binds `127.0.0.1:0` and serves.
    pub async fn start(config: FakeConfig) -> io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        Self::serve(listener, config)
    }

    /// Serves on an already bound listener (must be called inside a Tokio runtime).
    pub fn serve(listener: TcpListener, config: FakeConfig) -> io::Result<Self> {
        let addr = listener.local_addr()?;
        let shared = Shared::new(config.settings());
        let routes = match config.vendor {
            VendorKind::OpenAi => openai::routes(),
            VendorKind::Azure => azure::routes(),
            VendorKind::Volcengine => volcengine::routes(),
            VendorKind::ElevenLabs => elevenlabs::routes(),
            VendorKind::MiniMax => minimax::routes(),
            VendorKind::DashScope => dashscope::routes(),
            VendorKind::SelfHosted(profile) => selfhosted::routes(profile),
        };
        let app = routes
            .route("/_fake/stats", get(billing::stats_handler))
            .route("/_fake/stats/voices", get(billing::voices_handler))
            .with_state(Arc::clone(&shared));
        let vendor = config.vendor;
        let task = tokio::spawn(async move {
            // TCP_NODELAY, as real servers set it: a streamed first piece must not wait for
            // the client's delayed ACK of the headers (Nagle), about 40 ms.
            let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                let _ = tcp.set_nodelay(true);
            });
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!(vendor = vendor.as_str(), error = %e, "fake vendor server stopped");
            }
        });
        Ok(Self {
            vendor,
            addr,
            shared,
            task,
        })
    }

    /// The vendor it speaks.
    pub fn vendor(&self) -> VendorKind {
        self.vendor
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`: the `base_url` to give an adapter's upstream.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Counters per key.
    pub fn stats(&self) -> BTreeMap<String, KeyStats> {
        self.shared.stats()
    }

    /// Characters produced per voice id (empty: a self-hosted server's).
    pub fn voice_characters(&self) -> BTreeMap<String, u64> {
        self.shared.voice_characters()
    }

    /// Counters of one key (zeros if never seen).
    pub fn key_stats(&self, key: &str) -> KeyStats {
        self.shared.stats().remove(key).unwrap_or_default()
    }

    /// Appends steps to the script consumed by the next admitted requests.
    pub fn script(&self, steps: impl IntoIterator<Item = Step>) {
        self.shared.push_script(steps);
    }

    /// Changes the per-key cap from now on.
    pub fn set_cap(&self, cap: u32) {
        lock::lock(&self.shared.settings).cap = cap;
    }

    /// Changes the latency from now on.
    pub fn set_latency(&self, latency: Latency) {
        lock::lock(&self.shared.settings).latency = latency;
    }

    /// Changes streamed delivery for requests admitted from now on (`None`: the latency, then
    /// the whole answer). Streams already under way keep their timeline.
    pub fn set_streaming(&self, streaming: Option<Streaming>) {
        lock::lock(&self.shared.settings).streaming = streaming;
    }

    /// Turns the text markers in the audio on or off from now on ([`audio::marker`]).
    pub fn set_markers(&self, on: bool) {
        lock::lock(&self.shared.settings).markers = on;
    }

    /// Changes the random fault rates from now on.
    pub fn set_faults(&self, faults: FaultRates) {
        lock::lock(&self.shared.settings).faults = faults;
    }

    /// Holds every admitted request (after its latency) until [`FakeVendor::resume`]: a test
    /// can then fill a key's slots deterministically, or make a request outlive its timeout.
    pub fn pause(&self) {
        self.shared.paused.send_replace(true);
    }

    /// A self-hosted fake answers every route, health included, 503 while down (a model
    /// reloading); requests under way when it goes down answer 503 too.
    pub fn set_down(&self, down: bool) {
        self.shared
            .down
            .store(down, std::sync::atomic::Ordering::SeqCst);
    }

    /// Releases held requests.
    pub fn resume(&self) {
        self.shared.paused.send_replace(false);
    }

    /// Waits until at least `n` requests (all keys, refused ones included) have been counted.
    pub async fn wait_for_requests(&self, n: u64) {
        let mut total = self.shared.total.subscribe();
        // The sender lives in `self.shared`, so this only ends when the count is reached.
        let _ = total.wait_for(|t| *t >= n).await;
    }

    /// The last requests received (up to 1000), credentials removed.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.recorded()
    }

    /// A self-hosted fake: the digest (`sha256:<hex>`) of the reference clip each recorded
    /// request carried, in order (requests with a server-side voice have none).
    pub fn reference_digests(&self) -> Vec<String> {
        self.requests()
            .iter()
            .filter_map(|r| {
                r.headers
                    .iter()
                    .find(|(k, _)| k.as_str() == selfhosted::REFERENCE_HEADER)
                    .map(|(_, v)| v.clone())
            })
            .collect()
    }
}

impl Drop for FakeVendor {
    fn drop(&mut self) {
        self.resume();
        self.task.abort();
    }
}

/// A sealed snapshot of `provider` / `model` / `voice_id` with no params, no extra and the
/// locale `en-US`, for tests and experiments (set `params` / `extra` / `locales` as needed).
pub fn snapshot(provider: &str, model: &str, voice_id: &str) -> Snapshot {
    let json = serde_json::json!({
        "packId": "vp_fake",
        "packVersion": "1",
        "provider": provider,
        "model": model,
        "voiceId": voice_id,
        "ttsModelId": format!("{provider}-fake"),
        "tier": "STANDARD",
        "frozenAt": "2026-01-01T00:00:00Z",
        "digest": "",
        "locales": ["en-US"],
    });
    match serde_json::from_value::<Snapshot>(json) {
        Ok(s) => s.seal(),
        Err(e) => unreachable!("the constant snapshot JSON always parses: {e}"),
    }
}
