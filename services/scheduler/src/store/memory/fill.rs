//! Fill locks in the memory store (`store` module doc, "Fill locks"): a map from key to its
//! holder and expiry, under the store's fill mutex, so every call is one atomic step.
//!
//! Clock: the system clock plus a test offset **per fill key** (`advance_fill_clock`), the
//! counterpart of the per-pool offset of `PoolState` (a fill key has no pool). Expired locks
//! are dropped when their key is next touched, and every [`SWEEP_EVERY`] grants the whole map
//! is swept, so keys nobody asks for again do not pile up.

use std::{
    collections::HashMap,
    time::{SystemTime, UNIX_EPOCH},
};

use async_trait::async_trait;
use tokio::sync::mpsc;

use super::{MemoryStore, poisoned};
use crate::{
    model::{FillHolder, FillId, FillKey, FillState},
    store::{FillLocks, StoreResult},
};

/// Grants between two sweeps of expired locks.
const SWEEP_EVERY: u32 = 256;

/// One held lock.
#[derive(Debug)]
struct Held {
    fill_id: FillId,
    /// Expiry (ms, the key's clock).
    expires_ms: i64,
}

/// Every fill lock of the store.
#[derive(Debug, Default)]
pub(super) struct Fills {
    locks: HashMap<FillKey, Held>,
    /// Test clock offsets (ms), per key.
    offsets: HashMap<FillKey, i64>,
    grants_since_sweep: u32,
}

pub(super) fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Fills {
    fn now(&self, key: &FillKey) -> i64 {
        wall_ms().saturating_add(self.offsets.get(key).copied().unwrap_or(0))
    }

    /// The live lock of `key` and the key's clock, dropping an expired one.
    fn live(&mut self, key: &FillKey) -> (Option<&mut Held>, i64) {
        let now = self.now(key);
        if self.locks.get(key).is_some_and(|h| h.expires_ms <= now) {
            self.locks.remove(key);
        }
        (self.locks.get_mut(key), now)
    }

    pub(super) fn acquire(&mut self, key: &FillKey, fill_id: &FillId, ttl_ms: u64) -> FillState {
        let (held, now) = self.live(key);
        if let Some(h) = held {
            return FillState::Held {
                ttl_left_ms: u64::try_from(h.expires_ms - now).unwrap_or(0),
                holder: h.fill_id.clone(),
            };
        }
        self.locks.insert(
            key.clone(),
            Held {
                fill_id: fill_id.clone(),
                expires_ms: now.saturating_add(ms(ttl_ms)),
            },
        );
        self.grants_since_sweep += 1;
        if self.grants_since_sweep >= SWEEP_EVERY {
            self.grants_since_sweep = 0;
            let wall = wall_ms();
            let offsets = &self.offsets;
            self.locks.retain(|k, h| {
                h.expires_ms > wall.saturating_add(offsets.get(k).copied().unwrap_or(0))
            });
        }
        FillState::Granted
    }

    pub(super) fn renew(&mut self, key: &FillKey, fill_id: &FillId, ttl_ms: u64) -> bool {
        match self.live(key) {
            (Some(h), now) if h.fill_id == *fill_id => {
                h.expires_ms = now.saturating_add(ms(ttl_ms));
                true
            }
            _ => false,
        }
    }

    pub(super) fn release(&mut self, key: &FillKey, fill_id: &FillId) -> bool {
        match self.live(key) {
            (Some(h), _) if h.fill_id == *fill_id => {
                self.locks.remove(key);
                true
            }
            _ => false,
        }
    }

    pub(super) fn holder(&mut self, key: &FillKey) -> Option<FillHolder> {
        match self.live(key) {
            (Some(h), now) => Some(FillHolder {
                fill_id: h.fill_id.clone(),
                ttl_left_ms: u64::try_from(h.expires_ms - now).unwrap_or(0),
            }),
            (None, _) => None,
        }
    }

    pub(super) fn advance(&mut self, key: &FillKey, by_ms: u64) {
        let offset = self.offsets.entry(key.clone()).or_insert(0);
        *offset = offset.saturating_add(ms(by_ms));
    }
}

#[async_trait]
impl FillLocks for MemoryStore {
    async fn acquire_fill(
        &self,
        key: &FillKey,
        fill_id: &FillId,
        ttl_ms: u64,
    ) -> StoreResult<FillState> {
        Ok(self
            .fills
            .lock()
            .map_err(poisoned)?
            .acquire(key, fill_id, ttl_ms))
    }

    async fn renew_fill(&self, key: &FillKey, fill_id: &FillId, ttl_ms: u64) -> StoreResult<bool> {
        Ok(self
            .fills
            .lock()
            .map_err(poisoned)?
            .renew(key, fill_id, ttl_ms))
    }

    async fn release_fill(&self, key: &FillKey, fill_id: &FillId) -> StoreResult<bool> {
        let released = self.fills.lock().map_err(poisoned)?.release(key, fill_id);
        if released {
            // Nobody listening (no domain yet): waiters still poll.
            let _ = self.fill_released.send(key.clone());
        }
        Ok(released)
    }

    async fn fill_holder(&self, key: &FillKey) -> StoreResult<Option<FillHolder>> {
        Ok(self.fills.lock().map_err(poisoned)?.holder(key))
    }

    fn fill_releases(&self) -> Option<mpsc::UnboundedReceiver<FillKey>> {
        self.fill_released_rx
            .lock()
            .ok()
            .and_then(|mut rx| rx.take())
    }

    async fn advance_fill_clock(&self, key: &FillKey, ms: u64) -> StoreResult<()> {
        self.fills.lock().map_err(poisoned)?.advance(key, ms);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_until_release_or_expiry_by_the_key_s_own_clock() {
        let mut fills = Fills::default();
        let (key, other) = (
            FillKey::parse("k").unwrap(),
            FillKey::parse("other").unwrap(),
        );
        let (a, b) = (FillId::random(), FillId::random());
        assert_eq!(fills.acquire(&key, &a, 1_000), FillState::Granted);
        assert!(matches!(fills.acquire(&key, &b, 1_000),
            FillState::Held { holder, ttl_left_ms } if holder == a && ttl_left_ms <= 1_000));
        assert!(!fills.renew(&key, &b, 1_000) && !fills.release(&key, &b));
        assert_eq!(fills.acquire(&other, &b, 1_000), FillState::Granted);
        fills.advance(&key, 1_000);
        assert_eq!(fills.holder(&key), None, "expired by its own clock");
        assert!(
            fills.holder(&other).is_some(),
            "another key's clock did not move"
        );
        assert!(
            !fills.renew(&key, &a, 1_000),
            "an expired lock is not revived"
        );
        assert_eq!(fills.acquire(&key, &b, 1_000), FillState::Granted);
        assert!(fills.release(&key, &b) && !fills.release(&key, &b));
    }
}
