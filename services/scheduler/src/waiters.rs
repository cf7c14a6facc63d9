//! FIFO waiting for a free slot (invariant 4: not silent when full).
//!
//! One queue per pool. Waiters line up on a fair `tokio::sync::Mutex` (FIFO by design);
//! only the head retries the store, woken by a release on this replica or by a bounded poll
//! (which catches releases on other replicas). Dropping a waiter (client cancelled, deadline)
//! removes it from the line and leaves nothing behind.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use tokio::sync::{Mutex, MutexGuard, Notify};

/// A pool's line of waiting acquirers.
#[derive(Debug, Default)]
pub(crate) struct WaitQueue {
    turn: Mutex<()>,
    freed: Notify,
    waiting: AtomicUsize,
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

    /// Joins the line (counted until the guard drops).
    pub(crate) fn join(&self) -> Waiting<'_> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        Waiting(self)
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
