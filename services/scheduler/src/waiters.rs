//! Waiting for a free slot (invariant 4: not silent when full), in priority order, bounded so
//! that no number of waiters can keep the service from answering (invariant 10).
//!
//! One line per pool on this replica. Order: traffic class first (INTERACTIVE, STANDARD,
//! BATCH), then round-robin across tenants inside a class, then arrival order inside a tenant.
//! Round-robin is start-time fair queueing: a waiter's *round* is one past its tenant's last
//! waiter still in line, but never behind the round the class is serving, so a tenant with a
//! long backlog holds rounds r, r+1, r+2, ... while another tenant's single request gets the
//! current round and goes before most of that backlog. Only the head of the line retries the
//! store, woken by a release on this replica or by a bounded poll (which catches releases on
//! other replicas); a waiter that a better one overtakes stops retrying until it is the head
//! again. Dropping a waiter (client cancelled, deadline) removes it from the line at once and
//! hands the head to the next one.
//!
//! Bounds and shared knowledge of the line:
//! - at most `scheduler.max_waiters` wait at once ([`WaitQueue::join`] refuses one more);
//! - a store failure seen by any attempt of the pool is broadcast to every waiter
//!   ([`WaitQueue::store_failed`]), so during a Redis stall the whole line answers UNAVAILABLE
//!   within one store timeout instead of one waiter per timeout;
//! - the last refusal any attempt saw ([`WaitQueue::last_refusal`]) lets a waiter that never
//!   reached the head report the pool's real capacity and in-flight counts.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex as StdMutex, PoisonError},
    time::Duration,
};

use tokio::sync::{Notify, watch};

use crate::{
    model::{AcquireResult, Priority, Refusal},
    store::StoreError,
};

/// Place of a waiter in the line: class, round, arrival number (lower is served first).
type Place = (Priority, u64, u64);

/// One waiter in the line.
#[derive(Debug)]
struct Entry {
    tenant: String,
    since: std::time::Instant,
    /// Woken when this waiter becomes the head.
    turn: Arc<Notify>,
}

/// The ordered line of one pool (module doc).
#[derive(Debug, Default)]
struct Line {
    next_seq: u64,
    entries: BTreeMap<Place, Entry>,
    /// Per class: the round of the last waiter that left the head (the round being served).
    serving_round: [u64; 3],
    /// Per (class, tenant) with waiters in line: (last round given, waiters in line).
    tenants: HashMap<(Priority, String), (u64, usize)>,
}

fn class_index(p: Priority) -> usize {
    match p {
        Priority::Interactive => 0,
        Priority::Standard => 1,
        Priority::Batch => 2,
    }
}

impl Line {
    fn insert(&mut self, class: Priority, tenant: &str) -> (Place, Arc<Notify>) {
        let serving = self.serving_round[class_index(class)];
        let slot = self
            .tenants
            .entry((class, tenant.to_owned()))
            .or_insert((serving, 0));
        let round = if slot.1 == 0 {
            serving
        } else {
            (slot.0 + 1).max(serving)
        };
        *slot = (round, slot.1 + 1);
        let place = (class, round, self.next_seq);
        self.next_seq += 1;
        let turn = Arc::new(Notify::new());
        self.entries.insert(
            place,
            Entry {
                tenant: tenant.to_owned(),
                since: std::time::Instant::now(),
                turn: turn.clone(),
            },
        );
        (place, turn)
    }

    fn remove(&mut self, place: &Place) {
        let was_head = self.entries.keys().next() == Some(place);
        let Some(entry) = self.entries.remove(place) else {
            return;
        };
        let (class, round, _) = *place;
        if was_head {
            let served = &mut self.serving_round[class_index(class)];
            *served = (*served).max(round);
        }
        let key = (class, entry.tenant);
        if let Some(slot) = self.tenants.get_mut(&key) {
            slot.1 = slot.1.saturating_sub(1);
            if slot.1 == 0 {
                self.tenants.remove(&key);
            }
        }
        if was_head && let Some(next) = self.entries.values().next() {
            next.turn.notify_one();
        }
    }

    fn is_head(&self, place: &Place) -> bool {
        self.entries.keys().next() == Some(place)
    }
}

/// Waiters of one class on this replica.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassWaiting {
    /// How many wait.
    pub waiters: usize,
    /// How long the longest-waiting one has waited.
    pub oldest: Duration,
}

/// A pool's line of waiting acquirers.
#[derive(Debug)]
pub(crate) struct WaitQueue {
    line: StdMutex<Line>,
    freed: Notify,
    /// Per class: until when the store holds this replica's registration as a waiter of the
    /// pool (see [`WaitQueue::registration_due`]); `None` while not registered.
    registered_until: StdMutex<[Option<std::time::Instant>; 3]>,
    /// Bumped on every store failure; the reason of the last one (its `Unavailable` text) beside it.
    store_failures: watch::Sender<u64>,
    last_store_error: StdMutex<String>,
    last_refusal: StdMutex<Option<Refusal>>,
}

impl Default for WaitQueue {
    fn default() -> Self {
        Self {
            line: StdMutex::new(Line::default()),
            freed: Notify::new(),
            registered_until: StdMutex::new([None; 3]),
            store_failures: watch::channel(0).0,
            last_store_error: StdMutex::new(String::new()),
            last_refusal: StdMutex::new(None),
        }
    }
}

/// A waiter's place in the line while alive; dropping it leaves the line.
pub(crate) struct Waiting<'a> {
    queue: &'a WaitQueue,
    place: Place,
    turn: Arc<Notify>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.queue.lock().remove(&self.place);
    }
}

impl Waiting<'_> {
    /// Whether this waiter is the head of the line now.
    pub(crate) fn is_head(&self) -> bool {
        self.queue.lock().is_head(&self.place)
    }

    /// Returns once this waiter is the head of the line.
    pub(crate) async fn head(&self) {
        loop {
            let notified = self.turn.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_head() {
                return;
            }
            notified.await;
        }
    }
}

impl WaitQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Line> {
        self.line.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Number of requests currently waiting.
    pub(crate) fn waiting(&self) -> usize {
        self.lock().entries.len()
    }

    /// Waiters of each class (INTERACTIVE, STANDARD, BATCH order) and their longest wait.
    pub(crate) fn by_class(&self) -> [ClassWaiting; 3] {
        let line = self.lock();
        let mut out = [ClassWaiting::default(); 3];
        for ((class, _, _), entry) in &line.entries {
            let c = &mut out[class_index(*class)];
            c.waiters += 1;
            c.oldest = c.oldest.max(entry.since.elapsed());
        }
        out
    }

    /// Whether anyone of `class` or a class served before it waits (a new arrival of `class`
    /// must then queue instead of trying at once).
    pub(crate) fn waiting_at_or_above(&self, class: Priority) -> bool {
        self.lock()
            .entries
            .keys()
            .next()
            .is_some_and(|(c, _, _)| *c <= class)
    }

    /// Joins the line as `class` / `tenant` (removed when the guard drops), or `None` when
    /// `max` already wait.
    pub(crate) fn join(&self, max: usize, class: Priority, tenant: &str) -> Option<Waiting<'_>> {
        let mut line = self.lock();
        if line.entries.len() >= max {
            return None;
        }
        let (place, turn) = line.insert(class, tenant);
        Some(Waiting {
            queue: self,
            place,
            turn,
        })
    }

    /// Waiters of `class` in the line.
    fn waiting_in(&self, class: Priority) -> usize {
        self.lock()
            .entries
            .keys()
            .filter(|(c, _, _)| *c == class)
            .count()
    }

    /// Whether this replica's registration as a waiter of `class` should be (re)sent now:
    /// that class has waiters and the registration runs out within `refresh_before` (then it
    /// is counted as renewed for `ttl`). The caller sends it.
    pub(crate) fn registration_due(
        &self,
        class: Priority,
        ttl: Duration,
        refresh_before: Duration,
    ) -> bool {
        let now = std::time::Instant::now();
        let waiting = self.waiting_in(class);
        let mut until = self
            .registered_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let slot = &mut until[class_index(class)];
        if slot.is_some_and(|u| u > now + refresh_before) || waiting == 0 {
            return false;
        }
        *slot = Some(now + ttl);
        true
    }

    /// Whether the registration of `class` should be withdrawn now: nobody of it waits.
    pub(crate) fn deregistration_due(&self, class: Priority) -> bool {
        let waiting = self.waiting_in(class);
        let mut until = self
            .registered_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let slot = &mut until[class_index(class)];
        if slot.is_none() || waiting > 0 {
            return false;
        }
        *slot = None;
        true
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

    /// The order in which the line would serve its waiters: repeatedly remove the head.
    fn serving_order(
        q: &WaitQueue,
        waiters: Vec<(Waiting<'_>, &'static str)>,
    ) -> Vec<&'static str> {
        let mut waiters = waiters;
        let mut order = Vec::new();
        while !waiters.is_empty() {
            let i = waiters
                .iter()
                .position(|(w, _)| w.is_head())
                .expect("a head");
            let (w, name) = waiters.remove(i);
            drop(w);
            order.push(name);
        }
        assert_eq!(q.waiting(), 0);
        order
    }

    #[test]
    fn classes_go_first_then_tenants_round_robin_then_arrival_order() {
        let q = WaitQueue::default();
        let mut w = Vec::new();
        for name in ["b1", "b2", "b3"] {
            w.push((q.join(100, Priority::Batch, "bulk").expect("room"), name));
        }
        w.push((q.join(100, Priority::Standard, "app").expect("room"), "s1"));
        w.push((
            q.join(100, Priority::Interactive, "app").expect("room"),
            "i1",
        ));
        w.push((q.join(100, Priority::Batch, "other").expect("room"), "o1"));
        assert_eq!(
            serving_order(&q, w),
            ["i1", "s1", "b1", "o1", "b2", "b3"],
            "the other tenant's single BATCH request goes before the backlog's second"
        );
    }

    #[test]
    fn a_tenant_with_a_long_backlog_does_not_hold_back_a_newcomer() {
        let q = WaitQueue::default();
        let mut w = Vec::new();
        for _ in 0..50 {
            w.push((
                q.join(1000, Priority::Standard, "heavy").expect("room"),
                "heavy",
            ));
        }
        // Serve ten of the backlog, then a newcomer arrives.
        for _ in 0..10 {
            let i = w.iter().position(|(x, _)| x.is_head()).expect("head");
            drop(w.remove(i));
        }
        w.push((
            q.join(1000, Priority::Standard, "light").expect("room"),
            "light",
        ));
        let order = serving_order(&q, w);
        let at = order.iter().position(|n| *n == "light").expect("served");
        assert!(at <= 1, "the newcomer is served within one round, at {at}");
    }

    #[test]
    fn waiting_at_or_above_ignores_lower_classes_and_max_bounds_the_line() {
        let q = WaitQueue::default();
        let b = q.join(2, Priority::Batch, "").expect("room");
        assert!(!q.waiting_at_or_above(Priority::Interactive));
        assert!(q.waiting_at_or_above(Priority::Batch));
        let s = q.join(2, Priority::Standard, "").expect("room");
        assert!(
            q.join(2, Priority::Interactive, "").is_none(),
            "max_waiters"
        );
        assert!(q.waiting_at_or_above(Priority::Standard));
        let by = q.by_class();
        assert_eq!((by[0].waiters, by[1].waiters, by[2].waiters), (0, 1, 1));
        drop((b, s));
        assert_eq!(q.waiting(), 0);
    }

    #[tokio::test]
    async fn the_next_waiter_is_woken_when_the_head_leaves() {
        let q = Arc::new(WaitQueue::default());
        let first = q.join(10, Priority::Standard, "").expect("room");
        let q2 = q.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let second = q2.join(10, Priority::Standard, "").expect("room");
            tx.send(()).expect("send");
            second.head().await;
        });
        rx.await.expect("joined");
        assert!(first.is_head());
        drop(first);
        task.await.expect("second became the head");
    }
}
