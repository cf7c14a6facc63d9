//! How vendor answers become outcomes: the error classification of VENDORS.md ("How errors
//! must be classified"), `Retry-After` parsing, secret scrubbing, and [`ErrorAnswer`], the one
//! path from a vendor's error document to a [`VendorFailure`] that every adapter takes.
//!
//! Guards invariant 8 (params are applied or refused: [`require_range`], [`refuse_unknown_extra`]
//! never clamp) and the secret rule (a credential never reaches a [`VendorFailure`] message:
//! every message goes through [`scrub`]).
//!
//! # Classification shared by all vendors
//! | what happened | outcome |
//! |---|---|
//! | HTTP 429 | `RATE_LIMITED` (`Retry-After` / `retry-after-ms` read) |
//! | HTTP 401 / 403 | `KEY_INVALID` |
//! | HTTP 402 | `QUOTA_EXHAUSTED` |
//! | HTTP 408, connect error, read timeout, connection reset | `TIMEOUT` |
//! | other 4xx | `CLIENT_ERROR` |
//! | 5xx, any other status, 200 without audio | `UPSTREAM_ERROR` |
//!
//! Adapters refine this with the vendor's body code first (several vendors answer errors with
//! HTTP 200), then fall back to [`outcome_for_status`].

use std::time::SystemTime;

use reqwest::header::HeaderMap;
use voxpool_shared::{contract::Outcome, secret::Secret};

use super::HttpReply;
use crate::{
    audio,
    vendor::{AudioFormat, KeyCredential, VendorFailure},
};

/// Longest vendor message kept in a [`VendorFailure`], in characters.
const MAX_MESSAGE_CHARS: usize = 300;

/// Builds a failure whose message is `"<provider>: <message>"`, scrubbed of `secret` and cut
/// to a readable length.
pub fn failure(
    provider: &str,
    outcome: Outcome,
    http_status: Option<u16>,
    retry_after_ms: Option<u64>,
    message: impl AsRef<str>,
    secret: Option<&Secret>,
) -> VendorFailure {
    VendorFailure {
        outcome,
        http_status,
        retry_after_ms,
        message: scrub(&format!("{provider}: {}", message.as_ref()), secret),
    }
}

/// Removes the secret from a vendor-supplied text: the exact value, and any word that carries
/// a recognisable piece of it (vendors such as OpenAI echo a masked key like `sk-ab***wxyz`:
/// for secrets of 12+ characters, a word containing its first 6 or last 4 characters is
/// replaced). Control characters become spaces; the result is at most 300 characters.
pub fn scrub(text: &str, secret: Option<&Secret>) -> String {
    let mut out = text.to_owned();
    if let Some(secret) = secret.map(Secret::expose).filter(|s| !s.is_empty()) {
        out = out.replace(secret, "<redacted>");
        let chars: Vec<char> = secret.chars().collect();
        if chars.len() >= 12 {
            let head: String = chars[..6].iter().collect();
            let tail: String = chars[chars.len() - 4..].iter().collect();
            out = out
                .split(' ')
                .map(|word| {
                    if word.contains(&head) || word.contains(&tail) {
                        "<redacted>"
                    } else {
                        word
                    }
                })
                .collect::<Vec<_>>()
                .join(" ");
        }
    }
    let cleaned: String = out
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if cleaned.chars().count() > MAX_MESSAGE_CHARS {
        let cut: String = cleaned.chars().take(MAX_MESSAGE_CHARS).collect();
        format!("{cut}…")
    } else {
        cleaned
    }
}

/// The outcome an HTTP status implies when the body says nothing more specific.
pub fn outcome_for_status(status: u16) -> Outcome {
    match status {
        401 | 403 => Outcome::KeyInvalid,
        402 => Outcome::QuotaExhausted,
        408 => Outcome::Timeout,
        429 => Outcome::RateLimited,
        400..=499 => Outcome::ClientError,
        _ => Outcome::UpstreamError,
    }
}

/// `retry-after-ms` (OpenAI) or `Retry-After` (delta-seconds, fractional seconds, or an HTTP
/// date relative to `now`) in milliseconds; without either, the rate-limit window's reset:
/// OpenAI's `x-ratelimit-reset-requests` (a duration such as `1s`, `6m0s`, `250ms`) or the
/// common `x-ratelimit-reset` (seconds until the reset, or a Unix time in seconds). A date in
/// the past gives 0; garbage gives `None`.
pub fn retry_after_ms(headers: &HeaderMap, now: SystemTime) -> Option<u64> {
    retry_after_header_ms(headers, now).or_else(|| rate_limit_reset_ms(headers, now))
}

/// `x-ratelimit-reset-requests` / `x-ratelimit-reset` in ms from `now` (see [`retry_after_ms`]).
fn rate_limit_reset_ms(headers: &HeaderMap, now: SystemTime) -> Option<u64> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(d) = header("x-ratelimit-reset-requests").and_then(reset_duration_ms) {
        return Some(d);
    }
    let secs = header("x-ratelimit-reset")?.parse::<u64>().ok()?;
    let now_secs = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // A value past 2001-09-09 in seconds is a Unix time, anything smaller a delay.
    if secs > 1_000_000_000 {
        Some(secs.saturating_sub(now_secs).saturating_mul(1000))
    } else {
        Some(secs.saturating_mul(1000))
    }
}

/// A duration such as `1s`, `6m0s`, `250ms` (OpenAI's reset headers) in ms, by `humantime`.
fn reset_duration_ms(v: &str) -> Option<u64> {
    let d = humantime::parse_duration(v).ok()?;
    Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn retry_after_header_ms(headers: &HeaderMap, now: SystemTime) -> Option<u64> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(ms.ceil() as u64);
    }
    let value = header("retry-after")?;
    if let Ok(secs) = value.parse::<u64>() {
        return Some(secs.saturating_mul(1000));
    }
    if let Ok(secs) = value.parse::<f64>()
        && secs.is_finite()
        && secs >= 0.0
    {
        return Some((secs * 1000.0).ceil() as u64);
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(now)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    )
}

/// The `Content-Type` media type, lowercased, without parameters.
pub fn media_type(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(reqwest::header::CONTENT_TYPE)?.to_str().ok()?;
    Some(
        value
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase(),
    )
}

/// True when a response is a document (JSON, text, HTML, XML) rather than audio: by its
/// `Content-Type`, or, without one, because the body parses as a JSON object.
pub fn is_document(headers: &HeaderMap, body: &[u8]) -> bool {
    if let Some(media) = media_type(headers)
        && (media.starts_with("text/")
            || media.contains("json")
            || media.contains("xml")
            || media.contains("html"))
    {
        return true;
    }
    body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
        && serde_json::from_slice::<serde_json::Value>(body).is_ok_and(|v| v.is_object())
}

/// Checks a 200 response of a vendor that answers with raw audio bytes: refuses documents
/// (a JSON error with status 200), empty bodies and bytes that are not `format`.
pub fn raw_audio_or_failure(
    provider: &str,
    reply: &HttpReply,
    format: AudioFormat,
    secret: Option<&Secret>,
) -> Result<(), VendorFailure> {
    let status = Some(reply.status.as_u16());
    if reply.body.is_empty() {
        return Err(failure(
            provider,
            Outcome::UpstreamError,
            status,
            None,
            "HTTP 200 with an empty body",
            secret,
        ));
    }
    if let Err(e) = audio::sniff(format, &reply.body) {
        return Err(failure(
            provider,
            Outcome::UpstreamError,
            status,
            None,
            format!(
                "HTTP 200 but the body is not {} audio: {e}",
                format_name(format)
            ),
            secret,
        ));
    }
    Ok(())
}

/// The proto name of a format (`WAV`, `MP3`, `OGG_OPUS`, `PCM`), as callers spell it.
pub fn format_name(format: AudioFormat) -> &'static str {
    match format {
        AudioFormat::Wav => "WAV",
        AudioFormat::Mp3 => "MP3",
        AudioFormat::OggOpus => "OGG_OPUS",
        AudioFormat::Pcm => "PCM",
    }
}

/// The key's credential, or a `KEY_INVALID` failure when the config gave none.
pub fn require_secret<'a>(
    provider: &str,
    key: &'a KeyCredential,
) -> Result<&'a Secret, VendorFailure> {
    match &key.secret {
        Some(secret) if !secret.is_empty() => Ok(secret),
        _ => Err(failure(
            provider,
            Outcome::KeyInvalid,
            None,
            None,
            format!("key {} has no credential configured", key.key_id),
            None,
        )),
    }
}

/// A vendor's error answer as an adapter read it from the vendor's document.
#[derive(Clone, Debug)]
pub struct ErrorAnswer<'a> {
    /// HTTP status of the answer (200 when the vendor reports errors in the body).
    pub status: u16,
    /// Its headers (`Retry-After` is read from them).
    pub headers: &'a HeaderMap,
    /// Its body (quoted, cut, when the document names neither code nor message).
    pub body: &'a [u8],
    /// The vendor's error code as the message should show it (`rate_limit_exceeded`,
    /// `code 3003`), empty when the document has none.
    pub code: String,
    /// The vendor's error message, empty when none.
    pub message: &'a str,
    /// What the vendor's code means (VENDORS.md), when the adapter knows it.
    pub outcome: Option<Outcome>,
}

impl ErrorAnswer<'_> {
    /// The one path from a vendor's error answer to a failure: the vendor's own code decides
    /// when known, else the HTTP status ([`outcome_for_status`]; an error sent with HTTP 200
    /// is UPSTREAM_ERROR). The message is `HTTP <status> <code>: <message>`, or the body's
    /// first 200 bytes when the vendor named neither; it is scrubbed of `secret`.
    pub fn failure(self, provider: &str, secret: Option<&Secret>) -> VendorFailure {
        let status = self.status;
        let outcome = self.outcome.unwrap_or(if status == 200 {
            Outcome::UpstreamError
        } else {
            outcome_for_status(status)
        });
        let detail = match (self.code.is_empty(), self.message.is_empty()) {
            (true, true) => {
                String::from_utf8_lossy(&self.body[..self.body.len().min(200)]).into_owned()
            }
            (true, false) => self.message.to_owned(),
            (false, _) => format!("{}: {}", self.code, self.message),
        };
        failure(
            provider,
            outcome,
            Some(status),
            retry_after_ms(self.headers, SystemTime::now()),
            format!("HTTP {status} {}", detail.trim()),
            secret,
        )
    }
}

impl<'a> ErrorAnswer<'a> {
    /// An answer of `reply` with the vendor's `code`, `message` and the `outcome` they mean.
    pub fn of(
        reply: &'a HttpReply,
        code: String,
        message: &'a str,
        outcome: Option<Outcome>,
    ) -> Self {
        Self {
            status: reply.status.as_u16(),
            headers: &reply.headers,
            body: &reply.body,
            code,
            message,
            outcome,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use reqwest::header::{HeaderValue, RETRY_AFTER};

    use super::*;

    #[test]
    fn status_table_matches_vendors_md() {
        for (status, outcome) in [
            (400, Outcome::ClientError),
            (401, Outcome::KeyInvalid),
            (402, Outcome::QuotaExhausted),
            (403, Outcome::KeyInvalid),
            (404, Outcome::ClientError),
            (408, Outcome::Timeout),
            (415, Outcome::ClientError),
            (422, Outcome::ClientError),
            (429, Outcome::RateLimited),
            (500, Outcome::UpstreamError),
            (502, Outcome::UpstreamError),
            (503, Outcome::UpstreamError),
            (302, Outcome::UpstreamError),
        ] {
            assert_eq!(outcome_for_status(status), outcome, "status {status}");
        }
    }

    #[test]
    fn retry_after_reads_seconds_fractions_dates_and_ms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let with = |name: &'static str, v: &str| {
            let mut h = HeaderMap::new();
            h.insert(name, HeaderValue::from_str(v).unwrap());
            h
        };
        assert_eq!(retry_after_ms(&with("retry-after", "7"), now), Some(7000));
        assert_eq!(retry_after_ms(&with("retry-after", "0.25"), now), Some(250));
        assert_eq!(
            retry_after_ms(&with("retry-after-ms", "120"), now),
            Some(120)
        );
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(
            retry_after_ms(&with(RETRY_AFTER.as_str(), &later), now),
            Some(30_000)
        );
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(retry_after_ms(&with("retry-after", &earlier), now), Some(0));
        assert_eq!(retry_after_ms(&with("retry-after", "soon"), now), None);
        assert_eq!(retry_after_ms(&HeaderMap::new(), now), None);
        // Without Retry-After: the rate-limit window's reset.
        assert_eq!(
            retry_after_ms(&with("x-ratelimit-reset-requests", "6m0s"), now),
            Some(360_000)
        );
        assert_eq!(
            retry_after_ms(&with("x-ratelimit-reset-requests", "250ms"), now),
            Some(250)
        );
        assert_eq!(
            retry_after_ms(&with("x-ratelimit-reset", "3"), now),
            Some(3000)
        );
        let unix = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 5;
        assert_eq!(
            retry_after_ms(&with("x-ratelimit-reset", &unix.to_string()), now),
            Some(5000),
            "a Unix time in seconds"
        );
    }

    #[test]
    fn scrub_removes_the_secret_and_masked_echoes() {
        let secret = Secret::new("sk-test-0123456789abcdef");
        let msg =
            "Incorrect API key provided: sk-tes***********cdef. key sk-test-0123456789abcdef again";
        let out = scrub(msg, Some(&secret));
        assert!(!out.contains("sk-test-0123456789abcdef"), "{out}");
        assert!(!out.contains("cdef"), "{out}");
        assert!(out.contains("Incorrect API key provided"), "{out}");
        let long = "x".repeat(1000);
        assert!(scrub(&long, None).chars().count() <= MAX_MESSAGE_CHARS + 1);
        assert_eq!(scrub("line\nbreak", None), "line break");
    }

    #[test]
    fn documents_are_never_taken_for_audio() {
        let mut json = HeaderMap::new();
        json.insert(
            "content-type",
            HeaderValue::from_static("application/json; charset=utf-8"),
        );
        assert!(is_document(&json, b"RIFF...."));
        assert!(is_document(
            &HeaderMap::new(),
            br#" {"error":{"code":"x"}}"#
        ));
        assert!(!is_document(&HeaderMap::new(), &[0x7B, 0x00, 0x12, 0x34]));
        assert!(audio::sniff(AudioFormat::Mp3, &[0xFF, 0xFB, 0x90, 0xC0]).is_ok());
        assert!(audio::sniff(AudioFormat::Mp3, b"{\"a\":1}").is_err());
        assert!(audio::sniff(AudioFormat::Pcm, &[1, 2, 3]).is_err());
    }

    #[test]
    fn an_error_answer_shows_code_and_message_or_the_body_and_reads_retry_after() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from_static("3"));
        let secret = Secret::new("sk-test-0123456789abcdef");
        let f = ErrorAnswer {
            status: 429,
            headers: &headers,
            body: b"{}",
            code: "rate_limit_exceeded".into(),
            message: "slow down sk-test-0123456789abcdef",
            outcome: None,
        }
        .failure("openai", Some(&secret));
        assert_eq!(f.outcome, Outcome::RateLimited);
        assert_eq!(f.retry_after_ms, Some(3000));
        assert_eq!(f.http_status, Some(429));
        assert!(
            f.message
                .starts_with("openai: HTTP 429 rate_limit_exceeded: slow down"),
            "{}",
            f.message
        );
        assert!(!f.message.contains("0123456789"), "{}", f.message);
        let no_doc = HeaderMap::new();
        let f = ErrorAnswer {
            status: 200,
            headers: &no_doc,
            body: b"<html>busy</html>",
            code: String::new(),
            message: "",
            outcome: None,
        }
        .failure("azure", None);
        assert_eq!(
            f.outcome,
            Outcome::UpstreamError,
            "an error in a 200 is the vendor's"
        );
        assert!(f.message.contains("<html>busy</html>"), "{}", f.message);
        let f = ErrorAnswer {
            status: 200,
            headers: &no_doc,
            body: b"{}",
            code: "code 1004".into(),
            message: "auth",
            outcome: Some(Outcome::KeyInvalid),
        }
        .failure("minimax", None);
        assert_eq!(f.outcome, Outcome::KeyInvalid, "the vendor's code decides");
    }
}
