//! What a failed scheduler call means, decided from its code and typed `ErrorInfo` reason
//! ([`SchedulerReason`]), never from its message: whether to try it again on another endpoint
//! ([`retry`], the one such decision), why Acquire gave no lease ([`AcquireError`],
//! [`classify`]), and whether a grant may still exist behind a failed Acquire
//! ([`may_hold_a_grant`]).

use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::StatusExt;
use voxpool_domain::contract::{Reason as _, Retry, SchedulerReason, retry_of};

/// Whether a failed Acquire may still have a grant behind it (see `Abandoned`): no answer
/// (deadline, transport, cancelled) or a store that did not answer in time. A refusal (full,
/// unavailable keys, bad input) granted nothing.
pub(super) fn may_hold_a_grant(status: &Status) -> bool {
    match status.code() {
        // The scheduler's own WAIT_DEADLINE is a refusal: the wait ended without a grant.
        Code::DeadlineExceeded => {
            SchedulerReason::of(status) != Some(SchedulerReason::WaitDeadline)
        }
        Code::Cancelled | Code::Unknown | Code::Internal => true,
        Code::Unavailable => matches!(
            SchedulerReason::of(status),
            None | Some(SchedulerReason::StoreUnavailable | SchedulerReason::ShuttingDown)
        ),
        _ => false,
    }
}

/// Whether a failed scheduler call is worth another try on another endpoint: the one
/// decision of [`Scheduler::retrying`](super::Scheduler), made from the typed
/// [`SchedulerReason`] (never from message text).
///
/// Again: a failure another replica may not have: the replica is draining or cut off from its
/// store (SHUTTING_DOWN, STORE_UNAVAILABLE, POOL_NOT_SEEDED), an UNAVAILABLE without a reason
/// (the replica is down), or the connection broke mid-call (a killed replica's streams end
/// CANCELLED, or UNKNOWN / INTERNAL carrying the transport error; our own cancellation never
/// yields a status). Never: a reason that is the pool's state, the same on every replica
/// (full, no eligible key, keys cooling, POOL_RECOVERING: a waiting Acquire already waited
/// out what of it fits the deadline), a refusal of the request or the caller, and a deadline
/// (the call's own budget is spent).
pub(super) fn retry(status: &Status) -> Retry {
    match SchedulerReason::of(status) {
        Some(
            SchedulerReason::PoolFull
            | SchedulerReason::TooManyWaiters
            | SchedulerReason::BatchShareFull
            | SchedulerReason::NoEligibleKey
            | SchedulerReason::KeysUnavailable
            | SchedulerReason::PoolRecovering
            | SchedulerReason::WaitDeadline,
        ) => Retry::Never,
        Some(reason) => reason.retry(),
        None => match status.code() {
            Code::Unavailable | Code::Cancelled => Retry::Again,
            Code::DeadlineExceeded | Code::ResourceExhausted => Retry::Never,
            // Transport failures (a status with a source) again, every other code never.
            _ => retry_of::<SchedulerReason>(status),
        },
    }
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
    /// RESOURCE_EXHAUSTED `BUDGET_EXHAUSTED`: a budget covering the request cannot hold its
    /// reservation until the budget's period resets. Never failed over.
    BudgetExhausted {
        /// The scheduler's message.
        message: String,
        /// Its `ErrorInfo` metadata (`budget`, `subject`, `used`, `limit`, `resets_at_ms`).
        details: std::collections::HashMap<String, String>,
        /// Until the reset.
        retry_after: Option<Duration>,
    },
    /// The scheduler does not know the pool or refuses the request's fields.
    Mismatch {
        /// The scheduler's message.
        message: String,
    },
}

pub(super) fn classify(status: &Status) -> AcquireError {
    let reason = SchedulerReason::of(status);
    let retry_after = status
        .get_error_details()
        .retry_info()
        .and_then(|r| r.retry_delay);
    let message = status.message().to_owned();
    match (status.code(), reason) {
        (Code::ResourceExhausted, Some(SchedulerReason::BudgetExhausted)) => {
            let details = status
                .get_error_details()
                .error_info()
                .map(|info| info.metadata.clone())
                .unwrap_or_default();
            AcquireError::BudgetExhausted {
                message,
                details,
                retry_after,
            }
        }
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
        // A deployment mistake, not an outage: retrying cannot help.
        (Code::Unauthenticated | Code::PermissionDenied, _) => AcquireError::Mismatch {
            message: format!(
                "the scheduler refused this synthesis replica as a caller ({message}); give \
                 synthesis one of the scheduler's [[client_tokens]] in VOXPOOL_CLIENT_TOKEN or \
                 --client-token-file"
            ),
        },
        (Code::Unavailable, _) => AcquireError::Unreachable { message },
        (code, _) => AcquireError::Unreachable {
            message: format!("{code:?}: {message}"),
        },
    }
}
