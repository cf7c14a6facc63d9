//! The scheduler's domain, on domain types only (no protobuf here): [`Scheduler`] is the one
//! entry every RPC goes through, over one [`LeaseStore`] and the one [`PoolTable`].
//!
//! - [`admission`]: how an Acquire becomes a lease (waiting policy, undo-on-cancel).
//! - [`fill`]: fill locks (AcquireFill's waiting and wake-ups, RenewFill, ReleaseFill).
//! - `poll`: a pool's line poll on this replica (hand-overs nobody announced, ticket renewals).
//! - [`pools`]: the configured pools, upstreams and keys requests are checked against.
//! - Here: Release, Report, Renew, pool status and the admin calls, each re-seeding a pool
//!   the store lost where a retry can succeed.
//!
//! Owns the recovery step of invariant 1 of docs/ARCHITECTURE.md across a store that loses data: a store that lost a
//! pool (Redis restarted empty) is re-seeded from the config, that pool only, before the call
//! is retried once; the re-seed opens the pool's recovery window (`store` module doc).

pub mod admission;
pub mod budget;
pub mod fill;
mod poll;
pub mod pools;
mod quota;
pub mod refused;

use std::{sync::Arc, time::Duration};

use tokio_util::sync::CancellationToken;
use voxpool_config::Config;

pub use self::{
    admission::{AcquireRequest, Granted},
    budget::{BudgetBook, BudgetStatusRow},
    fill::FillAnswer,
    pools::{PoolEntry, PoolTable},
};
use crate::{
    error::SchedulerError,
    model::{
        BudgetAmount, HealthPolicy, KeyStatus, Lease, LeaseId, PoolStatus, ReportParams,
        ReportResult, Settle,
    },
    signing::LeaseSigner,
    store::{LeaseStore, StoreError},
    waiters::{Event, WaitQueues},
};

/// The domain over one store, for the configured pools.
pub struct Scheduler {
    store: Arc<dyn LeaseStore>,
    pools: PoolTable,
    queues: WaitQueues,
    policy: HealthPolicy,
    poll: Duration,
    /// `scheduler.line_ticket_ttl_ms`.
    ticket_ttl_ms: u64,
    max_waiters: usize,
    shutdown: CancellationToken,
    /// This replica's fill-lock waiters, woken by releases on any replica.
    fills: fill::FillWakers,
    /// `[[budgets]]` (`budget` module).
    budgets: BudgetBook,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("pools", &self.pools.names())
            .field("max_waiters", &self.max_waiters)
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    /// The domain over `store` for the pools of `config` (already validated and seeded into
    /// the store), with its waiting and health settings. Waits end when `shutdown` is
    /// cancelled.
    pub fn new(store: Arc<dyn LeaseStore>, config: &Config, shutdown: CancellationToken) -> Self {
        let pools = PoolTable::from_config(config);
        let settings = &config.scheduler;
        let queues = WaitQueues::new(pools.iter_ids());
        // Slots handed to this replica's waiters (by any replica's call) wake them at once.
        if let (Some(mut handovers), Ok(runtime)) =
            (store.handovers(), tokio::runtime::Handle::try_current())
        {
            let queues = queues.clone();
            let stop = shutdown.clone();
            runtime.spawn(async move {
                loop {
                    tokio::select! {
                        handover = handovers.recv() => match handover {
                            Some(h) => {
                                if let Some(q) = queues.get(&h.pool) {
                                    // Waiting on another replica, or gone: not ours to claim.
                                    q.tell(&h.token, Event::Handed);
                                }
                            }
                            None => return,
                        },
                        () = stop.cancelled() => return,
                    }
                }
            });
        }
        let fills = fill::FillWakers::default();
        // Fill locks released on any replica wake this replica's waiters for their key.
        if let (Some(mut released), Ok(runtime)) =
            (store.fill_releases(), tokio::runtime::Handle::try_current())
        {
            let (fills, stop) = (fills.clone(), shutdown.clone());
            runtime.spawn(async move {
                loop {
                    tokio::select! {
                        key = released.recv() => match key {
                            Some(key) => fills.wake(&key),
                            None => return,
                        },
                        () = stop.cancelled() => return,
                    }
                }
            });
        }
        Self {
            budgets: BudgetBook::from_config(config),
            fills,
            queues,
            pools,
            store,
            policy: HealthPolicy::from(settings),
            poll: Duration::from_millis(settings.wait_poll_ms),
            ticket_ttl_ms: settings.line_ticket_ttl_ms,
            max_waiters: usize::try_from(settings.max_waiters).unwrap_or(usize::MAX),
            shutdown,
        }
    }

    /// Reads the store-kept lease secret into `signer` (a no-op for a configured secret), so
    /// the edge signs and verifies lease ids without reaching the store itself.
    /// Errors: the store's, as a one-line reason.
    pub async fn refresh_signer(&self, signer: &LeaseSigner) -> Result<(), String> {
        signer.refresh(self.store.as_ref()).await
    }

    /// The configured pools.
    pub fn pools(&self) -> &PoolTable {
        &self.pools
    }

    /// Requests waiting in `pool`'s line on this replica.
    pub fn waiting(&self, pool: &str) -> usize {
        self.queues.get(pool).map_or(0, |q| q.waiting())
    }

    /// Pool status, re-seeding once if the store lost the pool.
    pub async fn status(&self, pool: &str) -> Result<PoolStatus, SchedulerError> {
        if let Some(s) = self.store.status(pool).await? {
            return Ok(s);
        }
        self.reseed(pool).await?;
        self.store
            .status(pool)
            .await?
            .ok_or_else(|| StoreError::NotSeeded(pool.to_owned()).into())
    }

    /// Seeds `pool` again after the store lost it: that pool only, so pools on a shard that is
    /// down (a Redis Cluster) do not keep this one from recovering.
    async fn reseed(&self, pool: &str) -> Result<(), StoreError> {
        tracing::warn!(pool = %pool, "pool missing from the lease store; re-seeding it");
        match self.pools.spec(pool) {
            Some(spec) => self.store.seed(std::slice::from_ref(spec)).await,
            None => Ok(()),
        }
    }

    /// Renews a lease (re-registering it during a recovery window when `key_id` names its
    /// key), re-seeding once if the store lost the pool: that re-seed is what opens the
    /// window, so a holder that renews first after a loss keeps its lease counted.
    /// Only the lease granted at `granted_at_ms` is renewed (`LeaseStore::renew_granted`).
    pub async fn renew(
        &self,
        id: &LeaseId,
        ttl_ms: u64,
        key_id: Option<&str>,
        granted_at_ms: Option<i64>,
    ) -> Result<Option<Lease>, SchedulerError> {
        match self
            .store
            .renew_granted(id, ttl_ms, key_id, granted_at_ms)
            .await
        {
            Err(StoreError::NotSeeded(pool)) => {
                self.reseed(&pool).await?;
                Ok(self
                    .store
                    .renew_granted(id, ttl_ms, key_id, granted_at_ms)
                    .await?)
            }
            other => Ok(other?),
        }
    }

    /// Frees the lease `id` granted at `granted_at_ms` (`LeaseStore::release_granted`):
    /// `true` if this call freed it.
    /// A lease released without a Report counts its whole budget reservation (what the vendor
    /// charged is unknown), unless its holder says it never sent the call (`not_sent`).
    pub async fn release(
        &self,
        id: &LeaseId,
        granted_at_ms: Option<i64>,
        not_sent: bool,
    ) -> Result<bool, SchedulerError> {
        let released = self.store.release_granted(id, granted_at_ms).await?;
        let settle = if not_sent {
            Settle::Nothing
        } else {
            Settle::Reserved
        };
        self.settle_budgets(id, settle).await;
        Ok(released)
    }

    /// Applies a reported outcome with the configured health policy (`LeaseStore::report`);
    /// `None` when neither the lease nor the named key is known. Whatever the outcome, the
    /// lease's budget reservations settle at `params.characters` and `cost_micros` (at most
    /// what each reserved; 0 after a failure: nothing charged).
    pub async fn report(
        &self,
        params: &ReportParams,
        cost_micros: u64,
    ) -> Result<Option<ReportResult>, SchedulerError> {
        let result = self.store.report(params, &self.policy).await?;
        let charged = BudgetAmount {
            characters: params.characters,
            cost_micros,
        };
        self.settle_budgets(&params.id, Settle::Charged(charged))
            .await;
        Ok(result)
    }

    /// Admin: applies `change` to `key` of `pool` and answers the key's status; UnknownKey
    /// when the store no longer has the key (config and store disagree, e.g. during a
    /// rolling config change).
    pub async fn change_key(
        &self,
        pool: &str,
        key: &str,
        change: KeyChange,
    ) -> Result<KeyStatus, SchedulerError> {
        let answer = match change {
            KeyChange::Capacity(capacity) => self.store.set_capacity(pool, key, capacity).await,
            KeyChange::Disabled(disabled) => self.store.set_disabled(pool, key, disabled).await,
        };
        answer?.ok_or_else(|| SchedulerError::UnknownKey {
            pool: pool.to_owned(),
            key: key.to_owned(),
        })
    }
}

/// What an admin RPC changes on a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyChange {
    /// A new live capacity, the key's ceiling (0 disables it).
    Capacity(u32),
    /// Disabled (`true`) or enabled again (`false`; also clears its cooldown and failures).
    Disabled(bool),
}
