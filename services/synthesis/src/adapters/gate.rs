//! The gate a vendor request's body waits at: the attempt's usage Charge must be on the usage
//! stream before the vendor has the text (a replica killed after that leaves the Charge for
//! the ledger; see `crate::usage`). The request's head goes out at once, so the Charge's
//! write overlaps the vendor connection's own round trip instead of coming before it; a
//! vendor does nothing with a request whose body has not arrived.
//!
//! An adapter that sends HTTP passes its request's gate to `http::open`, which holds the body
//! (or, for a body it cannot hold apart, the whole request) until the gate opens; one that
//! sends nothing over HTTP waits on [`Gate::opened`] before it starts. The gate also opens
//! when its [`GateOpener`] is dropped unopened. It is refused ([`GateOpener::refuse`]) when
//! the Charge could not be written and `[usage] on_store_down = "refuse"`: the body never goes,
//! and the call ends as an error that blames no key.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use tokio::sync::watch;

/// Where a gate stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Closed,
    Open,
    /// The Charge could not be written: the request must not go (`[usage] on_store_down =
    /// "refuse"`).
    Refused,
}

/// Where a vendor request waits for its Charge (module doc). Open by default. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Gate(Option<watch::Receiver<State>>, Arc<AtomicBool>);

/// Opens its [`Gate`] or refuses it (or lets it open by being dropped).
#[derive(Debug)]
pub struct GateOpener(watch::Sender<State>);

impl Gate {
    /// A closed gate and what opens it.
    pub fn closed() -> (GateOpener, Self) {
        let (tx, rx) = watch::channel(State::Closed);
        (GateOpener(tx), Self(Some(rx), Arc::default()))
    }

    /// Notes that the held body was handed to the vendor's connection: the vendor has the
    /// text (a timeout after that is work it may bill).
    pub fn mark_sent(&self) {
        self.1.store(true, Ordering::Relaxed);
    }

    /// Whether a held body was handed to the vendor's connection ([`Gate::mark_sent`]);
    /// false for an open gate that held nothing.
    pub fn body_sent(&self) -> bool {
        self.1.load(Ordering::Relaxed)
    }

    /// Whether this gate holds a request at all (a metered call's), open yet or not.
    pub fn holds(&self) -> bool {
        self.0.is_some()
    }

    /// Whether the request may go now.
    pub fn is_open(&self) -> bool {
        self.0.as_ref().is_none_or(|rx| *rx.borrow() == State::Open)
    }

    /// Whether the request was refused: it must not be sent.
    pub fn is_refused(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|rx| *rx.borrow() == State::Refused)
    }

    /// Waits until the gate opens (true) or is refused (false).
    pub async fn opened(&self) -> bool {
        let Some(rx) = &self.0 else { return true };
        match rx.clone().wait_for(|s| *s != State::Closed).await {
            Ok(state) => *state == State::Open,
            // The opener is gone unopened and unrefused: the gate is open.
            Err(_) => *rx.borrow() != State::Refused,
        }
    }
}

impl GateOpener {
    /// Lets the request's body go.
    pub fn open(self) {
        self.0.send_replace(State::Open);
    }

    /// Keeps the request from ever going: its Charge could not be written.
    pub fn refuse(self) {
        self.0.send_replace(State::Refused);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_closed_gate_opens_when_opened_or_when_its_opener_is_dropped() {
        assert!(Gate::default().is_open());
        let (opener, gate) = Gate::closed();
        assert!(!gate.is_open());
        let waiting = tokio::spawn({
            let gate = gate.clone();
            async move { gate.opened().await }
        });
        opener.open();
        waiting.await.expect("the waiter ends once the gate opens");
        assert!(gate.is_open());

        let (opener, gate) = Gate::closed();
        drop(opener);
        assert!(gate.opened().await);
    }

    #[tokio::test]
    async fn a_refused_gate_never_opens() {
        let (opener, gate) = Gate::closed();
        let waiting = tokio::spawn({
            let gate = gate.clone();
            async move { gate.opened().await }
        });
        opener.refuse();
        assert!(
            !waiting
                .await
                .expect("the waiter ends once the gate is refused")
        );
        assert!(gate.is_refused());
        assert!(!gate.is_open());
    }
}
