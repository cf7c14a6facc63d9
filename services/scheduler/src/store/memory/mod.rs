//! In-process lease store: the single-replica embedded default (`--store memory`).
//!
//! Same semantics as the Redis store (same conformance suite), held under one mutex so each
//! operation is atomic: every call locks the store, reaps what expired, runs, then hands what
//! it freed to the line's head ([`MemoryStore::with_pool`]). The clock is the system clock
//! plus a per-pool test offset ([`LeaseStore::advance_clock`]). State is lost when the process
//! exits, which is exactly a single replica's lifetime: run the Redis store for more than one
//! replica.
//!
//! By concern: [`pool`] (a pool's state and lease bookkeeping), [`key`] (one key's record),
//! `grant` (Acquire, Release), `line` and `waiting` (the line's order; hand-overs, claims),
//! `health` (cooldowns and adaptive capacity from reports), `quota` (character budgets),
//! `recovery` (seeding, renewal, re-registration), `budget` (budget rows), `fill` (fill locks, with their own clock per
//! key; a release is announced on an in-process channel that wakes the domain's waiters).

mod budget;
mod fill;
mod grant;
mod health;
mod key;
mod line;
mod pool;
mod quota;
mod recovery;
mod waiting;

use std::{collections::HashMap, sync::Mutex};

use async_trait::async_trait;
use tokio::sync::mpsc;

use self::{key::KeyEntry, pool::PoolState};
use super::{Handover, LeaseStore, StoreError, StoreResult};
use crate::model::{
    AcquireParams, AcquireResult, FillKey, HealthPolicy, KeyStatus, Lease, LeaseId, LeaseToken,
    PoolSpec, PoolStatus, ReportParams, ReportResult, TicketState,
};

/// The in-process [`LeaseStore`].
#[derive(Debug)]
pub struct MemoryStore {
    pools: Mutex<HashMap<String, PoolState>>,
    recovery_window_ms: u64,
    /// Longest TTL a lease re-registered during a recovery window gets (ms).
    recovery_lease_ttl_ms: u64,
    /// The replicas' shared lease secret when none is configured (one replica here).
    lease_secret: Mutex<Option<voxpool_domain::secret::Secret>>,
    handovers: mpsc::UnboundedSender<Handover>,
    handovers_rx: Mutex<Option<mpsc::UnboundedReceiver<Handover>>>,
    fills: Mutex<fill::Fills>,
    budgets: Mutex<budget::BudgetRows>,
    fill_released: mpsc::UnboundedSender<FillKey>,
    fill_released_rx: Mutex<Option<mpsc::UnboundedReceiver<FillKey>>>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::with_recovery_window(0)
    }
}

fn poisoned<T>(_: T) -> StoreError {
    StoreError::Protocol("memory store mutex poisoned".into())
}

impl MemoryStore {
    /// An empty store without a recovery window; call [`LeaseStore::seed`] before use.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store whose first seed of each pool opens a recovery window of
    /// `recovery_window_ms` (`scheduler.recovery_window_ms`): a scheduler restarted on the
    /// memory store has lost the leases its callers still hold, exactly like a Redis
    /// restarted empty, and they re-register by renewing.
    pub fn with_recovery_window(recovery_window_ms: u64) -> Self {
        let (handovers, rx) = mpsc::unbounded_channel();
        let (fill_released, fill_rx) = mpsc::unbounded_channel();
        Self {
            fills: Mutex::default(),
            budgets: Mutex::default(),
            fill_released,
            fill_released_rx: Mutex::new(Some(fill_rx)),
            pools: Mutex::default(),
            recovery_window_ms,
            recovery_lease_ttl_ms: voxpool_config::SchedulerSettings::default()
                .default_lease_ttl_ms,
            lease_secret: Mutex::default(),
            handovers,
            handovers_rx: Mutex::new(Some(rx)),
        }
    }

    /// The longest TTL a lease re-registered during a recovery window gets
    /// (`scheduler.default_lease_ttl_ms`; default 30000).
    #[must_use]
    pub fn with_recovery_lease_ttl(mut self, ttl_ms: u64) -> Self {
        self.recovery_lease_ttl_ms = ttl_ms;
        self
    }

    /// Runs `f` on `pool` (`None` when the store does not hold it) as one atomic step:
    /// expired leases and unclaimed hand-overs are reclaimed first, and whatever the call
    /// freed goes to the line's head before the lock is let go (`store` module doc).
    fn with_pool<T>(
        &self,
        pool: &str,
        f: impl FnOnce(&mut PoolState, i64) -> T,
    ) -> StoreResult<Option<T>> {
        let mut pools = self.pools.lock().map_err(poisoned)?;
        Ok(pools.get_mut(pool).map(|p| {
            let now = p.now();
            p.reap(now);
            p.expire_handed(now);
            let out = f(p, now);
            p.serve(now);
            for token in std::mem::take(&mut p.announce) {
                // Nobody listening (no domain yet): waiters still poll.
                let _ = self.handovers.send(Handover {
                    pool: pool.to_owned(),
                    token,
                });
            }
            out
        }))
    }

    /// An admin change `f` of key `key_id` of `pool`, answering the key's status (`None`
    /// for an unknown key).
    fn with_key(
        &self,
        pool: &str,
        key_id: &str,
        f: impl FnOnce(&mut KeyEntry, i64),
    ) -> StoreResult<Option<KeyStatus>> {
        Ok(self
            .with_pool(pool, |p, now| {
                let k = p.keys.get_mut(key_id)?;
                f(k, now);
                Some(k.status(key_id, now))
            })?
            .flatten())
    }

    /// [`MemoryStore::with_pool`] for a call on a pool the store must hold.
    fn seeded<T>(&self, pool: &str, f: impl FnOnce(&mut PoolState, i64) -> T) -> StoreResult<T> {
        self.with_pool(pool, f)?
            .ok_or_else(|| StoreError::NotSeeded(pool.to_owned()))
    }
}

#[async_trait]
impl LeaseStore for MemoryStore {
    async fn seed(&self, specs: &[PoolSpec]) -> StoreResult<()> {
        let mut pools = self.pools.lock().map_err(poisoned)?;
        for spec in specs {
            pools
                .entry(spec.pool.clone())
                .or_insert_with(|| PoolState::fresh(self.recovery_window_ms))
                .seed(spec);
        }
        Ok(())
    }

    async fn acquire(&self, p: &AcquireParams) -> StoreResult<AcquireResult> {
        self.seeded(&p.pool, |pool, now| pool.acquire(p, now))
    }

    async fn release_granted(&self, id: &LeaseId, granted_at_ms: Option<i64>) -> StoreResult<bool> {
        Ok(self
            .with_pool(&id.pool, |pool, now| pool.release(id, granted_at_ms, now))?
            .unwrap_or(false))
    }

    async fn renew_granted(
        &self,
        id: &LeaseId,
        ttl_ms: u64,
        key_id: Option<&str>,
        granted_at_ms: Option<i64>,
    ) -> StoreResult<Option<Lease>> {
        let ttls = (ttl_ms, self.recovery_lease_ttl_ms);
        self.seeded(&id.pool, |pool, now| {
            pool.renew(id, ttls, key_id, granted_at_ms, now)
        })
    }

    async fn report(
        &self,
        r: &ReportParams,
        policy: &HealthPolicy,
    ) -> StoreResult<Option<ReportResult>> {
        Ok(self
            .with_pool(&r.id.pool, |pool, now| pool.report(r, policy, now))?
            .flatten())
    }

    async fn status(&self, pool: &str) -> StoreResult<Option<PoolStatus>> {
        self.with_pool(pool, |p, now| PoolStatus {
            pool: pool.to_owned(),
            keys: p.keys.iter().map(|(id, k)| k.status(id, now)).collect(),
            now_ms: now,
            recovering_until_ms: if p.recovering_until_ms > now {
                p.recovering_until_ms
            } else {
                0
            },
            batch_in_flight: p.batch_leases.len() as u64,
            batch_max_share: p.batch_max_share,
            line: p.line.by_class(),
        })
    }

    async fn claim(&self, pool: &str, token: &LeaseToken, ttl_ms: u64) -> StoreResult<TicketState> {
        let mut states = self.seeded(pool, |p, now| {
            p.tickets(pool, std::slice::from_ref(token), ttl_ms, true, now)
        })?;
        Ok(states.pop().unwrap_or(TicketState::Gone))
    }

    async fn keep_waiting(
        &self,
        pool: &str,
        tokens: &[LeaseToken],
        ttl_ms: u64,
    ) -> StoreResult<Vec<TicketState>> {
        self.seeded(pool, |p, now| p.tickets(pool, tokens, ttl_ms, false, now))
    }

    async fn leave(&self, pool: &str, token: &LeaseToken, keep_lease: bool) -> StoreResult<()> {
        self.with_pool(pool, |p, now| p.leave(token, keep_lease, now))?;
        Ok(())
    }

    fn handovers(&self) -> Option<mpsc::UnboundedReceiver<Handover>> {
        self.handovers_rx.lock().ok().and_then(|mut rx| rx.take())
    }

    async fn set_capacity(
        &self,
        pool: &str,
        key_id: &str,
        capacity: u32,
    ) -> StoreResult<Option<KeyStatus>> {
        self.with_key(pool, key_id, |k, now| k.set_capacity(capacity, now))
    }

    async fn set_disabled(
        &self,
        pool: &str,
        key_id: &str,
        disabled: bool,
    ) -> StoreResult<Option<KeyStatus>> {
        self.with_key(pool, key_id, |k, _| k.set_disabled(disabled))
    }

    async fn ping(&self) -> StoreResult<()> {
        Ok(())
    }

    async fn lease_secret(
        &self,
        candidate: &voxpool_domain::secret::Secret,
    ) -> StoreResult<voxpool_domain::secret::Secret> {
        let mut kept = self.lease_secret.lock().map_err(poisoned)?;
        Ok(kept.get_or_insert_with(|| candidate.clone()).clone())
    }

    async fn forget_pool(&self, pool: &str) -> StoreResult<()> {
        self.pools.lock().map_err(poisoned)?.remove(pool);
        Ok(())
    }

    async fn advance_clock(&self, pool: &str, ms: u64) -> StoreResult<()> {
        self.with_pool(pool, |p, _| {
            p.clock_offset_ms = p
                .clock_offset_ms
                .saturating_add(i64::try_from(ms).unwrap_or(i64::MAX));
        })?;
        Ok(())
    }
}
