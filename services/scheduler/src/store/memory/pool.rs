//! One pool's state in the memory store, and the bookkeeping every operation shares: the
//! pool's clock, which leases it holds, freeing a slot, reaping what expired.
//!
//! Invariant 3 of docs/ARCHITECTURE.md (no leaks, never below zero): a lease is one [`LeaseEntry`] in `leases`; its
//! slot and its quota reservation are counted on its key exactly while that entry exists, and
//! every way out of `leases` ([`PoolState::free`], [`PoolState::reap`]) gives both back in the
//! same step and drops the token from the indexes over it (`batch_leases`, `handed`).

use std::{
    cmp::Reverse,
    collections::{BTreeMap, BinaryHeap, HashMap, HashSet},
    time::{SystemTime, UNIX_EPOCH},
};

use super::{key::KeyEntry, line::Line};
use crate::model::AcquireParams;

/// What the store keeps of one live lease.
#[derive(Debug)]
pub(super) struct LeaseEntry {
    /// The key it holds a slot on.
    pub(super) key: String,
    /// When it ends unless renewed (ms, the pool's clock).
    pub(super) expires_ms: i64,
    /// When it was granted (ms): the grant time its signed id names.
    pub(super) granted_ms: i64,
    /// Characters it reserved on its key's quota (its Acquire's `characters`; 0 when the key
    /// has no quota or a success settled them).
    pub(super) reserved: u64,
}

#[derive(Debug)]
pub(super) struct PoolState {
    pub(super) keys: BTreeMap<String, KeyEntry>,
    /// lease token -> the lease.
    pub(super) leases: HashMap<String, LeaseEntry>,
    /// Tokens of the live BATCH leases (an index over `leases`).
    pub(super) batch_leases: HashSet<String>,
    /// The pool's `batch_max_share`.
    pub(super) batch_max_share: f64,
    /// The pool's `adaptive` setting.
    pub(super) adaptive: bool,
    pub(super) clock_offset_ms: i64,
    /// End of the recovery window (ms, this pool's clock); 0 = none (module doc of `store`).
    pub(super) recovering_until_ms: i64,
    /// The pool's line of waiting requests, each ticket holding its Acquire.
    pub(super) line: Line<AcquireParams>,
    /// Tokens handed a slot (their lease is in `leases`) and not claimed yet -> until when
    /// the hand-over waits for its claim (ms).
    pub(super) handed: HashMap<String, i64>,
    /// Tokens handed a slot during the current call, announced when it ends.
    pub(super) announce: Vec<String>,
    /// Lease token -> until when it stays marked as reported on (ms;
    /// [`REPORTED_MEMORY_MS`](crate::store::REPORTED_MEMORY_MS)).
    pub(super) reported: HashMap<String, i64>,
    /// The marks by expiry, for reaping (a renewal pushes a later entry; a stale one is
    /// skipped).
    pub(super) reported_by_expiry: BinaryHeap<Reverse<(i64, String)>>,
}

impl Default for PoolState {
    fn default() -> Self {
        Self {
            keys: BTreeMap::new(),
            leases: HashMap::new(),
            batch_leases: HashSet::new(),
            batch_max_share: 1.0,
            adaptive: true,
            clock_offset_ms: 0,
            recovering_until_ms: 0,
            line: Line::default(),
            handed: HashMap::new(),
            announce: Vec::new(),
            reported: HashMap::new(),
            reported_by_expiry: BinaryHeap::new(),
        }
    }
}

impl PoolState {
    pub(super) fn now(&self) -> i64 {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        wall + self.clock_offset_ms
    }

    /// Whether `token` names a lease the store holds, granted at `granted` (any, for `None`):
    /// an idempotency key used again after its lease ended gives the same token to another
    /// lease, which the earlier lease's id must not reach.
    pub(super) fn holds(&self, token: &str, granted: Option<i64>) -> bool {
        self.leases
            .get(token)
            .is_some_and(|l| granted.is_none_or(|g| l.granted_ms == g))
    }

    /// The reported mark of the lease `token` granted at `granted` (`REPORTED_MEMORY_MS`).
    pub(super) fn mark(token: &str, granted: Option<i64>) -> String {
        match granted {
            Some(g) => format!("{token}:{g}"),
            None => token.to_owned(),
        }
    }

    /// Marks `token` as reported on until `until`, or later if it already is.
    pub(super) fn mark_reported(&mut self, token: &str, until: i64) {
        let at = self.reported.entry(token.to_owned()).or_insert(until);
        *at = (*at).max(until);
        self.reported_by_expiry
            .push(Reverse((*at, token.to_owned())));
    }

    /// Reclaims every expired lease (expiry <= now) and every ended reported mark.
    pub(super) fn reap(&mut self, now: i64) {
        while let Some(Reverse((until, _))) = self.reported_by_expiry.peek() {
            if *until > now {
                break;
            }
            if let Some(Reverse((until, token))) = self.reported_by_expiry.pop()
                && self.reported.get(&token).is_some_and(|at| *at <= until)
            {
                self.reported.remove(&token);
            }
        }
        let (keys, batch, handed) = (&mut self.keys, &mut self.batch_leases, &mut self.handed);
        self.leases.retain(|token, lease| {
            if lease.expires_ms > now {
                return true;
            }
            if let Some(k) = keys.get_mut(lease.key.as_str()) {
                k.in_flight = k.in_flight.saturating_sub(1);
                k.quota_reserved = k.quota_reserved.saturating_sub(lease.reserved);
            }
            batch.remove(token);
            handed.remove(token);
            false
        });
    }

    /// Removes a live lease and frees its slot. Returns false if it was not live.
    pub(super) fn free(&mut self, token: &str, now: i64) -> bool {
        match self.leases.get(token) {
            Some(lease) if lease.expires_ms > now => {}
            _ => return false,
        }
        self.batch_leases.remove(token);
        self.handed.remove(token);
        if let Some(lease) = self.leases.remove(token) {
            if let Some(k) = self.keys.get_mut(&lease.key) {
                k.in_flight = k.in_flight.saturating_sub(1);
                k.quota_reserved = k.quota_reserved.saturating_sub(lease.reserved);
            }
            true
        } else {
            false
        }
    }
}
