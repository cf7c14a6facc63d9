//! [`Core`]: everything a request needs, shared by the unary and streaming RPCs, and
//! [`Job`]: one validated request ready to run.

pub mod attempt;
pub mod chunks;
pub mod failover;
pub mod prepare;

use std::{sync::Arc, time::Duration};

use tokio_util::task::TaskTracker;

use voxpool_shared::{config::SynthesisSettings, snapshot::Snapshot};

use crate::{
    adapters::{AudioFormat, VendorAdapter, registry::Registry},
    catalog::Catalog,
    deadline::Deadline,
    lease::Scheduler,
    pools::{Pool, Pools},
};

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
    /// TTL asked for each lease; renewed every third of it during a call.
    pub lease_ttl: Duration,
    /// `[[client_tokens]]` of the config (references, not values): read by `server::serve_with`.
    pub client_tokens: Vec<voxpool_shared::config::ClientTokenConfig>,
    /// Every vendor call under way, including those whose caller has gone: each holds its
    /// lease until the vendor answers (see [`crate::job::attempt`]); shutdown waits for them.
    pub background: TaskTracker,
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
    /// Traffic class of every lease (PRIORITY_UNSPECIFIED: the scheduler's STANDARD).
    pub priority: voxpool_proto::scheduler::v1::Priority,
    /// Tenant the request is for (fairness inside its class).
    pub tenant: String,
    /// When the request must be answered.
    pub deadline: Deadline,
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
