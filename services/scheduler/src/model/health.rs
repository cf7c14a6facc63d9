//! Key health and pool status as domain types: vendor outcomes, key states and cooldown
//! reasons, reports and their results, the health policy reports apply (cooldowns, the
//! adaptive effective capacity), and the status of keys and pools.
//!
//! Invariant 5 of docs/ARCHITECTURE.md (a misbehaving key leaves rotation, a recovered one returns): the one
//! [`HealthPolicy`] both stores apply, in Rust and in `lua/report.lua` alike.

use voxpool_config::SchedulerSettings;

use super::{ClassLine, LeaseId, batch_limit};

/// The outcome of a vendor call (see docs/VENDORS.md for the classification): the contract type
/// shared with synthesis.
pub use voxpool_domain::contract::Outcome;

/// Whether a key takes leases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyState {
    /// Takes leases while below capacity.
    Available,
    /// Skipped until its cooldown ends.
    Cooling,
    /// Skipped until an admin enables it (or capacity is 0, or a credential cooldown runs).
    Disabled,
    /// Its character quota for the period is spent: skipped until the period resets.
    OverQuota,
}

/// Why a key is cooling; decides the reported state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoolReason {
    /// After RATE_LIMITED.
    RateLimited,
    /// After consecutive UPSTREAM_ERROR/TIMEOUT.
    Failures,
    /// After KEY_INVALID/QUOTA_EXHAUSTED: reported as DISABLED until it ends or EnableKey.
    Credential,
    /// Its configured character quota is spent: reported as OVER_QUOTA until the period ends.
    Quota,
}

impl CoolReason {
    /// Stable name stored with the cooldown.
    pub fn as_str(self) -> &'static str {
        match self {
            CoolReason::RateLimited => "rate_limited",
            CoolReason::Failures => "failures",
            CoolReason::Credential => "credential",
            CoolReason::Quota => "quota",
        }
    }

    /// Parses [`CoolReason::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "rate_limited" => Some(CoolReason::RateLimited),
            "failures" => Some(CoolReason::Failures),
            "credential" => Some(CoolReason::Credential),
            "quota" => Some(CoolReason::Quota),
            _ => None,
        }
    }
}

/// A report to apply to a key.
#[derive(Clone, Debug)]
pub struct ReportParams {
    /// The lease the vendor call ran under.
    pub id: LeaseId,
    /// Fallback key when the lease is already gone (`upstream/key`).
    pub key_id: Option<String>,
    /// What happened.
    pub outcome: Outcome,
    /// Vendor Retry-After (ms), 0 = default.
    pub retry_after_ms: u64,
    /// Also release the lease.
    pub release: bool,
    /// Characters the call synthesized (counted against the key's quota on SUCCESS).
    pub characters: u64,
    /// When the lease was granted (store clock, from its signed id). A lease the store no
    /// longer holds takes a report on `key_id` only while this is within
    /// [`crate::store::REPORTED_MEMORY_MS`] of now; `None`: only a live lease takes one.
    pub granted_at_ms: Option<i64>,
}

/// Result of a report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportResult {
    /// The key reported on.
    pub key_id: String,
    /// Its state afterwards.
    pub state: KeyState,
    /// Cooldown end (store clock) or 0.
    pub cooldown_until_ms: i64,
    /// Whether this call released the lease.
    pub released: bool,
    /// The key's effective capacity before and after, when this report changed it.
    pub effective_change: Option<(u32, u32)>,
    /// Whether the outcome was applied to the key: false when the lease was reported on
    /// before (an outcome counts once per lease) or is gone and was granted too long ago.
    pub applied: bool,
}

/// Health policy applied by reports; from [`SchedulerSettings`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HealthPolicy {
    /// Cooldown after RATE_LIMITED with no Retry-After (ms). On an adaptive pool only when the
    /// key ran no other lease: otherwise the lowered effective capacity is the back-off
    /// ([`HealthPolicy::lowered_capacity`]).
    pub rate_limit_cooldown_ms: u64,
    /// Consecutive failures before cooling.
    pub failure_threshold: u32,
    /// First failure cooldown (ms), doubled per further failure.
    pub failure_backoff_base_ms: u64,
    /// Failure cooldown cap (ms).
    pub failure_backoff_max_ms: u64,
    /// Cooldown after KEY_INVALID / QUOTA_EXHAUSTED (ms).
    pub credential_cooldown_ms: u64,
    /// Adaptive pools: factor applied to the effective capacity on a concurrency refusal.
    pub adaptive_decrease: f64,
    /// Adaptive pools: refusals this soon after a decrease do not lower it again (ms); one
    /// right after an increase does (the probe found the limit). A refusal while the key
    /// holds more leases than its effective capacity never does (they predate the decrease).
    pub adaptive_hold_ms: u64,
    /// Adaptive pools: time since the last change after which a success adds a slot (ms),
    /// doubled per refused probe up to `adaptive_increase_max_ms`.
    pub adaptive_increase_ms: u64,
    /// Adaptive pools: the longest wait between probes (ms).
    pub adaptive_increase_max_ms: u64,
}

impl From<&SchedulerSettings> for HealthPolicy {
    fn from(s: &SchedulerSettings) -> Self {
        Self {
            rate_limit_cooldown_ms: s.rate_limit_cooldown_ms,
            failure_threshold: s.failure_threshold,
            failure_backoff_base_ms: s.failure_backoff_base_ms,
            failure_backoff_max_ms: s.failure_backoff_max_ms,
            credential_cooldown_ms: s.credential_cooldown_ms,
            adaptive_decrease: s.adaptive_decrease,
            adaptive_hold_ms: s.adaptive_hold_ms,
            adaptive_increase_ms: s.adaptive_increase_ms,
            adaptive_increase_max_ms: s.adaptive_increase_max_ms,
        }
    }
}

impl HealthPolicy {
    /// The effective capacity after an overload refusal (CONCURRENCY_LIMITED, or RATE_LIMITED
    /// on an adaptive pool: a plain HTTP 429 teaches the limit as a vendor's concurrency code
    /// does, besides any cooldown the vendor asked for) on a key running `in_flight`
    /// leases (the refused one included) at effective capacity `effective`:
    /// `effective × adaptive_decrease` rounded down, but not below what the vendor accepted
    /// (`in_flight − 1`) nor below 1, and at least one slot less than before. The Redis store
    /// computes the same in `lua/report.lua`.
    pub fn lowered_capacity(&self, effective: u32, in_flight: u32) -> u32 {
        let scaled = (f64::from(effective) * self.adaptive_decrease + 1e-9).floor() as u32;
        let accepted = in_flight.saturating_sub(1);
        scaled.max(accepted).min(effective.saturating_sub(1)).max(1)
    }

    /// Cooldown after the `failures`-th consecutive failure, or `None` below the threshold:
    /// `base * 2^(failures - threshold)`, capped at the max.
    pub fn failure_cooldown_ms(&self, failures: u32) -> Option<u64> {
        if failures < self.failure_threshold {
            return None;
        }
        let exp = (failures - self.failure_threshold).min(32);
        Some(
            self.failure_backoff_base_ms
                .saturating_mul(1u64 << exp)
                .min(self.failure_backoff_max_ms),
        )
    }
}

/// One key's live state.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyStatus {
    /// `upstream/key`.
    pub key_id: String,
    /// Live capacity: the configured one, or what `SetKeyCapacity` set (the ceiling).
    pub capacity: u32,
    /// What leases are granted against: `capacity` as learned from the vendor's overload
    /// refusals (adaptive pools), 1..=capacity (0 when capacity is 0).
    pub effective_capacity: u32,
    /// Live leases.
    pub in_flight: u32,
    /// Available, cooling or disabled.
    pub state: KeyState,
    /// Cooldown end or 0.
    pub cooldown_until_ms: i64,
    /// Consecutive UPSTREAM_ERROR/TIMEOUT reports.
    pub consecutive_failures: u32,
    /// Characters used in the current quota period (0 without a quota).
    pub quota_used: u64,
    /// The key's characters per period (0 = no quota).
    pub quota_limit: u64,
    /// When the current quota period ends (store clock, ms; 0 without a quota).
    pub quota_resets_at_ms: i64,
}

impl KeyStatus {
    /// in_flight / effective capacity (how full the key is now), 0 when it is 0.
    pub fn utilization(&self) -> f64 {
        if self.effective_capacity == 0 {
            0.0
        } else {
            f64::from(self.in_flight) / f64::from(self.effective_capacity)
        }
    }
}

/// A pool's live state.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolStatus {
    /// Pool id.
    pub pool: String,
    /// Every key, sorted by key id.
    pub keys: Vec<KeyStatus>,
    /// Store clock when read.
    pub now_ms: i64,
    /// While the pool's recovery window runs (the store lost its state), when grants resume
    /// (store clock, ms); 0 when not recovering.
    pub recovering_until_ms: i64,
    /// BATCH leases held.
    pub batch_in_flight: u64,
    /// The pool's `batch_max_share` (0 < share <= 1).
    pub batch_max_share: f64,
    /// The pool's line, per class in [`Priority::ALL`](super::Priority::ALL) order (every replica's waiters).
    pub line: [ClassLine; 3],
}

impl PoolStatus {
    /// Sum of capacities of available keys.
    pub fn capacity(&self) -> u64 {
        self.available()
            .map(|k| u64::from(k.effective_capacity))
            .sum()
    }

    /// Sum of in-flight leases on available keys.
    pub fn in_flight(&self) -> u64 {
        self.available().map(|k| u64::from(k.in_flight)).sum()
    }

    /// Pool utilization: in-flight / capacity over available keys, 0 when capacity is 0.
    pub fn utilization(&self) -> f64 {
        let cap = self.capacity();
        if cap == 0 {
            0.0
        } else {
            self.in_flight() as f64 / cap as f64
        }
    }

    /// Most BATCH leases the pool allows now ([`batch_limit`] over the available capacity).
    pub fn batch_limit(&self) -> u64 {
        batch_limit(self.batch_max_share, self.capacity())
    }

    fn available(&self) -> impl Iterator<Item = &KeyStatus> {
        self.keys.iter().filter(|k| k.state == KeyState::Available)
    }
}
