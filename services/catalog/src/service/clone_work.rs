//! `voxpool.catalog.v1.CloneWork`: synthesis replicas claim clone steps under a lease and
//! report their outcome. Guarded by the admin token, which synthesis holds (its own admin
//! RPCs take the same one): only the deployment's own services run vendor steps.

use tonic::{Request, Response, Status};
use voxpool_domain::snapshot::timestamp_pb;
use voxpool_proto::catalog::v1::{self as pb, clone_work_server::CloneWork};
use voxpool_runtime::auth::AdminAuth;

use super::{
    clones::{check_scope, clone_to_pb},
    require_id,
};
use crate::{
    clones::{
        Clones,
        model::{Claimed, ListedVoice, Outcome, Target, Work},
    },
    error::CatalogError,
    model::from_micros,
};

/// Most steps one Claim hands out.
pub const MAX_CLAIM: u32 = 100;
/// Steps a Claim with `max` 0 hands out.
pub const DEFAULT_CLAIM: u32 = 10;
/// Shortest and longest lease, ms; `lease_ms` 0 = [`DEFAULT_LEASE_MS`].
pub const LEASE_MS: std::ops::RangeInclusive<u32> = 1_000..=600_000;
/// The lease of a Claim with `lease_ms` 0.
pub const DEFAULT_LEASE_MS: u32 = 60_000;
/// Most scopes one worker claims for.
pub const MAX_WORKER_SCOPES: usize = 1_000;

/// The clone work service.
#[derive(Clone)]
pub struct CloneWorkService {
    clones: Clones,
    auth: AdminAuth,
}

impl CloneWorkService {
    /// A service over `clones` guarded by `auth`.
    pub fn new(clones: Clones, auth: AdminAuth) -> Self {
        Self { clones, auth }
    }

    /// The tonic server wrapping this service.
    pub fn into_server(self) -> pb::clone_work_server::CloneWorkServer<Self> {
        pb::clone_work_server::CloneWorkServer::new(self)
    }
}

fn work_to_pb(work: Work) -> pb::clone_task::Work {
    use pb::clone_task::Work as W;
    match work {
        Work::None => W::Unspecified,
        Work::Create => W::Create,
        Work::Poll => W::Poll,
        Work::Delete => W::Delete,
        Work::KeepAlive => W::Keepalive,
    }
}

fn task_to_pb(c: &Claimed) -> pb::CloneTask {
    let mut task = pb::CloneTask {
        attempt: c.attempt,
        lease_token: c.lease_token.clone(),
        lease_until: Some(timestamp_pb(from_micros(c.lease_until_us))),
        ..Default::default()
    };
    match &c.target {
        Target::Clone(clone, recipe) => {
            task.pack_id = clone.pack_id.clone();
            task.scope = clone.scope.clone();
            task.work = work_to_pb(clone.work) as i32;
            task.vendor_voice_id = clone.vendor_voice_id.clone().unwrap_or_default();
            task.provider = recipe.provider.clone();
            task.model = recipe.model.clone();
            task.target_model = recipe.target_model.clone();
            task.pool = recipe.pool.clone();
            task.samples = recipe
                .samples
                .iter()
                .map(|s| pb::CloneSample {
                    digest: s.digest.clone(),
                    content_type: s.content_type.clone(),
                    transcript: s.transcript.clone(),
                    language: s.language.clone(),
                })
                .collect();
        }
        Target::Import {
            scope,
            pool,
            provider,
        } => {
            task.scope = scope.clone();
            task.pool = pool.clone();
            task.provider = provider.clone();
            task.work = pb::clone_task::Work::Import as i32;
        }
    }
    task
}

fn ts_us(t: &prost_types::Timestamp) -> i64 {
    t.seconds
        .saturating_mul(1_000_000)
        .saturating_add(i64::from(t.nanos) / 1_000)
}

/// The outcome of a report. Errors: INVALID_ARGUMENT `outcome` missing, or a vendor voice id
/// missing where one is needed.
fn outcome_of(req: &pb::ReportCloneWorkRequest) -> Result<Outcome, CatalogError> {
    use pb::report_clone_work_request::Outcome as O;
    let voice_id = |field: &str, id: &str| -> Result<String, CatalogError> {
        if id.is_empty() {
            return Err(CatalogError::invalid(
                field,
                "required: the vendor's voice id",
            ));
        }
        voxpool_domain::untrusted::check_field(id, 256)
            .map_err(|p| CatalogError::invalid(field, p.to_string()))?;
        Ok(id.to_owned())
    };
    Ok(match &req.outcome {
        None => {
            return Err(CatalogError::invalid(
                "outcome",
                "required: training, ready, failed, retry, deleted, expired or imported",
            ));
        }
        Some(O::Training(t)) => Outcome::Training {
            vendor_voice_id: voice_id("training.vendor_voice_id", &t.vendor_voice_id)?,
            poll_after_ms: u64::from(t.poll_after_ms),
        },
        Some(O::Ready(r)) => Outcome::Ready {
            vendor_voice_id: voice_id("ready.vendor_voice_id", &r.vendor_voice_id)?,
            expires_at_us: r.expires_at.as_ref().map(ts_us),
        },
        Some(O::Failed(f)) => Outcome::Failed {
            error: f.error.clone(),
        },
        Some(O::Retry(r)) => Outcome::Retry {
            after_ms: u64::from(r.after_ms),
            error: r.error.clone(),
        },
        Some(O::Deleted(_)) => Outcome::Deleted,
        Some(O::Expired(e)) => Outcome::Expired {
            error: e.error.clone(),
            reclaimed: e.reclaimed,
        },
        Some(O::Imported(list)) => Outcome::Imported(
            list.voices
                .iter()
                .map(|v| ListedVoice {
                    vendor_voice_id: v.vendor_voice_id.clone(),
                    name: v.name.clone(),
                })
                .collect(),
        ),
    })
}

/// The checked pack, scope and vendor voice id of a MarkGone / MarkUsed.
fn marked<'a>(
    pack_id: &str,
    scope: &str,
    vendor_voice_id: &'a str,
) -> Result<&'a str, CatalogError> {
    require_id("pack_id", pack_id)?;
    check_scope("scope", scope)?;
    if vendor_voice_id.is_empty() {
        return Err(CatalogError::invalid(
            "vendor_voice_id",
            "required: the vendor voice id the synthesis sent",
        ));
    }
    voxpool_domain::untrusted::check_field(vendor_voice_id, 256)
        .map_err(|p| CatalogError::invalid("vendor_voice_id", p.to_string()))?;
    Ok(vendor_voice_id)
}

#[tonic::async_trait]
impl CloneWork for CloneWorkService {
    async fn claim(
        &self,
        request: Request<pb::ClaimCloneWorkRequest>,
    ) -> Result<Response<pb::ClaimCloneWorkResponse>, Status> {
        self.auth.authorize(request.metadata())?;
        let req = request.get_ref();
        if req.worker.is_empty() {
            return Err(CatalogError::invalid("worker", "required: the worker's name").into());
        }
        voxpool_domain::untrusted::check_field(&req.worker, 128)
            .map_err(|p| CatalogError::invalid("worker", p.to_string()))?;
        if req.scopes.is_empty() || req.scopes.len() > MAX_WORKER_SCOPES {
            return Err(CatalogError::invalid(
                "scopes",
                format!(
                    "name 1..={MAX_WORKER_SCOPES} clone scopes this worker holds credentials for, got {}",
                    req.scopes.len()
                ),
            )
            .into());
        }
        for (i, scope) in req.scopes.iter().enumerate() {
            check_scope(&format!("scopes[{i}]"), scope)?;
        }
        let max = match req.max {
            0 => DEFAULT_CLAIM,
            n if n <= MAX_CLAIM => n,
            n => {
                return Err(CatalogError::invalid(
                    "max",
                    format!("must be 0..={MAX_CLAIM} (0 = {DEFAULT_CLAIM}), got {n}"),
                )
                .into());
            }
        };
        let lease_ms = match req.lease_ms {
            0 => DEFAULT_LEASE_MS,
            n if LEASE_MS.contains(&n) => n,
            n => {
                return Err(CatalogError::invalid(
                    "lease_ms",
                    format!(
                        "must be {}..={} ms (0 = {DEFAULT_LEASE_MS}), got {n}",
                        LEASE_MS.start(),
                        LEASE_MS.end()
                    ),
                )
                .into());
            }
        };
        let claimed = self
            .clones
            .claim(&req.worker, &req.scopes, max, lease_ms)
            .await?;
        Ok(Response::new(pb::ClaimCloneWorkResponse {
            tasks: claimed.iter().map(task_to_pb).collect(),
        }))
    }

    async fn report(
        &self,
        request: Request<pb::ReportCloneWorkRequest>,
    ) -> Result<Response<pb::VoiceClone>, Status> {
        self.auth.authorize(request.metadata())?;
        let req = request.get_ref();
        if !req.pack_id.is_empty() {
            require_id("pack_id", &req.pack_id)?;
        }
        check_scope("scope", &req.scope)?;
        if req.lease_token.is_empty() || req.lease_token.len() > 64 {
            return Err(CatalogError::invalid(
                "lease_token",
                "required: the lease_token of the claimed task",
            )
            .into());
        }
        let outcome = outcome_of(req)?;
        let clone = self
            .clones
            .report(&req.pack_id, &req.scope, &req.lease_token, &outcome)
            .await?;
        Ok(Response::new(if req.pack_id.is_empty() {
            pb::VoiceClone {
                scope: req.scope.clone(),
                ..Default::default()
            }
        } else {
            clone_to_pb(&clone)
        }))
    }

    async fn mark_gone(
        &self,
        request: Request<pb::MarkCloneGoneRequest>,
    ) -> Result<Response<pb::VoiceClone>, Status> {
        self.auth.authorize(request.metadata())?;
        let req = request.get_ref();
        let voice_id = marked(&req.pack_id, &req.scope, &req.vendor_voice_id)?;
        let clone = self
            .clones
            .mark_gone(&req.pack_id, &req.scope, voice_id, &req.error)
            .await?;
        Ok(Response::new(clone_to_pb(&clone)))
    }

    async fn mark_used(
        &self,
        request: Request<pb::MarkCloneUsedRequest>,
    ) -> Result<Response<pb::VoiceClone>, Status> {
        self.auth.authorize(request.metadata())?;
        let req = request.get_ref();
        let voice_id = marked(&req.pack_id, &req.scope, &req.vendor_voice_id)?;
        let clone = self
            .clones
            .mark_used(&req.pack_id, &req.scope, voice_id)
            .await?;
        Ok(Response::new(clone_to_pb(&clone)))
    }
}
