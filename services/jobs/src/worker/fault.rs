//! Faults of a replica rather than of its items (the parent module's doc): what they are, how
//! they are found (at start-up, on a call's answer, by the periodic re-check) and recorded.
//! Guards invariant 13's "only an item's own failure fails it".

use std::{sync::PoisonError, time::Duration};

use super::Workers;
use crate::synth::ReplicaFault;

/// How often a faulty replica checks whether its fault cleared.
pub const FAULT_RECHECK: Duration = Duration::from_secs(5);

/// Why a replica's workers are paused (module doc).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// What is wrong and what to do, for logs and health.
    pub why: String,
    /// Whether it is this replica's own misconfiguration (health NOT_SERVING), not an outage.
    pub not_serving: bool,
}

impl Workers {
    /// Why this replica's workers are paused, if they are (module doc).
    pub fn fault(&self) -> Option<Fault> {
        self.fault
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records a fault of this replica (logged when it is news).
    pub(super) fn found_fault(&self, found: Fault) {
        let mut fault = self.fault.lock().unwrap_or_else(PoisonError::into_inner);
        if fault.as_ref() != Some(&found) {
            tracing::error!(reason = %found.why, "workers paused: this replica cannot run items (they go back to the queue for other replicas); checking again every {}s", FAULT_RECHECK.as_secs());
            *fault = Some(found);
        }
    }

    /// The fault of a synthesis call: not reached at all, or this replica's worker token
    /// refused.
    pub(super) fn synthesis_fault(fault: &ReplicaFault) -> Fault {
        match fault {
            ReplicaFault::Unreachable(message) => Fault {
                why: format!(
                    "synthesis cannot be reached (check --synthesis and that synthesis runs): {message}"
                ),
                not_serving: false,
            },
            ReplicaFault::TokenRefused { message, .. } => Fault {
                why: format!(
                    "synthesis refuses this replica's worker token (VOXPOOL_CLIENT_TOKEN or --client-token-file: one of synthesis's [[client_tokens]] with \"synthesis\" in its services): {message}"
                ),
                not_serving: true,
            },
        }
    }

    /// The fault of a blob store that refused a write with `e`.
    pub(super) fn writes_refused(&self, e: &crate::results::BlobError) -> Fault {
        Fault {
            why: format!(
                "the blob store {} refuses this replica's writes ({e}): check --blob-store and its permissions or credentials",
                self.results.location()
            ),
            not_serving: true,
        }
    }

    /// Checks synthesis (reached, worker token accepted) and a blob write; records the
    /// outcome (module doc).
    pub(super) async fn check(&self) {
        let outcome = match self.synth.check_access().await {
            Err(error) => Err(Self::synthesis_fault(&error)),
            Ok(()) => self
                .results
                .probe_write(&self.consumer)
                .await
                .map_err(|e| self.writes_refused(&e)),
        };
        match outcome {
            Err(why) => self.found_fault(why),
            Ok(()) => {
                let mut fault = self.fault.lock().unwrap_or_else(PoisonError::into_inner);
                if fault.take().is_some() {
                    tracing::info!("workers resumed: the fault cleared");
                }
            }
        }
    }
}
