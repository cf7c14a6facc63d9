//! Seeding and recovery in the memory store (`store` module doc, "Recovery"): registering a
//! pool's keys, opening a recovery window on a pool the store does not hold, renewing a lease
//! and re-registering one the store lost.
//!
//! Invariant 1 of docs/ARCHITECTURE.md across a lost store: seeding never resets a live count, and a re-registered
//! lease comes back on its own key only during the window and only while that key has room,
//! living at most the default lease TTL.

use super::pool::PoolState;
use crate::{
    model::{Lease, LeaseId, PoolSpec},
    store::REPORTED_MEMORY_MS,
};

impl PoolState {
    /// A pool the store did not hold: with a recovery window of `window_ms` (0: none).
    pub(super) fn fresh(window_ms: u64) -> Self {
        let mut fresh = PoolState::default();
        if window_ms > 0 {
            fresh.recovering_until_ms = fresh
                .now()
                .saturating_add(i64::try_from(window_ms).unwrap_or(0));
        }
        fresh
    }

    /// Registers the keys of `spec` ([`LeaseStore::seed`](crate::store::LeaseStore::seed)):
    /// new keys get the configured capacity, existing ones keep their counts and an admin-set
    /// capacity unless the configured one changed; keys no longer configured are dropped.
    pub(super) fn seed(&mut self, spec: &PoolSpec) {
        self.batch_max_share = spec.batch_max_share;
        self.adaptive = spec.adaptive;
        self.keys
            .retain(|id, _| spec.keys.iter().any(|k| &k.key_id == id));
        for key in &spec.keys {
            let entry = self.keys.entry(key.key_id.clone()).or_default();
            if entry.config_capacity != key.capacity {
                entry.capacity = key.capacity;
                entry.ceiling = key.capacity;
                entry.config_capacity = key.capacity;
            }
            if !spec.adaptive {
                entry.capacity = entry.ceiling;
            }
            entry.quota = key.quota;
        }
    }

    /// [`LeaseStore::renew_granted`](crate::store::LeaseStore::renew_granted) on this pool;
    /// a lease re-registered during the window lives at most `recovery_ttl_ms`.
    pub(super) fn renew(
        &mut self,
        id: &LeaseId,
        (ttl_ms, recovery_ttl_ms): (u64, u64),
        key_id: Option<&str>,
        granted_at_ms: Option<i64>,
        now: i64,
    ) -> Option<Lease> {
        let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let mut expires = now.saturating_add(ms(ttl_ms));
        let token = id.token.as_str();
        if self.leases.contains_key(token) && !self.holds(token, granted_at_ms) {
            // Another lease under the same token: this id's lease ended.
            return None;
        }
        let key = if let Some(held) = self.leases.get_mut(token) {
            held.expires_ms = expires;
            let key = held.key.clone();
            let mark = PoolState::mark(token, Some(held.granted_ms));
            if self.reported.contains_key(&mark) {
                self.mark_reported(&mark, expires.saturating_add(REPORTED_MEMORY_MS));
            }
            key
        } else {
            expires = now.saturating_add(ms(ttl_ms.min(recovery_ttl_ms)));
            // Recovery: a live lease the store lost comes back on its key, never past
            // the key's capacity (see `lua/renew.lua`).
            let key = key_id.filter(|k| {
                self.recovering_until_ms > now
                    && self.keys.get(*k).is_some_and(|e| e.in_flight < e.capacity)
            })?;
            self.leases.insert(
                token.to_owned(),
                super::pool::LeaseEntry {
                    key: key.to_owned(),
                    expires_ms: expires,
                    // The re-registered lease keeps the grant time its id was signed with.
                    granted_ms: granted_at_ms.unwrap_or(now),
                    reserved: 0,
                },
            );
            let k = self.keys.get_mut(key)?;
            k.in_flight = k.in_flight.saturating_add(1);
            key.to_owned()
        };
        let granted = self.leases.get(token).map_or(now, |l| l.granted_ms);
        Some(
            self.keys
                .get(&key)?
                .lease(id.clone(), key, expires, granted),
        )
    }
}
