//! How a vendor call went, as a caller reports it to the scheduler (`Report.outcome`), and
//! its one conversion to and from the wire enum `voxpool.scheduler.v1.Outcome`.

use std::fmt;

use voxpool_proto::scheduler::v1 as pb;

/// How a vendor call went, as reported to the scheduler (`Report.outcome`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Audio came back.
    Success,
    /// 429 or the vendor's request-rate error: the key cools for `Retry-After`.
    RateLimited,
    /// 5xx or a vendor busy code: counts towards the failure backoff.
    UpstreamError,
    /// No answer in time (connect, read or the attempt timeout): counts like UpstreamError.
    Timeout,
    /// The vendor rejected the credential: the key is taken out.
    KeyInvalid,
    /// The account's balance or quota is spent: the key is taken out.
    QuotaExhausted,
    /// The request itself was bad; says nothing about the key.
    ClientError,
    /// The vendor refused because the key runs as many requests as the vendor allows it now:
    /// lowers the key's effective capacity (adaptive pools); no cooldown.
    ConcurrencyLimited,
}

impl Outcome {
    /// Every outcome, in wire order.
    pub const ALL: [Outcome; 8] = [
        Outcome::Success,
        Outcome::RateLimited,
        Outcome::UpstreamError,
        Outcome::Timeout,
        Outcome::KeyInvalid,
        Outcome::QuotaExhausted,
        Outcome::ClientError,
        Outcome::ConcurrencyLimited,
    ];

    /// Stable lowercase name, used in the store, in logs and as a metric attribute.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::RateLimited => "rate_limited",
            Outcome::UpstreamError => "upstream_error",
            Outcome::Timeout => "timeout",
            Outcome::KeyInvalid => "key_invalid",
            Outcome::QuotaExhausted => "quota_exhausted",
            Outcome::ClientError => "client_error",
            Outcome::ConcurrencyLimited => "concurrency_limited",
        }
    }

    /// The wire enum's value name (`RATE_LIMITED`), as docs/API.md and grpcurl spell it.
    pub fn wire_name(self) -> &'static str {
        pb::Outcome::from(self).as_str_name()
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.wire_name())
    }
}

impl From<Outcome> for pb::Outcome {
    fn from(o: Outcome) -> Self {
        match o {
            Outcome::Success => pb::Outcome::Success,
            Outcome::RateLimited => pb::Outcome::RateLimited,
            Outcome::UpstreamError => pb::Outcome::UpstreamError,
            Outcome::Timeout => pb::Outcome::Timeout,
            Outcome::KeyInvalid => pb::Outcome::KeyInvalid,
            Outcome::QuotaExhausted => pb::Outcome::QuotaExhausted,
            Outcome::ClientError => pb::Outcome::ClientError,
            Outcome::ConcurrencyLimited => pb::Outcome::ConcurrencyLimited,
        }
    }
}

/// A wire outcome that is not one of [`Outcome`] (UNSPECIFIED or an unknown number).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0} is not an outcome: use SUCCESS, RATE_LIMITED, UPSTREAM_ERROR, TIMEOUT, KEY_INVALID, QUOTA_EXHAUSTED, CLIENT_ERROR or CONCURRENCY_LIMITED"
)]
pub struct UnknownOutcome(pub i32);

impl TryFrom<i32> for Outcome {
    type Error = UnknownOutcome;

    fn try_from(raw: i32) -> Result<Self, UnknownOutcome> {
        match pb::Outcome::try_from(raw) {
            Ok(pb::Outcome::Success) => Ok(Outcome::Success),
            Ok(pb::Outcome::RateLimited) => Ok(Outcome::RateLimited),
            Ok(pb::Outcome::UpstreamError) => Ok(Outcome::UpstreamError),
            Ok(pb::Outcome::Timeout) => Ok(Outcome::Timeout),
            Ok(pb::Outcome::KeyInvalid) => Ok(Outcome::KeyInvalid),
            Ok(pb::Outcome::QuotaExhausted) => Ok(Outcome::QuotaExhausted),
            Ok(pb::Outcome::ClientError) => Ok(Outcome::ClientError),
            Ok(pb::Outcome::ConcurrencyLimited) => Ok(Outcome::ConcurrencyLimited),
            Ok(pb::Outcome::Unspecified) | Err(_) => Err(UnknownOutcome(raw)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_round_trip_through_the_wire() {
        for o in Outcome::ALL {
            let wire = pb::Outcome::from(o) as i32;
            assert_eq!(Outcome::try_from(wire), Ok(o));
        }
        assert_eq!(Outcome::try_from(0), Err(UnknownOutcome(0)));
        assert_eq!(Outcome::try_from(99), Err(UnknownOutcome(99)));
        assert_eq!(Outcome::RateLimited.to_string(), "RATE_LIMITED");
    }
}
