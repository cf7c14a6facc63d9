//! The pool's line in the memory store, from the store's side (`store` module doc, "The
//! line"): handing freed slots to tickets, claims, keeping tickets alive, leaving. The order
//! of the line itself is [`super::line`].
//!
//! Invariant 4 of docs/ARCHITECTURE.md (FIFO by class, never jumped): every free slot goes to the first ticket near
//! the head a key can take before any new arrival is served, and a slot handed to a ticket is
//! its lease from that step on (in `leases`, marked in `handed` until claimed or expired).

use super::pool::PoolState;
use crate::model::{LeaseId, LeaseToken, Refusal, TicketState};

/// How many tickets from the head of a line a hand-over looks at for one that a free key can
/// take (tickets may exclude keys or want other upstreams); `lua/prelude.lua` `SERVE_SCAN`.
const SERVE_SCAN: usize = 64;

impl PoolState {
    /// Hands free slots to the line's head (outside a recovery window): for each, the first
    /// of the line's first [`SERVE_SCAN`] tickets that a key can take (a ticket that excludes
    /// every free key lets the next one go). The tokens handed a slot are queued in
    /// `announce`.
    pub(super) fn serve(&mut self, now: i64) {
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
    pub(super) fn expire_handed(&mut self, now: i64) {
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

    /// Where the tickets of `tokens` of pool `pool` stand after the line was served, claiming
    /// handed slots when `take` ([`LeaseStore::claim`](crate::store::LeaseStore::claim),
    /// [`LeaseStore::keep_waiting`](crate::store::LeaseStore::keep_waiting)).
    pub(super) fn tickets(
        &mut self,
        pool: &str,
        tokens: &[LeaseToken],
        ttl_ms: u64,
        take: bool,
        now: i64,
    ) -> Vec<TicketState> {
        self.serve(now);
        let ttl = i64::try_from(ttl_ms).unwrap_or(i64::MAX);
        tokens
            .iter()
            .map(|token| {
                let t = token.as_str();
                if self.handed.contains_key(t)
                    && let Some(held) = self.leases.get(t)
                    && let Some(k) = self.keys.get(&held.key)
                {
                    if !take {
                        return TicketState::Handed;
                    }
                    let id = LeaseId {
                        pool: pool.to_owned(),
                        token: token.clone(),
                    };
                    let lease = k.lease(id, held.key.clone(), held.expires_ms, held.granted_ms);
                    self.handed.remove(t);
                    return TicketState::Granted(lease);
                }
                match self.line.get_mut(t) {
                    Some(ticket) => {
                        ticket.expires_ms = now.saturating_add(ttl);
                        TicketState::Waiting
                    }
                    None => TicketState::Gone,
                }
            })
            .collect()
    }

    /// [`LeaseStore::leave`](crate::store::LeaseStore::leave) on this pool.
    pub(super) fn leave(&mut self, token: &LeaseToken, keep_lease: bool, now: i64) {
        self.line.remove(token.as_str());
        if !keep_lease {
            self.handed.remove(token.as_str());
            self.free(token.as_str(), now);
        }
    }
}
