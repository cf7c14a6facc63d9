//! Fill locks in the domain (docs/SCHEDULER.md "Fill locks"): AcquireFill's waiting policy,
//! RenewFill and ReleaseFill over the store's one-step calls (`store::fill`).
//!
//! Owns the waiting: a caller that finds the lock held waits (at most its `wait_ms`, capped by
//! its deadline at the edge) until that holder lets go, then answers RELEASED without taking
//! the lock (the caller re-reads its cache first). Invariant: RELEASED only once the store says
//! the holder seen at arrival no longer holds the key; never a grant the caller did not ask for.
//!
//! Wake-up: every release, on any replica, reaches [`FillWakers`] through the store's
//! announcements ([`FillLocks::fill_releases`](crate::store::FillLocks::fill_releases): an
//! in-process channel for the memory store, Redis pub/sub for the Redis store), which wakes
//! this replica's waiters for that key at once (a `tokio::sync::Notify` per key, armed before
//! the first look at the store, so a release between the look and the wait is not missed).
//! An announcement is a hint: a woken waiter asks the store who holds the key, and waiters
//! also look every [`SAFETY_POLL`] (a lost message) and when the holder's TTL ends (an expiry
//! is announced by nobody).
//!
//! Waiting fill requests count against `--max-concurrent-requests` (they do not step aside
//! as waiting Acquires do), which is what bounds them.

use std::{
    collections::HashMap,
    pin::pin,
    sync::{Arc, Mutex, PoisonError, Weak},
    time::Duration,
};

use tokio::{sync::Notify, time::Instant};

use super::Scheduler;
use crate::{
    error::SchedulerError,
    model::{FillId, FillKey, FillState},
};

/// How often a waiter looks at the store whatever the announcements say (a lost pub/sub
/// message costs at most this).
pub const SAFETY_POLL: Duration = Duration::from_millis(200);

/// What AcquireFill answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FillAnswer {
    /// The caller holds the lock for `ttl_ms`.
    Granted {
        /// Its token.
        fill_id: FillId,
        /// Its TTL (ms).
        ttl_ms: u64,
    },
    /// The holder seen at arrival let go (released, or its TTL ended) while the caller waited.
    Released,
    /// Still held when the wait ran out.
    Held {
        /// At most how long until the holder's lock expires (ms).
        ttl_left_ms: u64,
    },
}

/// This replica's waiters, one `Notify` per key waited on (module doc).
#[derive(Debug, Default, Clone)]
pub(super) struct FillWakers(Arc<Mutex<HashMap<FillKey, Weak<Notify>>>>);

impl FillWakers {
    /// The key's `Notify`, shared by every waiter of the key on this replica.
    fn register(&self, key: &FillKey) -> Arc<Notify> {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = map.get(key).and_then(Weak::upgrade) {
            return n;
        }
        if map.len() >= 64 && map.len().is_power_of_two() {
            map.retain(|_, w| w.strong_count() > 0);
        }
        let n = Arc::new(Notify::new());
        map.insert(key.clone(), Arc::downgrade(&n));
        n
    }

    /// Wakes every waiter of `key` on this replica.
    pub(super) fn wake(&self, key: &FillKey) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match map.get(key).map(Weak::upgrade) {
            Some(Some(n)) => n.notify_waiters(),
            Some(None) => {
                map.remove(key);
            }
            None => {}
        }
    }
}

impl Scheduler {
    /// Takes the fill lock of `key` for `ttl_ms`, or waits until `wait_until` (`None`: not at
    /// all) for the caller that holds it to let go (module doc).
    pub async fn acquire_fill(
        &self,
        key: &FillKey,
        ttl_ms: u64,
        wait_until: Option<Instant>,
    ) -> Result<FillAnswer, SchedulerError> {
        let fill_id = FillId::random();
        let notify = self.fills.register(key);
        // Armed before the first look, so a release right after it still wakes us.
        let mut woken = pin!(notify.notified());
        woken.as_mut().enable();
        let (holder, mut ttl_left_ms) = match self.store.acquire_fill(key, &fill_id, ttl_ms).await?
        {
            FillState::Granted => return Ok(FillAnswer::Granted { fill_id, ttl_ms }),
            FillState::Held {
                ttl_left_ms,
                holder,
            } => (holder, ttl_left_ms),
        };
        let Some(until) = wait_until.filter(|u| *u > Instant::now()) else {
            return Ok(FillAnswer::Held { ttl_left_ms });
        };
        loop {
            let now = Instant::now();
            // Just past the holder's expiry: nobody announces that.
            let expiry = now + Duration::from_millis(ttl_left_ms.saturating_add(1));
            let next = (now + SAFETY_POLL).min(expiry).min(until);
            tokio::select! {
                () = woken.as_mut() => {}
                () = tokio::time::sleep_until(next) => {}
                () = self.shutdown.cancelled() => {
                    return Err(SchedulerError::FillShuttingDown { key: key.to_string() });
                }
            }
            woken.set(notify.notified());
            woken.as_mut().enable();
            match self.store.fill_holder(key).await? {
                Some(h) if h.fill_id == holder => ttl_left_ms = h.ttl_left_ms,
                // Released or expired, whoever holds it now.
                _ => return Ok(FillAnswer::Released),
            }
            if Instant::now() >= until {
                return Ok(FillAnswer::Held { ttl_left_ms });
            }
        }
    }

    /// Extends the caller's fill lock of `key` to now + `ttl_ms`. Errors:
    /// [`SchedulerError::FillNotHeld`] when `fill_id` no longer holds it.
    pub async fn renew_fill(
        &self,
        key: &FillKey,
        fill_id: &FillId,
        ttl_ms: u64,
    ) -> Result<u64, SchedulerError> {
        if self.store.renew_fill(key, fill_id, ttl_ms).await? {
            Ok(ttl_ms)
        } else {
            Err(SchedulerError::FillNotHeld {
                key: key.to_string(),
            })
        }
    }

    /// Lets the caller's fill lock of `key` go: `true` if `fill_id` held it.
    pub async fn release_fill(
        &self,
        key: &FillKey,
        fill_id: &FillId,
    ) -> Result<bool, SchedulerError> {
        Ok(self.store.release_fill(key, fill_id).await?)
    }
}

#[cfg(test)]
mod tests {
    use tokio_util::sync::CancellationToken;
    use voxpool_config::Config;

    use super::*;
    use crate::store::{LeaseStore, memory::MemoryStore};

    /// With the clock paused, time moves only when every task is idle: a waiter answered
    /// without the clock moving was woken by the release, not by a poll or its deadline.
    #[tokio::test(start_paused = true)]
    async fn a_release_wakes_a_waiter_at_once_not_at_its_next_poll() {
        let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
        let s = Arc::new(Scheduler::new(
            store,
            &Config::default(),
            CancellationToken::new(),
        ));
        let key = FillKey::parse("k").unwrap();
        let Ok(FillAnswer::Granted { fill_id, .. }) = s.acquire_fill(&key, 60_000, None).await
        else {
            panic!("the first caller is granted");
        };
        let started = Instant::now();
        let waiter = tokio::spawn({
            let (s, key) = (s.clone(), key.clone());
            async move {
                s.acquire_fill(&key, 0, Some(started + Duration::from_secs(60)))
                    .await
            }
        });
        // Registered means armed and waiting: the memory store answers within the same poll.
        while s
            .fills
            .0
            .lock()
            .unwrap()
            .get(&key)
            .and_then(Weak::upgrade)
            .is_none()
        {
            tokio::task::yield_now().await;
        }
        assert!(s.release_fill(&key, &fill_id).await.unwrap());
        assert_eq!(waiter.await.unwrap().unwrap(), FillAnswer::Released);
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "woken by the release itself"
        );
        assert!(matches!(
            s.acquire_fill(&key, 1_000, None).await.unwrap(),
            FillAnswer::Granted { .. }
        ));
    }
}
