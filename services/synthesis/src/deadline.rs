//! The request's time budget: the caller's gRPC deadline (`grpc-timeout`), else the configured
//! `synthesis.default_deadline_ms`. Work stops [`MARGIN`] early so DEADLINE_EXCEEDED (with the
//! attempts made) reaches the caller before tonic's own timer cancels the call.

use std::time::Duration;

use tokio::time::Instant;
use tonic::metadata::MetadataMap;

/// Kept before the caller's deadline for the answer to travel back.
pub const MARGIN: Duration = Duration::from_millis(50);

/// When the request must be answered.
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    at: Instant,
    budget: Duration,
}

impl Deadline {
    /// From the request metadata, falling back to `default` when the caller set none.
    pub fn from_metadata(md: &MetadataMap, default: Duration) -> Self {
        let budget =
            voxpool_runtime::serve::grpc_timeout(md).map_or(default, |d| d.saturating_sub(MARGIN));
        Self::after(budget)
    }

    /// `budget` from now.
    pub fn after(budget: Duration) -> Self {
        Self {
            at: Instant::now() + budget,
            budget,
        }
    }

    /// The instant work must end.
    pub fn at(&self) -> Instant {
        self.at
    }

    /// The whole budget in milliseconds.
    pub fn budget_ms(&self) -> u64 {
        u64::try_from(self.budget.as_millis()).unwrap_or(u64::MAX)
    }

    /// Time left (zero when passed).
    pub fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    /// True when no time is left.
    pub fn passed(&self) -> bool {
        self.remaining().is_zero()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_caller_deadline_the_default_budget_applies() {
        let d = Deadline::from_metadata(&MetadataMap::new(), Duration::from_secs(60));
        assert_eq!(d.budget_ms(), 60_000);
        assert!(!d.passed());
    }
}
