//! The `[scheduler]` and `[synthesis]` tuning tables, every value with its default.

use serde::{Deserialize, Serialize};

/// Scheduler tuning. All durations in milliseconds.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerSettings {
    /// Lease TTL when `Acquire.lease_ttl_ms` is 0. Default 30000.
    pub default_lease_ttl_ms: u64,
    /// Largest `lease_ttl_ms` accepted. Default 600000 (10 min).
    pub max_lease_ttl_ms: u64,
    /// Cooldown after RATE_LIMITED without `retry_after_ms`. Default 1000.
    pub rate_limit_cooldown_ms: u64,
    /// Consecutive UPSTREAM_ERROR/TIMEOUT reports before a key cools. Default 3.
    pub failure_threshold: u32,
    /// First failure cooldown; doubles per further failure. Default 1000.
    pub failure_backoff_base_ms: u64,
    /// Cap of the failure cooldown. Default 60000.
    pub failure_backoff_max_ms: u64,
    /// Cooldown after KEY_INVALID / QUOTA_EXHAUSTED; the key stays disabled until EnableKey
    /// or this passes. Default 86400000 (24 h).
    pub credential_cooldown_ms: u64,
    /// How often a waiting Acquire re-checks the store when no release wakes it. Default 25.
    pub wait_poll_ms: u64,
    /// Redis connect and command timeout. Default 1000.
    pub store_timeout_ms: u64,
    /// Most expired leases reclaimed per script call. Default 64.
    pub reap_batch: u32,
    /// Most Acquires that may wait at once in one pool's line on one replica; one more is
    /// answered RESOURCE_EXHAUSTED naming this setting. Waiting Acquires do not count against
    /// `--max-concurrent-requests`, so this is what bounds them. Default 1024.
    pub max_waiters: u32,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        Self {
            default_lease_ttl_ms: 30_000,
            max_lease_ttl_ms: 600_000,
            rate_limit_cooldown_ms: 1_000,
            failure_threshold: 3,
            failure_backoff_base_ms: 1_000,
            failure_backoff_max_ms: 60_000,
            credential_cooldown_ms: 86_400_000,
            wait_poll_ms: 25,
            store_timeout_ms: 1_000,
            reap_batch: 64,
            max_waiters: 1024,
        }
    }
}

/// Synthesis tuning. Durations in milliseconds.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SynthesisSettings {
    /// Longest accepted text, in characters. Default 20000.
    pub max_text_chars: usize,
    /// Most vendor attempts (keys tried) per request chunk. Default 4.
    pub max_attempts: u32,
    /// Timeout of one vendor HTTP call. Default 30000.
    pub attempt_timeout_ms: u64,
    /// Overall deadline when the caller sets none. Default 60000.
    pub default_deadline_ms: u64,
}

impl Default for SynthesisSettings {
    fn default() -> Self {
        Self {
            max_text_chars: 20_000,
            max_attempts: 4,
            attempt_timeout_ms: 30_000,
            default_deadline_ms: 60_000,
        }
    }
}
