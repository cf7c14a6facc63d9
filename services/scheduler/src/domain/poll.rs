//! A pool's line poll on this replica: while it has waiters of the pool, a task hands over
//! slots no call announced (expiries, ended cooldowns), tells waiters of slots whose
//! announcement was lost, and renews this replica's tickets.
//!
//! Invariant 4 of docs/ARCHITECTURE.md (not silent when full) across lost wake-ups: a waiter is woken by the poll
//! even when the hand-over's announcement never reached it, and its ticket outlives a slow
//! replica only while that replica renews it.

use std::{sync::Arc, time::Duration};

use tokio::time::Instant;

use super::Scheduler;
use crate::{
    model::TicketState,
    store::StoreError,
    waiters::{Event, WaitQueue},
};

impl Scheduler {
    /// Starts `pool`'s poll task unless it runs: while this replica has waiters of the pool
    /// it hands over slots no call announced (expiries, ended cooldowns), tells waiters of
    /// slots whose announcement was lost (they claim them themselves), and renews this
    /// replica's tickets every third of `scheduler.line_ticket_ttl_ms`. It ends when the pool
    /// has no waiters here.
    pub(super) fn poll_line(&self, queue: &Arc<WaitQueue>, pool: &str) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if !queue.start_polling() {
            return;
        }
        let (store, queue, pool) = (self.store.clone(), queue.clone(), pool.to_owned());
        let (poll, stop, ttl) = (self.poll, self.shutdown.clone(), self.ticket_ttl_ms);
        let renew_every = Duration::from_millis(ttl / 3);
        // Renewals are due every third of the ticket TTL even when the poll is longer.
        let pause = poll.min(renew_every);
        runtime.spawn(async move {
            let mut renewed = Instant::now();
            loop {
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = stop.cancelled() => return,
                }
                if queue.stop_polling_if_idle() {
                    return;
                }
                // A renewal counts once the store took it: one that failed is sent again on
                // the next poll, not a third of the TTL later (two lost renewals in a row
                // would let a live waiter's ticket expire).
                let sent = Instant::now();
                let tokens = if sent.duration_since(renewed) >= renew_every {
                    queue.tokens()
                } else {
                    Vec::new()
                };
                match store.keep_waiting(&pool, &tokens, ttl).await {
                    Ok(states) => {
                        if !tokens.is_empty() {
                            renewed = sent;
                        }
                        for (token, state) in tokens.iter().zip(states) {
                            let event = match state {
                                TicketState::Waiting | TicketState::Granted(_) => continue,
                                // The announcement was lost: the waiter claims it now.
                                TicketState::Handed => Event::Handed,
                                TicketState::Gone => Event::Gone,
                            };
                            queue.tell(token.as_str(), event);
                        }
                    }
                    Err(StoreError::NotSeeded(_)) => {
                        for token in queue.tokens() {
                            queue.tell(token.as_str(), Event::Gone);
                        }
                    }
                    Err(e) => {
                        tracing::debug!(pool = %pool, error = %e, "the line's poll failed");
                        queue.saw_error(&e);
                    }
                }
            }
        });
    }
}
