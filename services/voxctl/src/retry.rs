//! Which call failures are worth another try, and how long to wait before it.
//!
//! Whether a failure is retryable is decided once, in [`CallError::from_status`], by the
//! contract's [`retry_of`] over synthesis's typed reasons: a reason the server sent decides
//! (RESPONSE_TOO_LARGE never, KEYS_EXHAUSTED again, ...); without one, UNAVAILABLE,
//! RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED and transport failures (a status tonic built from a
//! connection error) are retried and everything else (INVALID_ARGUMENT, FAILED_PRECONDITION,
//! NOT_FOUND, ...) fails the item at once with the server's message. Never from message text.
//!
//! Delay before retry `n`: "full jitter" (a uniform draw in `0..=ceiling`, where the ceiling
//! grows exponentially from `base` up to `cap`; the ceiling sequence comes from `backon`),
//! but never less than the server's `google.rpc.RetryInfo` delay (itself capped by
//! [`RetryPolicy::max_server_delay`] so a bogus hint cannot stall a batch for hours).

use std::time::Duration;

use backon::ExponentialBuilder;
use rand::Rng as _;
use tonic::{Code, Status};
use tonic_types::StatusExt as _;
use voxpool_domain::contract::{Retry, SynthesisReason, is_transport, retry_of};

/// A failed Synthesize call, reduced to what retrying and reporting need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallError {
    /// The gRPC code (DEADLINE_EXCEEDED also for the client's own `--deadline`).
    pub code: Code,
    /// The server's message (or a local description).
    pub message: String,
    /// The server's RetryInfo delay.
    pub retry_after: Option<Duration>,
    /// Whether the status came from the transport (no server answer).
    pub transport: bool,
    /// The server's `google.rpc.ErrorInfo` reason, when it is one of synthesis's.
    pub reason: Option<SynthesisReason>,
    /// Whether the same call made again may succeed (decided from the typed reason, else
    /// the code; see the module doc).
    pub retry: Retry,
    /// The `ErrorInfo` metadata (for `RESPONSE_TOO_LARGE`: `bytes` and `limit`).
    pub metadata: std::collections::HashMap<String, String>,
}

/// How a call result counts for the circuit breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// The service answered (with audio or a definitive error).
    Up,
    /// The service is unreachable or failing (UNAVAILABLE, DEADLINE_EXCEEDED, transport).
    Down,
    /// Says nothing about availability (RESOURCE_EXHAUSTED: up but busy).
    Neutral,
}

impl CallError {
    /// From a status returned by the client.
    pub fn from_status(status: &Status) -> Self {
        let transport = is_transport(status);
        let details = status.get_error_details();
        let info = details.error_info();
        Self {
            code: status.code(),
            message: status.message().to_owned(),
            retry_after: details.retry_info().and_then(|r| r.retry_delay),
            transport,
            reason: SynthesisReason::of(status),
            retry: retry_of::<SynthesisReason>(status),
            metadata: info.map(|i| i.metadata.clone()).unwrap_or_default(),
        }
    }

    /// The client's own deadline ran out.
    pub fn deadline(deadline: Duration) -> Self {
        Self {
            code: Code::DeadlineExceeded,
            message: format!(
                "no answer within {} (--deadline)",
                humantime::format_duration(deadline)
            ),
            retry_after: None,
            transport: false,
            reason: None,
            retry: Retry::Again,
            metadata: std::collections::HashMap::new(),
        }
    }

    /// A failure decided here, not by a server (code OUT_OF_RANGE, never retried): e.g. audio
    /// that would pass the output format's size limit.
    pub fn local(message: String) -> Self {
        Self {
            code: Code::OutOfRange,
            message,
            retry_after: None,
            transport: false,
            reason: None,
            retry: Retry::Never,
            metadata: std::collections::HashMap::new(),
        }
    }

    /// Whether another attempt may succeed. A response over the message limit never does
    /// (the same text gives the same audio); [`CallError::too_large`] says how to split it.
    pub fn retryable(&self) -> bool {
        self.retry == Retry::Again
    }

    /// For a `RESPONSE_TOO_LARGE` answer: the audio's size and the server's limit (bytes).
    pub fn too_large(&self) -> Option<(u64, u64)> {
        if self.reason != Some(SynthesisReason::ResponseTooLarge) {
            return None;
        }
        let field = |k: &str| self.metadata.get(k).and_then(|v| v.parse::<u64>().ok());
        Some((field("bytes")?, field("limit")?))
    }

    /// How the failure counts for the circuit breaker.
    pub fn health(&self) -> Health {
        match self.code {
            _ if self.transport => Health::Down,
            Code::Unavailable | Code::DeadlineExceeded => Health::Down,
            Code::ResourceExhausted => Health::Neutral,
            _ => Health::Up,
        }
    }

    /// The code's canonical name (`UNAVAILABLE`), or `TRANSPORT` for transport failures.
    pub fn code_name(&self) -> String {
        if self.transport {
            return "TRANSPORT".into();
        }
        code_name(self.code)
    }
}

/// The canonical gRPC name of a code (`DEADLINE_EXCEEDED`).
pub fn code_name(code: Code) -> String {
    let camel = format!("{code:?}");
    let mut out = String::with_capacity(camel.len() + 4);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code_name(), self.message)
    }
}

/// Attempts and delays of one request.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    /// Most calls per request, the first included (at least 1).
    pub max_attempts: u32,
    /// First backoff ceiling.
    pub base: Duration,
    /// Highest backoff ceiling.
    pub cap: Duration,
    /// Longest server RetryInfo delay honoured.
    pub max_server_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            base: Duration::from_millis(200),
            cap: Duration::from_secs(20),
            max_server_delay: Duration::from_secs(300),
        }
    }
}

impl RetryPolicy {
    /// The backoff ceilings (no jitter; [`RetryPolicy::delay`] draws the actual wait), one per
    /// retry allowed.
    pub fn ceilings(&self) -> ExponentialBuilder {
        ExponentialBuilder::new()
            .with_min_delay(self.base)
            .with_max_delay(self.cap.max(self.base))
            .with_factor(2.0)
            .with_max_times(self.max_attempts.saturating_sub(1) as usize)
    }

    /// The wait before the next attempt: full jitter under `ceiling`, at least the server's
    /// RetryInfo delay.
    pub fn delay(&self, ceiling: Duration, error: &CallError) -> Duration {
        let jittered = full_jitter(ceiling);
        match error.retry_after {
            Some(server) => jittered.max(server.min(self.max_server_delay)),
            None => jittered,
        }
    }
}

/// A uniform draw in `0..=ceiling`.
pub fn full_jitter(ceiling: Duration) -> Duration {
    let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rand::rng().random_range(0..=nanos))
}

#[cfg(test)]
mod tests {
    use backon::BackoffBuilder as _;
    use tonic_types::{ErrorDetails, StatusExt as _};

    use super::*;

    #[test]
    fn only_unavailable_exhausted_deadline_and_transport_failures_are_retried() {
        for code in [
            Code::Unavailable,
            Code::ResourceExhausted,
            Code::DeadlineExceeded,
        ] {
            assert!(
                CallError::from_status(&Status::new(code, "x")).retryable(),
                "{code:?}"
            );
        }
        for code in [
            Code::InvalidArgument,
            Code::FailedPrecondition,
            Code::NotFound,
            Code::Unknown,
            Code::Internal,
        ] {
            assert!(
                !CallError::from_status(&Status::new(code, "x")).retryable(),
                "{code:?}"
            );
        }
        let transport = Status::from_error(Box::new(std::io::Error::other("connection reset")));
        let e = CallError::from_status(&transport);
        assert!(e.transport && e.retryable(), "{e:?}");
        assert_eq!(e.health(), Health::Down);
    }

    #[test]
    fn the_typed_reason_decides_over_the_code() {
        let with_reason = |code, reason: SynthesisReason| {
            CallError::from_status(&Status::with_error_details(
                code,
                "x",
                ErrorDetails::with_error_info(
                    reason.as_str(),
                    "voxpool.dev",
                    std::collections::HashMap::new(),
                ),
            ))
        };
        let broken = with_reason(Code::Aborted, SynthesisReason::VendorStreamBroken);
        assert_eq!(broken.reason, Some(SynthesisReason::VendorStreamBroken));
        assert!(
            broken.retryable(),
            "a broken vendor stream is worth another try"
        );
        let mismatch = with_reason(Code::ResourceExhausted, SynthesisReason::ResponseTooLarge);
        assert!(
            !mismatch.retryable(),
            "RESPONSE_TOO_LARGE never, whatever the code"
        );
    }

    #[test]
    fn resource_exhausted_is_neutral_and_client_errors_prove_the_service_up() {
        let health = |c| CallError::from_status(&Status::new(c, "x")).health();
        assert_eq!(health(Code::Unavailable), Health::Down);
        assert_eq!(health(Code::ResourceExhausted), Health::Neutral);
        assert_eq!(health(Code::InvalidArgument), Health::Up);
    }

    #[test]
    fn retry_info_is_read_and_acts_as_a_floor_under_the_jitter() {
        let status = Status::with_error_details(
            Code::ResourceExhausted,
            "pool full",
            ErrorDetails::with_retry_info(Some(Duration::from_millis(750))),
        );
        let e = CallError::from_status(&status);
        assert_eq!(e.retry_after, Some(Duration::from_millis(750)));
        let policy = RetryPolicy::default();
        for _ in 0..100 {
            let d = policy.delay(Duration::from_millis(100), &e);
            assert_eq!(d, Duration::from_millis(750));
        }
        let too_large = CallError::from_status(&Status::with_error_details(
            Code::ResourceExhausted,
            "too big",
            ErrorDetails::with_error_info(
                SynthesisReason::ResponseTooLarge.as_str(),
                "voxpool.synthesis",
                [
                    ("bytes".to_owned(), "900".to_owned()),
                    ("limit".to_owned(), "300".to_owned()),
                ],
            ),
        ));
        assert_eq!(too_large.too_large(), Some((900, 300)));
        assert!(!too_large.retryable(), "the same text can never fit");
        let hint_too_long = CallError {
            retry_after: Some(Duration::from_secs(86_400)),
            ..e
        };
        assert_eq!(
            policy.delay(Duration::ZERO, &hint_too_long),
            policy.max_server_delay
        );
    }

    #[test]
    fn full_jitter_stays_within_zero_and_the_ceiling() {
        let ceiling = Duration::from_millis(10);
        let draws: Vec<_> = (0..1000).map(|_| full_jitter(ceiling)).collect();
        assert!(draws.iter().all(|d| *d <= ceiling));
        assert!(draws.iter().any(|d| *d < ceiling / 2) && draws.iter().any(|d| *d > ceiling / 2));
    }

    #[test]
    fn ceilings_double_up_to_the_cap_and_allow_max_attempts_minus_one_retries() {
        let policy = RetryPolicy {
            max_attempts: 6,
            base: Duration::from_millis(100),
            cap: Duration::from_millis(500),
            ..RetryPolicy::default()
        };
        let ms: Vec<u128> = policy.ceilings().build().map(|d| d.as_millis()).collect();
        assert_eq!(ms, [100, 200, 400, 500, 500]);
    }

    #[test]
    fn code_names_are_the_canonical_grpc_spelling() {
        assert_eq!(code_name(Code::DeadlineExceeded), "DEADLINE_EXCEEDED");
        assert_eq!(code_name(Code::Ok), "OK");
        assert_eq!(
            CallError::deadline(Duration::from_secs(30)).code_name(),
            "DEADLINE_EXCEEDED"
        );
    }
}
