//! FIFO waiting for a free slot (invariant 4: not silent when full), bounded so that no number
//! of waiters can keep the service from answering (invariant 10).
//!
//! One queue per pool. Waiters line up on a fair `tokio::sync::Mutex` (FIFO by design);
//! only the head retries the store, woken by a release on this replica or by a bounded poll
//! (which catches releases on other replicas). Dropping a waiter (client cancelled, deadline)
//! removes it from the line and leaves nothing behind.
//!
//! Bounds and shared knowledge of the line:
//! - at most `scheduler.max_waiters` wait at once ([`WaitQueue::join`] refuses one more);
//! - a store failure seen by any attempt of the pool is broadcast to every waiter
//!   ([`WaitQueue::store_failed`]), so during a Redis stall the whole line answers UNAVAILABLE
//!   within one store timeout instead of one waiter per timeout;
//! - the last refusal any attempt saw ([`WaitQueue::last_refusal`]) lets a waiter that never
//!   reached the head report the pool's real capacity and in-flight counts.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex as StdMutex, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
};

use tokio::sync::{Mutex, MutexGuard, Notify, watch};

use crate::{
    model::{AcquireResult, Refusal},
    store::StoreError,
};

/// A pool's line of waiting acquirers.
#[derive(Debug)]
pub(crate) struct WaitQueue {
    turn: Mutex<()>,
    freed: Notify,
    waiting: AtomicUsize,
    /// Bumped on every store failure; the reason of the last one (its `Unavailable` text) beside it.
    store_failures: watch::Sender<u64>,
    last_store_error: StdMutex<String>,
    last_refusal: StdMutex<Option<Refusal>>,
}

impl Default for WaitQueue {
    fn default() -> Self {
        Self {
            turn: Mutex::new(()),
            freed: Notify::new(),
            waiting: AtomicUsize::new(0),
            store_failures: watch::channel(0).0,
            last_store_error: StdMutex::new(String::new()),
            last_refusal: StdMutex::new(None),
        }
    }
}

/// Counts a waiter while alive.
pub(crate) struct Waiting<'a>(&'a WaitQueue);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

impl WaitQueue {
    /// Number of requests currently waiting.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// Joins the line (counted until the guard drops), or `None` when `max` already wait.
    pub(crate) fn join(&self, max: usize) -> Option<Waiting<'_>> {
        self.waiting
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Waiting(self))
    }

    /// Waits for this waiter's turn at the head of the line.
    pub(crate) async fn head(&self) -> MutexGuard<'_, ()> {
        self.turn.lock().await
    }

    /// The head's wake-up signal.
    pub(crate) fn freed(&self) -> &Notify {
        &self.freed
    }

    /// Signals that a slot may have freed up.
    pub(crate) fn notify(&self) {
        self.freed.notify_one();
    }

    /// Remembers what an attempt on the pool answered: a refusal (for waiters that end
    /// without their own attempt) or a store failure (broadcast to every waiter).
    pub(crate) fn saw(&self, result: &Result<AcquireResult, StoreError>) {
        match result {
            Ok(AcquireResult::Granted(_)) => {}
            Ok(AcquireResult::Refused(refusal)) => {
                *self
                    .last_refusal
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(refusal.clone());
            }
            Err(StoreError::Unavailable(message)) => self.store_failed(message),
            Err(_) => {}
        }
    }

    /// Tells every waiter of the pool that the store is unreachable (`message` says why).
    fn store_failed(&self, message: &str) {
        message.clone_into(
            &mut self
                .last_store_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        self.store_failures.send_modify(|n| *n += 1);
    }

    /// A receiver that changes on the next store failure (subscribe before waiting).
    pub(crate) fn store_failures(&self) -> watch::Receiver<u64> {
        self.store_failures.subscribe()
    }

    /// The last store failure, as a store error for the caller.
    pub(crate) fn last_store_error(&self) -> StoreError {
        StoreError::Unavailable(
            self.last_store_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }

    /// The last refusal an attempt on this pool saw, if any.
    pub(crate) fn last_refusal(&self) -> Option<Refusal> {
        self.last_refusal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Every pool's queue, fixed at start-up from the config.
#[derive(Debug, Default)]
pub(crate) struct WaitQueues(HashMap<String, Arc<WaitQueue>>);

impl WaitQueues {
    pub(crate) fn new<'a>(pools: impl IntoIterator<Item = &'a str>) -> Self {
        Self(
            pools
                .into_iter()
                .map(|p| (p.to_owned(), Arc::default()))
                .collect(),
        )
    }

    pub(crate) fn get(&self, pool: &str) -> Option<&Arc<WaitQueue>> {
        self.0.get(pool)
    }
}
