//! Vendor adapters: one module per TTS vendor, all behind [`VendorAdapter`].
//!
//! An adapter does three things, and only these:
//! 1. [`VendorAdapter::check`]: maps the snapshot's vendor-neutral params (pitch %, rate
//!    multiplier, volume %, `extra`) and the requested format / sample rate onto what the
//!    vendor can express, or refuses with a [`ParamError`] naming the param, the value and
//!    the provider (invariant 8 of docs/ARCHITECTURE.md: applied or refused, never dropped or clamped).
//! 2. [`VendorAdapter::stream`]: one HTTP call (or one engine process) with one key's
//!    credential, writing the audio into an [`AudioSink`] as the vendor sends it (vendors that
//!    stream: as each piece arrives; the others: once, whole), or failing with a
//!    [`VendorFailure`] classified into a scheduler outcome (`http/classify.rs`, the outcome
//!    classification table of docs/VENDORS.md: body codes, not only HTTP status; `Retry-After` read). A failure can come after audio
//!    was written (a stream that breaks); `crate::job` decides what that means.
//!    [`VendorAdapter::synthesize`] is the same call collected into one [`VendorAudio`].
//! 3. [`VendorAdapter::text_limit`]: the vendor's per-request text limit, so `crate::job`
//!    splits longer text at sentence boundaries.
//!
//! The cloud adapters share one skeleton ([`cloud::CloudVendor`]): each writes only its wire
//! mapping and its call.
//!
//! Adapters never see the scheduler, never retry and never log credentials: failover,
//! reporting and releasing belong to `crate::job`.

pub mod espeak;
pub mod gate;
pub mod registry;
// Cloud adapters: `pub mod <name>;` lines go here (openai, azure, volcengine, elevenlabs,
// minimax, dashscope), and one `add` line each in `registry::builtin`.
pub mod azure;
pub mod cloud;
pub mod dashscope;
pub mod elevenlabs;
pub mod http;
pub mod minimax;
pub mod openai;
pub mod selfhosted;
pub mod volcengine;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::mpsc;
use voxpool_domain::{secret::Secret, snapshot::Snapshot};

pub use voxpool_domain::{
    audio::{Audio as VendorAudio, AudioFormat},
    text::TextLimit,
};

/// A param (or format / sample rate) the vendor cannot apply. Maps to INVALID_ARGUMENT.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{provider} cannot apply {param} = {value}: {reason}")]
pub struct ParamError {
    /// The snapshot field, e.g. `params.pitchPct`, `extra.style`, `format`, `sample_rate_hz`.
    pub param: String,
    /// The offending value as given.
    pub value: String,
    /// Provider id.
    pub provider: String,
    /// Why, with the accepted range or alternatives.
    pub reason: String,
}

/// The key a call runs under (from the lease and the config).
#[derive(Clone, Debug)]
pub struct KeyCredential {
    /// `upstream/key` as the scheduler names it.
    pub key_id: String,
    /// The vendor app id (the key part of `key_id`), e.g. Volcengine `appid`.
    pub app_id: String,
    /// The credential (token / API key); `None` for the local engine. `Debug` is redacted.
    pub secret: Option<Secret>,
}

/// The upstream (account / endpoint) a key belongs to, from the config.
#[derive(Clone, Debug, Default)]
pub struct UpstreamTarget {
    /// Upstream id.
    pub id: String,
    /// Base URL; `None` = the adapter's default.
    pub base_url: Option<String>,
    /// Region (Azure).
    pub region: Option<String>,
    /// Adapter options (e.g. Volcengine `cluster`).
    pub params: BTreeMap<String, serde_json::Value>,
    /// The upstream queues requests beyond its concurrency instead of refusing them (config
    /// `queueing`): a call that runs out its attempt timeout there is an overload signal.
    pub queueing: bool,
    /// A successful call slower than this is reported as a concurrency signal (config
    /// `latency_limit_ms`).
    pub latency_limit: Option<Duration>,
}

/// The reference clip a call speaks with (voices with clips: `selfhosted`), fetched from the
/// blob store and checked against its digest (`crate::references`).
#[derive(Clone)]
pub struct ReferenceAudio {
    /// The clip as the snapshot froze it (digest, transcript, language, …).
    pub reference: voxpool_domain::reference::Reference,
    /// Its bytes.
    pub bytes: Bytes,
    /// Its container.
    pub format: voxpool_domain::audio::clip::ClipFormat,
}

impl std::fmt::Debug for ReferenceAudio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReferenceAudio")
            .field("digest", &self.reference.digest)
            .field("bytes", &self.bytes.len())
            .finish_non_exhaustive()
    }
}

/// What one vendor call says and how it must sound: one chunk's text in the request's frozen
/// voice, output format, sample rate, reference clip and seed. Declared once: the job builds
/// one per chunk (`crate::job::Job::utterance`), an attempt sends it ([`VendorRequest`]), and
/// the audio cache keys an entry by it (`crate::cache::key`), so what is asked of the vendor
/// and what names its audio cannot drift apart.
#[derive(Clone, Debug)]
pub struct Utterance {
    /// Text of this chunk (already within [`VendorAdapter::text_limit`]).
    pub text: String,
    /// The frozen voice.
    pub voice: Arc<Snapshot>,
    /// The pool's vendor model id (the config's `model`); the snapshot's `model` wins when set.
    pub pool_model: String,
    /// Requested output.
    pub format: AudioFormat,
    /// Requested sample rate (Hz); `None` = vendor default.
    pub sample_rate_hz: Option<u32>,
    /// The reference clip to speak with (adapters whose [`VendorAdapter::takes_references`]).
    pub reference: Option<Arc<ReferenceAudio>>,
    /// The request's seed, for servers that take one.
    pub seed: Option<u64>,
}

/// One vendor call: an [`Utterance`] under one key.
#[derive(Clone, Debug)]
pub struct VendorRequest<'a> {
    /// What to say and how.
    pub utterance: &'a Utterance,
    /// The key and its credential.
    pub key: &'a KeyCredential,
    /// The key's upstream.
    pub upstream: &'a UpstreamTarget,
    /// Per-attempt timeout.
    pub timeout: Duration,
    /// Unique id for this attempt (vendors such as Volcengine want a fresh reqid).
    pub attempt_id: &'a str,
    /// Where the request waits for its usage Charge before the vendor has its text
    /// ([`gate`]); open by default.
    pub gate: gate::Gate,
}

/// How a vendor call failed, classified for the scheduler (docs/VENDORS.md error table).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VendorFailure {
    /// Scheduler outcome: RateLimited, ConcurrencyLimited, UpstreamError, Timeout, KeyInvalid,
    /// QuotaExhausted or
    /// ClientError.
    pub outcome: voxpool_domain::contract::Outcome,
    /// HTTP status, when there was a response.
    pub http_status: Option<u16>,
    /// `Retry-After` in ms, when the vendor sent one.
    pub retry_after_ms: Option<u64>,
    /// Vendor message with secrets removed (never a credential or the request body).
    pub message: String,
}

/// Where an adapter writes a call's audio as the vendor sends it: consecutive pieces of one
/// answer in the requested format (a WAV stream starts with its header, placeholder sizes
/// allowed). Writing never fails and never waits: once the reader has gone the bytes are
/// dropped, and the adapter reads on to the vendor's end (the lease covers the vendor's work).
#[derive(Debug)]
pub struct AudioSink {
    tx: mpsc::UnboundedSender<Bytes>,
    written: std::sync::atomic::AtomicU64,
    billed: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl AudioSink {
    /// A sink and the receiver of what is written into it.
    pub fn new() -> (Self, mpsc::UnboundedReceiver<Bytes>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Self {
                tx,
                written: std::sync::atomic::AtomicU64::new(0),
                billed: std::sync::Arc::default(),
            },
            rx,
        )
    }

    /// Writes the next piece (empty pieces are skipped).
    pub fn write(&self, bytes: impl Into<Bytes>) {
        let bytes = bytes.into();
        if bytes.is_empty() {
            return;
        }
        self.written.fetch_add(
            u64::try_from(bytes.len()).unwrap_or(u64::MAX),
            std::sync::atomic::Ordering::Relaxed,
        );
        // A closed receiver means nobody wants the audio any more; the call still runs on.
        let _ = self.tx.send(bytes);
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Records what the vendor says it billed for the call (ElevenLabs' `character-cost`).
    pub fn billed(&self, characters: u64) {
        self.billed
            .store(characters, std::sync::atomic::Ordering::Relaxed);
    }

    /// Where [`AudioSink::billed`] lands (0 = the vendor said nothing), kept by the attempt.
    pub fn billed_counter(&self) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
        self.billed.clone()
    }
}

/// How a streamed call ended, once all its audio is in the sink.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamEnd {
    /// The audio's sample rate (Hz), when the vendor or the request says it.
    pub sample_rate_hz: Option<u32>,
}

/// A TTS vendor.
#[async_trait]
pub trait VendorAdapter: Send + Sync + 'static {
    /// Provider id (`openai`, `azure`, `volcengine`, `elevenlabs`, `minimax`, `dashscope`,
    /// `espeak`).
    fn provider(&self) -> voxpool_domain::provider::Provider;

    /// Per-request text limit of the vendor.
    fn text_limit(&self) -> TextLimit;

    /// Whether the vendor speaks a voice from reference clips (a snapshot's `references`);
    /// a voice with clips on any other adapter is refused before a lease. Default: no.
    fn takes_references(&self) -> bool {
        false
    }

    /// Whether a call of `voice` on `upstream` gets its audio as the vendor generates it; when
    /// it arrives whole instead, `crate::job` gives the request a short first chunk. Default:
    /// yes.
    fn streams(&self, upstream: &UpstreamTarget, voice: &Snapshot) -> bool {
        let _ = (upstream, voice);
        true
    }

    /// Refuses params, extra options, formats or sample rates the vendor cannot apply.
    /// Called once per request before any lease is taken.
    fn check(
        &self,
        voice: &Snapshot,
        format: AudioFormat,
        sample_rate_hz: Option<u32>,
    ) -> Result<(), ParamError>;

    /// The sample rate (Hz) the vendor answers `format` with when none is asked for, if the
    /// adapter knows it. A text split into chunks asks every chunk for this rate explicitly,
    /// so chunks served by different upstreams share one rate. Default: unknown.
    fn default_sample_rate_hz(&self, format: AudioFormat) -> Option<u32> {
        let _ = format;
        None
    }

    /// One call with one key, its audio written into `sink` as it arrives. Never retries.
    async fn stream(
        &self,
        request: VendorRequest<'_>,
        sink: &AudioSink,
    ) -> Result<StreamEnd, VendorFailure>;

    /// The same call, its audio collected into one piece.
    async fn synthesize(&self, request: VendorRequest<'_>) -> Result<VendorAudio, VendorFailure> {
        let format = request.utterance.format;
        let (sink, mut rx) = AudioSink::new();
        let end = self.stream(request, &sink).await?;
        drop(sink);
        let mut bytes = Vec::new();
        while let Some(piece) = rx.recv().await {
            bytes.extend_from_slice(&piece);
        }
        Ok(VendorAudio {
            bytes,
            format,
            sample_rate_hz: end.sample_rate_hz,
        })
    }
}
