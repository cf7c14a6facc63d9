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
        let budget = grpc_timeout(md).map_or(default, |d| d.saturating_sub(MARGIN));
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

/// The `grpc-timeout` header (`<digits><H|M|S|m|u|n>`), if present and well formed.
pub fn grpc_timeout(md: &MetadataMap) -> Option<Duration> {
    let raw = md.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = raw.split_at(raw.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_units_parse() {
        let mut md = MetadataMap::new();
        for (raw, want) in [
            ("5S", Duration::from_secs(5)),
            ("250m", Duration::from_millis(250)),
            ("2M", Duration::from_secs(120)),
        ] {
            md.insert("grpc-timeout", raw.parse().unwrap());
            assert_eq!(grpc_timeout(&md), Some(want));
        }
        md.insert("grpc-timeout", "12x".parse().unwrap());
        assert_eq!(grpc_timeout(&md), None);
    }

    #[test]
    fn without_a_caller_deadline_the_default_budget_applies() {
        let d = Deadline::from_metadata(&MetadataMap::new(), Duration::from_secs(60));
        assert_eq!(d.budget_ms(), 60_000);
        assert!(!d.passed());
    }
}
