//! `SynthesisAdmin`: operators' RPCs on the audio cache (purge, stats), each behind the admin
//! bearer token (`VOXPOOL_ADMIN_TOKEN` / `--admin-token-file`; FAILED_PRECONDITION when the
//! server has none, UNAUTHENTICATED for a missing or wrong one).

use std::sync::Arc;

use tonic::{Request, Response, Status};
use voxpool_proto::synthesis::v1::{
    self as pb,
    synthesis_admin_server::{SynthesisAdmin, SynthesisAdminServer},
};
use voxpool_runtime::auth::AdminAuth;

use crate::{cache::CacheError, job::Core};

/// Longest pack id / digest accepted in a purge (ids are far shorter).
const MAX_ID_CHARS: usize = 128;

/// The admin service of one replica.
#[derive(Debug)]
pub struct SynthesisAdminService {
    core: Arc<Core>,
    auth: AdminAuth,
}

impl SynthesisAdminService {
    /// The service over `core`, answering callers that present `auth`'s token.
    pub fn new(core: Arc<Core>, auth: AdminAuth) -> Self {
        Self { core, auth }
    }

    /// The tonic server of it.
    pub fn into_server(self) -> SynthesisAdminServer<Self> {
        SynthesisAdminServer::new(self)
    }
}

fn unavailable(e: &CacheError) -> Status {
    Status::unavailable(format!("{e}; check the blob store and retry"))
}

fn check_id(field: &str, value: &str) -> Result<(), Status> {
    voxpool_domain::untrusted::check_field(value, MAX_ID_CHARS)
        .map_err(|problem| Status::invalid_argument(format!("{field}: {problem}")))?;
    if value.contains('/') {
        return Err(Status::invalid_argument(format!(
            "{field}: must not contain '/'"
        )));
    }
    Ok(())
}

#[tonic::async_trait]
impl SynthesisAdmin for SynthesisAdminService {
    async fn purge_cache(
        &self,
        request: Request<pb::PurgeCacheRequest>,
    ) -> Result<Response<pb::PurgeCacheResponse>, Status> {
        self.auth.authorize(request.metadata())?;
        let r = request.into_inner();
        if r.pack_id.is_empty() && r.snapshot_digest.is_empty() {
            return Err(Status::invalid_argument(
                "pack_id, snapshot_digest: set at least one (a pack's entries, or one snapshot's)",
            ));
        }
        check_id("pack_id", &r.pack_id)?;
        check_id("snapshot_digest", &r.snapshot_digest)?;
        if !r.snapshot_digest.is_empty()
            && !r
                .snapshot_digest
                .strip_prefix("sha256:")
                .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Err(Status::invalid_argument(
                "snapshot_digest: must be sha256:<64 hex digits>, as a snapshot's digest field",
            ));
        }
        let Some(cache) = &self.core.cache else {
            return Err(Status::failed_precondition(
                "the audio cache is off on this replica (--cache off): nothing to purge",
            ));
        };
        let gone = cache
            .purge(&r.pack_id, &r.snapshot_digest)
            .await
            .map_err(|e| unavailable(&e))?;
        tracing::info!(
            entries = gone.entries,
            bytes = gone.bytes,
            "audio cache purged"
        );
        Ok(Response::new(pb::PurgeCacheResponse {
            deleted_entries: i64::try_from(gone.entries).unwrap_or(i64::MAX),
            deleted_bytes: i64::try_from(gone.bytes).unwrap_or(i64::MAX),
        }))
    }

    async fn get_cache_stats(
        &self,
        request: Request<pb::GetCacheStatsRequest>,
    ) -> Result<Response<pb::CacheStats>, Status> {
        self.auth.authorize(request.metadata())?;
        let Some(cache) = &self.core.cache else {
            return Ok(Response::new(pb::CacheStats::default()));
        };
        let held = cache.holdings().await.map_err(|e| unavailable(&e))?;
        let (counters, evictions) = cache.counters();
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        Ok(Response::new(pb::CacheStats {
            enabled: true,
            location: cache.location().to_owned(),
            entries: n(held.entries),
            bytes: n(held.bytes),
            max_bytes: n(cache.max_bytes().unwrap_or(0)),
            pools: counters
                .into_iter()
                .map(|(pool, c)| pb::PoolCacheStats {
                    pool,
                    hits: n(c.hits),
                    misses: n(c.misses),
                    fills: n(c.fills),
                    coalesced: n(c.coalesced),
                    characters_saved: n(c.characters_saved),
                    bytes_stored: n(c.bytes_stored),
                })
                .collect(),
            evictions: n(evictions),
        }))
    }
}
