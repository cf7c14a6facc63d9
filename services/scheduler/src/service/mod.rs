//! The `voxpool.scheduler.v1.PoolScheduler` gRPC service: thin handlers that decode a request
//! ([`validate`], against the domain's one pool table), call the domain
//! ([`crate::domain::Scheduler`], for every RPC), and encode the answer ([`crate::convert`]);
//! plus admin authorization, the lease signer and the per-RPC metrics; the fill-lock RPCs'
//! decoding is in `fill`. Metric series and span fields name only configured pools (`unknown`
//! otherwise), so no caller string can grow them.

mod fill;
mod validate;

use std::sync::Arc;

use tokio::time::Instant;
use tonic::{Request, Response, Status};
use tracing::Instrument;
use voxpool_config::{Config, SchedulerSettings};
use voxpool_proto::scheduler::v1 as pb;
use voxpool_runtime::auth::AdminAuth;

pub use self::fill::MAX_FILL_WAIT_MS;
pub use self::validate::{
    MAX_FILTER_ENTRIES, MAX_REQUEST_ID_CHARS, MAX_RETRY_AFTER_MS, MAX_WAIT_TIMEOUT_MS,
};
use crate::{
    convert::key_status,
    domain::{Granted, KeyChange, Scheduler},
    error::SchedulerError,
    metrics::SchedulerMetrics,
    model::{KeyState, Outcome, PoolStatus},
    signing::LeaseSigner,
    store::{LeaseStore, StoreError},
};

/// The PoolScheduler implementation, generic over the store through a trait object.
pub struct SchedulerService {
    scheduler: Scheduler,
    settings: SchedulerSettings,
    auth: AdminAuth,
    metrics: Arc<SchedulerMetrics>,
    /// Signs granted leases and verifies presented ids.
    signer: Arc<LeaseSigner>,
    /// `Lease.renew_interval_ms`: half the recovery window (0 when recovery is off).
    renew_interval_ms: i64,
}

impl std::fmt::Debug for SchedulerService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerService")
            .field("pools", &self.scheduler.pools().names())
            .finish_non_exhaustive()
    }
}

impl SchedulerService {
    /// Builds the service over `store` for the pools of `config` (already validated and
    /// seeded into the store), granting leases signed by `signer`. Waiting Acquires end with
    /// UNAVAILABLE SHUTTING_DOWN when `shutdown` is cancelled, so a draining replica does not
    /// hold long waits past its grace period; the callers retry on another replica.
    pub fn new(
        store: Arc<dyn LeaseStore>,
        config: &Config,
        auth: AdminAuth,
        metrics: Arc<SchedulerMetrics>,
        signer: Arc<LeaseSigner>,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> Self {
        Self {
            scheduler: Scheduler::new(store, config, shutdown),
            settings: config.scheduler.clone(),
            auth,
            metrics,
            signer,
            renew_interval_ms: match config.scheduler.recovery_window_ms {
                0 => 0,
                window => i64::try_from((window / 2).max(1)).unwrap_or(i64::MAX),
            },
        }
    }

    /// The gRPC server wrapper for this service.
    pub fn into_server(self) -> pb::pool_scheduler_server::PoolSchedulerServer<Self> {
        pb::pool_scheduler_server::PoolSchedulerServer::new(self)
    }

    /// The configured pool's own name, or `unknown`: what spans and metric series carry.
    fn label<'a>(&'a self, pool: &str) -> &'a str {
        self.scheduler.pools().label(pool)
    }

    /// Reads a store-kept lease secret not read yet (start-up, the store just came back), so
    /// the call that needs it is answered with the store's own reason when it cannot be.
    async fn ensure_signer(&self) -> Result<(), SchedulerError> {
        if self.signer.is_ready() {
            return Ok(());
        }
        self.scheduler
            .refresh_signer(&self.signer)
            .await
            .map_err(|e| SchedulerError::Store(StoreError::Unavailable(e)))
    }

    /// The lease as sent: its signed id (granted at `granted_at_ms`, store clock), telling its
    /// holder how often to renew (`Lease.renew_interval_ms`).
    fn lease_pb(
        &self,
        lease: crate::model::Lease,
        granted_at_ms: i64,
    ) -> Result<pb::Lease, SchedulerError> {
        let signed = self
            .signer
            .sign(&lease, granted_at_ms)
            .ok_or_else(validate::not_ready)?;
        let mut out = pb::Lease::from(lease);
        out.lease_id = signed.to_string();
        out.renew_interval_ms = self.renew_interval_ms;
        Ok(out)
    }

    fn status_pb(&self, s: &PoolStatus) -> pb::PoolStatus {
        let mut out = pb::PoolStatus::from(s);
        out.waiters = i32::try_from(self.scheduler.waiting(&s.pool)).unwrap_or(i32::MAX);
        let classes = [
            pb::Priority::Interactive,
            pb::Priority::Standard,
            pb::Priority::Batch,
        ];
        out.class_waiters = classes
            .into_iter()
            .zip(s.line)
            .map(|(priority, c)| pb::ClassWaiters {
                priority: priority as i32,
                waiters: i32::try_from(c.waiters).unwrap_or(i32::MAX),
                oldest_wait_ms: if c.waiters == 0 {
                    0
                } else {
                    (s.now_ms - c.oldest_since_ms).max(0)
                },
            })
            .collect();
        out
    }
}

impl SchedulerService {
    /// Every budget row (`Scheduler::budget_status`), also into the budget gauges; empty
    /// (logged) when the store cannot answer: the pools' status still does.
    async fn budgets_pb(&self) -> Vec<pb::BudgetStatus> {
        match self.scheduler.budget_status().await {
            Ok(rows) => {
                self.metrics.budgets(&rows);
                rows.iter().map(pb::BudgetStatus::from).collect()
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not read the budgets");
                Vec::new()
            }
        }
    }

    /// An admin RPC (already authorized) on `key` of `pool`: the target is checked first, then
    /// the change (`change`) is decoded and applied.
    async fn change_key(
        &self,
        pool: &str,
        key: &str,
        change: impl FnOnce() -> Result<KeyChange, SchedulerError>,
    ) -> Result<Response<pb::KeyStatus>, Status> {
        self.admin_target(pool, key)?;
        let change = change()?;
        let status = self.scheduler.change_key(pool, key, change).await?;
        match change {
            KeyChange::Capacity(capacity) => {
                tracing::info!(pool = %pool, key = %key, capacity, "admin set key capacity");
            }
            KeyChange::Disabled(true) => {
                tracing::info!(pool = %pool, key = %key, "admin disabled key");
            }
            KeyChange::Disabled(false) => {
                tracing::info!(pool = %pool, key = %key, "admin enabled key");
            }
        }
        Ok(Response::new(key_status(pool, &status)))
    }
}

/// The authenticated caller's identity, empty when callers are not authenticated.
fn caller_of<T>(request: &Request<T>) -> String {
    voxpool_runtime::auth::caller_identity(request)
        .map(|c| c.as_str().to_owned())
        .unwrap_or_default()
}

/// The `result` attribute of the acquire metrics.
fn acquire_label(result: &Result<(crate::model::Lease, Granted), SchedulerError>) -> &'static str {
    match result {
        Ok((_, Granted::Immediately)) => "granted",
        Ok((_, Granted::AfterWaiting)) => "waited",
        Err(
            SchedulerError::PoolFull { .. }
            | SchedulerError::BatchShareFull { .. }
            | SchedulerError::NoEligibleKey { .. }
            | SchedulerError::TooManyWaiters { .. },
        ) => "exhausted",
        Err(
            SchedulerError::KeysUnavailable { .. }
            | SchedulerError::Recovering { .. }
            | SchedulerError::Store(_)
            | SchedulerError::ShuttingDown { .. },
        ) => "unavailable",
        Err(SchedulerError::WaitDeadline { .. }) => "deadline",
        Err(SchedulerError::BudgetExhausted(_)) => "budget_exhausted",
        Err(_) => "invalid",
    }
}

/// The cooldown metric's `reason` for a report that took a key out of rotation.
fn cooldown_reason(outcome: Outcome) -> Option<&'static str> {
    match outcome {
        Outcome::RateLimited => Some("rate_limited"),
        Outcome::UpstreamError | Outcome::Timeout => Some("failures"),
        Outcome::KeyInvalid | Outcome::QuotaExhausted => Some("credential"),
        Outcome::Success | Outcome::ClientError | Outcome::ConcurrencyLimited => None,
    }
}

#[tonic::async_trait]
impl pb::pool_scheduler_server::PoolScheduler for SchedulerService {
    async fn acquire(
        &self,
        request: Request<pb::AcquireRequest>,
    ) -> Result<Response<pb::Lease>, Status> {
        let deadline = validate::deadline(request.metadata());
        let caller = caller_of(&request);
        let (_, extensions, r) = request.into_parts();
        // Checked before anything logs it: a newline would forge a log line.
        validate::request_id(&r.request_id)?;
        let pool = self.label(&r.pool);
        let span = tracing::info_span!("scheduler.acquire", pool = %pool, request_id = %r.request_id, key = tracing::field::Empty);
        let started = Instant::now();
        let result = async {
            self.ensure_signer().await?;
            let request = self.acquire_request(&r, &caller, deadline)?;
            self.scheduler
                .acquire(request, || voxpool_runtime::limits::step_aside(&extensions))
                .await
        }
        .instrument(span.clone())
        .await;
        let priority = validate::priority(r.priority).unwrap_or_default();
        self.metrics.acquire(
            pool,
            priority,
            acquire_label(&result),
            started.elapsed().as_secs_f64(),
        );
        if let Err(SchedulerError::BudgetExhausted(refused)) = &result {
            self.metrics.budget_refused(&refused.row.budget);
        }
        let (lease, _) = result?;
        self.metrics.grant(pool, priority, &r.tenant);
        span.record("key", lease.key_id.as_str());
        tracing::debug!(parent: &span, "lease granted");
        let granted_at_ms = lease.granted_at_ms;
        Ok(Response::new(self.lease_pb(lease, granted_at_ms)?))
    }

    async fn release(
        &self,
        request: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        let caller = caller_of(&request);
        self.ensure_signer().await?;
        let (id, granted_at_ms) = self.release_target(request.get_ref(), &caller)?;
        let not_sent = request.get_ref().not_sent;
        let released = self.scheduler.release(&id, granted_at_ms, not_sent).await?;
        Ok(Response::new(pb::ReleaseResponse { released }))
    }

    async fn report(
        &self,
        request: Request<pb::ReportRequest>,
    ) -> Result<Response<pb::ReportResponse>, Status> {
        let r = request.into_inner();
        self.ensure_signer().await?;
        let params = self.report_params(&r)?;
        let cost = validate::cost_micros(r.cost_micros)?;
        let result = self.scheduler.report(&params, cost).await?.ok_or_else(|| {
            SchedulerError::ReportKeyUnknown {
                lease_id: r.lease_id.clone(),
            }
        })?;
        let pool = &params.id.pool;
        if let Some((before, after)) = result.effective_change {
            tracing::info!(pool = %pool, key = %result.key_id, outcome = params.outcome.as_str(),
                from = before, to = after, "key effective capacity changed");
        }
        if !result.applied {
            tracing::debug!(pool = %pool, key = %result.key_id, "report on a lease already reported on (or granted too long ago): outcome not applied");
        } else if result.state != KeyState::Available {
            if let Some(reason) = cooldown_reason(params.outcome) {
                self.metrics.cooldown(pool, &result.key_id, reason);
            }
            tracing::info!(pool = %pool, key = %result.key_id, outcome = params.outcome.as_str(),
                cooldown_until_ms = result.cooldown_until_ms, "key out of rotation after report");
        }
        Ok(Response::new(pb::ReportResponse {
            key_state: pb::KeyState::from(result.state) as i32,
            cooldown_until_ms: result.cooldown_until_ms,
            released: result.released,
            key_id: result.key_id,
            outcome_applied: result.applied,
        }))
    }

    async fn renew(
        &self,
        request: Request<pb::RenewRequest>,
    ) -> Result<Response<pb::Lease>, Status> {
        let r = request.into_inner();
        self.ensure_signer().await?;
        let signed = self.lease_id("lease_id", &r.lease_id)?;
        let ttl = self.ttl("lease_ttl_ms", r.lease_ttl_ms)?;
        self.same_key(&signed, "key_id", &r.key_id)?;
        // Re-registration (recovery) is on the key the lease was granted on, never another.
        let key_id = (!r.key_id.is_empty()).then_some(signed.key_id.as_str());
        let lease = self
            .scheduler
            .renew(&signed.id, ttl, key_id, Some(signed.granted_at_ms))
            .await?
            .ok_or(SchedulerError::LeaseNotLive {
                lease_id: r.lease_id,
            })?;
        Ok(Response::new(self.lease_pb(lease, signed.granted_at_ms)?))
    }

    async fn get_pool_status(
        &self,
        request: Request<pb::GetPoolStatusRequest>,
    ) -> Result<Response<pb::PoolStatus>, Status> {
        let pool = &request.get_ref().pool;
        self.pool("pool", pool)?;
        let status = self.scheduler.status(pool).await?;
        let mut out = self.status_pb(&status);
        out.budgets = self.budgets_pb().await;
        Ok(Response::new(out))
    }

    async fn list_pools(
        &self,
        _request: Request<pb::ListPoolsRequest>,
    ) -> Result<Response<pb::ListPoolsResponse>, Status> {
        let names = self.scheduler.pools().ids();
        let mut pools = Vec::with_capacity(names.len());
        let mut first_error = None;
        for name in names {
            match self.scheduler.status(name).await {
                Ok(status) => pools.push(self.status_pb(&status)),
                Err(SchedulerError::Store(e)) => {
                    pools.push(pb::PoolStatus {
                        pool: name.to_owned(),
                        store_error: e.to_string(),
                        ..Default::default()
                    });
                    first_error.get_or_insert(e);
                }
                Err(other) => return Err(other.into()),
            }
        }
        // One shard down lists the rest; nothing answering is the store's failure.
        if let Some(e) = first_error
            && pools.iter().all(|p| !p.store_error.is_empty())
        {
            return Err(SchedulerError::Store(e).into());
        }
        Ok(Response::new(pb::ListPoolsResponse {
            pools,
            budgets: self.budgets_pb().await,
        }))
    }

    async fn set_key_capacity(
        &self,
        request: Request<pb::SetKeyCapacityRequest>,
    ) -> Result<Response<pb::KeyStatus>, Status> {
        self.auth.authorize(request.metadata())?;
        let r = request.into_inner();
        let change = || validate::capacity(r.capacity).map(KeyChange::Capacity);
        self.change_key(&r.pool, &r.key_id, change).await
    }

    async fn disable_key(
        &self,
        request: Request<pb::DisableKeyRequest>,
    ) -> Result<Response<pb::KeyStatus>, Status> {
        self.auth.authorize(request.metadata())?;
        let r = request.into_inner();
        let change = || Ok(KeyChange::Disabled(true));
        self.change_key(&r.pool, &r.key_id, change).await
    }

    async fn acquire_fill(
        &self,
        request: Request<pb::AcquireFillRequest>,
    ) -> Result<Response<pb::AcquireFillResponse>, Status> {
        let deadline = validate::deadline(request.metadata());
        Ok(Response::new(
            self.acquire_fill_pb(request.get_ref(), deadline).await?,
        ))
    }

    async fn renew_fill(
        &self,
        request: Request<pb::RenewFillRequest>,
    ) -> Result<Response<pb::RenewFillResponse>, Status> {
        Ok(Response::new(self.renew_fill_pb(request.get_ref()).await?))
    }

    async fn release_fill(
        &self,
        request: Request<pb::ReleaseFillRequest>,
    ) -> Result<Response<pb::ReleaseFillResponse>, Status> {
        Ok(Response::new(
            self.release_fill_pb(request.get_ref()).await?,
        ))
    }

    async fn enable_key(
        &self,
        request: Request<pb::EnableKeyRequest>,
    ) -> Result<Response<pb::KeyStatus>, Status> {
        self.auth.authorize(request.metadata())?;
        let r = request.into_inner();
        let change = || Ok(KeyChange::Disabled(false));
        self.change_key(&r.pool, &r.key_id, change).await
    }
}
