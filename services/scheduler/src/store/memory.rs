//! In-process lease store: the single-replica embedded default (`--store memory`).
//!
//! Same semantics as the Redis store (same conformance suite), held under one mutex so each
//! operation is atomic. The clock is the system clock plus a per-pool test offset
//! ([`LeaseStore::advance_clock`]). State is lost when the process exits, which is exactly a
//! single replica's lifetime: run the Redis store for more than one replica.

use std::{
    cmp::Reverse,
    collections::{BTreeMap, BinaryHeap, HashMap, HashSet},
    sync::Mutex,
    time::{SystemTime, UNIX_EPOCH},
};

use async_trait::async_trait;
use rand::Rng;
use tokio::sync::mpsc;

use super::{Handover, LeaseStore, REPORTED_MEMORY_MS, StoreError, StoreResult, line::Line};
use crate::model::{
    AcquireParams, AcquireResult, CoolReason, HealthPolicy, KeyState, KeyStatus, Lease, LeaseId,
    LeaseToken, Outcome, PoolSpec, PoolStatus, Priority, QuotaConfig, Refusal, ReportParams,
    ReportResult, TicketState, batch_limit, upstream_of,
};

/// How many tickets from the head of a line a hand-over looks at for one that a free key can
/// take (tickets may exclude keys or want other upstreams).
pub(crate) const SERVE_SCAN: usize = 64;

/// Retry hint bounds for a full pool (ms).
pub(crate) const RETRY_HINT_MIN_MS: u64 = 50;
pub(crate) const RETRY_HINT_MAX_MS: u64 = 1_000;

#[derive(Debug, Default)]
struct KeyEntry {
    /// What grants are held to: the effective capacity (`ceiling` on a pool that does not
    /// adapt).
    capacity: u32,
    /// The configured or admin-set capacity: `capacity` never exceeds it.
    ceiling: u32,
    /// When `capacity` last changed by adaptation (store clock, ms).
    adapted_at_ms: i64,
    /// When a concurrency refusal last lowered `capacity` (store clock, ms).
    lowered_at_ms: i64,
    /// Wait before the next probe (ms); 0 = `adaptive_increase_ms`.
    probe_ms: u64,
    /// The key's character budget per period.
    quota: Option<QuotaConfig>,
    /// Characters used in the period starting at `quota_window_start_ms`.
    quota_used: u64,
    /// Characters reserved by live leases (their Acquire's `characters`), not counted yet.
    quota_reserved: u64,
    /// Start of the period `quota_used` counts (store clock, ms).
    quota_window_start_ms: i64,
    config_capacity: u32,
    in_flight: u32,
    cool_until_ms: i64,
    cool_reason: Option<CoolReason>,
    disabled: bool,
    failures: u32,
}

impl KeyEntry {
    fn state(&self, now: i64) -> KeyState {
        if self.ceiling == 0 || self.disabled {
            KeyState::Disabled
        } else if self.cool_until_ms > now {
            match self.cool_reason {
                Some(CoolReason::Credential) => KeyState::Disabled,
                Some(CoolReason::Quota) => KeyState::OverQuota,
                _ => KeyState::Cooling,
            }
        } else {
            KeyState::Available
        }
    }

    fn status(&self, key_id: &str, now: i64) -> KeyStatus {
        KeyStatus {
            key_id: key_id.to_owned(),
            capacity: self.ceiling,
            effective_capacity: self.capacity,
            in_flight: self.in_flight,
            state: self.state(now),
            cooldown_until_ms: if self.cool_until_ms > now {
                self.cool_until_ms
            } else {
                0
            },
            consecutive_failures: self.failures,
            quota_used: self.quota_used_at(now),
            quota_limit: self.quota.map_or(0, |q| q.characters),
            quota_resets_at_ms: self.quota.map_or(0, |q| q.per.window(now).1),
        }
    }

    /// Characters used in the quota period containing `now` (0 once a new period began).
    fn quota_used_at(&self, now: i64) -> u64 {
        match self.quota {
            Some(q) if q.per.window(now).0 == self.quota_window_start_ms => self.quota_used,
            _ => 0,
        }
    }

    /// Whether `characters` more fit in the quota next to what is used and reserved.
    fn quota_room(&self, characters: u64, now: i64) -> bool {
        match self.quota {
            Some(q) if characters > 0 => {
                self.quota_used_at(now)
                    .saturating_add(self.quota_reserved)
                    .saturating_add(characters)
                    <= q.characters
            }
            _ => true,
        }
    }

    /// Whether `characters` exceed what the period has left even with nothing reserved: only
    /// the next period can serve them.
    fn quota_spent_for(&self, characters: u64, now: i64) -> bool {
        self.quota.is_some_and(|q| {
            characters > 0 && self.quota_used_at(now).saturating_add(characters) > q.characters
        })
    }

    /// Within a tenth of its quota: picked only when no other key has room.
    fn near_quota(&self, now: i64) -> bool {
        self.quota
            .is_some_and(|q| self.quota_used_at(now).saturating_mul(10) >= q.characters * 9)
    }

    /// Counts `characters` against the quota; spent, the key is out until the period ends.
    fn spend(&mut self, characters: u64, now: i64) {
        let Some(q) = self.quota else { return };
        let (start, end) = q.per.window(now);
        if self.quota_window_start_ms != start {
            self.quota_window_start_ms = start;
            self.quota_used = 0;
        }
        self.quota_used = self.quota_used.saturating_add(characters);
        if self.quota_used >= q.characters {
            self.cool(end, CoolReason::Quota);
        }
    }

    /// The lease `id` on this key (`key_id`), ending at `expires_at_ms`, with the key's
    /// counts now.
    fn lease(&self, id: LeaseId, key_id: String, expires_at_ms: i64, granted_at_ms: i64) -> Lease {
        Lease {
            id,
            key_id,
            expires_at_ms,
            granted_at_ms,
            key_in_flight: self.in_flight,
            key_capacity: self.capacity,
        }
    }

    fn cool(&mut self, until: i64, reason: CoolReason) {
        // A new cooldown never shortens an existing one.
        if until > self.cool_until_ms {
            self.cool_until_ms = until;
            self.cool_reason = Some(reason);
        }
    }
}

#[derive(Debug)]
struct PoolState {
    keys: BTreeMap<String, KeyEntry>,
    /// lease token -> (key id, expiry ms)
    leases: HashMap<String, (String, i64)>,
    /// lease token -> when it was granted (ms), for every token of `leases`.
    granted: HashMap<String, i64>,
    /// lease token -> characters it reserved on its key's quota (leases that reserved some).
    reservations: HashMap<String, u64>,
    /// Tokens of the live BATCH leases (a subset of `leases`).
    batch_leases: HashSet<String>,
    /// The pool's `batch_max_share`.
    batch_max_share: f64,
    /// The pool's `adaptive` setting.
    adaptive: bool,
    clock_offset_ms: i64,
    /// End of the recovery window (ms, this pool's clock); 0 = none (module doc of `store`).
    recovering_until_ms: i64,
    /// The pool's line of waiting requests, each ticket holding its Acquire.
    line: Line<AcquireParams>,
    /// Tokens handed a slot (their lease is in `leases`) and not claimed yet -> until when
    /// the hand-over waits for its claim (ms).
    handed: HashMap<String, i64>,
    /// Tokens handed a slot during the current call, announced when it ends.
    announce: Vec<String>,
    /// Lease token -> until when it stays marked as reported on (ms; [`REPORTED_MEMORY_MS`]).
    reported: HashMap<String, i64>,
    /// The marks by expiry, for reaping (a renewal pushes a later entry; a stale one is
    /// skipped).
    reported_by_expiry: BinaryHeap<Reverse<(i64, String)>>,
}

impl Default for PoolState {
    fn default() -> Self {
        Self {
            keys: BTreeMap::new(),
            leases: HashMap::new(),
            granted: HashMap::new(),
            reservations: HashMap::new(),
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
    fn now(&self) -> i64 {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        wall + self.clock_offset_ms
    }

    /// Whether `token` names a lease the store holds, granted at `granted` (any, for `None`):
    /// an idempotency key used again after its lease ended gives the same token to another
    /// lease, which the earlier lease's id must not reach.
    fn holds(&self, token: &str, granted: Option<i64>) -> bool {
        self.leases.contains_key(token)
            && granted.is_none_or(|g| self.granted.get(token) == Some(&g))
    }

    /// The reported mark of the lease `token` granted at `granted` (`REPORTED_MEMORY_MS`).
    fn mark(token: &str, granted: Option<i64>) -> String {
        match granted {
            Some(g) => format!("{token}:{g}"),
            None => token.to_owned(),
        }
    }

    /// Marks `token` as reported on until `until`, or later if it already is.
    fn mark_reported(&mut self, token: &str, until: i64) {
        let at = self.reported.entry(token.to_owned()).or_insert(until);
        *at = (*at).max(until);
        self.reported_by_expiry
            .push(Reverse((*at, token.to_owned())));
    }

    /// Reclaims every expired lease (expiry <= now) and every ended reported mark.
    fn reap(&mut self, now: i64) {
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
        let (granted, reservations) = (&mut self.granted, &mut self.reservations);
        self.leases.retain(|token, (key, exp)| {
            if *exp > now {
                return true;
            }
            if let Some(k) = keys.get_mut(key.as_str()) {
                k.in_flight = k.in_flight.saturating_sub(1);
                let reserved = reservations.remove(token).unwrap_or(0);
                k.quota_reserved = k.quota_reserved.saturating_sub(reserved);
            }
            batch.remove(token);
            handed.remove(token);
            granted.remove(token);
            false
        });
    }

    /// Removes a live lease and frees its slot. Returns false if it was not live.
    fn free(&mut self, token: &str, now: i64) -> bool {
        match self.leases.get(token) {
            Some((_, exp)) if *exp > now => {}
            _ => return false,
        }
        self.batch_leases.remove(token);
        self.handed.remove(token);
        self.granted.remove(token);
        let reserved = self.reservations.remove(token).unwrap_or(0);
        if let Some((key, _)) = self.leases.remove(token) {
            if let Some(k) = self.keys.get_mut(&key) {
                k.in_flight = k.in_flight.saturating_sub(1);
                k.quota_reserved = k.quota_reserved.saturating_sub(reserved);
            }
            true
        } else {
            false
        }
    }

    /// Leases one slot for `p` on the least-utilized eligible key with room, or says why not.
    fn try_grant(&mut self, p: &AcquireParams, now: i64) -> Result<Lease, Refusal> {
        let eligible: Vec<&String> = self
            .keys
            .keys()
            .filter(|id| !p.exclude_keys.iter().any(|e| e == *id))
            .filter(|id| {
                p.upstream_ids.is_empty() || p.upstream_ids.iter().any(|u| u == upstream_of(id))
            })
            .collect();
        if eligible.is_empty() {
            return Err(Refusal::NoEligibleKey);
        }
        let available: Vec<(&String, &KeyEntry)> = eligible
            .iter()
            .map(|id| (*id, &self.keys[*id]))
            .filter(|(_, k)| k.state(now) == KeyState::Available)
            .collect();
        if available.is_empty() {
            let next = eligible
                .iter()
                .map(|id| &self.keys[*id])
                .filter(|k| !k.disabled && k.capacity > 0 && k.cool_until_ms > now)
                .map(|k| k.cool_until_ms)
                .min();
            return Err(Refusal::Unavailable {
                next_available_ms: next,
                now_ms: now,
            });
        }
        if p.priority == Priority::Batch {
            let capacity: u64 = self
                .keys
                .values()
                .filter(|k| k.state(now) == KeyState::Available)
                .map(|k| u64::from(k.capacity))
                .sum();
            let limit = batch_limit(self.batch_max_share, capacity);
            let held = self.batch_leases.len() as u64;
            if held >= limit {
                let soonest = self
                    .batch_leases
                    .iter()
                    .filter_map(|t| self.leases.get(t).map(|(_, exp)| *exp))
                    .min()
                    .unwrap_or(now);
                return Err(Refusal::BatchShare {
                    limit,
                    in_flight: held,
                    retry_after_ms: u64::try_from(soonest - now)
                        .unwrap_or(0)
                        .clamp(RETRY_HINT_MIN_MS, RETRY_HINT_MAX_MS),
                });
            }
        }
        // Lowest utilization among keys with room; compare in_flight/capacity exactly. Keys
        // near their quota only when no other key has room.
        let chars = p.characters;
        let fresh_room = available.iter().any(|(_, k)| {
            k.in_flight < k.capacity && !k.near_quota(now) && k.quota_room(chars, now)
        });
        let mut best: Vec<&String> = Vec::new();
        let mut best_ratio: Option<(u32, u32)> = None;
        for (id, k) in &available {
            if k.in_flight >= k.capacity
                || !k.quota_room(chars, now)
                || (fresh_room && k.near_quota(now))
            {
                continue;
            }
            let ratio = (k.in_flight, k.capacity);
            match best_ratio {
                None => {
                    best_ratio = Some(ratio);
                    best = vec![id];
                }
                Some((bi, bc)) => {
                    let lhs = u64::from(ratio.0) * u64::from(bc);
                    let rhs = u64::from(bi) * u64::from(ratio.1);
                    if lhs < rhs {
                        best_ratio = Some(ratio);
                        best = vec![id];
                    } else if lhs == rhs {
                        best.push(id);
                    }
                }
            }
        }
        // Keys with a free slot but not the quota for these characters: when the period
        // cannot hold them even with nothing reserved, only the next period serves them.
        let short: Vec<&KeyEntry> = available
            .iter()
            .map(|(_, k)| *k)
            .filter(|k| k.in_flight < k.capacity && !k.quota_room(chars, now))
            .collect();
        if best.is_empty()
            && !short.is_empty()
            && short.iter().all(|k| k.quota_spent_for(chars, now))
        {
            let next = short
                .iter()
                .filter_map(|k| k.quota.map(|q| q.per.window(now).1))
                .min();
            return Err(Refusal::Unavailable {
                next_available_ms: next,
                now_ms: now,
            });
        }
        if best.is_empty() {
            let capacity: u64 = available.iter().map(|(_, k)| u64::from(k.capacity)).sum();
            let in_flight: u64 = available.iter().map(|(_, k)| u64::from(k.in_flight)).sum();
            let soonest = self
                .leases
                .values()
                .filter(|(key, _)| eligible.contains(&key))
                .map(|(_, exp)| *exp)
                .min()
                .unwrap_or(now);
            let retry = u64::try_from(soonest - now)
                .unwrap_or(0)
                .clamp(RETRY_HINT_MIN_MS, RETRY_HINT_MAX_MS);
            return Err(Refusal::Full {
                capacity,
                in_flight,
                retry_after_ms: retry,
                quota_short: short
                    .iter()
                    .filter(|k| !k.quota_spent_for(chars, now))
                    .count() as u64,
            });
        }
        let chosen = best[rand::rng().random_range(0..best.len())].clone();
        let expires = now.saturating_add(i64::try_from(p.ttl_ms).unwrap_or(i64::MAX));
        self.leases
            .insert(p.token.as_str().to_owned(), (chosen.clone(), expires));
        self.granted.insert(p.token.as_str().to_owned(), now);
        if p.priority == Priority::Batch {
            self.batch_leases.insert(p.token.as_str().to_owned());
        }
        let Some(k) = self.keys.get_mut(&chosen) else {
            return Err(Refusal::NoEligibleKey);
        };
        k.in_flight += 1;
        if chars > 0 && k.quota.is_some() {
            k.quota_reserved = k.quota_reserved.saturating_add(chars);
            self.reservations.insert(p.token.as_str().to_owned(), chars);
        }
        Ok(k.lease(p.lease_id(), chosen, expires, now))
    }

    /// Whether some available key has a free slot.
    fn has_room(&self, now: i64) -> bool {
        self.keys
            .values()
            .any(|k| k.state(now) == KeyState::Available && k.in_flight < k.capacity)
    }

    /// Hands free slots to the line's head (outside a recovery window): for each, the first
    /// of the line's first [`SERVE_SCAN`] tickets that a key can take (a ticket that excludes
    /// every free key lets the next one go). The tokens handed a slot are queued in
    /// `announce`.
    fn serve(&mut self, now: i64) {
        self.line.expire(now);
        if self.recovering_until_ms > now {
            return;
        }
        while !self.line.is_empty() && self.has_room(now) {
            let mut granted = None;
            for token in self.line.first(SERVE_SCAN) {
                let Some(params) = self.line.ticket(&token).map(|t| t.payload.clone()) else {
                    continue;
                };
                match self.try_grant(&params, now) {
                    Ok(_) => {
                        granted = Some(token);
                        break;
                    }
                    // Every ticket after a BATCH one is BATCH too.
                    Err(Refusal::BatchShare { .. }) => break,
                    Err(_) => {}
                }
            }
            let Some(token) = granted else { break };
            let Some(ticket) = self.line.take(&token, true) else {
                break;
            };
            let claim_ttl = i64::try_from(ticket.payload.ticket_ttl_ms).unwrap_or(i64::MAX);
            self.handed
                .insert(token.clone(), now.saturating_add(claim_ttl));
            self.announce.push(token);
        }
    }

    /// Frees the slots handed to tickets and never claimed by `now` (their waiter is gone).
    fn expire_handed(&mut self, now: i64) {
        let dead: Vec<String> = self
            .handed
            .iter()
            .filter(|(_, until)| **until <= now)
            .map(|(token, _)| token.clone())
            .collect();
        for token in dead {
            self.handed.remove(&token);
            self.free(&token, now);
        }
    }
}

/// The in-process [`LeaseStore`].
#[derive(Debug)]
pub struct MemoryStore {
    pools: Mutex<HashMap<String, PoolState>>,
    recovery_window_ms: u64,
    /// Longest TTL a lease re-registered during a recovery window gets (ms).
    recovery_lease_ttl_ms: u64,
    /// The replicas' shared lease secret when none is configured (one replica here).
    lease_secret: Mutex<Option<voxpool_domain::secret::Secret>>,
    handovers: mpsc::UnboundedSender<Handover>,
    handovers_rx: Mutex<Option<mpsc::UnboundedReceiver<Handover>>>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::with_recovery_window(0)
    }
}

impl MemoryStore {
    /// An empty store without a recovery window; call [`LeaseStore::seed`] before use.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store whose first seed of each pool opens a recovery window of
    /// `recovery_window_ms` (`scheduler.recovery_window_ms`): a scheduler restarted on the
    /// memory store has lost the leases its callers still hold, exactly like a Redis
    /// restarted empty, and they re-register by renewing.
    pub fn with_recovery_window(recovery_window_ms: u64) -> Self {
        let (handovers, rx) = mpsc::unbounded_channel();
        Self {
            pools: Mutex::default(),
            recovery_window_ms,
            recovery_lease_ttl_ms: voxpool_config::SchedulerSettings::default()
                .default_lease_ttl_ms,
            lease_secret: Mutex::default(),
            handovers,
            handovers_rx: Mutex::new(Some(rx)),
        }
    }

    /// The longest TTL a lease re-registered during a recovery window gets
    /// (`scheduler.default_lease_ttl_ms`; default 30000).
    #[must_use]
    pub fn with_recovery_lease_ttl(mut self, ttl_ms: u64) -> Self {
        self.recovery_lease_ttl_ms = ttl_ms;
        self
    }

    fn with_pool<T>(
        &self,
        pool: &str,
        f: impl FnOnce(&mut PoolState, i64) -> T,
    ) -> StoreResult<Option<T>> {
        let mut pools = self
            .pools
            .lock()
            .map_err(|_| StoreError::Protocol("memory store mutex poisoned".into()))?;
        Ok(pools.get_mut(pool).map(|p| {
            let now = p.now();
            p.reap(now);
            p.expire_handed(now);
            let out = f(p, now);
            // Whatever the call freed goes to the line's head (`store` module doc).
            p.serve(now);
            for token in std::mem::take(&mut p.announce) {
                // Nobody listening (no Admission yet): waiters still poll.
                let _ = self.handovers.send(Handover {
                    pool: pool.to_owned(),
                    token,
                });
            }
            out
        }))
    }
}

impl MemoryStore {
    /// Where the tickets of `tokens` stand after the line was served, claiming handed slots
    /// when `take` ([`LeaseStore::claim`], [`LeaseStore::keep_waiting`]).
    fn tickets(
        &self,
        pool: &str,
        tokens: &[LeaseToken],
        ttl_ms: u64,
        take: bool,
    ) -> StoreResult<Vec<TicketState>> {
        self.with_pool(pool, |p, now| {
            p.serve(now);
            let ttl = i64::try_from(ttl_ms).unwrap_or(i64::MAX);
            tokens
                .iter()
                .map(|token| {
                    let t = token.as_str();
                    if p.handed.contains_key(t)
                        && let Some((key, exp)) = p.leases.get(t)
                        && let Some(k) = p.keys.get(key)
                    {
                        if !take {
                            return TicketState::Handed;
                        }
                        let id = LeaseId {
                            pool: pool.to_owned(),
                            token: token.clone(),
                        };
                        let granted = p.granted.get(t).copied().unwrap_or(now);
                        let lease = k.lease(id, key.clone(), *exp, granted);
                        p.handed.remove(t);
                        return TicketState::Granted(lease);
                    }
                    match p.line.get_mut(t) {
                        Some(ticket) => {
                            ticket.expires_ms = now.saturating_add(ttl);
                            TicketState::Waiting
                        }
                        None => TicketState::Gone,
                    }
                })
                .collect()
        })?
        .ok_or_else(|| StoreError::NotSeeded(pool.to_owned()))
    }
}

/// Whether a request refused for `refusal` may wait in the line for it to pass: not when no
/// key is eligible or every eligible key is disabled (mirrored by `lua/acquire.lua`).
fn queueable(refusal: &Refusal) -> bool {
    !matches!(
        refusal,
        Refusal::NoEligibleKey
            | Refusal::Unavailable {
                next_available_ms: None,
                ..
            }
    )
}

/// Applies a vendor outcome to a key's health (shared rule, mirrored by the Redis script).
/// Applies a reported outcome to key `k`, which ran `in_flight` leases (the reported one
/// included) when the vendor answered; `adaptive` is the pool's setting; a SUCCESS counts
/// `settled` characters against the quota (what the call reported, at most what its lease
/// reserved). Returns the effective
/// capacity before and after when it changed (model.rs `HealthPolicy::lowered_capacity`, the
/// same rules as `lua/report.lua`).
fn apply_outcome(
    k: &mut KeyEntry,
    r: &ReportParams,
    policy: &HealthPolicy,
    (now, in_flight, adaptive, settled): (i64, u32, bool, u64),
) -> Option<(u32, u32)> {
    let (outcome, retry_after_ms) = (r.outcome, r.retry_after_ms);
    let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let before = k.capacity;
    let since_change = now.saturating_sub(k.adapted_at_ms);
    match outcome {
        Outcome::Success => {
            k.failures = 0;
            if settled > 0 {
                k.spend(settled, now);
            }
            let wait = if k.probe_ms == 0 {
                policy.adaptive_increase_ms
            } else {
                k.probe_ms
            };
            if adaptive && k.capacity < k.ceiling && since_change >= ms(wait) {
                // The last change an increase that held: probes go back to the base pace.
                if k.adapted_at_ms > k.lowered_at_ms {
                    k.probe_ms = policy.adaptive_increase_ms;
                }
                k.capacity += 1;
                k.adapted_at_ms = now;
            }
        }
        Outcome::ConcurrencyLimited => {
            let since_lowered = now.saturating_sub(k.lowered_at_ms);
            // More leases than the effective capacity: granted before it was lowered.
            let stale = in_flight > k.capacity;
            if adaptive && k.capacity > 1 && !stale && since_lowered >= ms(policy.adaptive_hold_ms)
            {
                // A refused probe (the last change was an increase): wait twice as long.
                if k.adapted_at_ms > k.lowered_at_ms {
                    let current = k.probe_ms.max(policy.adaptive_increase_ms);
                    k.probe_ms = current
                        .saturating_mul(2)
                        .min(policy.adaptive_increase_max_ms);
                }
                k.capacity = policy.lowered_capacity(k.capacity, in_flight);
                k.adapted_at_ms = now;
                k.lowered_at_ms = now;
            }
        }
        Outcome::RateLimited => {
            // Adaptive pools: a rate-limit refusal is an overload signal like a concurrency
            // refusal and lowers the effective capacity by the same rules; the key cools only
            // for the vendor's Retry-After, or the default when it ran no other lease (a lone
            // request refused: no concurrency of ours explains it). See `lua/report.lua`.
            if adaptive {
                let refusal = ReportParams {
                    outcome: Outcome::ConcurrencyLimited,
                    ..r.clone()
                };
                apply_outcome(k, &refusal, policy, (now, in_flight, adaptive, 0));
            }
            if !adaptive || retry_after_ms > 0 || in_flight <= 1 {
                let wait = if retry_after_ms > 0 {
                    retry_after_ms
                } else {
                    policy.rate_limit_cooldown_ms
                };
                k.cool(now.saturating_add(ms(wait)), CoolReason::RateLimited);
            }
        }
        Outcome::UpstreamError | Outcome::Timeout => {
            k.failures = k.failures.saturating_add(1);
            if let Some(wait) = policy.failure_cooldown_ms(k.failures) {
                k.cool(now.saturating_add(ms(wait)), CoolReason::Failures);
            }
        }
        Outcome::KeyInvalid | Outcome::QuotaExhausted => {
            k.cool(
                now.saturating_add(ms(policy.credential_cooldown_ms)),
                CoolReason::Credential,
            );
        }
        Outcome::ClientError => {}
    }
    (k.capacity != before).then_some((before, k.capacity))
}

#[async_trait]
impl LeaseStore for MemoryStore {
    async fn seed(&self, specs: &[PoolSpec]) -> StoreResult<()> {
        let mut pools = self
            .pools
            .lock()
            .map_err(|_| StoreError::Protocol("memory store mutex poisoned".into()))?;
        for spec in specs {
            let pool = pools.entry(spec.pool.clone()).or_insert_with(|| {
                let mut fresh = PoolState::default();
                if self.recovery_window_ms > 0 {
                    fresh.recovering_until_ms = fresh
                        .now()
                        .saturating_add(i64::try_from(self.recovery_window_ms).unwrap_or(0));
                }
                fresh
            });
            pool.batch_max_share = spec.batch_max_share;
            pool.adaptive = spec.adaptive;
            pool.keys
                .retain(|id, _| spec.keys.iter().any(|k| &k.key_id == id));
            for key in &spec.keys {
                let entry = pool.keys.entry(key.key_id.clone()).or_default();
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
        Ok(())
    }

    async fn acquire(&self, p: &AcquireParams) -> StoreResult<AcquireResult> {
        let result = self.with_pool(&p.pool, |pool, now| {
            // A live lease with this token (an idempotent retry; `reap` already dropped every
            // expired one) is answered again instead of taking a second slot: also one handed
            // to this token's ticket and not claimed yet.
            // Its TTL counts from now, as in the Redis store (see `lua/acquire.lua`).
            if let Some((key, exp)) = pool.leases.get_mut(p.token.as_str())
                && let Some(k) = pool.keys.get(key.as_str())
            {
                *exp = (*exp).max(now.saturating_add(i64::try_from(p.ttl_ms).unwrap_or(i64::MAX)));
                let granted = pool.granted.get(p.token.as_str()).copied().unwrap_or(now);
                let lease = k.lease(p.lease_id(), key.clone(), *exp, granted);
                pool.handed.remove(p.token.as_str());
                pool.line.remove(p.token.as_str());
                return AcquireResult::Granted(lease);
            }
            // Free slots go to the line before any new arrival, so the arrival never jumps
            // it: what is left free after this, no ticket near the head can use.
            pool.serve(now);
            let refusal = if pool.recovering_until_ms > now {
                Refusal::Recovering {
                    until_ms: pool.recovering_until_ms,
                    now_ms: now,
                }
            } else {
                match pool.try_grant(p, now) {
                    Ok(lease) => return AcquireResult::Granted(lease),
                    Err(refusal) => refusal,
                }
            };
            if p.join_line && queueable(&refusal) {
                let ttl = i64::try_from(p.ticket_ttl_ms).unwrap_or(i64::MAX);
                pool.line
                    .push(p.token.as_str(), p.priority, &p.tenant, now, ttl, p.clone());
                AcquireResult::Queued(refusal)
            } else {
                AcquireResult::Refused(refusal)
            }
        })?;
        result.ok_or_else(|| StoreError::NotSeeded(p.pool.clone()))
    }

    async fn release_granted(&self, id: &LeaseId, granted_at_ms: Option<i64>) -> StoreResult<bool> {
        Ok(self
            .with_pool(&id.pool, |pool, now| {
                let token = id.token.as_str();
                pool.holds(token, granted_at_ms) && pool.free(token, now)
            })?
            .unwrap_or(false))
    }

    async fn renew_granted(
        &self,
        id: &LeaseId,
        ttl_ms: u64,
        key_id: Option<&str>,
        granted_at_ms: Option<i64>,
    ) -> StoreResult<Option<Lease>> {
        Ok(self
            .with_pool(&id.pool, |pool, now| {
                let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
                let mut expires = now.saturating_add(ms(ttl_ms));
                let token = id.token.as_str();
                if pool.leases.contains_key(token) && !pool.holds(token, granted_at_ms) {
                    // Another lease under the same token: this id's lease ended.
                    return None;
                }
                let key = if let Some((key, exp)) = pool.leases.get_mut(token) {
                    *exp = expires;
                    let key = key.clone();
                    let mark = PoolState::mark(token, pool.granted.get(token).copied());
                    if pool.reported.contains_key(&mark) {
                        pool.mark_reported(&mark, expires.saturating_add(REPORTED_MEMORY_MS));
                    }
                    key
                } else {
                    expires = now.saturating_add(ms(ttl_ms.min(self.recovery_lease_ttl_ms)));
                    // Recovery: a live lease the store lost comes back on its key, never past
                    // the key's capacity (see `lua/renew.lua`).
                    let key = key_id.filter(|k| {
                        pool.recovering_until_ms > now
                            && pool.keys.get(*k).is_some_and(|e| e.in_flight < e.capacity)
                    })?;
                    pool.leases
                        .insert(id.token.as_str().to_owned(), (key.to_owned(), expires));
                    // The re-registered lease keeps the grant time its id was signed with.
                    pool.granted
                        .insert(id.token.as_str().to_owned(), granted_at_ms.unwrap_or(now));
                    let k = pool.keys.get_mut(key)?;
                    k.in_flight = k.in_flight.saturating_add(1);
                    key.to_owned()
                };
                let granted = pool.granted.get(id.token.as_str()).copied().unwrap_or(now);
                Some(
                    pool.keys
                        .get(&key)?
                        .lease(id.clone(), key, expires, granted),
                )
            })?
            .ok_or_else(|| StoreError::NotSeeded(id.pool.clone()))?)
    }

    async fn report(
        &self,
        r: &ReportParams,
        policy: &HealthPolicy,
    ) -> StoreResult<Option<ReportResult>> {
        Ok(self
            .with_pool(&r.id.pool, |pool, now| {
                let token = r.id.token.as_str();
                let live = pool.holds(token, r.granted_at_ms);
                let (key_id, lease_expiry) = match pool.leases.get(token) {
                    Some((key, exp)) if live => (key.clone(), Some(*exp)),
                    _ => (
                        r.key_id.clone().filter(|k| pool.keys.contains_key(k))?,
                        None,
                    ),
                };
                let mark = PoolState::mark(
                    token,
                    r.granted_at_ms.or_else(|| pool.granted.get(token).copied()),
                );
                // Once per lease; a lease the store no longer holds only if granted recently.
                let fresh = lease_expiry.is_some()
                    || r.granted_at_ms
                        .is_some_and(|g| now.saturating_sub(g) <= REPORTED_MEMORY_MS);
                let applied = fresh && !pool.reported.contains_key(&mark);
                if applied {
                    let until = lease_expiry.unwrap_or(now).max(now);
                    pool.mark_reported(&mark, until.saturating_add(REPORTED_MEMORY_MS));
                }
                let in_flight = pool.keys.get(&key_id)?.in_flight;
                // A success settles the lease's reservation: at most what it reserved counts.
                let reserved = if live && applied && r.outcome == Outcome::Success {
                    pool.reservations.remove(token).unwrap_or(0)
                } else {
                    0
                };
                if let Some(k) = pool.keys.get_mut(&key_id) {
                    k.quota_reserved = k.quota_reserved.saturating_sub(reserved);
                }
                let settled = r.characters.min(reserved);
                let released = r.release && live && pool.free(token, now);
                let adaptive = pool.adaptive;
                let k = pool.keys.get_mut(&key_id)?;
                let effective_change = if applied {
                    apply_outcome(k, r, policy, (now, in_flight, adaptive, settled))
                } else {
                    None
                };
                let st = k.status(&key_id, now);
                Some(ReportResult {
                    key_id,
                    state: st.state,
                    cooldown_until_ms: st.cooldown_until_ms,
                    released,
                    effective_change,
                    applied,
                })
            })?
            .flatten())
    }

    async fn status(&self, pool: &str) -> StoreResult<Option<PoolStatus>> {
        self.with_pool(pool, |p, now| PoolStatus {
            pool: pool.to_owned(),
            keys: p.keys.iter().map(|(id, k)| k.status(id, now)).collect(),
            now_ms: now,
            recovering_until_ms: if p.recovering_until_ms > now {
                p.recovering_until_ms
            } else {
                0
            },
            batch_in_flight: p.batch_leases.len() as u64,
            batch_max_share: p.batch_max_share,
            line: p.line.by_class(),
        })
    }

    async fn claim(&self, pool: &str, token: &LeaseToken, ttl_ms: u64) -> StoreResult<TicketState> {
        let mut states = self.tickets(pool, std::slice::from_ref(token), ttl_ms, true)?;
        Ok(states.pop().unwrap_or(TicketState::Gone))
    }

    async fn keep_waiting(
        &self,
        pool: &str,
        tokens: &[LeaseToken],
        ttl_ms: u64,
    ) -> StoreResult<Vec<TicketState>> {
        self.tickets(pool, tokens, ttl_ms, false)
    }

    async fn leave(&self, pool: &str, token: &LeaseToken, keep_lease: bool) -> StoreResult<()> {
        self.with_pool(pool, |p, now| {
            p.line.remove(token.as_str());
            if !keep_lease {
                p.handed.remove(token.as_str());
                p.free(token.as_str(), now);
            }
        })?;
        Ok(())
    }

    fn handovers(&self) -> Option<mpsc::UnboundedReceiver<Handover>> {
        self.handovers_rx.lock().ok().and_then(|mut rx| rx.take())
    }

    async fn set_capacity(
        &self,
        pool: &str,
        key_id: &str,
        capacity: u32,
    ) -> StoreResult<Option<KeyStatus>> {
        Ok(self
            .with_pool(pool, |p, now| {
                let k = p.keys.get_mut(key_id)?;
                // A new ceiling; learning starts again from it.
                k.capacity = capacity;
                k.ceiling = capacity;
                k.adapted_at_ms = now;
                Some(k.status(key_id, now))
            })?
            .flatten())
    }

    async fn set_disabled(
        &self,
        pool: &str,
        key_id: &str,
        disabled: bool,
    ) -> StoreResult<Option<KeyStatus>> {
        Ok(self
            .with_pool(pool, |p, now| {
                let k = p.keys.get_mut(key_id)?;
                k.disabled = disabled;
                if !disabled {
                    k.cool_until_ms = 0;
                    k.cool_reason = None;
                    k.failures = 0;
                }
                Some(k.status(key_id, now))
            })?
            .flatten())
    }

    async fn ping(&self) -> StoreResult<()> {
        Ok(())
    }

    async fn lease_secret(
        &self,
        candidate: &voxpool_domain::secret::Secret,
    ) -> StoreResult<voxpool_domain::secret::Secret> {
        let mut kept = self
            .lease_secret
            .lock()
            .map_err(|_| StoreError::Protocol("memory store mutex poisoned".into()))?;
        Ok(kept.get_or_insert_with(|| candidate.clone()).clone())
    }

    async fn forget_pool(&self, pool: &str) -> StoreResult<()> {
        self.pools
            .lock()
            .map_err(|_| StoreError::Protocol("memory store mutex poisoned".into()))?
            .remove(pool);
        Ok(())
    }

    async fn advance_clock(&self, pool: &str, ms: u64) -> StoreResult<()> {
        self.with_pool(pool, |p, _| {
            p.clock_offset_ms = p
                .clock_offset_ms
                .saturating_add(i64::try_from(ms).unwrap_or(i64::MAX));
        })?;
        Ok(())
    }
}
