//! Admission: how an Acquire becomes a lease, on domain types only (no protobuf here).
//!
//! Owns the waiting policy of invariant 4 ("not silent when full"): try at once unless someone
//! of the same or a better class waits; when the pool is full and the caller may wait, join
//! the pool's line ([`crate::waiters`]: class, then tenant round-robin, then arrival) and let
//! the head retry the store on each release or poll, until a grant, the wait's end, the
//! caller's deadline, a store failure, or shutdown. A wait that cannot end in a grant (no eligible
//! key, every key disabled, the first cooldown ending after the wait) answers at once.
//!
//! Also owns two safety nets of invariant 3 ("no leaks"): a grant whose caller went away
//! mid-call is released at once ([`UndoGrant`]; not an idempotent one, which its caller's
//! retry claims), and a store that lost a pool (Redis restarted empty) is re-seeded from the
//! config before the attempt is retried.

use std::{collections::HashMap, sync::Arc, time::Duration};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use voxpool_shared::config::SchedulerSettings;

use crate::{
    error::SchedulerError,
    model::{
        AcquireParams, AcquireResult, Lease, LeaseId, LeaseToken, PoolSpec, PoolStatus, Priority,
        Refusal,
    },
    store::{LeaseStore, StoreError, memory::RETRY_HINT_MIN_MS},
    waiters::{WaitQueue, WaitQueues},
};

/// One validated Acquire.
#[derive(Clone, Debug)]
pub struct AcquireRequest {
    /// What the store is asked for (its token is replaced on every attempt).
    pub params: AcquireParams,
    /// How long the caller is willing to wait for a slot (zero: answer at once).
    pub wait: Duration,
    /// The caller's own deadline, if it sent one (already shortened by a safety margin).
    pub deadline: Option<Instant>,
    /// Who the request is for (round-robin inside its class); empty = the shared tenant.
    pub tenant: String,
}

/// How an Acquire got its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Granted {
    /// At once.
    Immediately,
    /// After waiting in the pool's line.
    AfterWaiting,
}

/// The admission policy over one store, for the configured pools.
pub struct Admission {
    store: Arc<dyn LeaseStore>,
    /// This replica's id in the store's registry of waiting replicas.
    replica_id: String,
    specs: Vec<PoolSpec>,
    keys_per_pool: HashMap<String, usize>,
    queues: WaitQueues,
    poll: Duration,
    max_waiters: usize,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("pools", &self.specs.len())
            .field("max_waiters", &self.max_waiters)
            .finish_non_exhaustive()
    }
}

/// Releases a lease on drop unless disarmed: a grant whose caller went away mid-call
/// (cancelled RPC) must not hold a slot until its TTL.
struct UndoGrant {
    store: Arc<dyn LeaseStore>,
    id: Option<LeaseId>,
}

impl Drop for UndoGrant {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let store = self.store.clone();
            tokio::spawn(async move {
                // The store may be the reason we are here (a stalled Redis that runs the grant
                // later): retry for a while so the slot comes back before its TTL.
                for attempt in 0..10u32 {
                    match store.release(&id).await {
                        Ok(_) => return,
                        Err(e) if attempt == 9 => {
                            tracing::warn!(lease = %id, error = %e, "could not undo an abandoned grant; it expires at its TTL");
                        }
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt + 1)))
                                .await;
                        }
                    }
                }
            });
        }
    }
}

impl Admission {
    /// The policy for the pools of `specs`, with the waiting settings of `settings`.
    pub fn new(
        store: Arc<dyn LeaseStore>,
        specs: Vec<PoolSpec>,
        settings: &SchedulerSettings,
        shutdown: CancellationToken,
    ) -> Self {
        let queues = WaitQueues::new(specs.iter().map(|s| s.pool.as_str()));
        // Slots freed through other replicas wake this replica's heads at once.
        if let (Some(mut freed), Ok(runtime)) =
            (store.freed_signals(), tokio::runtime::Handle::try_current())
        {
            let queues = queues.clone();
            let stop = shutdown.clone();
            runtime.spawn(async move {
                loop {
                    tokio::select! {
                        pool = freed.recv() => match pool {
                            Some(pool) => {
                                if let Some(q) = queues.get(&pool) {
                                    q.notify();
                                }
                            }
                            None => return,
                        },
                        () = stop.cancelled() => return,
                    }
                }
            });
        }
        Self {
            replica_id: LeaseToken::random().as_str().to_owned(),
            queues,
            keys_per_pool: specs
                .iter()
                .map(|s| (s.pool.clone(), s.keys.len()))
                .collect(),
            specs,
            store,
            poll: Duration::from_millis(settings.wait_poll_ms),
            max_waiters: usize::try_from(settings.max_waiters).unwrap_or(usize::MAX),
            shutdown,
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn LeaseStore> {
        &self.store
    }

    /// Requests waiting in `pool`'s line on this replica.
    pub fn waiting(&self, pool: &str) -> usize {
        self.queues.get(pool).map_or(0, |q| q.waiting())
    }

    /// Waiters of `pool` on this replica per class (INTERACTIVE, STANDARD, BATCH order).
    pub fn waiting_by_class(&self, pool: &str) -> [crate::waiters::ClassWaiting; 3] {
        self.queues
            .get(pool)
            .map_or_else(Default::default, |q| q.by_class())
    }

    /// Wakes `pool`'s head waiter: a slot may have freed up on this replica.
    pub fn notify(&self, pool: &str) {
        if let Some(q) = self.queues.get(pool) {
            q.notify();
        }
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
        match self.specs.iter().find(|s| s.pool == pool) {
            Some(spec) => self.store.seed(std::slice::from_ref(spec)).await,
            None => Ok(()),
        }
    }

    /// Renews a lease (re-registering it during a recovery window when `key_id` names its
    /// key), re-seeding once if the store lost the pool: that re-seed is what opens the
    /// window, so a holder that renews first after a loss keeps its lease counted.
    pub async fn renew(
        &self,
        id: &LeaseId,
        ttl_ms: u64,
        key_id: Option<&str>,
    ) -> Result<Option<Lease>, SchedulerError> {
        match self.store.renew(id, ttl_ms, key_id).await {
            Err(StoreError::NotSeeded(pool)) => {
                self.reseed(&pool).await?;
                Ok(self.store.renew(id, ttl_ms, key_id).await?)
            }
            other => Ok(other?),
        }
    }

    /// One store attempt with a fresh token, undone if the caller goes away mid-call. What it
    /// answered is shared with the pool's line (`queue`).
    ///
    /// An idempotent attempt is never undone: its caller retries with the same key and is
    /// answered this very lease (possibly through another replica, after a store failover
    /// replicated it), so releasing it here would free a slot the caller is using. Left
    /// unclaimed, it ends at its TTL: a slot held a while, never a slot leased twice.
    async fn attempt(
        &self,
        queue: &WaitQueue,
        params: &mut AcquireParams,
        fresh: bool,
    ) -> Result<AcquireResult, StoreError> {
        params.replica.clone_from(&self.replica_id);
        params.fresh = fresh;
        if !params.idempotent {
            params.token = LeaseToken::random();
        }
        let mut undo = UndoGrant {
            store: self.store.clone(),
            id: (!params.idempotent).then(|| LeaseId {
                pool: params.pool.clone(),
                token: params.token.clone(),
            }),
        };
        let mut result = self.store.acquire(params).await;
        if let Err(StoreError::NotSeeded(pool)) = &result {
            // The store lost the pool (e.g. Redis restarted empty): seed again, retry once.
            self.reseed(pool).await?;
            result = self.store.acquire(params).await;
        }
        // Keep the undo armed when the store failed: a timed-out script may still run later
        // and grant this token to nobody.
        if result.is_ok() {
            undo.id = None;
        }
        queue.saw(&result);
        result
    }

    /// Keeps this replica registered in the store as a waiter of `pool` while it has waiters
    /// (renewed before [`REGISTRATION_TTL`] runs out, withdrawn when the line empties), so
    /// releases through other replicas wake it. Sent in the background: a lost registration
    /// only costs a poll.
    fn register_waiting(&self, queue: &WaitQueue, pool: &str, class: Priority) {
        if let (Some(registration), Ok(runtime)) = (
            self.registration(queue, pool, class),
            tokio::runtime::Handle::try_current(),
        ) {
            runtime.spawn(registration);
        }
    }

    /// The store call that (re)registers or withdraws this replica as a waiter of `pool`, if
    /// one is due; its failure is only logged (waiters still poll).
    fn registration(
        &self,
        queue: &WaitQueue,
        pool: &str,
        class: Priority,
    ) -> Option<impl Future<Output = ()> + Send + 'static> {
        let ttl = if queue.registration_due(class, REGISTRATION_TTL, REGISTRATION_TTL / 2) {
            REGISTRATION_TTL
        } else if queue.deregistration_due(class) {
            Duration::ZERO
        } else {
            return None;
        };
        let (store, pool, replica) = (self.store.clone(), pool.to_owned(), self.replica_id.clone());
        Some(async move {
            let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
            if let Err(e) = store.note_waiting(&pool, &replica, class, ms).await {
                tracing::debug!(pool = %pool, error = %e, "could not update the waiting registration; waiters poll");
            }
        })
    }

    fn refused(&self, pool: &str, refusal: Refusal, waited: Duration) -> SchedulerError {
        match refusal {
            Refusal::Full {
                capacity,
                in_flight,
                retry_after_ms,
            } => SchedulerError::PoolFull {
                pool: pool.to_owned(),
                capacity,
                in_flight,
                retry_after_ms,
                waited_ms: millis(waited),
            },
            Refusal::Unavailable {
                next_available_ms,
                now_ms,
            } => SchedulerError::KeysUnavailable {
                pool: pool.to_owned(),
                next_available_ms,
                now_ms,
            },
            Refusal::NoEligibleKey => SchedulerError::NoEligibleKey {
                pool: pool.to_owned(),
                keys: self.keys_per_pool.get(pool).copied().unwrap_or(0),
            },
            Refusal::QueuedElsewhere { class } => SchedulerError::QueuedElsewhere {
                pool: pool.to_owned(),
                class: class.as_str().to_ascii_uppercase(),
                retry_after_ms: millis(self.poll).max(RETRY_HINT_MIN_MS),
                waited_ms: millis(waited),
            },
            Refusal::BatchShare {
                limit,
                in_flight,
                retry_after_ms,
            } => SchedulerError::BatchShareFull {
                pool: pool.to_owned(),
                limit,
                in_flight,
                retry_after_ms,
                waited_ms: millis(waited),
            },
            Refusal::Recovering { until_ms, now_ms } => SchedulerError::Recovering {
                pool: pool.to_owned(),
                resumes_in_ms: u64::try_from(until_ms - now_ms).unwrap_or(0),
            },
        }
    }

    /// Admits `request` (module doc). `on_wait` runs once, when the request joins the pool's
    /// line (the gRPC edge uses it to stop counting the request against
    /// `--max-concurrent-requests`).
    ///
    /// Errors: every refusal as its [`SchedulerError`] (`PoolFull` with the pool's real
    /// counts, `KeysUnavailable`, `NoEligibleKey`, `TooManyWaiters`, `WaitDeadline`,
    /// `ShuttingDown`, `Store`, `UnknownPool`).
    pub async fn acquire(
        &self,
        request: AcquireRequest,
        on_wait: impl FnOnce(),
    ) -> Result<(Lease, Granted), SchedulerError> {
        let AcquireRequest {
            mut params,
            wait,
            deadline,
            tenant,
        } = request;
        let class = params.priority;
        let pool = params.pool.clone();
        let queue = self
            .queues
            .get(&pool)
            .cloned()
            .ok_or_else(|| SchedulerError::UnknownPool {
                pool: pool.clone(),
                known: self
                    .specs
                    .iter()
                    .map(|s| s.pool.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        let start = Instant::now();
        let wait_end = start + wait;
        let (end, by_deadline) = match deadline {
            Some(d) if d < wait_end => (d, true),
            _ => (wait_end, false),
        };
        // Without waiters of this class or a better one ahead (or when not waiting at all) try
        // at once: a new arrival never jumps the line of its class or above.
        if wait.is_zero() || !queue.waiting_at_or_above(class) {
            match self.attempt(&queue, &mut params, true).await? {
                AcquireResult::Granted(lease) => return Ok((lease, Granted::Immediately)),
                AcquireResult::Refused(refusal) if wait.is_zero() || hopeless(&refusal, end) => {
                    return Err(self.refused(&pool, refusal, Duration::ZERO));
                }
                AcquireResult::Refused(_) => {}
            }
        }
        let ended = |last: Option<Refusal>| {
            let waited = start.elapsed();
            if by_deadline {
                return SchedulerError::WaitDeadline {
                    pool: pool.clone(),
                    waited_ms: millis(waited),
                };
            }
            match last.or_else(|| queue.last_refusal()) {
                Some(refusal) => self.refused(&pool, refusal, waited),
                None => SchedulerError::PoolFull {
                    pool: pool.clone(),
                    capacity: 0,
                    in_flight: 0,
                    retry_after_ms: millis(self.poll),
                    waited_ms: millis(waited),
                },
            }
        };
        // Declared before the waiter so it runs after the waiter has left the line.
        let _deregister = Deregister {
            admission: self,
            queue: &queue,
            pool: &pool,
            class,
        };
        let Some(waiting) = queue.join(self.max_waiters, class, &tenant) else {
            return Err(SchedulerError::TooManyWaiters {
                pool: pool.clone(),
                max_waiters: self.max_waiters,
            });
        };
        on_wait();
        // Registered before waiting, so a release through another replica that comes right
        // after finds this replica to wake.
        if let Some(registration) = self.registration(&queue, &pool, class) {
            registration.await;
        }
        // The head finds a store failure by itself: its own attempt fails within the store
        // timeout. Everyone behind it learns of that failure at once.
        let mut store_failures = queue.store_failures();
        let shutting_down = || SchedulerError::ShuttingDown { pool: pool.clone() };
        let mut last = None;
        loop {
            tokio::select! {
                // A store failure wins over becoming the head: the head would only find it
                // again, one store timeout later.
                biased;
                _ = store_failures.changed() => return Err(SchedulerError::Store(queue.last_store_error())),
                () = self.shutdown.cancelled() => return Err(shutting_down()),
                head = tokio::time::timeout_at(end, waiting.head()) => if head.is_err() {
                    return Err(ended(last));
                },
            }
            // The head: retry the store until a grant, or until a better waiter overtakes it.
            while waiting.is_head() {
                self.register_waiting(&queue, &pool, class);
                let notified = queue.freed().notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                match self.attempt(&queue, &mut params, false).await? {
                    AcquireResult::Granted(lease) => return Ok((lease, Granted::AfterWaiting)),
                    AcquireResult::Refused(refusal) if hopeless(&refusal, end) => {
                        return Err(self.refused(&pool, refusal, start.elapsed()));
                    }
                    AcquireResult::Refused(refusal) => last = Some(refusal),
                }
                if Instant::now() >= end {
                    return Err(ended(last));
                }
                tokio::select! {
                    () = &mut notified => {
                        // Overtaken meanwhile: pass the wake-up on to the new head.
                        if !waiting.is_head() {
                            queue.notify();
                        }
                    }
                    () = tokio::time::sleep(self.poll) => {}
                    () = tokio::time::sleep_until(end) => {}
                    () = self.shutdown.cancelled() => return Err(shutting_down()),
                }
            }
        }
    }
}

/// How long the store keeps this replica registered as a waiter of a pool without a renewal
/// (a killed replica's registration ends by itself).
const REGISTRATION_TTL: Duration = Duration::from_secs(3);

/// Withdraws the waiting registration when the last waiter of a pool leaves.
struct Deregister<'a> {
    admission: &'a Admission,
    queue: &'a WaitQueue,
    pool: &'a str,
    class: Priority,
}

impl Drop for Deregister<'_> {
    fn drop(&mut self) {
        self.admission
            .register_waiting(self.queue, self.pool, self.class);
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// True when waiting until `end` cannot turn `refusal` into a grant: no key is eligible, every
/// eligible key is disabled, the first cooling key returns only after `end`, or the recovery
/// window ends only after `end`. Such an
/// Acquire answers at once instead of holding the caller (and a request slot) until its
/// deadline.
fn hopeless(refusal: &Refusal, end: Instant) -> bool {
    match refusal {
        Refusal::NoEligibleKey
        | Refusal::Unavailable {
            next_available_ms: None,
            ..
        } => true,
        Refusal::Unavailable {
            next_available_ms: Some(t),
            now_ms,
        }
        | Refusal::Recovering {
            until_ms: t,
            now_ms,
        } => {
            let back_in = Duration::from_millis(u64::try_from(t - now_ms).unwrap_or(0));
            Instant::now() + back_in > end
        }
        Refusal::Full { .. } | Refusal::BatchShare { .. } | Refusal::QueuedElsewhere { .. } => {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_refusals_that_a_wait_cannot_change_are_hopeless() {
        let end = Instant::now() + Duration::from_secs(1);
        assert!(hopeless(&Refusal::NoEligibleKey, end));
        let disabled = Refusal::Unavailable {
            next_available_ms: None,
            now_ms: 0,
        };
        assert!(hopeless(&disabled, end));
        let back_soon = Refusal::Unavailable {
            next_available_ms: Some(100),
            now_ms: 0,
        };
        assert!(!hopeless(&back_soon, end));
        let back_late = Refusal::Unavailable {
            next_available_ms: Some(60_000),
            now_ms: 0,
        };
        assert!(hopeless(&back_late, end));
        let full = Refusal::Full {
            capacity: 1,
            in_flight: 1,
            retry_after_ms: 10,
        };
        assert!(!hopeless(&full, end));
        let recovering_briefly = Refusal::Recovering {
            until_ms: 200,
            now_ms: 0,
        };
        assert!(!hopeless(&recovering_briefly, end));
        let recovering_long = Refusal::Recovering {
            until_ms: 5_000,
            now_ms: 0,
        };
        assert!(hopeless(&recovering_long, end));
    }
}
