//! Domain types of the scheduler, independent of gRPC and of the store backend.
//!
//! Times are milliseconds since the Unix epoch on the *store's* clock (invariant 6: one
//! clock), durations are milliseconds. Key ids are `upstream_id/key_id`.

use std::fmt;

use voxpool_config::{Config, SchedulerSettings};
pub use voxpool_config::{QuotaConfig, QuotaPeriod};

/// One key of a pool as the store knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeySpec {
    /// `upstream_id/key_id`.
    pub key_id: String,
    /// Concurrent requests allowed, from the config file.
    pub capacity: u32,
    /// The key's character budget per period, from the config file.
    pub quota: Option<QuotaConfig>,
}

/// A pool's keys, as seeded into the store from the config file.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolSpec {
    /// Pool id (tts model id).
    pub pool: String,
    /// Every key of every upstream of the pool.
    pub keys: Vec<KeySpec>,
    /// Most of the pool's capacity BATCH leases may hold (0 < share <= 1; see [`batch_limit`]).
    pub batch_max_share: f64,
    /// Whether keys learn their effective capacity from the vendor's overload refusals
    /// (CONCURRENCY_LIMITED and RATE_LIMITED reports, [`HealthPolicy::lowered_capacity`]).
    pub adaptive: bool,
}

/// Most BATCH leases a pool allows: `share` of `capacity` (the capacity of its available keys)
/// rounded down, but at least 1 while `capacity` is above 0 so a small share never starves
/// bulk work entirely. The Redis store computes the same in `lua/prelude.lua`.
pub fn batch_limit(share: f64, capacity: u64) -> u64 {
    if capacity == 0 {
        return 0;
    }
    // The epsilon keeps 0.6 * 10 at 6 despite binary rounding.
    let limit = (share * capacity as f64 + 1e-9).floor() as u64;
    limit.clamp(1, capacity)
}

impl PoolSpec {
    /// The pools of a (validated) config file.
    pub fn from_config(config: &Config) -> Vec<PoolSpec> {
        config
            .pools
            .iter()
            .map(|p| PoolSpec {
                pool: p.id.clone(),
                keys: p
                    .upstreams
                    .iter()
                    .flat_map(|u| {
                        u.keys.iter().map(move |k| KeySpec {
                            key_id: format!("{}/{}", u.id, k.id),
                            capacity: k.capacity,
                            quota: k.quota,
                        })
                    })
                    .collect(),
                batch_max_share: p.batch_max_share,
                adaptive: p.adaptive,
            })
            .collect()
    }
}

/// The upstream part of a key id (`acct-a` in `acct-a/app-1`).
pub fn upstream_of(key_id: &str) -> &str {
    key_id.split_once('/').map_or(key_id, |(u, _)| u)
}

/// The random part of a lease id: 128 bits as 32 lowercase hex digits.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseToken(String);

impl LeaseToken {
    /// A fresh unguessable token from the OS-seeded CSPRNG.
    pub fn random() -> Self {
        let bytes: [u8; 16] = rand::random();
        Self(hex::encode(bytes))
    }

    /// The token of the lease that Acquires carrying `idempotency_key` on `pool` from
    /// `caller` (its authenticated identity, empty when callers are not authenticated) share:
    /// the first 128 bits of SHA-256 over the three, so every replica derives the same one (as
    /// unguessable as the caller's key), and another caller presenting the same key derives
    /// another token: it gets nothing of the first caller's lease.
    pub fn for_idempotency_key(pool: &str, caller: &str, idempotency_key: &str) -> Self {
        use sha2::Digest as _;
        let digest = sha2::Sha256::new()
            .chain_update(b"voxpool idempotent acquire\0")
            .chain_update(pool.as_bytes())
            .chain_update(b"\0")
            .chain_update(caller.as_bytes())
            .chain_update(b"\0")
            .chain_update(idempotency_key.as_bytes())
            .finalize();
        Self(hex::encode(&digest[..16]))
    }

    /// Parses 32 lowercase hex digits.
    pub fn parse(s: &str) -> Option<Self> {
        (s.len() == 32
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .then(|| Self(s.to_owned()))
    }

    /// The 32 hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A lease id as callers see it: `<pool>/<32 hex digits>`. The pool part lets Release and
/// Renew find the lease with one script on the pool's hash slot.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseId {
    /// The pool the lease is in.
    pub pool: String,
    /// The random part.
    pub token: LeaseToken,
}

impl LeaseId {
    /// Parses `<pool>/<32 hex>`; `None` when malformed.
    pub fn parse(s: &str) -> Option<Self> {
        let (pool, token) = s.rsplit_once('/')?;
        if !voxpool_config::is_valid_id(pool) {
            return None;
        }
        Some(Self {
            pool: pool.to_owned(),
            token: LeaseToken::parse(token)?,
        })
    }
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.pool, self.token.as_str())
    }
}

/// A granted lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The lease's id.
    pub id: LeaseId,
    /// `upstream/key`.
    pub key_id: String,
    /// Expiry on the store clock (ms since epoch).
    pub expires_at_ms: i64,
    /// When the store granted it (store clock, ms since epoch): the same on every answer for
    /// one lease (an idempotent retry, a claim), so its signed id is too.
    pub granted_at_ms: i64,
    /// In-flight leases on the key including this one.
    pub key_in_flight: u32,
    /// The key's capacity at grant time.
    pub key_capacity: u32,
}

/// Traffic class of an Acquire (`voxpool.scheduler.v1.Priority`): waiters are served in this
/// order, and BATCH leases are held to the pool's `batch_max_share`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// Live traffic: served first.
    Interactive,
    /// The default.
    #[default]
    Standard,
    /// Bulk jobs: served last, within the batch share.
    Batch,
}

impl Priority {
    /// Every class, in serving order.
    pub const ALL: [Priority; 3] = [Priority::Interactive, Priority::Standard, Priority::Batch];

    /// Serving order: 0 (INTERACTIVE), 1, 2 (BATCH).
    pub fn rank(self) -> u8 {
        match self {
            Priority::Interactive => 0,
            Priority::Standard => 1,
            Priority::Batch => 2,
        }
    }

    /// The class of [`Priority::rank`] `r`.
    pub fn from_rank(r: u8) -> Option<Self> {
        Self::ALL.get(usize::from(r)).copied()
    }

    /// Stable lower-case name (metrics attribute, store encoding).
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Interactive => "interactive",
            Priority::Standard => "standard",
            Priority::Batch => "batch",
        }
    }
}

/// What Acquire asks of the store (already validated).
#[derive(Clone, Debug)]
pub struct AcquireParams {
    /// Pool id.
    pub pool: String,
    /// The token the new lease gets (generated before the call so a cancelled call can be
    /// undone). When a live lease already has it, the store answers that lease instead of
    /// granting a second one (an idempotent retry).
    pub token: LeaseToken,
    /// True when `token` comes from the caller's idempotency key and must be kept on every
    /// attempt; false when each attempt draws a fresh random token.
    pub idempotent: bool,
    /// Keys not to lease.
    pub exclude_keys: Vec<String>,
    /// Only keys of these upstreams (empty = all).
    pub upstream_ids: Vec<String>,
    /// Lease time to live (ms).
    pub ttl_ms: u64,
    /// Traffic class; a BATCH grant is refused beyond the pool's batch share.
    pub priority: Priority,
    /// Who the request is for: round-robin across tenants inside a class when it waits in
    /// the pool's line (empty = the one shared tenant).
    pub tenant: String,
    /// True when a refused attempt should join the pool's line in the store (a ticket named
    /// by `token`, answered [`AcquireResult::Queued`]) so that a freed slot is handed to it;
    /// false for an Acquire that does not wait.
    pub join_line: bool,
    /// How long that ticket, and a slot handed to it, live without a renewal or claim (ms;
    /// `scheduler.line_ticket_ttl_ms`).
    pub ticket_ttl_ms: u64,
    /// Characters the call will bill, reserved against the key's quota while the lease lives:
    /// a key with a quota whose used + reserved characters leave no room for them is not
    /// granted, and a Report counts at most these (0: nothing reserved, nothing counted).
    pub characters: u64,
}

impl AcquireParams {
    /// The id of the lease this Acquire gets (its pool and token).
    pub fn lease_id(&self) -> LeaseId {
        LeaseId {
            pool: self.pool.clone(),
            token: self.token.clone(),
        }
    }
}

/// Result of one acquire attempt: a lease, or a refusal that cannot be mistaken for one.
#[derive(Clone, Debug, PartialEq)]
pub enum AcquireResult {
    /// A slot was leased.
    Granted(Lease),
    /// No slot was leased, and why.
    Refused(Refusal),
    /// No slot was leased, for the reason given; the request waits in the pool's line
    /// under its token ([`crate::store::LeaseStore::claim`] collects the slot handed to it).
    Queued(Refusal),
}

/// Where a waiting request's ticket stands ([`crate::store::LeaseStore::claim`]).
#[derive(Clone, Debug, PartialEq)]
pub enum TicketState {
    /// Still in line; its ticket was kept alive.
    Waiting,
    /// A freed slot was handed to it: this lease, now claimed
    /// ([`crate::store::LeaseStore::claim`] only).
    Granted(Lease),
    /// A freed slot was handed to it and waits for its claim
    /// ([`crate::store::LeaseStore::keep_waiting`] only).
    Handed,
    /// The store has no such ticket (it expired, its waiter left, the store lost it): join
    /// the line again.
    Gone,
}

/// Waiters of one class in a pool's line (every replica).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassLine {
    /// How many wait.
    pub waiters: u64,
    /// When the longest-waiting one joined (store clock, ms); 0 without waiters.
    pub oldest_since_ms: i64,
}

/// Why an acquire attempt leased nothing (invariant 4: never silent when full).
#[derive(Clone, Debug, PartialEq)]
pub enum Refusal {
    /// Every eligible available key is at capacity.
    Full {
        /// Sum of capacities of the pool's available keys.
        capacity: u64,
        /// Sum of in-flight leases on them.
        in_flight: u64,
        /// Suggested wait before retrying (ms).
        retry_after_ms: u64,
        /// Keys among them with a free slot but no room in their character quota for the
        /// request, because calls in flight hold reservations (it frees as those end).
        quota_short: u64,
    },
    /// No eligible key is available: all cooling or disabled.
    Unavailable {
        /// Earliest cooldown end among eligible keys (store clock), `None` when every eligible
        /// key is disabled.
        next_available_ms: Option<i64>,
        /// The store's clock at the attempt.
        now_ms: i64,
    },
    /// The filters (`exclude_keys`, `upstream_ids`) leave no key at all.
    NoEligibleKey,
    /// A BATCH Acquire while the pool's BATCH leases already hold its `batch_max_share`
    /// (slots may be free: they are kept for live traffic).
    BatchShare {
        /// Most BATCH leases allowed now.
        limit: u64,
        /// BATCH leases held.
        in_flight: u64,
        /// Suggested wait before retrying (ms).
        retry_after_ms: u64,
    },
    /// The store lost the pool's state and is in its recovery window: live leases
    /// re-register by renewing, new grants wait until `until_ms`.
    Recovering {
        /// When grants resume (store clock, ms).
        until_ms: i64,
        /// The store's clock at the attempt.
        now_ms: i64,
    },
}

/// The outcome of a vendor call (see VENDORS.md for the classification): the contract type
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
    /// The pool's line, per class in [`Priority::ALL`] order (every replica's waiters).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_ids_round_trip_and_reject_garbage() {
        let id = LeaseId {
            pool: "volc-standard".into(),
            token: LeaseToken::random(),
        };
        assert_eq!(LeaseId::parse(&id.to_string()), Some(id));
        for bad in [
            "",
            "volc-standard",
            "volc-standard/xyz",
            "/0123456789abcdef0123456789abcdef",
            "Volc/0123456789abcdef0123456789abcdef",
            "p/0123456789ABCDEF0123456789ABCDEF",
            "p/0123456789abcdef0123456789abcde",
        ] {
            assert_eq!(LeaseId::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn batch_limit_is_the_share_rounded_down_but_never_zero_on_a_live_pool() {
        assert_eq!(batch_limit(0.6, 10), 6);
        assert_eq!(batch_limit(1.0, 10), 10);
        assert_eq!(batch_limit(0.05, 10), 1);
        assert_eq!(batch_limit(0.3, 7), 2);
        assert_eq!(batch_limit(0.6, 0), 0);
    }

    #[test]
    fn failure_backoff_doubles_from_threshold_and_caps() {
        let p = HealthPolicy {
            rate_limit_cooldown_ms: 1000,
            failure_threshold: 3,
            failure_backoff_base_ms: 1000,
            failure_backoff_max_ms: 5000,
            credential_cooldown_ms: 1,
            ..HealthPolicy::from(&SchedulerSettings::default())
        };
        assert_eq!(p.failure_cooldown_ms(2), None);
        assert_eq!(p.failure_cooldown_ms(3), Some(1000));
        assert_eq!(p.failure_cooldown_ms(4), Some(2000));
        assert_eq!(p.failure_cooldown_ms(5), Some(4000));
        assert_eq!(p.failure_cooldown_ms(6), Some(5000));
        assert_eq!(p.failure_cooldown_ms(400), Some(5000));
    }

    #[test]
    fn a_concurrency_refusal_lowers_toward_what_the_vendor_accepted() {
        let p = HealthPolicy::from(&SchedulerSettings::default());
        // Halved, but not below the leases the vendor accepted (in flight less the refused).
        assert_eq!(p.lowered_capacity(10, 10), 9);
        assert_eq!(p.lowered_capacity(10, 3), 5);
        assert_eq!(p.lowered_capacity(5, 5), 4);
        // At least one slot less, never below 1.
        assert_eq!(p.lowered_capacity(4, 9), 3);
        assert_eq!(p.lowered_capacity(2, 1), 1);
        assert_eq!(p.lowered_capacity(1, 1), 1);
    }
}
