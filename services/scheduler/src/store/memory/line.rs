//! The order of a pool's line of waiting requests, as the memory store keeps it (the Redis
//! store keeps the same order in `lua/prelude.lua`, `line_*` functions).
//!
//! Order: traffic class first (INTERACTIVE, STANDARD, BATCH), then round-robin across tenants
//! inside a class, then arrival order inside a tenant. Round-robin is start-time fair
//! queueing: a ticket's *round* is one past its tenant's last ticket still in line, but never
//! behind the round its class is serving (the round of the last ticket granted), so a tenant
//! with a long backlog holds rounds r, r+1, r+2, ... while another tenant's single request
//! gets the current round and goes before most of that backlog.
//!
//! Invariant: every ticket in `order` has exactly one entry in `tickets` and is counted once
//! in its (class, tenant) slot; removing a ticket undoes all three.

use std::collections::{BTreeMap, HashMap};

use crate::model::{ClassLine, Priority};

/// Place of a ticket: class, round, arrival number (lower is served first).
pub(crate) type Place = (Priority, u64, u64);

/// One ticket and what the line keeps about it.
#[derive(Debug)]
pub(crate) struct Ticket<T> {
    pub(crate) place: Place,
    pub(crate) tenant: String,
    /// When it joined (store clock, ms).
    pub(crate) since_ms: i64,
    /// Until when it stays without a renewal (store clock, ms).
    pub(crate) expires_ms: i64,
    pub(crate) payload: T,
}

/// A pool's line of tickets, each named by a token (module doc).
#[derive(Debug)]
pub(crate) struct Line<T> {
    next_seq: u64,
    order: BTreeMap<Place, String>,
    tickets: HashMap<String, Ticket<T>>,
    /// Per class: the round being served.
    serving_round: [u64; 3],
    /// Per (class, tenant) with tickets in line: (last round given, tickets in line).
    tenants: HashMap<(Priority, String), (u64, usize)>,
}

impl<T> Default for Line<T> {
    fn default() -> Self {
        Self {
            next_seq: 0,
            order: BTreeMap::new(),
            tickets: HashMap::new(),
            serving_round: [0; 3],
            tenants: HashMap::new(),
        }
    }
}

impl<T> Line<T> {
    /// Adds a ticket named `token` at the end of its tenant's share of its class.
    pub(crate) fn push(
        &mut self,
        token: &str,
        class: Priority,
        tenant: &str,
        now_ms: i64,
        ttl_ms: i64,
        payload: T,
    ) {
        self.remove(token);
        let serving = self.serving_round[usize::from(class.rank())];
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
        self.order.insert(place, token.to_owned());
        self.tickets.insert(
            token.to_owned(),
            Ticket {
                place,
                tenant: tenant.to_owned(),
                since_ms: now_ms,
                expires_ms: now_ms.saturating_add(ttl_ms),
                payload,
            },
        );
    }

    /// Takes the ticket `token` out of the line (`served`: it was granted a slot, so its
    /// class now serves its round).
    pub(crate) fn take(&mut self, token: &str, served: bool) -> Option<Ticket<T>> {
        let ticket = self.tickets.remove(token)?;
        self.order.remove(&ticket.place);
        let (class, round, _) = ticket.place;
        if served {
            let serving = &mut self.serving_round[usize::from(class.rank())];
            *serving = (*serving).max(round);
        }
        let key = (class, ticket.tenant.clone());
        if let Some(slot) = self.tenants.get_mut(&key) {
            slot.1 = slot.1.saturating_sub(1);
            if slot.1 == 0 {
                self.tenants.remove(&key);
            }
        }
        Some(ticket)
    }

    /// Removes `token` without serving it (left, expired).
    pub(crate) fn remove(&mut self, token: &str) -> bool {
        self.take(token, false).is_some()
    }

    /// The ticket `token`, if in line.
    pub(crate) fn get_mut(&mut self, token: &str) -> Option<&mut Ticket<T>> {
        self.tickets.get_mut(token)
    }

    /// Tokens in serving order, at most `n`.
    pub(crate) fn first(&self, n: usize) -> Vec<String> {
        self.order.values().take(n).cloned().collect()
    }

    /// The ticket `token`'s payload and class.
    pub(crate) fn ticket(&self, token: &str) -> Option<&Ticket<T>> {
        self.tickets.get(token)
    }

    /// Whether the line is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Drops every ticket that expired by `now_ms`.
    pub(crate) fn expire(&mut self, now_ms: i64) {
        let dead: Vec<String> = self
            .tickets
            .iter()
            .filter(|(_, t)| t.expires_ms <= now_ms)
            .map(|(token, _)| token.clone())
            .collect();
        for token in dead {
            self.remove(&token);
        }
    }

    /// Waiters per class, in [`Priority::ALL`] order.
    pub(crate) fn by_class(&self) -> [ClassLine; 3] {
        let mut out = [ClassLine::default(); 3];
        for t in self.tickets.values() {
            let c = &mut out[usize::from(t.place.0.rank())];
            c.waiters += 1;
            if c.oldest_since_ms == 0 || t.since_ms < c.oldest_since_ms {
                c.oldest_since_ms = t.since_ms;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order in which the line serves its tickets.
    fn serve_all(line: &mut Line<()>) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(head) = line.first(1).pop() {
            line.take(&head, true);
            out.push(head);
        }
        out
    }

    #[test]
    fn classes_go_first_then_tenants_round_robin_then_arrival_order() {
        let mut line = Line::default();
        for name in ["b1", "b2", "b3"] {
            line.push(name, Priority::Batch, "bulk", 0, 1000, ());
        }
        line.push("s1", Priority::Standard, "app", 0, 1000, ());
        line.push("i1", Priority::Interactive, "app", 0, 1000, ());
        line.push("o1", Priority::Batch, "other", 0, 1000, ());
        assert_eq!(
            serve_all(&mut line),
            ["i1", "s1", "b1", "o1", "b2", "b3"],
            "the other tenant's single BATCH request goes before the backlog's second"
        );
    }

    #[test]
    fn a_tenant_with_a_long_backlog_does_not_hold_back_a_newcomer() {
        let mut line = Line::default();
        for i in 0..50 {
            line.push(
                &format!("heavy{i}"),
                Priority::Standard,
                "heavy",
                0,
                1000,
                (),
            );
        }
        for _ in 0..10 {
            let head = line.first(1).pop().expect("head");
            line.take(&head, true);
        }
        line.push("light", Priority::Standard, "light", 0, 1000, ());
        let order = serve_all(&mut line);
        let at = order.iter().position(|n| n == "light").expect("served");
        assert!(at <= 1, "the newcomer is served within one round, at {at}");
    }

    #[test]
    fn expired_and_removed_tickets_leave_every_index() {
        let mut line = Line::default();
        line.push("a", Priority::Batch, "t", 0, 100, ());
        line.push("b", Priority::Standard, "t", 50, 100, ());
        let by = line.by_class();
        assert_eq!((by[1].waiters, by[1].oldest_since_ms), (1, 50));
        line.expire(100);
        assert!(line.ticket("a").is_none(), "expired at 100");
        assert!(line.remove("b"));
        assert!(line.is_empty());
        assert!(line.tenants.is_empty(), "no tenant slot left behind");
    }
}
