//! Key health in the memory store: a Report's outcome applied to its key once per lease —
//! cooldowns (rate limits, failures with capped back-off, credentials), the adaptive
//! effective capacity, and a success's characters settled against the quota. The same rules
//! as `lua/report.lua`.
//!
//! Invariant 11 of docs/ARCHITECTURE.md (an outcome changes a key once per lease): a report is applied only when its
//! lease is live or was granted within [`REPORTED_MEMORY_MS`], and not already marked as
//! reported on; a replay only releases.

use super::{key::KeyEntry, pool::PoolState};
use crate::{
    model::{CoolReason, HealthPolicy, Outcome, ReportParams, ReportResult},
    store::REPORTED_MEMORY_MS,
};

impl PoolState {
    /// [`LeaseStore::report`](crate::store::LeaseStore::report) on this pool; `None` when
    /// neither the lease nor `r.key_id` names a known key.
    pub(super) fn report(
        &mut self,
        r: &ReportParams,
        policy: &HealthPolicy,
        now: i64,
    ) -> Option<ReportResult> {
        let token = r.id.token.as_str();
        let live = self.holds(token, r.granted_at_ms);
        let (key_id, lease_expiry) = match self.leases.get(token) {
            Some(held) if live => (held.key.clone(), Some(held.expires_ms)),
            _ => (
                r.key_id.clone().filter(|k| self.keys.contains_key(k))?,
                None,
            ),
        };
        let mark = PoolState::mark(
            token,
            r.granted_at_ms
                .or_else(|| self.leases.get(token).map(|l| l.granted_ms)),
        );
        // Once per lease; a lease the store no longer holds only if granted recently.
        let fresh = lease_expiry.is_some()
            || r.granted_at_ms
                .is_some_and(|g| now.saturating_sub(g) <= REPORTED_MEMORY_MS);
        let applied = fresh && !self.reported.contains_key(&mark);
        if applied {
            let until = lease_expiry.unwrap_or(now).max(now);
            self.mark_reported(&mark, until.saturating_add(REPORTED_MEMORY_MS));
        }
        let in_flight = self.keys.get(&key_id)?.in_flight;
        // A success settles the lease's reservation: at most what it reserved counts.
        let reserved = if live && applied && r.outcome == Outcome::Success {
            self.leases
                .get_mut(token)
                .map_or(0, |l| std::mem::take(&mut l.reserved))
        } else {
            0
        };
        if let Some(k) = self.keys.get_mut(&key_id) {
            k.quota_reserved = k.quota_reserved.saturating_sub(reserved);
        }
        let settled = r.characters.min(reserved);
        let released = r.release && live && self.free(token, now);
        let adaptive = self.adaptive;
        let k = self.keys.get_mut(&key_id)?;
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
    }
}

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
