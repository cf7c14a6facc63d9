//! Fill locks (docs/SCHEDULER.md "Fill locks"): one lock per content key, outside every pool,
//! shared by every replica through the store. [`FillLocks::acquire_fill`] takes it when nobody
//! holds it, or its holder's TTL ended on the store's clock (an expired holder is taken over,
//! so a dead filler blocks nobody past its TTL); only the [`FillId`] it was granted to renews
//! or releases it. Each method is one atomic step on the store.
//!
//! Invariant guarded: at most one live holder per key at any instant of the store's clock
//! (invariant 6, one clock: expiry is the store's time, never a replica's).
//!
//! A release is announced on every replica ([`FillLocks::fill_releases`]), a hint that wakes
//! the callers waiting for that key at once; the waiting itself is the domain's
//! (`domain::fill`), which also polls, so a lost announcement costs one poll. The memory store
//! announces on an in-process channel; the Redis store PUBLISHes on `<prefix>:fills:released`,
//! which each replica's hand-over subscriber (`redis::wake`) also follows.
//!
//! Test clock: a fill key belongs to no pool, so `advance_clock(pool)` cannot move it; each
//! key has its own offset instead ([`FillLocks::advance_fill_clock`]), kept in the store like
//! a pool's (Redis: `<prefix>:fill:{<key>}:clock`, in the lock's hash slot).

use async_trait::async_trait;

use super::StoreResult;
use crate::model::{FillHolder, FillId, FillKey, FillState};

/// The fill-lock part of a [`LeaseStore`](super::LeaseStore) (module doc).
#[async_trait]
pub trait FillLocks: Send + Sync + 'static {
    /// Takes the fill lock of `key` for `fill_id` until now + `ttl_ms` when nobody holds it,
    /// or its holder's TTL has ended (module doc): [`FillState::Granted`]; otherwise
    /// [`FillState::Held`] with the holder and how long its lock has left. One atomic step.
    async fn acquire_fill(
        &self,
        key: &FillKey,
        fill_id: &FillId,
        ttl_ms: u64,
    ) -> StoreResult<FillState>;

    /// Extends the fill lock of `key` to now + `ttl_ms` if `fill_id` holds it (its TTL not
    /// ended): `Ok(true)`; `Ok(false)` when it does not (released, expired, taken over). An
    /// expired lock is never revived.
    async fn renew_fill(&self, key: &FillKey, fill_id: &FillId, ttl_ms: u64) -> StoreResult<bool>;

    /// Lets the fill lock of `key` go if `fill_id` holds it (`Ok(true)`, announced on
    /// [`FillLocks::fill_releases`]); `Ok(false)` and nothing changed otherwise.
    async fn release_fill(&self, key: &FillKey, fill_id: &FillId) -> StoreResult<bool>;

    /// Who holds the fill lock of `key` now (`None`: nobody, or its TTL ended). Read only:
    /// how a waiter tells its holder let go.
    async fn fill_holder(&self, key: &FillKey) -> StoreResult<Option<FillHolder>>;

    /// Fill locks released, by key, on every replica (the first call takes the receiver; later
    /// calls get `None`). A hint: a lost one costs a waiter one poll (`domain::fill`).
    fn fill_releases(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<FillKey>>;

    /// Test hook: moves this store's clock for the fill lock of `key` forward by `ms` (fill
    /// locks have a clock of their own per key, module doc). Production code never calls it.
    async fn advance_fill_clock(&self, key: &FillKey, ms: u64) -> StoreResult<()>;
}
