//! The scheduler as synthesis uses it: Acquire with classified errors, and [`LeaseGuard`],
//! which guarantees a lease is given back on every path (invariant 3 of docs/ARCHITECTURE.md, no leaks).
//!
//! - the vendor answered (also for a caller that has gone, see `crate::job::attempt`):
//!   `Report(outcome, release = true)` in one call, falling back to `Release` when the report
//!   fails;
//! - the call was fenced or the adapter panicked: `Release` without a report;
//! - the guard dropped while armed (a task aborted at runtime shutdown, an early return):
//!   `Drop` spawns a `Release`. If even that cannot run, the lease expires at its TTL.
//!
//! While a vendor call runs, [`LeaseGuard::keep_alive`] renews the lease every third of its
//! TTL, so a long call never loses its slot and a crashed replica's slots return within one
//! TTL.
//!
//! Several scheduler replicas (`voxpool_runtime::endpoints`): calls are balanced over the healthy ones, and an
//! Acquire, Release, Report or Renew that fails with UNAVAILABLE (a replica killed, draining or
//! cut off from its store) or a transport error is retried on another endpoint with jittered
//! exponential backoff (`backon`) within the call's budget. Acquire carries an idempotency key
//! that stays the same on every retry, so a retry after a lost answer gets the same lease
//! instead of a second slot. An Acquire given up before its answer (the caller went away, the
//! budget ran out) frees the lease its key may have been granted (`Abandoned`), so waiting
//! callers that leave never hold slots until the TTL.

mod classify;
pub mod fill;
mod guard;
mod model;

use std::time::Duration;

use tonic::{Status, service::interceptor::InterceptedService, transport::Channel};
use voxpool_domain::contract::{Retry, is_transport};
use voxpool_proto::scheduler::v1::{self as pb, pool_scheduler_client::PoolSchedulerClient};
use voxpool_runtime::auth::ClientToken;

pub use classify::AcquireError;
pub use fill::{FillLock, FillOutcome};
pub use guard::LeaseGuard;
pub use model::{Acquire, Lease, Priority};

use classify::{classify, may_hold_a_grant, retry};

/// Time limit of Report / Release / Renew calls, retries included: long enough to ride out a
/// lease-store failover of a few seconds.
const SMALL_RPC_TIMEOUT: Duration = Duration::from_secs(6);

/// The scheduler's gRPC client (lazily connected) and its URL for messages.
#[derive(Clone, Debug)]
pub struct Scheduler {
    client: PoolSchedulerClient<InterceptedService<Channel, ClientToken>>,
    health: tonic_health::pb::health_client::HealthClient<Channel>,
    endpoints: voxpool_runtime::endpoints::Endpoints,
    url: String,
    /// `synthesis.scheduler_unavailable_grace_ms`: past this much silence from every
    /// endpoint, calls fail at once (see [`Scheduler::retrying`]).
    grace: Duration,
}

/// An Acquire without a definite answer yet. Dropped armed (the call was cancelled, or it
/// ended in a failure after which a grant may exist: a deadline, a broken connection, a
/// store that timed out mid-script), it frees the lease of its idempotency key in the
/// background: at once, and again after [`ABANDONED_RECHECKS`] for a grant that lands late
/// (a scheduler still running the store call). Releasing that lease is always safe: only this
/// call knew the key, and it will never use the lease.
struct Abandoned {
    scheduler: Option<Scheduler>,
    pool: String,
    idempotency_key: String,
}

/// When an abandoned Acquire's lease is released again after the first try.
const ABANDONED_RECHECKS: [Duration; 2] = [Duration::from_secs(1), Duration::from_secs(4)];

impl Drop for Abandoned {
    fn drop(&mut self) {
        let Some(scheduler) = self.scheduler.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (pool, key) = (
            std::mem::take(&mut self.pool),
            std::mem::take(&mut self.idempotency_key),
        );
        runtime.spawn(async move {
            let mut freed = false;
            for wait in std::iter::once(Duration::ZERO).chain(ABANDONED_RECHECKS) {
                tokio::time::sleep(wait).await;
                match scheduler.release_abandoned(&pool, &key).await {
                    Ok(released) => freed |= released,
                    Err(e) => tracing::debug!(pool = %pool, error = %e.message(), "could not release an abandoned Acquire's lease; it ends at its TTL"),
                }
            }
            if freed {
                tracing::debug!(pool = %pool, "released the lease of an Acquire whose caller went away");
            }
        });
    }
}

impl Scheduler {
    /// A client for `spec` (`URL[,URL...]`, see `voxpool_runtime::endpoints`) that connects on
    /// first use and presents `token` on every call (health checks go without).
    /// Needs a Tokio runtime (the endpoint prober is a task).
    /// While no endpoint has answered its health check SERVING for `grace`, every call fails
    /// at once with UNAVAILABLE instead of retrying until its deadline.
    /// Each endpoint's health is checked every `probe_every`.
    pub fn connect_lazy(
        spec: &str,
        token: ClientToken,
        grace: Duration,
        probe_every: Duration,
    ) -> Result<Self, String> {
        let endpoints =
            voxpool_runtime::endpoints::Endpoints::start_probing("--scheduler", spec, probe_every)?;
        let channel = endpoints.channel.clone();
        Ok(Self {
            client: PoolSchedulerClient::with_interceptor(channel.clone(), token),
            health: tonic_health::pb::health_client::HealthClient::new(channel),
            endpoints,
            url: spec.to_owned(),
            grace,
        })
    }

    /// Runs `call` until it succeeds, fails with an error no other replica would avoid, or
    /// `budget` runs out (module doc); each try is bounded by what is left. No cap on the
    /// number of tries: a lease store failing over for a few seconds (a Sentinel promotion, a
    /// cluster shard's replica taking over) costs a caller whose deadline outlasts it only the
    /// wait, with backoff capped at 500 ms.
    async fn retrying<T, F, Fut>(
        &self,
        what: &str,
        budget: Duration,
        mut call: F,
    ) -> Result<T, Status>
    where
        F: FnMut(Duration) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        use backon::BackoffBuilder as _;
        let end = tokio::time::Instant::now() + budget;
        let mut backoff = backon::ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(20))
            .with_max_delay(Duration::from_millis(500))
            .without_max_times()
            .with_jitter()
            .build();
        loop {
            let silent = self.endpoints.silent_for();
            if silent >= self.grace {
                return Err(Status::unavailable(format!(
                    "{what}: no scheduler endpoint of {} has answered its health check SERVING for {}ms (synthesis.scheduler_unavailable_grace_ms = {}); failing at once instead of waiting: start the scheduler or fix --scheduler",
                    self.url,
                    silent.as_millis(),
                    self.grace.as_millis()
                )));
            }
            let left = end.saturating_duration_since(tokio::time::Instant::now());
            let result = match tokio::time::timeout(left, call(left)).await {
                Ok(result) => result,
                Err(_) => Err(Status::deadline_exceeded(format!(
                    "{what} got no answer from the scheduler within {}ms",
                    budget.as_millis()
                ))),
            };
            let status = match result {
                Ok(value) => {
                    self.endpoints.answered();
                    return Ok(value);
                }
                Err(status) if retry(&status) == Retry::Again => status,
                Err(status) => {
                    // A refusal is an answer too: the scheduler is up.
                    if !is_transport(&status) {
                        self.endpoints.answered();
                    }
                    return Err(status);
                }
            };
            self.endpoints.kick();
            match backoff.next() {
                Some(delay) if tokio::time::Instant::now() + delay < end => {
                    tracing::debug!(call = what, error = %status.message(), retry_in_ms = delay.as_millis(), "scheduler call failed; retrying on another endpoint");
                    tokio::time::sleep(delay).await;
                }
                _ => return Err(status),
            }
        }
    }

    /// The URL, for messages.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Acquire, bounded by `rpc_timeout` (each try sends what is left as its gRPC deadline and
    /// waits at most that long for a slot). Tries after a retryable failure carry the same
    /// `idempotency_key`, so they can only get the lease a lost answer held.
    pub async fn acquire(
        &self,
        acquire: &Acquire,
        rpc_timeout: Duration,
    ) -> Result<Lease, AcquireError> {
        let request = acquire.to_pb();
        // Until an answer arrives, a grant may exist (or still land) that nobody will use: if
        // this call is dropped (our caller went away) or ends without an answer, free it by
        // its idempotency key instead of leaving the slot held until its TTL.
        let mut abandoned = Abandoned {
            scheduler: (!request.idempotency_key.is_empty()).then(|| self.clone()),
            pool: request.pool.clone(),
            idempotency_key: request.idempotency_key.clone(),
        };
        let result = self
            .retrying("Acquire", rpc_timeout, |left| {
                let mut request = request.clone();
                let left_ms = i64::try_from(left.as_millis()).unwrap_or(i64::MAX);
                request.wait_timeout_ms = request.wait_timeout_ms.min(left_ms);
                let mut req = tonic::Request::new(request);
                req.set_timeout(left);
                let mut client = self.client.clone();
                async move { client.acquire(req).await.map(tonic::Response::into_inner) }
            })
            .await;
        match &result {
            // A definite answer: the lease is ours (the guard takes over), or none was granted.
            Ok(_) => abandoned.scheduler = None,
            Err(status) if !may_hold_a_grant(status) => abandoned.scheduler = None,
            Err(_) => {}
        }
        // Our own budget running out is DEADLINE_EXCEEDED too, classified like the scheduler's.
        result.map(Lease::from).map_err(|status| classify(&status))
    }

    /// Report (optionally releasing) a lease, retried on another replica (module doc).
    async fn report(&self, request: pb::ReportRequest) -> Result<pb::ReportResponse, Status> {
        self.retrying("Report", SMALL_RPC_TIMEOUT, |_| {
            let mut client = self.client.clone();
            let request = request.clone();
            async move {
                client
                    .report(request)
                    .await
                    .map(tonic::Response::into_inner)
            }
        })
        .await
    }

    /// Release a lease; `false` when it was already gone. Retried on another replica.
    /// `not_sent`: its call never reached a vendor (its budget reservations count nothing).
    pub async fn release(&self, lease_id: &str, not_sent: bool) -> Result<bool, Status> {
        self.release_as(pb::ReleaseRequest {
            lease_id: lease_id.to_owned(),
            not_sent,
            ..Default::default()
        })
        .await
    }

    /// Frees the lease an idempotent Acquire got or may still get (see [`Abandoned`]).
    async fn release_abandoned(&self, pool: &str, idempotency_key: &str) -> Result<bool, Status> {
        self.release_as(pb::ReleaseRequest {
            pool: pool.to_owned(),
            idempotency_key: idempotency_key.to_owned(),
            ..Default::default()
        })
        .await
    }

    /// One Release (by lease id, or by pool and idempotency key), retried on another replica.
    async fn release_as(&self, request: pb::ReleaseRequest) -> Result<bool, Status> {
        self.retrying("Release", SMALL_RPC_TIMEOUT, |_| {
            let mut client = self.client.clone();
            let request = request.clone();
            async move {
                client
                    .release(request)
                    .await
                    .map(|r| r.into_inner().released)
            }
        })
        .await
    }

    /// Extend a lease on `key_id` to now + `ttl` (re-registering it if the scheduler's store
    /// lost it during a recovery window). Retried on another replica.
    pub async fn renew(
        &self,
        lease_id: &str,
        key_id: &str,
        ttl: Duration,
    ) -> Result<Lease, Status> {
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        self.retrying("Renew", SMALL_RPC_TIMEOUT, |_| {
            let mut client = self.client.clone();
            let request = pb::RenewRequest {
                lease_id: lease_id.to_owned(),
                lease_ttl_ms: ttl_ms,
                key_id: key_id.to_owned(),
            };
            async move { client.renew(request).await.map(tonic::Response::into_inner) }
        })
        .await
        .map(Lease::from)
    }

    /// True when the scheduler answers its health check with SERVING.
    pub async fn is_serving(&self) -> bool {
        let mut health = self.health.clone();
        let check = health.check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        });
        matches!(
            tokio::time::timeout(SMALL_RPC_TIMEOUT, check).await,
            Ok(Ok(r)) if r.get_ref().status == tonic_health::pb::health_check_response::ServingStatus::Serving as i32
        )
    }
}

#[cfg(test)]
mod tests;
