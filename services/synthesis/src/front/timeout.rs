//! A client's deadline over HTTP: `X-Voxpool-Timeout` and the OpenAI SDKs' `X-Stainless-Timeout`,
//! seconds (fractions allowed), read the way the gRPC side reads `grpc-timeout`
//! ([`Deadline::from_metadata`]): the job gets the client's time less [`MARGIN`], so its
//! DEADLINE_EXCEEDED (504 with the attempts made) reaches the client before it gives up. The
//! time is bounded by the server's `--request-timeout` (a longer one would be cut there, without
//! the attempts); with neither header the job gets `synthesis.default_deadline_ms`. When both
//! are sent the shorter applies. A value that is not a positive number of seconds, or a header
//! sent twice, is a 400 naming the header.
//!
//! The Python SDK sends `X-Stainless-Read-Timeout` instead: how long it waits for the *next*
//! bytes of an answer, not for the whole of it (a long stream outlasts it), so it is no
//! deadline and is not read; send `X-Stainless-Timeout` or `X-Voxpool-Timeout` from it with
//! `extra_headers`.

use std::time::Duration;

use axum::http::HeaderMap;

use super::error::ApiError;
use crate::deadline::{Deadline, MARGIN};

/// The headers read, as they are named in errors.
const HEADERS: [&str; 2] = ["X-Voxpool-Timeout", "X-Stainless-Timeout"];

/// The deadline of a request with `headers` (module doc): `default` without a header, at most
/// `max`. Errors: 400 naming the header.
pub(super) fn deadline(
    headers: &HeaderMap,
    default: Duration,
    max: Duration,
) -> Result<Deadline, ApiError> {
    let mut asked: Option<Duration> = None;
    for name in HEADERS {
        let mut values = headers.get_all(name).iter();
        let Some(value) = values.next() else {
            continue;
        };
        if values.next().is_some() {
            return Err(ApiError::invalid(name, "sent twice: send it once"));
        }
        let seconds = value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s > 0.0)
            .ok_or_else(|| {
                ApiError::invalid(
                    name,
                    format!(
                        "must be a positive number of seconds (such as 30 or 2.5), got {}",
                        voxpool_domain::untrusted::quote(&String::from_utf8_lossy(
                            value.as_bytes()
                        ))
                    ),
                )
            })?;
        // Past what a Duration holds is past `max` anyway.
        let time = Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX);
        asked = Some(asked.map_or(time, |a| a.min(time)));
    }
    Ok(match asked {
        Some(time) => Deadline::after(time.min(max).saturating_sub(MARGIN)),
        None => Deadline::after(default),
    })
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    const DEFAULT: Duration = Duration::from_secs(60);
    const MAX: Duration = Duration::from_secs(900);

    fn with(pairs: &[(&'static str, &'static str)]) -> Result<Deadline, ApiError> {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, value.parse().unwrap());
        }
        deadline(&headers, DEFAULT, MAX)
    }

    #[test]
    fn a_client_deadline_is_its_time_less_the_margin_within_the_servers_maximum() {
        assert_eq!(with(&[]).unwrap().budget_ms(), 60_000, "the default");
        assert_eq!(
            with(&[("x-stainless-timeout", "2.5")]).unwrap().budget_ms(),
            2_450
        );
        assert_eq!(
            with(&[("X-Voxpool-Timeout", "10")]).unwrap().budget_ms(),
            9_950
        );
        assert_eq!(
            with(&[("x-voxpool-timeout", "10"), ("x-stainless-timeout", "3")])
                .unwrap()
                .budget_ms(),
            2_950,
            "the shorter of the two"
        );
        assert_eq!(
            with(&[("x-stainless-timeout", "86400")])
                .unwrap()
                .budget_ms(),
            899_950,
            "bounded by --request-timeout"
        );
        assert_eq!(
            with(&[("x-stainless-timeout", "1e300")])
                .unwrap()
                .budget_ms(),
            899_950
        );
    }

    #[test]
    fn a_bad_value_is_400_naming_the_header() {
        for (name, value) in [
            ("x-stainless-timeout", "soon"),
            ("x-stainless-timeout", "0"),
            ("x-voxpool-timeout", "-3"),
            ("x-voxpool-timeout", "NaN"),
            ("x-voxpool-timeout", "inf"),
            ("x-voxpool-timeout", ""),
        ] {
            let e = with(&[(name, value)]).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{name}: {value}");
            assert!(
                e.param
                    .as_deref()
                    .is_some_and(|p| p.eq_ignore_ascii_case(name)),
                "{name}: {value}: {:?}",
                e.param
            );
        }
        let e = with(&[("x-voxpool-timeout", "5"), ("x-voxpool-timeout", "6")]).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("X-Voxpool-Timeout"));
    }
}
