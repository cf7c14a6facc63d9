//! The `LeaseStore` trait: where in-flight counts, leases, cooldowns and capacities live.
//!
//! Two backends implement the same semantics and pass the same conformance suite
//! (`tests/conformance/`):
//! - [`memory::MemoryStore`]: in-process, for a single replica (the embedded default).
//! - [`redis::RedisStore`]: Redis sorted sets driven by Lua scripts, shared by any number of
//!   replicas; time is Redis `TIME` read inside each script.
//!
//! Every method is one atomic step on the store: a grant, release, renewal or report either
//! happens whole or not at all, so concurrent callers (threads or replicas) can never push a
//! key past its capacity (invariant 1 of docs/ARCHITECTURE.md) or drive a count below zero (invariant 3).
//!
//! **Recovery** (invariant 1 across a store that loses data). A store can lose a pool's state
//! while leases on it are live: Redis restarted without persistence, FLUSHALL, a replica
//! promoted without the pool, a scheduler restarted on the memory store. Re-seeding with zero
//! in flight would then hand out slots the vendor is still using. So [`LeaseStore::seed`]
//! opens a *recovery window* (`scheduler.recovery_window_ms`) on every pool it finds absent:
//! until it ends, Acquire is refused with [`Refusal::Recovering`](crate::model::Refusal::Recovering) (waiting Acquires wait it
//! out) and a Renew that names its `key_id` re-registers a lease the store no longer knows.
//! Holders renew at least every half window (`Lease.renew_interval_ms`), so when the window
//! ends every live lease is counted again. A store that merely comes back *older* (a
//! promoted replica that missed recent writes) is covered by replica acknowledgements
//! instead (`scheduler.store_replica_acks`, see [`redis`]).
//!
//! **The line** (invariant 4 across replicas). Waiting Acquires are *tickets* in the store,
//! one line per pool shared by every replica, ordered as the memory store's `line` module says (class, tenant
//! round-robin, arrival). A refused Acquire that may wait joins it in the same step that
//! refused it ([`AcquireParams::join_line`]); a new arrival is refused (or queued) while
//! tickets of its class or a better one wait, so it never jumps them. Every step that frees
//! a slot (release, report, capacity raise, enable, and the reaping of expired leases and
//! ended cooldowns) hands it to the line's head in that same step: the lease is written under
//! the ticket's token, announced ([`LeaseStore::handovers`]) and claimed by its waiter
//! ([`LeaseStore::claim`]). Tickets and unclaimed hand-overs live `scheduler.line_ticket_ttl_ms`
//! ([`AcquireParams::ticket_ttl_ms`]) unless their replica renews them, so a dead replica's waiters leave the line by themselves.
//!
//! **Budgets** ([`budget::Budgets`], a part of every `LeaseStore`): rows of `[[budgets]]`
//! outside every pool, reserved at Acquire and settled at Report; see [`budget`].
//!
//! **Fill locks** ([`fill::FillLocks`], a part of every `LeaseStore`): single-flight locks on
//! content keys, outside every pool; see [`fill`].

pub mod budget;
pub mod connecting;
pub mod fill;
pub mod memory;
pub mod redis;

use async_trait::async_trait;

pub use self::{budget::Budgets, fill::FillLocks};

use crate::model::{
    AcquireParams, AcquireResult, HealthPolicy, KeyStatus, Lease, LeaseId, LeaseToken, PoolSpec,
    PoolStatus, ReportParams, ReportResult, TicketState,
};

/// How long a lease stays marked as reported on after its last renewal or its report, and the
/// oldest grant a report on a lease the store no longer holds may name (ms). An outcome changes
/// a key once per lease (invariant 11): a replayed Report within this finds the mark, one after
/// it names a grant too old to be taken. Both backends use it (`lua/prelude.lua`
/// `REPORTED_MS`).
pub const REPORTED_MEMORY_MS: i64 = 60_000;

/// Bounds of the retry hint a refusal of a full pool (or a full batch share) carries (ms):
/// when the first slot comes back, clamped. Both backends answer it (the Redis store clamps
/// what its scripts reply).
pub(crate) const RETRY_HINT_MIN_MS: u64 = 50;
/// See [`RETRY_HINT_MIN_MS`].
pub(crate) const RETRY_HINT_MAX_MS: u64 = 1_000;

/// A freed slot handed to the waiting request `token` of `pool`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handover {
    /// Pool id.
    pub pool: String,
    /// The waiting request's token (its lease's token once claimed).
    pub token: String,
}

/// Store failures. Domain outcomes (full, cooling, unknown lease) are results, not errors.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store could not be reached or timed out; the caller may retry.
    #[error("lease store unreachable: {0}")]
    Unavailable(String),
    /// The pool has no keys in the store: it was never seeded, or the store lost its data
    /// (a Redis restart without persistence). The service re-seeds and retries.
    #[error("pool {0:?} is not seeded in the lease store")]
    NotSeeded(String),
    /// The store answered something this code does not understand (a bug or a foreign
    /// writer on our keys).
    #[error("lease store returned an unexpected reply: {0}")]
    Protocol(String),
}

/// Result of Release / Renew / admin calls on a lease or key that may not exist.
pub type StoreResult<T> = Result<T, StoreError>;

/// Backend of the scheduler. All times are the store's clock in ms since the epoch.
#[async_trait]
pub trait LeaseStore: FillLocks + Budgets + Send + Sync + 'static {
    /// Registers pools and their keys. A key new to the store gets the configured capacity;
    /// an existing key keeps its live in-flight count, and keeps an admin-set capacity unless
    /// the configured capacity changed since the last seed. Keys no longer configured stop
    /// taking leases. Never resets live counts (restarting a replica hands out no new slots).
    async fn seed(&self, pools: &[PoolSpec]) -> StoreResult<()>;

    /// Leases one slot on the least-utilized eligible available key, ties broken at random.
    async fn acquire(&self, params: &AcquireParams) -> StoreResult<AcquireResult>;

    /// Frees a lease. `Ok(true)` if this call freed it, `Ok(false)` if it was already released
    /// or had expired (its slot was or is now reclaimed).
    async fn release(&self, id: &LeaseId) -> StoreResult<bool> {
        self.release_granted(id, None).await
    }

    /// [`LeaseStore::release`] of the lease `id` granted at `granted_at_ms` (store clock) only:
    /// a later lease under the same token (an idempotency key used again after its lease
    /// ended) is another lease, and an id of the earlier one frees nothing (`Ok(false)`).
    /// `None`: whatever lease the token names.
    async fn release_granted(&self, id: &LeaseId, granted_at_ms: Option<i64>) -> StoreResult<bool>;

    /// Extends a live lease to now + `ttl_ms`. `Ok(None)` when it expired or was released;
    /// an expired lease is never resurrected. The one exception is recovery (module doc): a
    /// lease the store does not know, renewed with its `key_id` while the pool's recovery
    /// window runs, is re-registered on that key (counted in flight again) if the key has
    /// room: re-registration never takes a key past its capacity, and lives at most the
    /// default lease TTL (`scheduler.default_lease_ttl_ms`) whatever `ttl_ms` asks.
    async fn renew(
        &self,
        id: &LeaseId,
        ttl_ms: u64,
        key_id: Option<&str>,
    ) -> StoreResult<Option<Lease>> {
        self.renew_granted(id, ttl_ms, key_id, None).await
    }

    /// [`LeaseStore::renew`] of the lease granted at `granted_at_ms` only (see
    /// [`LeaseStore::release_granted`]): a later lease under the same token answers `Ok(None)`.
    /// A lease re-registered during a recovery window keeps `granted_at_ms` as its grant time.
    async fn renew_granted(
        &self,
        id: &LeaseId,
        ttl_ms: u64,
        key_id: Option<&str>,
        granted_at_ms: Option<i64>,
    ) -> StoreResult<Option<Lease>>;

    /// Applies a vendor outcome to the lease's key (or `params.key_id` when the lease is gone,
    /// or the token now names a lease granted at another time than `params.granted_at_ms`,
    /// if it was granted within [`REPORTED_MEMORY_MS`]) and optionally releases the lease. An
    /// outcome is applied once per lease: a second report on it only releases
    /// ([`ReportResult::applied`] false). `Ok(None)` when neither identifies a known key.
    async fn report(
        &self,
        params: &ReportParams,
        policy: &HealthPolicy,
    ) -> StoreResult<Option<ReportResult>>;

    /// Live state of every key of the pool; `Ok(None)` for an unknown pool.
    async fn status(&self, pool: &str) -> StoreResult<Option<PoolStatus>>;

    /// Admin: sets a key's live capacity (0 disables). `Ok(None)` for an unknown key.
    async fn set_capacity(
        &self,
        pool: &str,
        key_id: &str,
        capacity: u32,
    ) -> StoreResult<Option<KeyStatus>>;

    /// Admin: disables (`true`) or enables (`false`) a key. Enabling also clears its
    /// cooldown and failure count. `Ok(None)` for an unknown key.
    async fn set_disabled(
        &self,
        pool: &str,
        key_id: &str,
        disabled: bool,
    ) -> StoreResult<Option<KeyStatus>>;

    /// The lease secret the scheduler replicas share when none is configured
    /// ([`crate::signing`]): the store's, or `candidate` when the store had none (it is
    /// stored then, so every later caller gets it).
    async fn lease_secret(
        &self,
        candidate: &voxpool_domain::secret::Secret,
    ) -> StoreResult<voxpool_domain::secret::Secret>;

    /// Round-trips to the store (health checks).
    async fn ping(&self) -> StoreResult<()>;

    /// Claims the slot handed to the waiting request `token` (its ticket, see
    /// [`AcquireParams::join_line`]): [`TicketState::Granted`] with the lease, now its
    /// caller's; [`TicketState::Waiting`] while still in line (its ticket kept for another
    /// `ttl_ms`); [`TicketState::Gone`] when the store holds neither. First it hands every
    /// free slot to the line's head, like [`LeaseStore::keep_waiting`].
    async fn claim(&self, pool: &str, token: &LeaseToken, ttl_ms: u64) -> StoreResult<TicketState>;

    /// Keeps the tickets of `tokens` in the pool's line for another `ttl_ms` and says where
    /// each stands ([`TicketState::Waiting`], [`TicketState::Handed`]: a slot waits for its
    /// claim, [`TicketState::Gone`]), in `tokens` order; it never claims. First it hands every
    /// free slot to the line's head (slots freed by expiry or a cooldown's end, which no call
    /// announced), so an empty `tokens` is the line's poll.
    async fn keep_waiting(
        &self,
        pool: &str,
        tokens: &[LeaseToken],
        ttl_ms: u64,
    ) -> StoreResult<Vec<TicketState>>;

    /// Takes the waiting request `token` out of the pool's line, and releases the lease
    /// handed or claimed under that token unless `keep_lease` (an idempotent request, whose
    /// caller's retry is answered that lease).
    async fn leave(&self, pool: &str, token: &LeaseToken, keep_lease: bool) -> StoreResult<()>;

    /// Slots handed to waiting requests as they happen, by (pool, token), on every replica
    /// (the first call takes the receiver; later calls get `None`). A hint that wakes the
    /// waiter to claim its slot at once: waiters also poll ([`LeaseStore::claim`]).
    fn handovers(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<Handover>>;

    /// Test hook: moves this store's clock for `pool` forward by `ms`. Production code never
    /// calls it; tests use it to expire leases and end cooldowns without sleeping.
    async fn advance_clock(&self, pool: &str, ms: u64) -> StoreResult<()>;

    /// Test hook: drops every trace of `pool` from the store, as a Redis restarted without
    /// persistence or a FLUSHALL would. Production code never calls it.
    async fn forget_pool(&self, pool: &str) -> StoreResult<()>;
}
