//! Admission: how an Acquire becomes a lease, on domain types only (no protobuf here).
//!
//! Owns the waiting policy of invariant 4 ("not silent when full"): an Acquire that may wait
//! and is refused joins the pool's line in the store in the same step (`store` module doc,
//! "The line": one line per pool across replicas, by class, tenant round-robin, arrival), then
//! waits for the store to hand it a slot: announced at once ([`LeaseStore::handovers`]) and
//! claimed, or found by the pool's poll, which also keeps this replica's tickets alive. The
//! wait ends in a grant, at the wait's end or the caller's deadline, on a store failure, or
//! on shutdown; a wait that cannot end in a grant (no eligible key, every key disabled, the
//! first cooldown ending after the wait) answers at once.
//!
//! Also owns the safety nets of invariant 3 ("no leaks"): a grant whose caller went away
//! mid-call is released at once ([`UndoGrant`]; not an idempotent one, which its caller's
//! retry claims); a request that stops waiting leaves the line at once and releases a slot
//! handed to it meanwhile ([`Leave`]); and a store that lost a pool (Redis restarted empty)
//! is re-seeded from the config before the attempt is retried.

use std::{collections::HashMap, sync::Arc, time::Duration};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use voxpool_config::SchedulerSettings;

use crate::{
    error::SchedulerError,
    model::{
        AcquireParams, AcquireResult, Lease, LeaseId, LeaseToken, PoolSpec, PoolStatus, Refusal,
        TicketState,
    },
    store::{LeaseStore, StoreError},
    waiters::{Event, WaitQueue, WaitQueues},
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
    specs: Vec<PoolSpec>,
    keys_per_pool: HashMap<String, usize>,
    queues: WaitQueues,
    poll: Duration,
    /// `scheduler.line_ticket_ttl_ms`.
    ticket_ttl_ms: u64,
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
        Self {
            queues,
            keys_per_pool: specs
                .iter()
                .map(|s| (s.pool.clone(), s.keys.len()))
                .collect(),
            specs,
            store,
            poll: Duration::from_millis(settings.wait_poll_ms),
            ticket_ttl_ms: settings.line_ticket_ttl_ms,
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

    /// One store attempt, undone if the caller goes away mid-call. What it answered is
    /// shared with the pool's waiters (`queue`).
    ///
    /// An idempotent attempt is never undone: its caller retries with the same key and is
    /// answered this very lease (possibly through another replica, after a store failover
    /// replicated it), so releasing it here would free a slot the caller is using. Left
    /// unclaimed, it ends at its TTL: a slot held a while, never a slot leased twice.
    async fn attempt(
        &self,
        queue: &WaitQueue,
        params: &AcquireParams,
    ) -> Result<AcquireResult, StoreError> {
        let mut undo = UndoGrant {
            store: self.store.clone(),
            id: (!params.idempotent).then(|| params.lease_id()),
        };
        let mut result = self.store.acquire(params).await;
        if let Err(StoreError::NotSeeded(pool)) = &result {
            // The store lost the pool (e.g. Redis restarted empty): seed again, retry once.
            self.reseed(pool).await?;
            result = self.store.acquire(params).await;
        }
        // Keep the undo armed when the store failed: a timed-out script may still run later
        // and grant this token to nobody. A queued attempt is undone by `Leave` instead.
        if result.is_ok() {
            undo.id = None;
        }
        queue.saw(&result);
        result
    }

    /// Claims the slot the store announced for `token`.
    async fn claim(
        &self,
        queue: &WaitQueue,
        pool: &str,
        token: &LeaseToken,
    ) -> Result<TicketState, StoreError> {
        let result = self.store.claim(pool, token, self.ticket_ttl_ms).await;
        match result {
            Ok(state) => Ok(state),
            // The store lost the pool with its line: join it again (that re-seeds).
            Err(StoreError::NotSeeded(_)) => Ok(TicketState::Gone),
            Err(e) => {
                queue.saw_error(&e);
                Err(e)
            }
        }
    }

    /// Starts `pool`'s poll task unless it runs: while this replica has waiters of the pool
    /// it hands over slots no call announced (expiries, ended cooldowns), tells waiters of
    /// slots whose announcement was lost (they claim them themselves), and renews this
    /// replica's tickets every third of `scheduler.line_ticket_ttl_ms`. It ends when the pool
    /// has no waiters here.
    fn poll_line(&self, queue: &Arc<WaitQueue>, pool: &str) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if !queue.start_polling() {
            return;
        }
        let (store, queue, pool) = (self.store.clone(), queue.clone(), pool.to_owned());
        let (poll, stop, ttl) = (self.poll, self.shutdown.clone(), self.ticket_ttl_ms);
        let renew_every = Duration::from_millis(ttl / 3);
        // Renewals are due every third of the ticket TTL even when the poll is longer.
        let pause = poll.min(renew_every);
        runtime.spawn(async move {
            let mut renewed = Instant::now();
            loop {
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = stop.cancelled() => return,
                }
                if queue.stop_polling_if_idle() {
                    return;
                }
                let tokens = if renewed.elapsed() >= renew_every {
                    renewed = Instant::now();
                    queue.tokens()
                } else {
                    Vec::new()
                };
                match store.keep_waiting(&pool, &tokens, ttl).await {
                    Ok(states) => {
                        for (token, state) in tokens.iter().zip(states) {
                            let event = match state {
                                TicketState::Waiting | TicketState::Granted(_) => continue,
                                // The announcement was lost: the waiter claims it now.
                                TicketState::Handed => Event::Handed,
                                TicketState::Gone => Event::Gone,
                            };
                            queue.tell(token.as_str(), event);
                        }
                    }
                    Err(StoreError::NotSeeded(_)) => {
                        for token in queue.tokens() {
                            queue.tell(token.as_str(), Event::Gone);
                        }
                    }
                    Err(e) => {
                        tracing::debug!(pool = %pool, error = %e, "the line's poll failed");
                        queue.saw_error(&e);
                    }
                }
            }
        });
    }

    fn refused(&self, pool: &str, refusal: Refusal, waited: Duration) -> SchedulerError {
        match refusal {
            Refusal::Full {
                capacity,
                in_flight,
                retry_after_ms,
                quota_short,
            } => SchedulerError::PoolFull {
                pool: pool.to_owned(),
                capacity,
                in_flight,
                retry_after_ms,
                waited_ms: millis(waited),
                quota_short,
            },
            Refusal::Unavailable {
                next_available_ms,
                now_ms,
            } => SchedulerError::KeysUnavailable {
                pool: pool.to_owned(),
                next_available_ms,
                now_ms,
                over_quota: Vec::new(),
            },
            Refusal::NoEligibleKey => SchedulerError::NoEligibleKey {
                pool: pool.to_owned(),
                keys: self.keys_per_pool.get(pool).copied().unwrap_or(0),
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
    /// counts, `BatchShareFull`, `KeysUnavailable`, `NoEligibleKey`,
    /// `TooManyWaiters`, `WaitDeadline`, `ShuttingDown`, `Store`, `UnknownPool`).
    pub async fn acquire(
        &self,
        request: AcquireRequest,
        on_wait: impl FnOnce(),
    ) -> Result<(Lease, Granted), SchedulerError> {
        let AcquireRequest {
            mut params,
            wait,
            deadline,
        } = request;
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
        if !params.idempotent {
            params.token = LeaseToken::random();
        }
        // Room on this replica to wait, taken before the store may queue the request. Without
        // it (`max_waiters` already wait here) the request may still take a free slot.
        let mut waiting = if wait.is_zero() {
            None
        } else {
            queue.join(self.max_waiters, &params.token)
        };
        let over_max = !wait.is_zero() && waiting.is_none();
        params.join_line = waiting.is_some();
        params.ticket_ttl_ms = self.ticket_ttl_ms;
        let mut leave = Leave {
            store: self.store.clone(),
            pool: pool.clone(),
            token: params.token.clone(),
            keep_lease: params.idempotent,
            armed: params.join_line,
        };
        let mut last = match self.attempt(&queue, &params).await {
            Ok(AcquireResult::Granted(lease)) => {
                leave.armed = false;
                return Ok((lease, Granted::Immediately));
            }
            Ok(AcquireResult::Refused(_)) if over_max => {
                return Err(SchedulerError::TooManyWaiters {
                    pool: pool.clone(),
                    max_waiters: self.max_waiters,
                });
            }
            Ok(AcquireResult::Refused(refusal)) => {
                leave.armed = false;
                return Err(self.refused(&pool, refusal, Duration::ZERO));
            }
            Ok(AcquireResult::Queued(refusal)) if hopeless(&refusal, end) => {
                return Err(self.refused(&pool, refusal, Duration::ZERO));
            }
            Ok(AcquireResult::Queued(refusal)) => refusal,
            Err(e) => return Err(e.into()),
        };
        let Some(waiting) = waiting.as_mut() else {
            // Queued without waiting: the store answered what was not asked.
            return Err(self.refused(&pool, last, Duration::ZERO));
        };
        on_wait();
        self.poll_line(&queue, &pool);
        let ended = |last: Refusal| {
            let waited = start.elapsed();
            if by_deadline {
                return SchedulerError::WaitDeadline {
                    pool: pool.clone(),
                    waited_ms: millis(waited),
                };
            }
            self.refused(&pool, queue.last_refusal().unwrap_or(last), waited)
        };
        let mut store_failures = queue.store_failures();
        let shutting_down = || SchedulerError::ShuttingDown { pool: pool.clone() };
        loop {
            let event = tokio::select! {
                // A store failure wins: the next call would only find it again, one store
                // timeout later.
                biased;
                _ = store_failures.changed() => return Err(SchedulerError::Store(queue.last_store_error())),
                () = self.shutdown.cancelled() => return Err(shutting_down()),
                () = tokio::time::sleep_until(end) => return Err(ended(last)),
                event = waiting.next() => event,
            };
            let state = match event {
                Event::Waiting => continue,
                Event::Gone => TicketState::Gone,
                Event::Handed => self.claim(&queue, &pool, &params.token).await?,
            };
            match state {
                // `claim` never answers Handed.
                TicketState::Waiting | TicketState::Handed => {}
                TicketState::Granted(lease) => {
                    leave.armed = false;
                    return Ok((lease, Granted::AfterWaiting));
                }
                // The ticket expired (this replica stalled) or the store lost it: join again.
                TicketState::Gone => match self.attempt(&queue, &params).await? {
                    AcquireResult::Granted(lease) => {
                        leave.armed = false;
                        return Ok((lease, Granted::AfterWaiting));
                    }
                    AcquireResult::Queued(refusal) if !hopeless(&refusal, end) => last = refusal,
                    AcquireResult::Refused(refusal) | AcquireResult::Queued(refusal) => {
                        return Err(self.refused(&pool, refusal, start.elapsed()));
                    }
                },
            }
        }
    }
}

/// Takes a request that stops waiting out of the pool's line, releasing a slot handed to it
/// meanwhile (unless `keep_lease`: an idempotent request's retry claims it), unless disarmed.
/// Runs in the background: a lost call only leaves the ticket until it expires.
struct Leave {
    store: Arc<dyn LeaseStore>,
    pool: String,
    token: LeaseToken,
    keep_lease: bool,
    armed: bool,
}

impl Drop for Leave {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, pool, token, keep) = (
            self.store.clone(),
            std::mem::take(&mut self.pool),
            self.token.clone(),
            self.keep_lease,
        );
        runtime.spawn(async move {
            if let Err(e) = store.leave(&pool, &token, keep).await {
                tracing::debug!(pool = %pool, error = %e, "could not leave the line; the ticket expires by itself");
            }
        });
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
        Refusal::Full { .. } | Refusal::BatchShare { .. } => false,
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
            quota_short: 0,
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
