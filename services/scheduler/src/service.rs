//! The `voxpool.scheduler.v1.PoolScheduler` gRPC service.
//!
//! Owns request validation (INVALID_ARGUMENT naming the field), FIFO waiting when a pool is
//! full (bounded by `wait_timeout_ms`, the gRPC deadline and `scheduler.max_waiters`; see
//! [`crate::waiters`]), cancellation safety (a lease granted to a caller that went away is
//! released at once), admin authorization, and the conversion between proto messages and
//! [`crate::model`] types. Counting and picking are the store's job ([`LeaseStore`]).
//!
//! Untrusted strings (invariant 10): ids and `request_id` holding control characters are
//! INVALID_ARGUMENT before anything logs them; messages quote at most a short escaped prefix
//! of a caller's value ([`quote`]); metric labels name only configured pools.

use std::{collections::HashMap, sync::Arc, time::Duration};

use tokio::time::Instant;
use tonic::{Request, Response, Status, metadata::MetadataMap};
use tracing::Instrument;
use voxpool_proto::scheduler::v1 as pb;
use voxpool_shared::{
    auth::AdminAuth,
    config::{Config, MAX_KEY_CAPACITY, SchedulerSettings},
    untrusted::{check_field, quote},
};

use crate::{
    error::SchedulerError,
    metrics::SchedulerMetrics,
    model::{
        AcquireParams, AcquireResult, HealthPolicy, KeyState, KeyStatus, Lease, LeaseId,
        LeaseToken, Outcome, PoolSpec, PoolStatus, ReportParams, upstream_of,
    },
    store::{LeaseStore, StoreError},
    waiters::{WaitQueue, WaitQueues},
};

/// Most entries accepted in `exclude_keys` / `upstream_ids`.
pub const MAX_FILTER_ENTRIES: usize = 256;
/// Longest accepted `request_id`.
pub const MAX_REQUEST_ID_CHARS: usize = 128;
/// Longest id (pool, key, upstream) checked for control characters before it is looked up.
const MAX_ID_CHARS: usize = 1024;
/// Longest accepted `wait_timeout_ms` (10 minutes).
pub const MAX_WAIT_TIMEOUT_MS: i64 = 600_000;
/// Longest accepted `retry_after_ms` in a report (24 hours).
pub const MAX_RETRY_AFTER_MS: i64 = 86_400_000;
/// Margin kept before the gRPC deadline so our DEADLINE_EXCEEDED (with details) reaches the
/// caller before its own timer fires.
const DEADLINE_MARGIN: Duration = Duration::from_millis(50);

#[derive(Debug)]
struct PoolInfo {
    upstreams: Vec<String>,
    keys: Vec<String>,
}

/// The PoolScheduler implementation, generic over the store through a trait object.
pub struct SchedulerService {
    store: Arc<dyn LeaseStore>,
    specs: Vec<PoolSpec>,
    pools: HashMap<String, PoolInfo>,
    pool_names: String,
    settings: SchedulerSettings,
    policy: HealthPolicy,
    queues: WaitQueues,
    auth: AdminAuth,
    metrics: Arc<SchedulerMetrics>,
    shutdown: tokio_util::sync::CancellationToken,
}

impl std::fmt::Debug for SchedulerService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerService")
            .field("pools", &self.pool_names)
            .finish_non_exhaustive()
    }
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> SchedulerError {
    SchedulerError::InvalidArgument {
        field: field.into(),
        message: message.into(),
    }
}

/// The gRPC deadline (`grpc-timeout` metadata) as an instant, if the caller set one.
fn grpc_deadline(md: &MetadataMap) -> Option<Instant> {
    let raw = md.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = raw.split_at(raw.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    let d = match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    };
    Instant::now().checked_add(d.saturating_sub(DEADLINE_MARGIN))
}

/// Releases a lease on drop unless disarmed: a grant whose caller went away mid-call
/// (cancelled RPC) must not hold a slot until its TTL.
struct UndoGrant {
    store: Arc<dyn LeaseStore>,
    id: Option<LeaseId>,
}

impl Drop for UndoGrant {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let store = self.store.clone();
            tokio::spawn(async move {
                // The store may be the reason we are here (a stalled Redis that runs the grant
                // later): retry for a while so the slot comes back before its TTL.
                for attempt in 0..10u32 {
                    match store.release(&id).await {
                        Ok(_) => return,
                        Err(e) if attempt == 9 => {
                            tracing::warn!(lease = %id, error = %e, "could not undo an abandoned grant; it expires at its TTL");
                        }
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt + 1)))
                                .await
                        }
                    }
                }
            });
        }
    }
}

impl SchedulerService {
    /// Builds the service over `store` for the pools of `config` (already validated and
    /// seeded into the store).
    pub fn new(
        store: Arc<dyn LeaseStore>,
        config: &Config,
        auth: AdminAuth,
        metrics: Arc<SchedulerMetrics>,
    ) -> Self {
        let pools: HashMap<String, PoolInfo> = config
            .pools
            .iter()
            .map(|p| {
                let upstreams = p.upstreams.iter().map(|u| u.id.clone()).collect();
                let keys = p
                    .upstreams
                    .iter()
                    .flat_map(|u| u.keys.iter().map(move |k| format!("{}/{}", u.id, k.id)))
                    .collect();
                (p.id.clone(), PoolInfo { upstreams, keys })
            })
            .collect();
        let mut names: Vec<&str> = pools.keys().map(String::as_str).collect();
        names.sort_unstable();
        Self {
            specs: PoolSpec::from_config(config),
            queues: WaitQueues::new(names.iter().copied()),
            pool_names: names.join(", "),
            store,
            pools,
            settings: config.scheduler.clone(),
            policy: HealthPolicy::from(&config.scheduler),
            auth,
            metrics,
            shutdown: tokio_util::sync::CancellationToken::new(),
        }
    }

    /// Ends every waiting Acquire with UNAVAILABLE when `shutdown` is cancelled, so a draining
    /// replica does not hold long waits (up to `MAX_WAIT_TIMEOUT_MS`) past its grace period;
    /// the callers retry on another replica.
    pub fn with_shutdown(mut self, shutdown: tokio_util::sync::CancellationToken) -> Self {
        self.shutdown = shutdown;
        self
    }

    /// The gRPC server wrapper for this service.
    pub fn into_server(self) -> pb::pool_scheduler_server::PoolSchedulerServer<Self> {
        pb::pool_scheduler_server::PoolSchedulerServer::new(self)
    }

    fn pool(&self, field: &str, pool: &str) -> Result<&PoolInfo, SchedulerError> {
        if pool.is_empty() {
            return Err(invalid(
                field,
                "required: a pool id such as \"volc-standard\"",
            ));
        }
        if let Err(voxpool_shared::untrusted::FieldProblem::ControlCharacter { found, at }) =
            check_field(pool, MAX_ID_CHARS)
        {
            return Err(invalid(
                field,
                format!("must not contain control characters (found {found:?} at character {at})"),
            ));
        }
        self.pools
            .get(pool)
            .ok_or_else(|| SchedulerError::UnknownPool {
                pool: pool.to_owned(),
                known: self.pool_names.clone(),
            })
    }

    fn ttl(&self, field: &str, ttl_ms: i64) -> Result<u64, SchedulerError> {
        let max = self.settings.max_lease_ttl_ms;
        match u64::try_from(ttl_ms) {
            Ok(0) => Ok(self.settings.default_lease_ttl_ms),
            Ok(t) if t <= max => Ok(t),
            _ => Err(invalid(
                field,
                format!("must be 0 (server default) or 1..={max} ms, got {ttl_ms}"),
            )),
        }
    }

    fn lease_id(field: &str, raw: &str) -> Result<LeaseId, SchedulerError> {
        LeaseId::parse(raw).ok_or_else(|| {
            invalid(field, format!("{} is not a lease id: expected <pool>/<32 lowercase hex digits> as returned by Acquire", quote(raw)))
        })
    }

    fn notify(&self, pool: &str) {
        if let Some(q) = self.queues.get(pool) {
            q.notify();
        }
    }

    fn validate_acquire(
        &self,
        r: &pb::AcquireRequest,
    ) -> Result<(AcquireParams, Duration), SchedulerError> {
        let pool = self.pool("pool", &r.pool)?;
        if r.exclude_keys.len() > MAX_FILTER_ENTRIES {
            return Err(invalid(
                "exclude_keys",
                format!(
                    "at most {MAX_FILTER_ENTRIES} entries, got {}",
                    r.exclude_keys.len()
                ),
            ));
        }
        if r.upstream_ids.len() > MAX_FILTER_ENTRIES {
            return Err(invalid(
                "upstream_ids",
                format!(
                    "at most {MAX_FILTER_ENTRIES} entries, got {}",
                    r.upstream_ids.len()
                ),
            ));
        }
        for (i, u) in r.upstream_ids.iter().enumerate() {
            if !pool.upstreams.contains(u) {
                return Err(invalid(
                    format!("upstream_ids[{i}]"),
                    format!(
                        "pool {:?} has no upstream {} (upstreams: {})",
                        r.pool,
                        quote(u),
                        pool.upstreams.join(", ")
                    ),
                ));
            }
        }
        let ttl_ms = self.ttl("lease_ttl_ms", r.lease_ttl_ms)?;
        if !(0..=MAX_WAIT_TIMEOUT_MS).contains(&r.wait_timeout_ms) {
            return Err(invalid(
                "wait_timeout_ms",
                format!(
                    "must be 0..={MAX_WAIT_TIMEOUT_MS} ms, got {}",
                    r.wait_timeout_ms
                ),
            ));
        }
        let params = AcquireParams {
            pool: r.pool.clone(),
            token: LeaseToken::random(),
            exclude_keys: r
                .exclude_keys
                .iter()
                .filter(|k| pool.keys.contains(k))
                .cloned()
                .collect(),
            upstream_ids: r.upstream_ids.clone(),
            ttl_ms,
        };
        Ok((params, Duration::from_millis(r.wait_timeout_ms as u64)))
    }

    /// One store attempt with a fresh token, undone if the caller goes away mid-call. What it
    /// answered is shared with the pool's line (`queue`).
    async fn attempt(
        &self,
        queue: &WaitQueue,
        params: &mut AcquireParams,
    ) -> Result<AcquireResult, StoreError> {
        params.token = LeaseToken::random();
        let mut undo = UndoGrant {
            store: self.store.clone(),
            id: Some(LeaseId {
                pool: params.pool.clone(),
                token: params.token.clone(),
            }),
        };
        let mut result = self.store.acquire(params).await;
        if let Err(StoreError::NotSeeded(pool)) = &result {
            // The store lost the pool (e.g. Redis restarted empty): seed again, retry once.
            tracing::warn!(pool = %pool, "pool missing from the lease store; re-seeding");
            self.store.seed(&self.specs).await?;
            result = self.store.acquire(params).await;
        }
        // Keep the undo armed when the store failed: a timed-out script may still run later
        // and grant this token to nobody.
        if result.is_ok() {
            undo.id = None;
        }
        queue.saw(&result);
        result
    }

    /// Pool status, re-seeding once if the store lost the pool.
    async fn read_status(&self, pool: &str) -> Result<PoolStatus, SchedulerError> {
        if let Some(s) = self.store.status(pool).await? {
            return Ok(s);
        }
        self.store.seed(&self.specs).await?;
        self.store
            .status(pool)
            .await?
            .ok_or_else(|| StoreError::NotSeeded(pool.to_owned()).into())
    }

    fn no_grant(&self, pool: &str, result: AcquireResult, waited: Duration) -> SchedulerError {
        match result {
            AcquireResult::Full {
                capacity,
                in_flight,
                retry_after_ms,
            } => SchedulerError::PoolFull {
                pool: pool.to_owned(),
                capacity,
                in_flight,
                retry_after_ms,
                waited_ms: waited.as_millis() as u64,
            },
            AcquireResult::Unavailable {
                next_available_ms,
                now_ms,
            } => SchedulerError::KeysUnavailable {
                pool: pool.to_owned(),
                next_available_ms,
                now_ms,
            },
            AcquireResult::NoEligibleKey | AcquireResult::Granted(_) => {
                SchedulerError::NoEligibleKey {
                    pool: pool.to_owned(),
                    keys: self.pools.get(pool).map_or(0, |p| p.keys.len()),
                }
            }
        }
    }

    /// Acquire with FIFO waiting (see the module doc). Returns the lease and whether it had
    /// to wait for it. `on_wait` runs once, when the request joins the pool's line (the gRPC
    /// edge uses it to stop counting the request against `--max-concurrent-requests`).
    pub async fn acquire(
        &self,
        r: &pb::AcquireRequest,
        deadline: Option<Instant>,
        on_wait: impl FnOnce(),
    ) -> Result<(Lease, bool), SchedulerError> {
        let (mut params, wait) = self.validate_acquire(r)?;
        let pool = params.pool.clone();
        let queue = self
            .queues
            .get(&pool)
            .cloned()
            .ok_or_else(|| SchedulerError::UnknownPool {
                pool: pool.clone(),
                known: self.pool_names.clone(),
            })?;
        let start = Instant::now();
        // Without waiters ahead (or when not waiting at all) try at once.
        let wait_end = start + wait;
        let (end, by_deadline) = match deadline {
            Some(d) if d < wait_end => (d, true),
            _ => (wait_end, false),
        };
        if wait.is_zero() || queue.waiting() == 0 {
            match self.attempt(&queue, &mut params).await? {
                AcquireResult::Granted(lease) => return Ok((lease, false)),
                other if wait.is_zero() || hopeless(&other, end) => {
                    return Err(self.no_grant(&pool, other, Duration::ZERO));
                }
                _ => {}
            }
        }
        let ended = |last: Option<AcquireResult>| {
            let waited = start.elapsed();
            if by_deadline {
                SchedulerError::WaitDeadline {
                    pool: pool.clone(),
                    waited_ms: waited.as_millis() as u64,
                }
            } else {
                match last.or_else(|| queue.last_refusal()) {
                    Some(res) => self.no_grant(&pool, res, waited),
                    None => SchedulerError::PoolFull {
                        pool: pool.clone(),
                        capacity: 0,
                        in_flight: 0,
                        retry_after_ms: self.settings.wait_poll_ms,
                        waited_ms: waited.as_millis() as u64,
                    },
                }
            }
        };
        let max_waiters = usize::try_from(self.settings.max_waiters).unwrap_or(usize::MAX);
        let Some(_waiting) = queue.join(max_waiters) else {
            return Err(SchedulerError::TooManyWaiters {
                pool: pool.clone(),
                max_waiters,
            });
        };
        on_wait();
        let mut store_failures = queue.store_failures();
        // The head finds a store failure by itself: its own attempt fails within the store
        // timeout. Everyone behind it learns of that failure at once.
        let store_failed = |queue: &WaitQueue| SchedulerError::Store(queue.last_store_error());
        let shutting_down = || SchedulerError::ShuttingDown { pool: pool.clone() };
        let _head = tokio::select! {
            // A store failure wins over becoming the head: the head would only find it again,
            // one store timeout later.
            biased;
            _ = store_failures.changed() => return Err(store_failed(&queue)),
            () = self.shutdown.cancelled() => return Err(shutting_down()),
            head = tokio::time::timeout_at(end, queue.head()) => match head {
                Ok(head) => head,
                Err(_) => return Err(ended(None)),
            },
        };
        let poll = Duration::from_millis(self.settings.wait_poll_ms);
        loop {
            let notified = queue.freed().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let last = match self.attempt(&queue, &mut params).await? {
                AcquireResult::Granted(lease) => return Ok((lease, true)),
                other if hopeless(&other, end) => {
                    return Err(self.no_grant(&pool, other, start.elapsed()));
                }
                other => other,
            };
            if Instant::now() >= end {
                return Err(ended(Some(last)));
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep(poll) => {}
                _ = tokio::time::sleep_until(end) => {}
                () = self.shutdown.cancelled() => return Err(shutting_down()),
            }
        }
    }

    fn status_pb(&self, s: &PoolStatus) -> pb::PoolStatus {
        let mut out = pool_status_pb(s);
        out.waiters = self
            .queues
            .get(&s.pool)
            .map_or(0, |q| i32::try_from(q.waiting()).unwrap_or(i32::MAX));
        out
    }

    fn check_admin(&self, md: &MetadataMap) -> Result<(), Status> {
        self.auth.authorize(md)
    }

    /// The key status an admin store call answered, or UnknownKey when the store no longer
    /// has the key (config and store disagree, e.g. during a rolling config change).
    fn admin_result(
        pool: &str,
        key: &str,
        answer: Result<Option<KeyStatus>, StoreError>,
    ) -> Result<KeyStatus, SchedulerError> {
        answer?.ok_or_else(|| SchedulerError::UnknownKey {
            pool: pool.to_owned(),
            key: key.to_owned(),
        })
    }

    fn admin_target<'a>(&self, pool: &'a str, key: &'a str) -> Result<(), SchedulerError> {
        let info = self.pool("pool", pool)?;
        if key.is_empty() {
            return Err(invalid(
                "key_id",
                "required: `upstream/key` as shown by GetPoolStatus",
            ));
        }
        if !info.keys.iter().any(|k| k == key) {
            return Err(SchedulerError::UnknownKey {
                pool: pool.to_owned(),
                key: key.to_owned(),
            });
        }
        Ok(())
    }
}

/// True when waiting until `end` cannot turn `result` into a grant: no key is eligible, every
/// eligible key is disabled, or the first cooling key returns only after `end`. Such an
/// Acquire answers at once instead of holding the caller (and a request slot) until its
/// deadline.
fn hopeless(result: &AcquireResult, end: Instant) -> bool {
    match result {
        AcquireResult::NoEligibleKey => true,
        AcquireResult::Unavailable {
            next_available_ms: None,
            ..
        } => true,
        AcquireResult::Unavailable {
            next_available_ms: Some(t),
            now_ms,
        } => {
            let back_in = Duration::from_millis(u64::try_from(t - now_ms).unwrap_or(0));
            Instant::now() + back_in > end
        }
        AcquireResult::Full { .. } | AcquireResult::Granted(_) => false,
    }
}

fn lease_pb(l: Lease) -> pb::Lease {
    pb::Lease {
        lease_id: l.id.to_string(),
        pool: l.id.pool.clone(),
        upstream_id: upstream_of(&l.key_id).to_owned(),
        key_id: l.key_id,
        expires_at_ms: l.expires_at_ms,
        key_in_flight: i32::try_from(l.key_in_flight).unwrap_or(i32::MAX),
        key_capacity: i32::try_from(l.key_capacity).unwrap_or(i32::MAX),
    }
}

fn state_pb(s: KeyState) -> pb::KeyState {
    match s {
        KeyState::Available => pb::KeyState::Available,
        KeyState::Cooling => pb::KeyState::Cooling,
        KeyState::Disabled => pb::KeyState::Disabled,
    }
}

fn key_pb(pool: &str, k: &KeyStatus) -> pb::KeyStatus {
    pb::KeyStatus {
        key_id: k.key_id.clone(),
        upstream_id: upstream_of(&k.key_id).to_owned(),
        capacity: i32::try_from(k.capacity).unwrap_or(i32::MAX),
        in_flight: i32::try_from(k.in_flight).unwrap_or(i32::MAX),
        utilization: k.utilization(),
        state: state_pb(k.state) as i32,
        cooldown_until_ms: k.cooldown_until_ms,
        consecutive_failures: i32::try_from(k.consecutive_failures).unwrap_or(i32::MAX),
        pool: pool.to_owned(),
    }
}

/// Converts a pool status to its proto form.
pub fn pool_status_pb(s: &PoolStatus) -> pb::PoolStatus {
    pb::PoolStatus {
        pool: s.pool.clone(),
        capacity: i32::try_from(s.capacity()).unwrap_or(i32::MAX),
        in_flight: i32::try_from(s.in_flight()).unwrap_or(i32::MAX),
        utilization: s.utilization(),
        keys: s.keys.iter().map(|k| key_pb(&s.pool, k)).collect(),
        now_ms: s.now_ms,
        waiters: 0,
    }
}

fn outcome_of(raw: i32) -> Result<Outcome, SchedulerError> {
    match pb::Outcome::try_from(raw) {
        Ok(pb::Outcome::Success) => Ok(Outcome::Success),
        Ok(pb::Outcome::RateLimited) => Ok(Outcome::RateLimited),
        Ok(pb::Outcome::UpstreamError) => Ok(Outcome::UpstreamError),
        Ok(pb::Outcome::Timeout) => Ok(Outcome::Timeout),
        Ok(pb::Outcome::KeyInvalid) => Ok(Outcome::KeyInvalid),
        Ok(pb::Outcome::QuotaExhausted) => Ok(Outcome::QuotaExhausted),
        Ok(pb::Outcome::ClientError) => Ok(Outcome::ClientError),
        Ok(pb::Outcome::Unspecified) | Err(_) => Err(invalid(
            "outcome",
            format!(
                "{raw} is not an outcome: use SUCCESS, RATE_LIMITED, UPSTREAM_ERROR, TIMEOUT, KEY_INVALID, QUOTA_EXHAUSTED or CLIENT_ERROR"
            ),
        )),
    }
}

#[tonic::async_trait]
impl pb::pool_scheduler_server::PoolScheduler for SchedulerService {
    async fn acquire(
        &self,
        request: Request<pb::AcquireRequest>,
    ) -> Result<Response<pb::Lease>, Status> {
        let deadline = grpc_deadline(request.metadata());
        let (_, extensions, r) = request.into_parts();
        // Checked before anything logs it: a newline would forge a log line.
        if let Err(problem) = check_field(&r.request_id, MAX_REQUEST_ID_CHARS) {
            return Err(invalid("request_id", problem.to_string()).into());
        }
        // Only configured pools name spans and metric series (bounded cardinality).
        let pool_label = self
            .pools
            .get_key_value(r.pool.as_str())
            .map_or("unknown", |(name, _)| name.as_str());
        let span = tracing::info_span!("scheduler.acquire", pool = %pool_label, request_id = %r.request_id, key = tracing::field::Empty);
        let started = Instant::now();
        let result = SchedulerService::acquire(self, &r, deadline, || {
            voxpool_shared::limits::step_aside(&extensions);
        })
        .instrument(span.clone())
        .await;
        let label = match &result {
            Ok((_, false)) => "granted",
            Ok((_, true)) => "waited",
            Err(
                SchedulerError::PoolFull { .. }
                | SchedulerError::NoEligibleKey { .. }
                | SchedulerError::TooManyWaiters { .. },
            ) => "exhausted",
            Err(
                SchedulerError::KeysUnavailable { .. }
                | SchedulerError::Store(_)
                | SchedulerError::ShuttingDown { .. },
            ) => "unavailable",
            Err(SchedulerError::WaitDeadline { .. }) => "deadline",
            Err(_) => "invalid",
        };
        self.metrics
            .acquire(pool_label, label, started.elapsed().as_secs_f64());
        let (lease, _) = result?;
        span.record("key", lease.key_id.as_str());
        tracing::debug!(parent: &span, "lease granted");
        Ok(Response::new(lease_pb(lease)))
    }

    async fn release(
        &self,
        request: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        let id = Self::lease_id("lease_id", &request.get_ref().lease_id)?;
        self.pool("lease_id", &id.pool)?;
        let released = self
            .store
            .release(&id)
            .await
            .map_err(SchedulerError::from)?;
        if released {
            self.notify(&id.pool);
        }
        Ok(Response::new(pb::ReleaseResponse { released }))
    }

    async fn report(
        &self,
        request: Request<pb::ReportRequest>,
    ) -> Result<Response<pb::ReportResponse>, Status> {
        let r = request.into_inner();
        let id = Self::lease_id("lease_id", &r.lease_id)?;
        let pool = self.pool("lease_id", &id.pool)?;
        if !r.key_id.is_empty() && !pool.keys.contains(&r.key_id) {
            return Err(invalid(
                "key_id",
                format!(
                    "{} is not a key of pool {:?}; send the keyId the lease was granted on",
                    quote(&r.key_id),
                    id.pool
                ),
            )
            .into());
        }
        let outcome = outcome_of(r.outcome)?;
        if !(0..=MAX_RETRY_AFTER_MS).contains(&r.retry_after_ms) {
            return Err(invalid(
                "retry_after_ms",
                format!(
                    "must be 0..={MAX_RETRY_AFTER_MS} ms, got {}",
                    r.retry_after_ms
                ),
            )
            .into());
        }
        if r.latency_ms < 0 {
            return Err(
                invalid("latency_ms", format!("must be >= 0, got {}", r.latency_ms)).into(),
            );
        }
        let params = ReportParams {
            id: id.clone(),
            key_id: (!r.key_id.is_empty()).then(|| r.key_id.clone()),
            outcome,
            retry_after_ms: r.retry_after_ms as u64,
            release: r.release,
        };
        let result = self
            .store
            .report(&params, &self.policy)
            .await
            .map_err(SchedulerError::from)?
            .ok_or_else(|| SchedulerError::ReportKeyUnknown {
                lease_id: r.lease_id.clone(),
            })?;
        if result.released {
            self.notify(&id.pool);
        }
        if result.state != KeyState::Available {
            let reason = match outcome {
                Outcome::RateLimited => Some("rate_limited"),
                Outcome::UpstreamError | Outcome::Timeout => Some("failures"),
                Outcome::KeyInvalid | Outcome::QuotaExhausted => Some("credential"),
                Outcome::Success | Outcome::ClientError => None,
            };
            if let Some(reason) = reason {
                self.metrics.cooldown(&id.pool, &result.key_id, reason);
            }
            tracing::info!(pool = %id.pool, key = %result.key_id, outcome = outcome.as_str(),
                cooldown_until_ms = result.cooldown_until_ms, "key out of rotation after report");
        }
        Ok(Response::new(pb::ReportResponse {
            key_state: state_pb(result.state) as i32,
            cooldown_until_ms: result.cooldown_until_ms,
            released: result.released,
            key_id: result.key_id,
        }))
    }

    async fn renew(
        &self,
        request: Request<pb::RenewRequest>,
    ) -> Result<Response<pb::Lease>, Status> {
        let r = request.into_inner();
        let id = Self::lease_id("lease_id", &r.lease_id)?;
        self.pool("lease_id", &id.pool)?;
        let ttl = self.ttl("lease_ttl_ms", r.lease_ttl_ms)?;
        let lease = self
            .store
            .renew(&id, ttl)
            .await
            .map_err(SchedulerError::from)?
            .ok_or(SchedulerError::LeaseNotLive {
                lease_id: r.lease_id,
            })?;
        Ok(Response::new(lease_pb(lease)))
    }

    async fn get_pool_status(
        &self,
        request: Request<pb::GetPoolStatusRequest>,
    ) -> Result<Response<pb::PoolStatus>, Status> {
        let pool = &request.get_ref().pool;
        self.pool("pool", pool)?;
        let status = self.read_status(pool).await?;
        Ok(Response::new(self.status_pb(&status)))
    }

    async fn list_pools(
        &self,
        _request: Request<pb::ListPoolsRequest>,
    ) -> Result<Response<pb::ListPoolsResponse>, Status> {
        let mut names: Vec<&String> = self.pools.keys().collect();
        names.sort();
        let mut pools = Vec::with_capacity(names.len());
        for name in names {
            pools.push(self.status_pb(&self.read_status(name).await?));
        }
        Ok(Response::new(pb::ListPoolsResponse { pools }))
    }

    async fn set_key_capacity(
        &self,
        request: Request<pb::SetKeyCapacityRequest>,
    ) -> Result<Response<pb::KeyStatus>, Status> {
        self.check_admin(request.metadata())?;
        let r = request.into_inner();
        self.admin_target(&r.pool, &r.key_id)?;
        let capacity = u32::try_from(r.capacity)
            .ok()
            .filter(|c| *c <= MAX_KEY_CAPACITY)
            .ok_or_else(|| {
                invalid(
                    "capacity",
                    format!(
                        "must be 0..={MAX_KEY_CAPACITY} (0 disables the key), got {}",
                        r.capacity
                    ),
                )
            })?;
        let status = Self::admin_result(
            &r.pool,
            &r.key_id,
            self.store.set_capacity(&r.pool, &r.key_id, capacity).await,
        )?;
        tracing::info!(pool = %r.pool, key = %r.key_id, capacity, "admin set key capacity");
        self.notify(&r.pool);
        Ok(Response::new(key_pb(&r.pool, &status)))
    }

    async fn disable_key(
        &self,
        request: Request<pb::DisableKeyRequest>,
    ) -> Result<Response<pb::KeyStatus>, Status> {
        self.check_admin(request.metadata())?;
        let r = request.into_inner();
        self.admin_target(&r.pool, &r.key_id)?;
        let status = Self::admin_result(
            &r.pool,
            &r.key_id,
            self.store.set_disabled(&r.pool, &r.key_id, true).await,
        )?;
        tracing::info!(pool = %r.pool, key = %r.key_id, "admin disabled key");
        Ok(Response::new(key_pb(&r.pool, &status)))
    }

    async fn enable_key(
        &self,
        request: Request<pb::EnableKeyRequest>,
    ) -> Result<Response<pb::KeyStatus>, Status> {
        self.check_admin(request.metadata())?;
        let r = request.into_inner();
        self.admin_target(&r.pool, &r.key_id)?;
        let status = Self::admin_result(
            &r.pool,
            &r.key_id,
            self.store.set_disabled(&r.pool, &r.key_id, false).await,
        )?;
        tracing::info!(pool = %r.pool, key = %r.key_id, "admin enabled key");
        self.notify(&r.pool);
        Ok(Response::new(key_pb(&r.pool, &status)))
    }
}
