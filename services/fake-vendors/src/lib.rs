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
//! The ElevenLabs, MiniMax and Volcengine fakes also clone voices the way their vendors do
//! ([`CloneConfig`]): each key belongs to a scope (workspace, account, AppID), a clone serves
//! its scope only, slots fill (and free where the vendor deletes), MiniMax's unused clones expire
//! and Volcengine's train on a fake clock a test moves forward (`POST /_fake/clock/advance`),
//! a test can expire or reclaim a clone (`POST /_fake/clones/state`), and every clone call is
//! counted per scope
//! (`GET /_fake/stats/clones`, [`FakeVendor::clone_counts`]).
//!
//! Invalid-key answers echo the presented key in their message on purpose (OpenAI, Volcengine):
//! adapter tests then prove that failures never carry the credential.

pub mod audio;
mod azure;
mod billing;
mod cloning;
mod config;
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
pub use cloning::{CloneConfig, CloneCounts, CloneState, ClonedVoice};
pub use config::FakeConfig;
use control::Shared;
pub use control::{KeyStats, RecordedRequest};
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
        let clones = cloning::Clones::new(config.vendor, config.clones.clone());
        let shared = Shared::new(config.settings(), clones);
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
            .merge(cloning::control::routes())
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

    /// Clone calls per scope ([`CloneCounts`]; also `GET /_fake/stats/clones`).
    pub fn clone_counts(&self) -> BTreeMap<String, CloneCounts> {
        self.shared.clones.counts()
    }

    /// Every cloned voice the vendor holds now, per scope, with its state.
    pub fn clones(&self) -> Vec<ClonedVoice> {
        self.shared.clones.voices()
    }

    /// Moves the fake clock forward (`POST /_fake/clock/advance`); the fake time now, in
    /// seconds since the epoch.
    pub fn advance_clock(&self, by: std::time::Duration) -> u64 {
        self.shared.clones.clock.advance(by)
    }

    /// Plays the vendor changing a clone of `scope` (`POST /_fake/clones/state`); `false` when
    /// the scope holds no such clone.
    pub fn set_clone_state(&self, scope: &str, voice_id: &str, state: CloneState) -> bool {
        self.shared.clones.set_state(scope, voice_id, state)
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
