//! The scheduler as synthesis uses it: Acquire with classified errors, and [`LeaseGuard`],
//! which guarantees a lease is given back on every path (invariant 3, no leaks).
//!
//! - the vendor answered (also for a caller that has gone, see `crate::attempt`):
//!   `Report(outcome, release = true)` in one call, falling back to `Release` when the report
//!   fails;
//! - the call was fenced or the adapter panicked: `Release` without a report;
//! - the guard dropped while armed (a task aborted at runtime shutdown, an early return):
//!   `Drop` spawns a `Release`. If even that cannot run, the lease expires at its TTL.
//!
//! While a vendor call runs, [`LeaseGuard::keep_alive`] renews the lease every third of its
//! TTL, so a long call never loses its slot and a crashed replica's slots return within one
//! TTL.

mod guard;

use std::time::Duration;

use tonic::{Code, Status, service::interceptor::InterceptedService, transport::Channel};
use tonic_types::StatusExt;
use voxpool_proto::scheduler::v1::{self as pb, pool_scheduler_client::PoolSchedulerClient};
use voxpool_shared::{contract::SchedulerReason, telemetry::TraceContextInterceptor};

pub use guard::LeaseGuard;

/// Time limit of Report / Release / Renew calls.
const SMALL_RPC_TIMEOUT: Duration = Duration::from_secs(3);

/// The scheduler's gRPC client (lazily connected) and its URL for messages.
#[derive(Clone, Debug)]
pub struct Scheduler {
    client: PoolSchedulerClient<InterceptedService<Channel, TraceContextInterceptor>>,
    health: tonic_health::pb::health_client::HealthClient<Channel>,
    url: String,
}

/// Why Acquire gave no lease, classified from the scheduler's status and `ErrorInfo` reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireError {
    /// RESOURCE_EXHAUSTED `POOL_FULL`: every eligible key at capacity.
    PoolFull {
        /// The scheduler's message.
        message: String,
        /// Its `RetryInfo`.
        retry_after: Option<Duration>,
    },
    /// RESOURCE_EXHAUSTED `NO_ELIGIBLE_KEY`: exclusions and upstream filters leave no key.
    NoEligibleKey {
        /// The scheduler's message.
        message: String,
    },
    /// UNAVAILABLE `KEYS_UNAVAILABLE`: every eligible key cooling or disabled.
    KeysUnavailable {
        /// The scheduler's message.
        message: String,
        /// When the first key returns.
        retry_after: Option<Duration>,
    },
    /// The wait for a slot hit the deadline.
    Deadline {
        /// The scheduler's message.
        message: String,
    },
    /// Transport failure or the scheduler's store is down.
    Unreachable {
        /// Transport / status message.
        message: String,
    },
    /// The scheduler does not know the pool or refuses the request's fields.
    Mismatch {
        /// The scheduler's message.
        message: String,
    },
}

fn classify(status: &Status) -> AcquireError {
    let reason = SchedulerReason::of(status);
    let retry_after = status
        .get_error_details()
        .retry_info()
        .and_then(|r| r.retry_delay);
    let message = status.message().to_owned();
    match (status.code(), reason) {
        (Code::ResourceExhausted, Some(SchedulerReason::NoEligibleKey)) => {
            AcquireError::NoEligibleKey { message }
        }
        (Code::ResourceExhausted, _) => AcquireError::PoolFull {
            message,
            retry_after,
        },
        (Code::Unavailable, Some(SchedulerReason::KeysUnavailable)) => {
            AcquireError::KeysUnavailable {
                message,
                retry_after,
            }
        }
        (Code::DeadlineExceeded | Code::Cancelled, _) => AcquireError::Deadline { message },
        (Code::NotFound | Code::InvalidArgument | Code::FailedPrecondition, _) => {
            AcquireError::Mismatch { message }
        }
        (Code::Unavailable, _) => AcquireError::Unreachable { message },
        (code, _) => AcquireError::Unreachable {
            message: format!("{code:?}: {message}"),
        },
    }
}

impl Scheduler {
    /// A client for `url` (`http://host:port`) that connects on first use.
    pub fn connect_lazy(url: &str) -> Result<Self, String> {
        let channel = voxpool_shared::limits::client_endpoint("--scheduler", url)?
            .connect_timeout(Duration::from_secs(2))
            .connect_lazy();
        Ok(Self {
            client: PoolSchedulerClient::with_interceptor(channel.clone(), TraceContextInterceptor),
            health: tonic_health::pb::health_client::HealthClient::new(channel),
            url: url.to_owned(),
        })
    }

    /// The URL, for messages.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Acquire, bounded by `rpc_timeout` (sent as the gRPC deadline as well).
    pub async fn acquire(
        &self,
        request: pb::AcquireRequest,
        rpc_timeout: Duration,
    ) -> Result<pb::Lease, AcquireError> {
        let mut req = tonic::Request::new(request);
        req.set_timeout(rpc_timeout);
        let mut client = self.client.clone();
        match tokio::time::timeout(rpc_timeout, client.acquire(req)).await {
            Ok(Ok(lease)) => Ok(lease.into_inner()),
            Ok(Err(status)) => Err(classify(&status)),
            Err(_) => Err(AcquireError::Deadline {
                message: "Acquire did not answer before the deadline".into(),
            }),
        }
    }

    /// Report (optionally releasing) a lease.
    pub async fn report(&self, request: pb::ReportRequest) -> Result<pb::ReportResponse, Status> {
        let mut client = self.client.clone();
        small(client.report(request)).await
    }

    /// Release a lease; `false` when it was already gone.
    pub async fn release(&self, lease_id: &str) -> Result<bool, Status> {
        let mut client = self.client.clone();
        small(client.release(pb::ReleaseRequest {
            lease_id: lease_id.to_owned(),
        }))
        .await
        .map(|r| r.released)
    }

    /// Extend a lease to now + `ttl`.
    pub async fn renew(&self, lease_id: &str, ttl: Duration) -> Result<pb::Lease, Status> {
        let mut client = self.client.clone();
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        small(client.renew(pb::RenewRequest {
            lease_id: lease_id.to_owned(),
            lease_ttl_ms: ttl_ms,
        }))
        .await
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

async fn small<T>(
    call: impl Future<Output = Result<tonic::Response<T>, Status>>,
) -> Result<T, Status> {
    match tokio::time::timeout(SMALL_RPC_TIMEOUT, call).await {
        Ok(r) => r.map(tonic::Response::into_inner),
        Err(_) => Err(Status::deadline_exceeded(format!(
            "no answer within {}ms",
            SMALL_RPC_TIMEOUT.as_millis()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use voxpool_shared::status::with_info;

    #[test]
    fn scheduler_errors_are_classified_by_code_and_reason() {
        let full = with_info(
            Code::ResourceExhausted,
            "full",
            "POOL_FULL",
            HashMap::new(),
            Some(Duration::from_millis(250)),
        );
        assert_eq!(
            classify(&full),
            AcquireError::PoolFull {
                message: "full".into(),
                retry_after: Some(Duration::from_millis(250))
            }
        );
        let none = with_info(
            Code::ResourceExhausted,
            "none",
            "NO_ELIGIBLE_KEY",
            HashMap::new(),
            None,
        );
        assert!(matches!(
            classify(&none),
            AcquireError::NoEligibleKey { .. }
        ));
        let cooling = with_info(
            Code::Unavailable,
            "cool",
            "KEYS_UNAVAILABLE",
            HashMap::new(),
            None,
        );
        assert!(matches!(
            classify(&cooling),
            AcquireError::KeysUnavailable { .. }
        ));
        let store = with_info(
            Code::Unavailable,
            "store",
            "STORE_UNAVAILABLE",
            HashMap::new(),
            None,
        );
        assert!(matches!(classify(&store), AcquireError::Unreachable { .. }));
        assert!(matches!(
            classify(&Status::not_found("pool")),
            AcquireError::Mismatch { .. }
        ));
        assert!(matches!(
            classify(&Status::unavailable("tcp connect error")),
            AcquireError::Unreachable { .. }
        ));
    }
}
