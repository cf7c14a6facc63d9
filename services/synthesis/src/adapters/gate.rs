//! The gate a vendor request's body waits at: the attempt's usage Charge must be on the usage
//! stream before the vendor has the text (a replica killed after that leaves the Charge for
//! the ledger; see `crate::usage`). The request's head goes out at once, so the Charge's
//! write overlaps the vendor connection's own round trip instead of coming before it; a
//! vendor does nothing with a request whose body has not arrived.
//!
//! An adapter that sends HTTP passes its request's gate to `http::open`, which holds the body
//! (or, for a body it cannot hold apart, the whole request) until the gate opens; one that
//! sends nothing over HTTP waits on [`Gate::opened`] before it starts. The gate also opens
//! when its [`GateOpener`] is dropped unopened: the Charge's writer never fails a call.

use tokio::sync::watch;

/// Where a vendor request waits for its Charge (module doc). Open by default. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Gate(Option<watch::Receiver<bool>>);

/// Opens its [`Gate`] (or lets it open by being dropped).
#[derive(Debug)]
pub struct GateOpener(watch::Sender<bool>);

impl Gate {
    /// A closed gate and what opens it.
    pub fn closed() -> (GateOpener, Self) {
        let (tx, rx) = watch::channel(false);
        (GateOpener(tx), Self(Some(rx)))
    }

    /// Whether the request may go now.
    pub fn is_open(&self) -> bool {
        self.0.as_ref().is_none_or(|rx| *rx.borrow())
    }

    /// Waits until the gate opens.
    pub async fn opened(&self) {
        if let Some(rx) = &self.0 {
            // An error means the opener is gone: the gate is open.
            let _ = rx.clone().wait_for(|open| *open).await;
        }
    }
}

impl GateOpener {
    /// Lets the request's body go.
    pub fn open(self) {
        self.0.send_replace(true);
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
        gate.opened().await;
    }
}
