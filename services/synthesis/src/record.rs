//! [`AttemptRecord`]: what one vendor call under one lease did, for the response's `attempts`
//! (its proto form: `crate::convert::attempt`) and for error details (invariant 9 of docs/ARCHITECTURE.md: exhaustion
//! names every key and upstream tried).

use std::fmt;

use voxpool_domain::contract::Outcome;

/// One vendor call made for a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptRecord {
    /// `upstream/key`.
    pub key_id: String,
    /// The key's upstream.
    pub upstream_id: String,
    /// How it ended.
    pub outcome: Outcome,
    /// Vendor HTTP status, when there was a response.
    pub http_status: Option<u16>,
    /// Wall time of the call (ms).
    pub latency_ms: u64,
    /// Vendor message, secrets removed; empty on success.
    pub message: String,
    /// The vendor's `Retry-After` (ms), when given.
    pub retry_after_ms: Option<u64>,
}

/// `acct-a/app-1 RATE_LIMITED (429) after 12ms: too many requests`.
impl fmt::Display for AttemptRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.key_id, self.outcome.wire_name())?;
        if let Some(status) = self.http_status {
            write!(f, " ({status})")?;
        }
        write!(f, " after {}ms", self.latency_ms)?;
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

/// `a; b; c` — every attempt on one line.
pub fn summary(attempts: &[AttemptRecord]) -> String {
    attempts
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_key_outcome_status_latency_and_message() {
        let a = AttemptRecord {
            key_id: "acct-a/app-1".into(),
            upstream_id: "acct-a".into(),
            outcome: Outcome::RateLimited,
            http_status: Some(429),
            latency_ms: 12,
            message: "slow down".into(),
            retry_after_ms: Some(1000),
        };
        assert_eq!(
            a.to_string(),
            "acct-a/app-1 RATE_LIMITED (429) after 12ms: slow down"
        );
        assert_eq!(crate::convert::attempt(&a).http_status, 429);
    }
}
