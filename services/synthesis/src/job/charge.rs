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
    error::SynthesisError,
    usage::{Charge, Meter},
};

/// Longest an attempt waits for its Charge (with the key's slot held meanwhile).
pub(super) const MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

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
