//! Domain types of the scheduler, independent of gRPC and of the store backend.
//!
//! Times are milliseconds since the Unix epoch on the *store's* clock (invariant 6 of docs/ARCHITECTURE.md: one
//! clock), durations are milliseconds. Key ids are `upstream_id/key_id`.

use std::fmt;

use voxpool_config::Config;
pub use voxpool_config::{QuotaConfig, QuotaPeriod};

mod budget;
mod fill;
mod health;

pub use self::{budget::*, fill::*, health::*};

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

#[cfg(test)]
mod tests {
    use voxpool_config::SchedulerSettings;

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
