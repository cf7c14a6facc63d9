//! Admission: how an Acquire becomes a lease ([`Scheduler::acquire`]).
//!
//! Owns the waiting policy of invariant 4 of docs/ARCHITECTURE.md ("not silent when full"): an Acquire that may wait
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
//! is re-seeded from the config before the attempt is retried (`super` doc).

use std::{sync::Arc, time::Duration};

use tokio::time::Instant;

use super::Scheduler;
use crate::{
    error::SchedulerError,
    model::{AcquireParams, AcquireResult, Lease, LeaseId, LeaseToken, Refusal, TicketState},
    store::{LeaseStore, StoreError},
    waiters::{Event, WaitQueue},
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
    /// Who the request speaks for, besides `params.tenant` (a client token, mTLS subject or
    /// HTTP key name; empty = none): budgets may cover callers (`budget` module).
    pub caller: String,
    /// The pack's tier: budgets limited to tiers cover only those (`None`: no tier list).
    pub tier: Option<voxpool_domain::snapshot::Tier>,
    /// The cost the call may reach (millionths), reserved against budgets with a cost.
    pub cost_micros: u64,
    /// What the whole request needs (its other calls included): budgets must have it left,
    /// though only this call's characters and cost are reserved (`budget` module). Zero =
    /// this call's.
    pub request_characters: u64,
    /// The same for cost (millionths).
    pub request_cost_micros: u64,
}

/// How an Acquire got its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Granted {
    /// At once.
    Immediately,
    /// After waiting in the pool's line.
    AfterWaiting,
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

impl Scheduler {
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
                quota_keys: Vec::new(),
                characters: 0,
            },
            Refusal::Unavailable {
                next_available_ms,
                now_ms,
            } => SchedulerError::KeysUnavailable {
                pool: pool.to_owned(),
                next_available_ms,
                now_ms,
                over_quota: Vec::new(),
                characters: 0,
            },
            Refusal::NoEligibleKey => SchedulerError::NoEligibleKey {
                pool: pool.to_owned(),
                keys: self.pools.get(pool).map_or(0, super::PoolEntry::key_count),
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

    /// Admits `request` (module doc) under its token. `on_wait` runs once, when the request
    /// joins the pool's line (the gRPC edge uses it to stop counting the request against
    /// `--max-concurrent-requests`).
    ///
    /// Errors: every refusal as its [`SchedulerError`] (`PoolFull` with the pool's real
    /// counts, `BatchShareFull`, `KeysUnavailable`, `NoEligibleKey`, `TooManyWaiters`,
    /// `WaitDeadline`, `ShuttingDown`, `Store`, `UnknownPool`).
    pub(super) async fn admit(
        &self,
        request: AcquireRequest,
        on_wait: impl FnOnce(),
    ) -> Result<(Lease, Granted), SchedulerError> {
        let AcquireRequest {
            mut params,
            wait,
            deadline,
            ..
        } = request;
        let pool = params.pool.clone();
        let queue = self
            .queues
            .get(&pool)
            .cloned()
            .ok_or_else(|| SchedulerError::UnknownPool {
                pool: pool.clone(),
                known: self.pools.names().to_owned(),
            })?;
        let start = Instant::now();
        let wait_end = start + wait;
        let (end, by_deadline) = match deadline {
            Some(d) if d < wait_end => (d, true),
            _ => (wait_end, false),
        };
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
