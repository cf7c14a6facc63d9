//! A job's life, from a validated request to its audio: [`Core`] (everything a request needs,
//! shared by the unary and streaming RPCs) and its methods, the domain [`Request`] the edge
//! hands in (`crate::convert`), and [`Job`], one request ready to run.
//!
//! A request's `text` goes: [`Core::prepare`] ([`prepare`]: everything that can be refused is
//! refused before a lease; invariant 8 of docs/ARCHITECTURE.md) → [`Core::run`] / [`Core::run_into`] ([`chunks`]: the
//! chunks side by side, emitted in text order) → [`failover`] (per chunk: lease, call, report,
//! fail over to other keys of the pool with the same snapshot; invariant 9) → [`attempt`] (one
//! leased vendor call that outlives its caller; invariant 1 at the vendor). A streaming caller
//! (gRPC or HTTP) reads the audio from [`delivery`], in pieces as it is produced. Each chunk's
//! vendor call is one [`Utterance`] ([`Job::utterance`]), also its cache identity. Nothing
//! here sees a protobuf type: each front converts (`crate::convert`, `crate::front`), and so
//! does the scheduler client (`crate::lease`).

pub mod admission;
pub mod attempt;
pub mod cached;
mod charge;
pub mod chunks;
pub mod clone_route;
pub mod delivery;
pub mod failover;
pub mod prepare;
pub mod spool;

use std::{sync::Arc, time::Duration};

use tokio_util::task::TaskTracker;

use voxpool_config::SynthesisSettings;
use voxpool_domain::snapshot::{Snapshot, SnapshotError};

use crate::{
    adapters::{AudioFormat, Utterance, VendorAdapter, registry::Registry},
    cache::{Cache, Policy},
    catalog::Catalog,
    deadline::Deadline,
    error::SynthesisError,
    lease::{Priority, Scheduler},
    pools::{Pool, Pools},
    record::AttemptRecord,
};

pub use chunks::{Finished, Output};

/// Shared state of the service.
pub struct Core {
    /// Pools from the config, credentials resolved.
    pub pools: Pools,
    /// Adapters by provider id.
    pub adapters: Registry,
    /// The scheduler client.
    pub scheduler: Scheduler,
    /// The catalog client.
    pub catalog: Catalog,
    /// `[synthesis]` settings of the config.
    pub settings: SynthesisSettings,
    /// The audio cache; `None` with `--cache off` ([`cached`]).
    pub cache: Option<Arc<Cache>>,
    /// Reference clips by digest (`crate::references`); `None` = no blob store, and voices
    /// with clips are refused.
    pub references: Option<Arc<crate::references::ReferenceClips>>,
    /// The token `SynthesisAdmin` RPCs need: read by `server::serve_with`.
    pub admin: voxpool_runtime::auth::AdminAuth,
    /// TTL asked for each lease; renewed every third of it during a call.
    pub lease_ttl: Duration,
    /// `[[client_tokens]]` of the config (references, not values): read by `server::serve_with`.
    pub client_tokens: Vec<voxpool_config::ClientTokenConfig>,
    /// Every vendor call under way, including those whose caller has gone: each holds its
    /// lease until the vendor answers (see [`attempt`]); shutdown waits for them.
    pub background: TaskTracker,
    /// `[usage]` and the usage stream (`crate::usage`).
    pub usage: crate::usage::Usage,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut providers: Vec<&str> = self.adapters.keys().map(|p| p.as_str()).collect();
        providers.sort_unstable();
        f.debug_struct("Core")
            .field("pools", &self.pools.names())
            .field("providers", &providers)
            .field("scheduler", &self.scheduler.url())
            .finish_non_exhaustive()
    }
}

/// One validated request: the voice, the pool and adapter serving it, and the text chunks.
#[derive(Clone)]
pub struct Job {
    /// The pool (`snapshot.ttsModelId`).
    pub pool: Arc<Pool>,
    /// The pool's adapter.
    pub adapter: Arc<dyn VendorAdapter>,
    /// The frozen voice: identical for every chunk and every failover attempt (invariant 9).
    pub voice: Arc<Snapshot>,
    /// Text chunks within the adapter's limit, in order; whitespace-only chunks removed.
    pub chunks: Vec<String>,
    /// Output format.
    pub format: AudioFormat,
    /// Sample rate asked of every chunk: the caller's; for text of several chunks without one,
    /// the adapter's default asked explicitly (so pieces from different upstreams share one
    /// rate); else `None` = vendor default.
    pub sample_rate_hz: Option<u32>,
    /// WAV output with the streaming header (`wav_streaming_header`).
    pub wav_streaming_header: bool,
    /// The caller's (or a generated) request id.
    pub request_id: String,
    /// Traffic class of every lease.
    pub priority: Priority,
    /// Tenant the request is for (fairness inside its class).
    pub tenant: String,
    /// When the request must be answered.
    pub deadline: Deadline,
    /// How the request uses the audio cache ([`cached`]).
    pub cache_policy: Policy,
    /// The reference clip every chunk speaks with (picked once per request: a split text
    /// never changes clip), for voices with clips.
    pub reference: Option<Arc<crate::adapters::ReferenceAudio>>,
    /// The request's seed (the pick among clips, and the server's sampling where it takes one).
    pub seed: Option<u64>,
    /// What the request is metered for (`crate::usage`).
    pub meter: Arc<crate::usage::Meter>,
    /// Set once the first chunk holds a lease (or is done): the other chunks wait for it
    /// before asking for theirs, so the first chunk's Acquire, which asks the budgets for the
    /// whole text, is judged before any other chunk reserves or spends anything.
    pub first_leased: Arc<tokio::sync::watch::Sender<bool>>,
    /// For a managed clone pack: the scopes whose clone is READY and their vendor ids; the
    /// job is sent only to their keys ([`clone_route`]). `None` for every other voice.
    pub clone: Option<Arc<clone_route::CloneRoute>>,
}

impl Job {
    /// What chunk `index` asks of the vendor: its text in the job's voice, format, sample
    /// rate, clip and seed. The same for every attempt of the chunk, and the chunk's cache
    /// identity ([`crate::cache::EntryKey::of`]).
    pub fn utterance(&self, index: usize) -> Utterance {
        Utterance {
            text: self.chunks[index].clone(),
            voice: self.voice.clone(),
            pool_model: self.pool.model.clone(),
            format: self.format,
            sample_rate_hz: self.sample_rate_hz,
            reference: self.reference.clone(),
            seed: self.seed,
        }
    }

    /// The digest of the clip the job speaks with; empty for voices without clips.
    pub fn reference_digest(&self) -> String {
        self.reference
            .as_ref()
            .map(|r| r.reference.digest.clone())
            .unwrap_or_default()
    }
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("pool", &self.pool.id)
            .field("pack", &self.voice.pack_id)
            .field("chunks", &self.chunks.len())
            .field("format", &self.format)
            .field("request_id", &self.request_id)
            .finish_non_exhaustive()
    }
}

/// A number a wire enum carried that names none of its members (protobuf enums are open):
/// kept so [`prepare`] refuses it by name, in its turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unknown(pub i32);

/// Where a request's voice comes from.
#[derive(Clone, Debug)]
pub enum VoiceSource {
    /// A snapshot given whole.
    Snapshot(Box<Snapshot>),
    /// A snapshot given whole that does not convert (the field and why).
    Malformed(SnapshotError),
    /// A snapshot's JSON form, as stored in a card.
    Json(String),
    /// A voice pack id the catalog freezes.
    PackId(String),
}

/// A synthesis request as the edge hands it over, not yet validated ([`prepare`] checks it).
#[derive(Clone, Debug)]
pub struct Request {
    /// The caller's request id; empty = generate one.
    pub request_id: String,
    /// Traffic class of every lease.
    pub priority: Result<Priority, Unknown>,
    /// Tenant the request is for.
    pub tenant: String,
    /// The text to speak.
    pub text: String,
    /// Output format (unspecified = WAV).
    pub format: Result<AudioFormat, Unknown>,
    /// WAV with the streaming header.
    pub wav_streaming_header: bool,
    /// Sample rate asked for; 0 = the vendor's default.
    pub sample_rate_hz: i32,
    /// The voice; `None` when the caller set none.
    pub voice: Option<VoiceSource>,
    /// How the request uses the audio cache (unspecified = USE).
    pub cache_policy: Result<Policy, Unknown>,
    /// Changes to the voice for this request only (none from gRPC).
    pub overrides: Overrides,
    /// The clip tag asked for (voices with reference clips); empty = a weighted roll.
    pub emotion: String,
    /// Seeds the roll among clips and the server's sampling; `None` = random.
    pub seed: Option<u64>,
    /// The authenticated caller's name (client token name, mTLS subject, HTTP key name);
    /// empty = anonymous.
    pub caller: String,
    /// The front the request came through.
    pub path: crate::usage::Path,
}

/// Per-request changes to the resolved voice: the HTTP front's `speed` and `instructions`.
/// [`prepare`] applies them to a copy of the snapshot and seals it anew (its digest, and so
/// its cache entries, are its own), then the adapter checks the result like any snapshot:
/// a vendor that cannot apply them refuses naming `params.rate` / `extra.instructions`,
/// never drops them (invariant 8).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overrides {
    /// Multiplies the voice's rate (its `params.rate`, else 1.0); `None` or 1.0 = unchanged.
    pub rate_scale: Option<f64>,
    /// A style prompt replacing the voice's `extra.instructions`.
    pub instructions: Option<String>,
}

/// The audio of a whole job.
#[derive(Debug)]
pub struct Synthesized {
    /// Joined audio.
    pub audio: Vec<u8>,
    /// Sample rate (Hz), when known.
    pub sample_rate_hz: Option<u32>,
    /// The key of the last chunk.
    pub key_id: String,
    /// Every attempt.
    pub attempts: Vec<AttemptRecord>,
    /// How many chunks came from the audio cache.
    pub cached_chunks: u32,
    /// The clip the voice spoke with; empty for voices without clips.
    pub reference_digest: String,
    /// What the request used.
    pub usage: crate::usage::Totals,
}

/// A unary call's output: everything collected, nothing delivered before the end.
#[derive(Debug, Default)]
struct Collect {
    audio: Vec<u8>,
}

impl Output for Collect {
    fn live(&self) -> bool {
        false
    }

    async fn send(&mut self, bytes: Vec<u8>) -> bool {
        self.audio.extend(bytes);
        true
    }

    fn delivered(&self) -> (u64, u64) {
        (0, 0)
    }
}

impl Core {
    /// Validates `request` and resolves its voice ([`prepare`]). Every error is a refusal
    /// made before any lease.
    pub async fn prepare(
        &self,
        request: Request,
        deadline: Deadline,
    ) -> Result<Job, SynthesisError> {
        prepare::prepare(self, request, deadline).await
    }

    /// Runs every chunk of `job` ([`chunks`]) and joins the audio: the unary call.
    pub async fn run(self: &Arc<Self>, job: Job) -> Result<Synthesized, SynthesisError> {
        let job = Arc::new(job);
        let mut out = Collect::default();
        let Some(done) = self.run_into(&job, &mut out).await? else {
            // Collect never refuses bytes, so the run cannot see its caller gone.
            return Err(SynthesisError::DeadlineExceeded {
                pool: Some(job.pool.id.clone()),
                budget_ms: job.deadline.budget_ms(),
                attempts: Vec::new(),
                in_call: false,
            });
        };
        let mut audio = out.audio;
        audio.extend(done.tail);
        Ok(Synthesized {
            audio,
            sample_rate_hz: done.sample_rate_hz,
            key_id: done.key_id,
            attempts: done.attempts,
            cached_chunks: done.cached_chunks,
            reference_digest: job.reference_digest(),
            usage: job.meter.totals(),
        })
    }

    /// Runs every chunk of `job` ([`chunks::run`]), sending output to `out` as it may go
    /// (a stream), except what is owed after the last chunk ([`Finished::tail`]).
    /// `Ok(None)`: the caller went away.
    pub async fn run_into(
        self: &Arc<Self>,
        job: &Arc<Job>,
        out: &mut impl Output,
    ) -> Result<Option<Finished>, SynthesisError> {
        chunks::run(self, job, out).await
    }
}
