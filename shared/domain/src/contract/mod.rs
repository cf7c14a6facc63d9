//! The typed contract between the services and their clients: the outcome a caller reports
//! for a vendor call ([`Outcome`]), the `google.rpc.ErrorInfo` reasons each service answers
//! with ([`SchedulerReason`], [`SynthesisReason`], [`CatalogReason`]) and the one rule a
//! client applies to decide whether a failed call is worth another try ([`retry_of`]).
//!
//! Rule for this module: a name that crosses a process boundary and that a client acts on is
//! an enum here, converted to and from the wire in this one place; servers build errors from
//! these enums and clients read them back through them, so a reason is never a retyped
//! string and never inferred from message text.

mod outcome;
mod reason;

pub use outcome::{Outcome, UnknownOutcome};
pub use reason::{
    AuthReason, CatalogReason, JobsReason, Reason, Retry, SchedulerReason, SynthesisReason,
    is_transport, retry_of,
};

use crate::untrusted::{FieldProblem, check_field};

/// Longest `tenant` an Acquire or Synthesize request may carry, in characters.
pub const MAX_TENANT_CHARS: usize = 64;

/// A `tenant` as the scheduler accepts it: at most [`MAX_TENANT_CHARS`] characters, no control
/// or invisible formatting characters (it becomes a metric attribute). Checked by the
/// scheduler, by synthesis before it takes a lease, and by voxctl before it sends anything.
pub fn check_tenant(tenant: &str) -> Result<(), FieldProblem> {
    check_field(tenant, MAX_TENANT_CHARS)
}

/// `(cached, chunks)` of one response: the text chunks synthesis split the request into, and
/// how many of them its audio cache served. Synthesis reports only `cached_chunks`; every other
/// chunk was spoken by exactly one vendor call that succeeded (`attempts[]` lists every vendor
/// call, failed ones included, and a cached chunk makes none), so `chunks` is `cached_chunks`
/// plus the SUCCESS attempts, and at least 1 (a response always holds a chunk's audio).
pub fn chunks_of(response: &voxpool_proto::synthesis::v1::SynthesizeResponse) -> (u64, u64) {
    let cached = u64::try_from(response.cached_chunks).unwrap_or(0);
    let spoken = response
        .attempts
        .iter()
        .filter(|a| a.outcome == voxpool_proto::scheduler::v1::Outcome::Success as i32)
        .count() as u64;
    (cached, (cached + spoken).max(1))
}
