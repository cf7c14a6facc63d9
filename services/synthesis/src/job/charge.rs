//! An attempt's usage Charge and the gate its vendor request waits at: the request starts at
//! once, its body held until the Charge is on the usage stream (`crate::adapters::gate`). A
//! replica killed once the Charge is written leaves it for the ledger (the vendor bills what
//! it was sent); one killed while waiting for a key or for the Charge leaves nothing, as the
//! vendor was sent nothing. A Charge the store never takes (`[usage] on_store_down =
//! "refuse"`) refuses the gate: the request never goes and the call fails UNAVAILABLE
//! `USAGE_STORE_UNAVAILABLE`.

use std::future::Future;

use tokio::time::Instant;

use crate::{
    adapters::gate::Gate,
    deadline::Deadline,
    error::SynthesisError,
    usage::{Charge, Meter},
};

/// Longest an attempt waits for its Charge (with the key's slot held meanwhile).
pub(super) const MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The pause before a chunk whose Charge the store did not take asks for a key again.
const PAUSE: std::time::Duration = std::time::Duration::from_millis(250);

/// After a Charge the store did not take (`refused`): waits a pause and answers `Ok` (ask
/// for a key again) while `remaining` leaves room for another try, else the refusal. The
/// key was released meanwhile, so a store that stays down holds no slot between tries, and
/// one failing over (a few seconds) costs the call a wait, not a failure.
pub(super) async fn pause_or(
    refused: SynthesisError,
    remaining: std::time::Duration,
) -> Result<(), SynthesisError> {
    if remaining <= PAUSE * 2 {
        return Err(refused);
    }
    tokio::time::sleep(PAUSE).await;
    Ok(())
}

/// Waits, holding no key, while the usage store is known not to take Charges
/// ([`Meter::store_answers`]); the refusal once the deadline leaves no room.
pub(super) async fn store_ready(meter: &Meter, deadline: &Deadline) -> Result<(), SynthesisError> {
    while let Err(down) = meter.store_answers() {
        pause_or(down, deadline.remaining()).await?;
    }
    Ok(())
}

/// The gate for the attempt of `charge` on key `key_id`, and the write that opens (or
/// refuses) it, tried until `until`; no gate when the meter writes no records.
pub(super) fn gated<'a>(
    meter: &'a Meter,
    charge: &Charge,
    key_id: &'a str,
    until: Instant,
) -> (Gate, impl Future<Output = Result<(), SynthesisError>> + 'a) {
    let (opener, gate) = if meter.records() {
        let (opener, gate) = Gate::closed();
        (Some(opener), gate)
    } else {
        (None, Gate::default())
    };
    let charge = charge.clone();
    let written = async move {
        let Some(opener) = opener else {
            return Ok(());
        };
        match meter.charge(&charge, key_id, until).await {
            Ok(()) => {
                opener.open();
                Ok(())
            }
            Err(e) => {
                opener.refuse();
                Err(e)
            }
        }
    };
    (gate, written)
}
