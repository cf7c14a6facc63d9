//! The scheduler's error enum and its one exhaustive mapping to `tonic::Status`.
//!
//! No catch-all arm: a new variant must be classified. Messages are lowercase, name the pool,
//! key or field involved and say what to do; details carry `google.rpc` ErrorInfo (reason +
//! metadata), RetryInfo, BadRequest, or ResourceInfo beside the ErrorInfo of a NOT_FOUND.

use std::{collections::HashMap, time::Duration};

use tonic::{Code, Status};
use voxpool_domain::{
    contract::SchedulerReason,
    status::{invalid_argument, not_found, with_info},
    untrusted::{QUOTE_CHARS, quote},
};

pub use crate::domain::refused::{BudgetRefused, QuotaNote};
use crate::{domain::refused::quota_suffix, store::StoreError};

/// Every way a scheduler RPC can fail.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    /// A request field is malformed or out of range.
    #[error("invalid {field}: {message}")]
    InvalidArgument {
        /// Proto field path, e.g. `lease_ttl_ms` or `upstream_ids[1]`.
        field: String,
        /// What is wrong and what is accepted.
        message: String,
    },
    /// The pool is not in the config.
    #[error("pool {} is not configured (known pools: {known})", quote(pool))]
    UnknownPool {
        /// The requested pool.
        pool: String,
        /// Comma-separated configured pool ids.
        known: String,
    },
    /// The key is not in the pool.
    #[error("key {} is not in pool {pool:?}", quote(key))]
    UnknownKey {
        /// Pool id.
        pool: String,
        /// Requested key id.
        key: String,
    },
    /// Every eligible available key is at capacity.
    #[error(
        "pool {pool:?} is full ({in_flight}/{capacity} in flight on eligible keys){}{}; retry in {retry_after_ms}ms",
        if !quota_keys.is_empty() {
            quota_suffix(quota_keys, *characters, "calls in flight hold reservations on the rest; they free as those calls end")
        } else if *quota_short > 0 {
            format!(", {quota_short} key(s) with free slots have no character quota left for this request while calls in flight hold their reservations")
        } else {
            String::new()
        },
        if *waited_ms > 0 { format!(" after waiting {waited_ms}ms") } else { String::new() }
    )]
    PoolFull {
        /// Pool id.
        pool: String,
        /// Sum of capacities of eligible available keys.
        capacity: u64,
        /// Sum of their in-flight leases.
        in_flight: u64,
        /// Retry hint (ms).
        retry_after_ms: u64,
        /// How long this request waited (ms).
        waited_ms: u64,
        /// Keys with a free slot whose character quota is held by reservations.
        quota_short: u64,
        /// Those keys, named with their quota (filled by the domain).
        quota_keys: Vec<QuotaNote>,
        /// The characters the request asked to reserve.
        characters: u64,
    },
    /// A BATCH Acquire while BATCH leases hold the pool's batch share.
    #[error(
        "pool {pool:?}: BATCH leases already hold {in_flight} of the {limit} the pool's batch_max_share allows (the other slots are kept for live traffic){}; retry in {retry_after_ms}ms, or send priority STANDARD/INTERACTIVE for live requests",
        if *waited_ms > 0 { format!(" after waiting {waited_ms}ms") } else { String::new() }
    )]
    BatchShareFull {
        /// Pool id.
        pool: String,
        /// Most BATCH leases allowed now.
        limit: u64,
        /// BATCH leases held.
        in_flight: u64,
        /// Retry hint (ms).
        retry_after_ms: u64,
        /// How long this request waited (ms).
        waited_ms: u64,
    },
    /// `exclude_keys` / `upstream_ids` leave no key of the pool.
    #[error(
        "no key of pool {pool:?} is eligible: exclude_keys and upstream_ids rule out all {keys} keys"
    )]
    NoEligibleKey {
        /// Pool id.
        pool: String,
        /// Number of keys in the pool.
        keys: usize,
    },
    /// Every eligible key is cooling or disabled.
    #[error("{}{}", unavailable_message(pool, *next_available_ms, *now_ms), quota_suffix(over_quota, *characters, "over quota: only the next period can serve it"))]
    KeysUnavailable {
        /// Pool id.
        pool: String,
        /// Earliest cooldown end (store clock, ms) or `None` when all are disabled.
        next_available_ms: Option<i64>,
        /// Store clock at the attempt (ms).
        now_ms: i64,
        /// Keys out because their character quota is spent or cannot hold the request this
        /// period, with their use and reset (store clock, ms).
        over_quota: Vec<QuotaNote>,
        /// The characters the request asked to reserve.
        characters: u64,
    },
    /// The store lost the pool's state and its recovery window runs (`store` module doc).
    #[error(
        "pool {pool:?} is recovering: the lease store had no state for it (a fresh store, or a Redis restart, flush or failover that lost it), so new grants wait {resumes_in_ms}ms more (scheduler.recovery_window_ms) while live leases re-register; retry then, or send a waitTimeoutMs that covers it"
    )]
    Recovering {
        /// Pool id.
        pool: String,
        /// Until the window ends (ms).
        resumes_in_ms: u64,
    },
    /// The pool's line already holds `scheduler.max_waiters` waiting Acquires.
    #[error(
        "pool {pool:?} already has {max_waiters} waiting Acquires on this replica (scheduler.max_waiters); retry with backoff, or send waitTimeoutMs 0 to be answered at once"
    )]
    TooManyWaiters {
        /// Pool id.
        pool: String,
        /// The configured bound.
        max_waiters: usize,
    },
    /// The gRPC deadline ended the wait for a slot.
    #[error("no slot of pool {pool:?} freed before the request deadline (waited {waited_ms}ms)")]
    WaitDeadline {
        /// Pool id.
        pool: String,
        /// How long the request waited (ms).
        waited_ms: u64,
    },
    /// Renew on a lease that expired or was released.
    #[error(
        "lease {lease_id} is not live (expired or released); acquire a new lease (if its pool is recovering after the store lost its state, renewing with keyId set re-registers a live one)"
    )]
    LeaseNotLive {
        /// The lease id.
        lease_id: String,
    },
    /// A lease id whose signature does not verify ([`crate::signing`]).
    #[error(
        "lease {} was not issued by this scheduler fleet (its signature does not verify: made up, altered, or signed under a lease secret no longer accepted); nothing was changed; use the leaseId Acquire returned",
        quote(lease_id)
    )]
    LeaseNotIssued {
        /// The presented id (untrusted).
        lease_id: String,
    },
    /// Report on a lease that is gone, without a `key_id` to report against.
    #[error(
        "lease {lease_id} is not live (expired or released) and no key_id was given; report with key_id set to the lease's keyId"
    )]
    ReportKeyUnknown {
        /// The lease id.
        lease_id: String,
    },
    /// This replica is draining for shutdown; a waiting Acquire ends so the caller can retry
    /// on another replica.
    #[error(
        "this scheduler replica is shutting down; retry (another replica will answer) for pool {pool:?}"
    )]
    ShuttingDown {
        /// Pool id.
        pool: String,
    },
    /// RenewFill of a fill lock the caller no longer holds.
    #[error(
        "the fill lock of key {key:?} is not held by this fill_id (it expired, was released, or another caller took it over after it expired); stop relying on it: check the cache, then AcquireFill again if the entry is still missing"
    )]
    FillNotHeld {
        /// The fill key (checked: only `[A-Za-z0-9._:/-]`).
        key: String,
    },
    /// This replica is draining; a waiting AcquireFill ends so the caller can retry elsewhere.
    #[error(
        "this scheduler replica is shutting down; retry AcquireFill for key {key:?} (another replica will answer)"
    )]
    FillShuttingDown {
        /// The fill key (checked).
        key: String,
    },
    /// A budget covering the request (`[[budgets]]`) cannot hold it this period.
    #[error("{0}")]
    BudgetExhausted(Box<BudgetRefused>),
    /// The lease store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// At most the first [`QUOTE_CHARS`] characters of an untrusted value, for error details.
fn prefix(value: &str) -> &str {
    value
        .char_indices()
        .nth(QUOTE_CHARS)
        .map_or(value, |(end, _)| &value[..end])
}

fn unavailable_message(pool: &str, next: Option<i64>, now: i64) -> String {
    match next {
        Some(t) => format!(
            "every eligible key of pool {pool:?} is cooling or disabled; the first returns in {}ms (at {t} ms since epoch, store clock)",
            (t - now).max(0)
        ),
        None => format!(
            "every eligible key of pool {pool:?} is disabled; an admin must EnableKey or raise its capacity"
        ),
    }
}

impl From<SchedulerError> for Status {
    fn from(e: SchedulerError) -> Self {
        let message = e.to_string();
        match e {
            SchedulerError::InvalidArgument { field, message } => invalid_argument(&field, message),
            SchedulerError::UnknownPool { pool, .. } => not_found(
                "voxpool.dev/Pool",
                prefix(&pool),
                SchedulerReason::PoolNotFound.as_str(),
                message,
            ),
            SchedulerError::UnknownKey { pool, key } => not_found(
                "voxpool.dev/Key",
                &format!("{pool}/{}", prefix(&key)),
                SchedulerReason::KeyNotFound.as_str(),
                message,
            ),
            SchedulerError::PoolFull {
                pool,
                capacity,
                in_flight,
                retry_after_ms,
                waited_ms,
                quota_short,
                ..
            } => with_info(
                Code::ResourceExhausted,
                message,
                SchedulerReason::PoolFull.as_str(),
                HashMap::from([
                    ("pool".to_owned(), pool),
                    ("capacity".to_owned(), capacity.to_string()),
                    ("in_flight".to_owned(), in_flight.to_string()),
                    ("quota_short_keys".to_owned(), quota_short.to_string()),
                    ("waited_ms".to_owned(), waited_ms.to_string()),
                ]),
                Some(Duration::from_millis(retry_after_ms)),
            ),
            SchedulerError::BatchShareFull {
                pool,
                limit,
                in_flight,
                retry_after_ms,
                waited_ms,
            } => with_info(
                Code::ResourceExhausted,
                message,
                SchedulerReason::BatchShareFull.as_str(),
                HashMap::from([
                    ("pool".to_owned(), pool),
                    ("batch_limit".to_owned(), limit.to_string()),
                    ("batch_in_flight".to_owned(), in_flight.to_string()),
                    ("waited_ms".to_owned(), waited_ms.to_string()),
                ]),
                Some(Duration::from_millis(retry_after_ms)),
            ),
            SchedulerError::Recovering {
                pool,
                resumes_in_ms,
            } => with_info(
                Code::Unavailable,
                message,
                SchedulerReason::PoolRecovering.as_str(),
                HashMap::from([
                    ("pool".to_owned(), pool),
                    ("resumes_in_ms".to_owned(), resumes_in_ms.to_string()),
                ]),
                Some(Duration::from_millis(resumes_in_ms.max(1))),
            ),
            SchedulerError::TooManyWaiters { pool, max_waiters } => with_info(
                Code::ResourceExhausted,
                message,
                SchedulerReason::TooManyWaiters.as_str(),
                HashMap::from([
                    ("pool".to_owned(), pool),
                    ("max_waiters".to_owned(), max_waiters.to_string()),
                ]),
                Some(Duration::from_millis(250)),
            ),
            SchedulerError::NoEligibleKey { pool, keys } => with_info(
                Code::ResourceExhausted,
                message,
                SchedulerReason::NoEligibleKey.as_str(),
                HashMap::from([
                    ("pool".to_owned(), pool),
                    ("keys".to_owned(), keys.to_string()),
                ]),
                None,
            ),
            SchedulerError::KeysUnavailable {
                pool,
                next_available_ms,
                now_ms,
                over_quota,
                ..
            } => {
                let mut md = HashMap::from([("pool".to_owned(), pool)]);
                if !over_quota.is_empty() {
                    let keys: Vec<&str> = over_quota.iter().map(|n| n.key.as_str()).collect();
                    md.insert("over_quota_keys".to_owned(), keys.join(","));
                    for n in &over_quota {
                        md.insert(
                            format!("quota_resets_at_ms:{}", n.key),
                            n.resets_at_ms.to_string(),
                        );
                    }
                }
                let retry = next_available_ms.map(|t| {
                    md.insert("next_available_ms".to_owned(), t.to_string());
                    Duration::from_millis(u64::try_from(t - now_ms).unwrap_or(0))
                });
                with_info(
                    Code::Unavailable,
                    message,
                    SchedulerReason::KeysUnavailable.as_str(),
                    md,
                    retry,
                )
            }
            SchedulerError::WaitDeadline { pool, waited_ms } => with_info(
                Code::DeadlineExceeded,
                message,
                SchedulerReason::WaitDeadline.as_str(),
                HashMap::from([
                    ("pool".to_owned(), pool),
                    ("waited_ms".to_owned(), waited_ms.to_string()),
                ]),
                None,
            ),
            SchedulerError::LeaseNotLive { lease_id } => with_info(
                Code::FailedPrecondition,
                message,
                SchedulerReason::LeaseNotLive.as_str(),
                HashMap::from([("lease_id".to_owned(), lease_id)]),
                None,
            ),
            SchedulerError::LeaseNotIssued { lease_id } => with_info(
                Code::PermissionDenied,
                message,
                SchedulerReason::LeaseNotIssued.as_str(),
                HashMap::from([("lease_id".to_owned(), prefix(&lease_id).to_owned())]),
                None,
            ),
            SchedulerError::ReportKeyUnknown { lease_id } => not_found(
                "voxpool.dev/Lease",
                &lease_id,
                SchedulerReason::LeaseNotFound.as_str(),
                message,
            ),
            SchedulerError::ShuttingDown { pool } => with_info(
                Code::Unavailable,
                message,
                SchedulerReason::ShuttingDown.as_str(),
                HashMap::from([("pool".to_owned(), pool)]),
                Some(Duration::from_millis(100)),
            ),
            SchedulerError::FillNotHeld { key } => with_info(
                Code::NotFound,
                message,
                SchedulerReason::FillNotHeld.as_str(),
                HashMap::from([("key".to_owned(), key)]),
                None,
            ),
            SchedulerError::FillShuttingDown { key } => with_info(
                Code::Unavailable,
                message,
                SchedulerReason::ShuttingDown.as_str(),
                HashMap::from([("key".to_owned(), key)]),
                Some(Duration::from_millis(100)),
            ),
            SchedulerError::BudgetExhausted(refused) => refused.status(message),
            SchedulerError::Store(StoreError::Unavailable(_)) => with_info(
                Code::Unavailable,
                message,
                SchedulerReason::StoreUnavailable.as_str(),
                HashMap::new(),
                Some(Duration::from_millis(500)),
            ),
            SchedulerError::Store(StoreError::NotSeeded(pool)) => with_info(
                Code::Unavailable,
                message,
                SchedulerReason::PoolNotSeeded.as_str(),
                HashMap::from([("pool".to_owned(), pool)]),
                Some(Duration::from_millis(500)),
            ),
            SchedulerError::Store(StoreError::Protocol(_)) => Status::internal(message),
        }
    }
}
