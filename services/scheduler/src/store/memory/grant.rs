//! Grants in the memory store: Acquire (least utilization first, the batch share, the
//! quota's room) and Release.
//!
//! Invariant 1 of docs/ARCHITECTURE.md (never over capacity): a slot is granted only on an available key with
//! `in_flight < capacity` and quota room, counted in the same locked step that picks it; a
//! new arrival first lets the line take what is free ([`PoolState::serve`]), so it never
//! jumps waiting tickets.

use rand::Rng;

use super::{
    key::KeyEntry,
    pool::{LeaseEntry, PoolState},
};
use crate::{
    model::{
        AcquireParams, AcquireResult, KeyState, Lease, LeaseId, Priority, Refusal, batch_limit,
        upstream_of,
    },
    store::{RETRY_HINT_MAX_MS, RETRY_HINT_MIN_MS},
};

impl PoolState {
    /// [`LeaseStore::acquire`](crate::store::LeaseStore::acquire) on this pool.
    pub(super) fn acquire(&mut self, p: &AcquireParams, now: i64) -> AcquireResult {
        // A live lease with this token (an idempotent retry; `reap` already dropped every
        // expired one) is answered again instead of taking a second slot: also one handed
        // to this token's ticket and not claimed yet.
        // Its TTL counts from now, as in the Redis store (see `lua/acquire.lua`).
        if let Some(held) = self.leases.get_mut(p.token.as_str())
            && let Some(k) = self.keys.get(held.key.as_str())
        {
            held.expires_ms = held
                .expires_ms
                .max(now.saturating_add(i64::try_from(p.ttl_ms).unwrap_or(i64::MAX)));
            let lease = k.lease(
                p.lease_id(),
                held.key.clone(),
                held.expires_ms,
                held.granted_ms,
            );
            self.handed.remove(p.token.as_str());
            self.line.remove(p.token.as_str());
            return AcquireResult::Granted(lease);
        }
        // Free slots go to the line before any new arrival, so the arrival never jumps
        // it: what is left free after this, no ticket near the head can use.
        self.serve(now);
        let refusal = if self.recovering_until_ms > now {
            Refusal::Recovering {
                until_ms: self.recovering_until_ms,
                now_ms: now,
            }
        } else {
            match self.try_grant(p, now) {
                Ok(lease) => return AcquireResult::Granted(lease),
                Err(refusal) => refusal,
            }
        };
        if p.join_line && queueable(&refusal) {
            let ttl = i64::try_from(p.ticket_ttl_ms).unwrap_or(i64::MAX);
            self.line
                .push(p.token.as_str(), p.priority, &p.tenant, now, ttl, p.clone());
            AcquireResult::Queued(refusal)
        } else {
            AcquireResult::Refused(refusal)
        }
    }

    /// [`LeaseStore::release_granted`](crate::store::LeaseStore::release_granted) on this
    /// pool.
    pub(super) fn release(&mut self, id: &LeaseId, granted_at_ms: Option<i64>, now: i64) -> bool {
        let token = id.token.as_str();
        self.holds(token, granted_at_ms) && self.free(token, now)
    }

    /// Leases one slot for `p` on the least-utilized eligible key with room, or says why not.
    pub(super) fn try_grant(&mut self, p: &AcquireParams, now: i64) -> Result<Lease, Refusal> {
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
            self.batch_room(now)?;
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
                .filter(|l| eligible.contains(&&l.key))
                .map(|l| l.expires_ms)
                .min()
                .unwrap_or(now);
            return Err(Refusal::Full {
                capacity,
                in_flight,
                retry_after_ms: retry_hint(soonest, now),
                quota_short: short
                    .iter()
                    .filter(|k| !k.quota_spent_for(chars, now))
                    .count() as u64,
            });
        }
        let chosen = best[rand::rng().random_range(0..best.len())].clone();
        let expires = now.saturating_add(i64::try_from(p.ttl_ms).unwrap_or(i64::MAX));
        let Some(k) = self.keys.get_mut(&chosen) else {
            return Err(Refusal::NoEligibleKey);
        };
        k.in_flight += 1;
        let reserved = if chars > 0 && k.quota.is_some() {
            k.quota_reserved = k.quota_reserved.saturating_add(chars);
            chars
        } else {
            0
        };
        let lease = k.lease(p.lease_id(), chosen.clone(), expires, now);
        self.leases.insert(
            p.token.as_str().to_owned(),
            LeaseEntry {
                key: chosen,
                expires_ms: expires,
                granted_ms: now,
                reserved,
            },
        );
        if p.priority == Priority::Batch {
            self.batch_leases.insert(p.token.as_str().to_owned());
        }
        Ok(lease)
    }

    /// `Ok` while BATCH leases hold less than the pool's batch share of its available
    /// capacity ([`batch_limit`]).
    fn batch_room(&self, now: i64) -> Result<(), Refusal> {
        let capacity: u64 = self
            .keys
            .values()
            .filter(|k| k.state(now) == KeyState::Available)
            .map(|k| u64::from(k.capacity))
            .sum();
        let limit = batch_limit(self.batch_max_share, capacity);
        let held = self.batch_leases.len() as u64;
        if held < limit {
            return Ok(());
        }
        let soonest = self
            .batch_leases
            .iter()
            .filter_map(|t| self.leases.get(t).map(|l| l.expires_ms))
            .min()
            .unwrap_or(now);
        Err(Refusal::BatchShare {
            limit,
            in_flight: held,
            retry_after_ms: retry_hint(soonest, now),
        })
    }

    /// Whether some available key has a free slot.
    pub(super) fn has_room(&self, now: i64) -> bool {
        self.keys
            .values()
            .any(|k| k.state(now) == KeyState::Available && k.in_flight < k.capacity)
    }
}

/// The retry hint of a refusal whose first slot comes back at `soonest`.
fn retry_hint(soonest: i64, now: i64) -> u64 {
    u64::try_from(soonest - now)
        .unwrap_or(0)
        .clamp(RETRY_HINT_MIN_MS, RETRY_HINT_MAX_MS)
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
