//! [`LeaseGuard`]: a held lease that goes back to the scheduler on every path (invariant 3 of docs/ARCHITECTURE.md):
//! Report + release once the vendor answered, Release when the call says nothing about the key
//! (fenced, adapter panic), and a spawned Release from `Drop` when the guard is dropped while
//! armed (a task aborted at runtime shutdown, an early return). The guard lives in the
//! attempt's own task, so a caller that goes away never drops it early (`crate::job::attempt`).
//! [`LeaseGuard::keep_alive`] renews the lease during a vendor call every third of its TTL, or
//! more often when the scheduler asks (`Lease::renew_interval`: a lease store that loses its
//! state re-registers the leases renewed within its recovery window), always naming the
//! lease's key so the scheduler can re-register it.

use std::time::Duration;

use tonic::Code;
use voxpool_proto::scheduler::v1 as pb;

use super::{Lease, Scheduler, model::shown};

/// A held lease that is given back on every path (module doc).
#[derive(Debug)]
pub struct LeaseGuard {
    scheduler: Scheduler,
    lease: Lease,
    armed: bool,
    /// The call was handed to a vendor ([`LeaseGuard::sent`]); until then a release says it
    /// was not sent, so its budget reservations count nothing.
    sent: bool,
}

impl LeaseGuard {
    /// Takes charge of `lease`.
    pub fn new(scheduler: Scheduler, lease: Lease) -> Self {
        Self {
            scheduler,
            lease,
            armed: true,
            sent: false,
        }
    }

    /// The call is about to be sent to the vendor: from now on a release without a Report
    /// counts the lease's whole budget reservation.
    pub fn sent(&mut self) {
        self.sent = true;
    }

    /// The lease.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Reports the vendor call's outcome and releases in one call; falls back to Release. The
    /// guard stays armed until the scheduler confirms, so a caller that goes away during the
    /// report still gets its lease released by `Drop`.
    /// `characters`: what the vendor charged for (counted against the key's quota on
    /// SUCCESS), and `cost_micros` its cost: on any outcome they settle the lease's budget
    /// reservations (0 after a refusal before any audio).
    pub async fn finish(
        mut self,
        outcome: voxpool_domain::contract::Outcome,
        retry_after_ms: Option<u64>,
        latency_ms: u64,
        characters: u64,
        cost_micros: i64,
    ) {
        let request = pb::ReportRequest {
            lease_id: self.lease.lease_id.clone(),
            outcome: pb::Outcome::from(outcome) as i32,
            retry_after_ms: retry_after_ms
                .map_or(0, |ms| i64::try_from(ms.min(86_400_000)).unwrap_or(0)),
            latency_ms: i64::try_from(latency_ms).unwrap_or(i64::MAX),
            release: true,
            key_id: self.lease.key_id.clone(),
            characters: i64::try_from(characters).unwrap_or(i64::MAX),
            cost_micros: cost_micros.clamp(0, voxpool_config::MAX_COST_MICROS),
        };
        match self.scheduler.report(request).await {
            Ok(_) => self.armed = false,
            Err(status) => {
                tracing::warn!(lease = %shown(&self.lease.lease_id), key = %self.lease.key_id, error = %status.message(), "report failed; releasing");
                self.release_now().await;
            }
        }
    }

    /// Releases without a report (caller gone, adapter failure).
    pub async fn release(mut self) {
        self.release_now().await;
    }

    async fn release_now(&mut self) {
        match self
            .scheduler
            .release(&self.lease.lease_id, !self.sent)
            .await
        {
            Ok(_) => self.armed = false,
            Err(status) => {
                tracing::warn!(lease = %shown(&self.lease.lease_id), error = %status.message(), "release failed; retrying once in the background, else the lease expires at its TTL");
            }
        }
    }

    /// Renews the lease every `ttl / 3` (or `Lease.renew_interval_ms` when shorter) while a
    /// vendor call runs, and returns (so the caller
    /// aborts the call) as soon as the lease can no longer be trusted: the scheduler says it
    /// expired, or no renewal succeeded before the lease would have expired (scheduler
    /// unreachable). This fencing keeps the vendor within the key's capacity even when the
    /// scheduler goes away mid-call: once the slot may have been handed to someone else, this
    /// call must stop. The local estimate of expiry is conservative (`ttl * 5 / 6` after the
    /// last successful renewal, measured from when it was sent).
    pub async fn keep_alive(&self, ttl: Duration) -> LeaseLost {
        let asked = self.lease.renew_interval.unwrap_or(Duration::MAX);
        let period = (ttl / 3).min(asked).max(Duration::from_millis(10));
        let trust = ttl - ttl / 6;
        let mut valid_until = tokio::time::Instant::now() + trust;
        loop {
            let next = (tokio::time::Instant::now() + period).min(valid_until);
            tokio::time::sleep_until(next).await;
            if tokio::time::Instant::now() >= valid_until {
                tracing::warn!(lease = %shown(&self.lease.lease_id), key = %self.lease.key_id, "lease could not be renewed in time; aborting the vendor call");
                return LeaseLost::NotRenewed;
            }
            let sent = tokio::time::Instant::now();
            match self
                .scheduler
                .renew(&self.lease.lease_id, &self.lease.key_id, ttl)
                .await
            {
                Ok(_) => {
                    valid_until = sent + trust;
                    tracing::debug!(lease = %shown(&self.lease.lease_id), "lease renewed");
                }
                Err(status)
                    if matches!(
                        status.code(),
                        Code::FailedPrecondition | Code::NotFound | Code::PermissionDenied
                    ) =>
                {
                    tracing::warn!(lease = %shown(&self.lease.lease_id), key = %self.lease.key_id, "lease expired during a vendor call; aborting the call");
                    return LeaseLost::Expired;
                }
                Err(status) => {
                    tracing::warn!(lease = %shown(&self.lease.lease_id), error = %status.message(), "lease renewal failed; retrying");
                }
            }
        }
    }
}

/// Why [`LeaseGuard::keep_alive`] gave up on a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseLost {
    /// The scheduler says the lease expired or was released.
    Expired,
    /// No renewal succeeded before the lease would have expired.
    NotRenewed,
}

impl std::fmt::Display for LeaseLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LeaseLost::Expired => "the scheduler says the lease expired",
            LeaseLost::NotRenewed => "the scheduler could not renew the lease in time",
        })
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let scheduler = self.scheduler.clone();
        let lease_id = std::mem::take(&mut self.lease.lease_id);
        let not_sent = !self.sent;
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    match scheduler.release(&lease_id, not_sent).await {
                        Ok(_) => tracing::debug!(lease = %shown(&lease_id), "released an abandoned lease"),
                        Err(status) => {
                            tracing::warn!(lease = %shown(&lease_id), error = %status.message(), "could not release an abandoned lease; it expires at its TTL");
                        }
                    }
                });
            }
            Err(_) => {
                tracing::warn!(lease = %shown(&lease_id), "no runtime to release an abandoned lease; it expires at its TTL");
            }
        }
    }
}
