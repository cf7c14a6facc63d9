//! The typed contract between the scheduler and its clients (synthesis, voxctl): the outcome
//! a caller reports for a vendor call, and the `google.rpc.ErrorInfo` reasons the scheduler
//! answers with. Both sides name these through the enums here and convert to and from the
//! wire (`voxpool.scheduler.v1.Outcome`, the `reason` string) in this one place, so a
//! reason is never matched as a free string and a new outcome cannot be forgotten on one side.

use std::fmt;

use voxpool_proto::scheduler::v1 as pb;

use crate::untrusted::{FieldProblem, check_field};

/// Longest `tenant` an Acquire or Synthesize request may carry, in characters.
pub const MAX_TENANT_CHARS: usize = 64;

/// A `tenant` as the scheduler accepts it: at most [`MAX_TENANT_CHARS`] characters, no control
/// or invisible formatting characters (it becomes a metric attribute). Checked by the
/// scheduler, by synthesis before it takes a lease, and by voxctl before it sends anything.
pub fn check_tenant(tenant: &str) -> Result<(), FieldProblem> {
    check_field(tenant, MAX_TENANT_CHARS)
}

/// How a vendor call went, as reported to the scheduler (`Report.outcome`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Audio came back.
    Success,
    /// 429 or the vendor's request-rate error: the key cools for `Retry-After`.
    RateLimited,
    /// 5xx or a vendor busy code: counts towards the failure backoff.
    UpstreamError,
    /// No answer in time (connect, read or the attempt timeout): counts like UpstreamError.
    Timeout,
    /// The vendor rejected the credential: the key is taken out.
    KeyInvalid,
    /// The account's balance or quota is spent: the key is taken out.
    QuotaExhausted,
    /// The request itself was bad; says nothing about the key.
    ClientError,
    /// The vendor refused because the key runs as many requests as the vendor allows it now:
    /// lowers the key's effective capacity (adaptive pools); no cooldown.
    ConcurrencyLimited,
}

impl Outcome {
    /// Every outcome, in wire order.
    pub const ALL: [Outcome; 8] = [
        Outcome::Success,
        Outcome::RateLimited,
        Outcome::UpstreamError,
        Outcome::Timeout,
        Outcome::KeyInvalid,
        Outcome::QuotaExhausted,
        Outcome::ClientError,
        Outcome::ConcurrencyLimited,
    ];

    /// Stable lowercase name, used in the store, in logs and as a metric attribute.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::RateLimited => "rate_limited",
            Outcome::UpstreamError => "upstream_error",
            Outcome::Timeout => "timeout",
            Outcome::KeyInvalid => "key_invalid",
            Outcome::QuotaExhausted => "quota_exhausted",
            Outcome::ClientError => "client_error",
            Outcome::ConcurrencyLimited => "concurrency_limited",
        }
    }

    /// The wire enum's value name (`RATE_LIMITED`), as API.md and grpcurl spell it.
    pub fn wire_name(self) -> &'static str {
        pb::Outcome::from(self).as_str_name()
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.wire_name())
    }
}

impl From<Outcome> for pb::Outcome {
    fn from(o: Outcome) -> Self {
        match o {
            Outcome::Success => pb::Outcome::Success,
            Outcome::RateLimited => pb::Outcome::RateLimited,
            Outcome::UpstreamError => pb::Outcome::UpstreamError,
            Outcome::Timeout => pb::Outcome::Timeout,
            Outcome::KeyInvalid => pb::Outcome::KeyInvalid,
            Outcome::QuotaExhausted => pb::Outcome::QuotaExhausted,
            Outcome::ClientError => pb::Outcome::ClientError,
            Outcome::ConcurrencyLimited => pb::Outcome::ConcurrencyLimited,
        }
    }
}

/// A wire outcome that is not one of [`Outcome`] (UNSPECIFIED or an unknown number).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0} is not an outcome: use SUCCESS, RATE_LIMITED, UPSTREAM_ERROR, TIMEOUT, KEY_INVALID, QUOTA_EXHAUSTED, CLIENT_ERROR or CONCURRENCY_LIMITED"
)]
pub struct UnknownOutcome(pub i32);

impl TryFrom<i32> for Outcome {
    type Error = UnknownOutcome;

    fn try_from(raw: i32) -> Result<Self, UnknownOutcome> {
        match pb::Outcome::try_from(raw) {
            Ok(pb::Outcome::Success) => Ok(Outcome::Success),
            Ok(pb::Outcome::RateLimited) => Ok(Outcome::RateLimited),
            Ok(pb::Outcome::UpstreamError) => Ok(Outcome::UpstreamError),
            Ok(pb::Outcome::Timeout) => Ok(Outcome::Timeout),
            Ok(pb::Outcome::KeyInvalid) => Ok(Outcome::KeyInvalid),
            Ok(pb::Outcome::QuotaExhausted) => Ok(Outcome::QuotaExhausted),
            Ok(pb::Outcome::ClientError) => Ok(Outcome::ClientError),
            Ok(pb::Outcome::ConcurrencyLimited) => Ok(Outcome::ConcurrencyLimited),
            Ok(pb::Outcome::Unspecified) | Err(_) => Err(UnknownOutcome(raw)),
        }
    }
}

/// The `google.rpc.ErrorInfo.reason` of every scheduler error a client may act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SchedulerReason {
    /// RESOURCE_EXHAUSTED: every eligible key is at capacity; retry after `RetryInfo`.
    PoolFull,
    /// RESOURCE_EXHAUSTED: the pool's line of waiters is full (`scheduler.max_waiters`).
    TooManyWaiters,
    /// RESOURCE_EXHAUSTED: BATCH leases already hold the pool's `batch_max_share`; retry after
    /// `RetryInfo` (the free slots are kept for live traffic).
    BatchShareFull,
    /// RESOURCE_EXHAUSTED: `exclude_keys` / `upstream_ids` leave no key.
    NoEligibleKey,
    /// UNAVAILABLE: every eligible key is cooling or disabled.
    KeysUnavailable,
    /// DEADLINE_EXCEEDED: the caller's deadline ended the wait for a slot.
    WaitDeadline,
    /// FAILED_PRECONDITION: Renew of a lease that expired or was released.
    LeaseNotLive,
    /// UNAVAILABLE: this replica is draining; another replica will answer.
    ShuttingDown,
    /// UNAVAILABLE: the lease store does not answer.
    StoreUnavailable,
    /// UNAVAILABLE: the store lost the pool and could not re-seed it.
    PoolNotSeeded,
    /// UNAVAILABLE: the store lost the pool's state; grants resume when its recovery window
    /// ends (`RetryInfo`), while live leases re-register.
    PoolRecovering,
    /// PERMISSION_DENIED: the lease id's signature does not verify: made up, altered, or
    /// signed under a lease secret the fleet no longer accepts. Never retry it.
    LeaseNotIssued,
}

impl SchedulerReason {
    /// Every reason.
    pub const ALL: [SchedulerReason; 12] = [
        SchedulerReason::PoolFull,
        SchedulerReason::TooManyWaiters,
        SchedulerReason::BatchShareFull,
        SchedulerReason::NoEligibleKey,
        SchedulerReason::KeysUnavailable,
        SchedulerReason::WaitDeadline,
        SchedulerReason::LeaseNotLive,
        SchedulerReason::ShuttingDown,
        SchedulerReason::StoreUnavailable,
        SchedulerReason::PoolNotSeeded,
        SchedulerReason::PoolRecovering,
        SchedulerReason::LeaseNotIssued,
    ];

    /// The reason string on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            SchedulerReason::PoolFull => "POOL_FULL",
            SchedulerReason::TooManyWaiters => "TOO_MANY_WAITERS",
            SchedulerReason::BatchShareFull => "BATCH_SHARE_FULL",
            SchedulerReason::NoEligibleKey => "NO_ELIGIBLE_KEY",
            SchedulerReason::KeysUnavailable => "KEYS_UNAVAILABLE",
            SchedulerReason::WaitDeadline => "WAIT_DEADLINE",
            SchedulerReason::LeaseNotLive => "LEASE_NOT_LIVE",
            SchedulerReason::ShuttingDown => "SHUTTING_DOWN",
            SchedulerReason::StoreUnavailable => "STORE_UNAVAILABLE",
            SchedulerReason::PoolNotSeeded => "POOL_NOT_SEEDED",
            SchedulerReason::PoolRecovering => "POOL_RECOVERING",
            SchedulerReason::LeaseNotIssued => "LEASE_NOT_ISSUED",
        }
    }

    /// The reason a wire string names, if it is one of ours.
    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == raw)
    }

    /// The reason of a scheduler `Status`, read from its `ErrorInfo` detail.
    pub fn of(status: &tonic::Status) -> Option<Self> {
        use tonic_types::StatusExt;
        status
            .get_error_details()
            .error_info()
            .and_then(|info| Self::parse(&info.reason))
    }
}

impl fmt::Display for SchedulerReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_round_trip_through_the_wire() {
        for o in Outcome::ALL {
            let wire = pb::Outcome::from(o) as i32;
            assert_eq!(Outcome::try_from(wire), Ok(o));
        }
        assert_eq!(Outcome::try_from(0), Err(UnknownOutcome(0)));
        assert_eq!(Outcome::try_from(99), Err(UnknownOutcome(99)));
        assert_eq!(Outcome::RateLimited.to_string(), "RATE_LIMITED");
    }

    #[test]
    fn reasons_parse_back() {
        for r in SchedulerReason::ALL {
            assert_eq!(SchedulerReason::parse(r.as_str()), Some(r));
        }
        assert_eq!(SchedulerReason::parse("POOL_FULLER"), None);
    }
}
