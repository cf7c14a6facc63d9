//! This replica's side of a pool's line (invariant 4 of docs/ARCHITECTURE.md: not silent when full), bounded so that
//! no number of waiters can keep the service from answering (invariant 10).
//!
//! The line itself, its order and its hand-overs live in the store (`store` module doc, "The
//! line"), shared by every replica. Here, per pool, is what this replica needs to wait on it:
//! a registry of its waiting requests by ticket token, each with a channel on which the
//! request learns what happened to its ticket ([`Event`]: a slot was handed to it, or its
//! ticket is gone). The domain's announcement listener and the pool's poll
//! ([`crate::domain`]) write those events; the waiting request reads them.
//!
//! Bounds and shared knowledge:
//! - at most `scheduler.max_waiters` wait on this replica at once ([`WaitQueue::join`]
//!   refuses one more);
//! - a store failure seen by any call for the pool is broadcast to every waiter
//!   ([`WaitQueue::saw`]), so during a Redis stall the whole line answers UNAVAILABLE within
//!   one store timeout instead of one waiter per timeout;
//! - the last refusal any attempt saw ([`WaitQueue::last_refusal`]) lets a waiter report the
//!   pool's real capacity and in-flight counts when its wait ends.
//!
//! Invariant: a waiter's registry entry exists exactly while its [`Waiting`] guard lives;
//! requests sharing a token (an idempotent retry while the first try still waits) share it.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex as StdMutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
};

use tokio::sync::watch;

use crate::{
    model::{AcquireResult, LeaseToken, Refusal},
    store::StoreError,
};

/// What happened to a waiting request's ticket.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Event {
    /// Nothing yet.
    Waiting,
    /// A slot was handed to it (announced, or found by the pool's poll): claim it.
    Handed,
    /// The store no longer holds its ticket: join the line again.
    Gone,
}

/// One token's entry in the registry.
#[derive(Debug)]
struct Entry {
    events: watch::Sender<Event>,
    /// Waiters sharing the token.
    waiters: usize,
}

/// This replica's waiting requests of one pool.
#[derive(Debug)]
pub(crate) struct WaitQueue {
    entries: StdMutex<HashMap<String, Entry>>,
    /// Whether the pool's poll task runs (see [`WaitQueue::start_polling`]).
    polling: AtomicBool,
    /// Bumped on every store failure; the reason of the last one (its `Unavailable` text) beside it.
    store_failures: watch::Sender<u64>,
    last_store_error: StdMutex<String>,
    last_refusal: StdMutex<Option<Refusal>>,
}

impl Default for WaitQueue {
    fn default() -> Self {
        Self {
            entries: StdMutex::new(HashMap::new()),
            polling: AtomicBool::new(false),
            store_failures: watch::channel(0).0,
            last_store_error: StdMutex::new(String::new()),
            last_refusal: StdMutex::new(None),
        }
    }
}

/// A request's place in this replica's registry while it waits; dropping it leaves.
pub(crate) struct Waiting<'a> {
    queue: &'a WaitQueue,
    token: String,
    events: watch::Receiver<Event>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut entries = self.queue.lock();
        if let Some(entry) = entries.get_mut(&self.token) {
            entry.waiters = entry.waiters.saturating_sub(1);
            if entry.waiters == 0 {
                entries.remove(&self.token);
            }
        }
    }
}

impl Waiting<'_> {
    /// The next event for this request (waits for one).
    pub(crate) async fn next(&mut self) -> Event {
        if self.events.changed().await.is_err() {
            // The entry is held by this guard, so its sender lives: unreachable in practice.
            return Event::Gone;
        }
        self.events.borrow_and_update().clone()
    }
}

impl WaitQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Requests currently waiting on this replica.
    pub(crate) fn waiting(&self) -> usize {
        self.lock().values().map(|e| e.waiters).sum()
    }

    /// Registers a request waiting under `token` (removed when the guard drops), or `None`
    /// when `max` already wait.
    pub(crate) fn join(&self, max: usize, token: &LeaseToken) -> Option<Waiting<'_>> {
        let mut entries = self.lock();
        if entries.values().map(|e| e.waiters).sum::<usize>() >= max {
            return None;
        }
        let entry = entries
            .entry(token.as_str().to_owned())
            .or_insert_with(|| Entry {
                events: watch::channel(Event::Waiting).0,
                waiters: 0,
            });
        entry.waiters += 1;
        let events = entry.events.subscribe();
        Some(Waiting {
            queue: self,
            token: token.as_str().to_owned(),
            events,
        })
    }

    /// The tokens of every request waiting here.
    pub(crate) fn tokens(&self) -> Vec<LeaseToken> {
        self.lock()
            .keys()
            .filter_map(|t| LeaseToken::parse(t))
            .collect()
    }

    /// Tells the requests waiting under `token` what happened to their ticket. False when
    /// none waits here any more (a lease in `event` is then nobody's).
    pub(crate) fn tell(&self, token: &str, event: Event) -> bool {
        match self.lock().get(token) {
            Some(entry) => {
                entry.events.send_replace(event);
                true
            }
            None => false,
        }
    }

    /// Marks the pool's poll task as running; false when it already runs.
    pub(crate) fn start_polling(&self) -> bool {
        !self.polling.swap(true, Ordering::AcqRel)
    }

    /// Lets the poll task end when nobody waits: true when it should end (and it is then
    /// marked stopped, so the next waiter starts it again).
    pub(crate) fn stop_polling_if_idle(&self) -> bool {
        let entries = self.lock();
        if entries.is_empty() {
            self.polling.store(false, Ordering::Release);
            true
        } else {
            false
        }
    }

    /// Remembers what a store call for the pool answered: a refusal (for waiters that end
    /// without their own attempt) or a store failure (broadcast to every waiter).
    pub(crate) fn saw(&self, result: &Result<AcquireResult, StoreError>) {
        match result {
            Ok(AcquireResult::Granted(_)) => {}
            Ok(AcquireResult::Refused(refusal) | AcquireResult::Queued(refusal)) => {
                *self
                    .last_refusal
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(refusal.clone());
            }
            Err(e) => self.saw_error(e),
        }
    }

    /// Broadcasts `e` to every waiter if it says the store is unreachable.
    pub(crate) fn saw_error(&self, e: &StoreError) {
        if let StoreError::Unavailable(message) = e {
            message.clone_into(
                &mut self
                    .last_store_error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            );
            self.store_failures.send_modify(|n| *n += 1);
        }
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

    /// The last refusal a call for this pool saw, if any.
    pub(crate) fn last_refusal(&self) -> Option<Refusal> {
        self.last_refusal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Every pool's queue, fixed at start-up from the config.
#[derive(Clone, Debug, Default)]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_bounds_the_waiters_and_dropping_a_guard_leaves() {
        let q = WaitQueue::default();
        let (a, b) = (LeaseToken::random(), LeaseToken::random());
        let first = q.join(2, &a).expect("room");
        let again = q.join(2, &a).expect("room: a retry shares the token");
        assert!(q.join(2, &b).is_none(), "max_waiters");
        assert_eq!(q.waiting(), 2);
        assert_eq!(q.tokens(), vec![a.clone()]);
        drop(first);
        assert!(q.tell(a.as_str(), Event::Handed), "the retry still waits");
        drop(again);
        assert!(!q.tell(a.as_str(), Event::Handed), "nobody waits under it");
        assert_eq!(q.waiting(), 0);
    }

    #[tokio::test]
    async fn a_waiter_hears_what_happened_to_its_ticket() {
        let q = WaitQueue::default();
        let token = LeaseToken::random();
        let mut w = q.join(10, &token).expect("room");
        assert!(q.tell(token.as_str(), Event::Gone));
        assert_eq!(w.next().await, Event::Gone);
    }

    #[test]
    fn the_poll_task_stops_only_when_nobody_waits() {
        let q = WaitQueue::default();
        assert!(q.start_polling());
        assert!(!q.start_polling(), "already running");
        let token = LeaseToken::random();
        let w = q.join(10, &token).expect("room");
        assert!(!q.stop_polling_if_idle());
        drop(w);
        assert!(q.stop_polling_if_idle());
        assert!(q.start_polling(), "the next waiter starts it again");
    }
}
