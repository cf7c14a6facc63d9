//! How vendor answers become outcomes: the error classification of docs/VENDORS.md ("Outcome
//! classification"), `Retry-After` parsing, secret scrubbing, and [`ErrorAnswer`], the one
//! path from a vendor's error document to a [`VendorFailure`] that every adapter takes.
//!
//! Guards invariant 8 of docs/ARCHITECTURE.md (params are applied or refused: [`require_range`], [`refuse_unknown_extra`]
//! never clamp) and the secret rule (a credential never reaches a [`VendorFailure`] message:
//! every message goes through [`scrub`]).
//!
//! # Classification shared by all vendors
//! | what happened | outcome |
//! |---|---|
//! | HTTP 429 (any body but a spent quota's) | `RATE_LIMITED` (`Retry-After` / `retry-after-ms` read) |
//! | HTTP 503 with `Retry-After` | `RATE_LIMITED` (the server shedding load, back at the time it says) |
//! | HTTP 401 / 403 | `KEY_INVALID` |
//! | HTTP 402 | `QUOTA_EXHAUSTED` |
//! | HTTP 408, connect error, read timeout, connection reset | `TIMEOUT` |
//! | other 4xx | `CLIENT_ERROR` |
//! | 5xx, any other status, 200 without audio | `UPSTREAM_ERROR` |
//!
//! Adapters refine this with the vendor's body code first (several vendors answer errors with
//! HTTP 200), then fall back to [`outcome_for_status`].
//!
//! # Overload signals teach the adaptive capacity
//! RATE_LIMITED is an overload signal: on an adaptive pool the scheduler lowers the key's
//! effective capacity for it as for CONCURRENCY_LIMITED (a vendor's concurrency code), and
//! cools the key only for the `Retry-After` the vendor sent. So a plain 429 (self-hosted and
//! proxy-fronted OpenAI-compatible servers signal overload that way), a 503 with
//! `Retry-After`, and a read timeout of an upstream marked `queueing` (reported RATE_LIMITED
//! by `crate::job::attempt`) all teach the key its real limit. A spent quota or balance is never
//! one of them: it stays QUOTA_EXHAUSTED (OpenAI's 429 `insufficient_quota`).

use std::time::SystemTime;

use reqwest::header::HeaderMap;
use voxpool_domain::{contract::Outcome, secret::Secret};

use super::HttpReply;
use crate::{
    adapters::{AudioFormat, KeyCredential, VendorFailure},
    audio,
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
    /// What the vendor's code means (docs/VENDORS.md), when the adapter knows it.
    pub outcome: Option<Outcome>,
}

impl ErrorAnswer<'_> {
    /// The one path from a vendor's error answer to a failure: the vendor's own code decides
    /// when known, else the HTTP status ([`outcome_for_status`]; an error sent with HTTP 200
    /// is UPSTREAM_ERROR); an UPSTREAM_ERROR answered 503 with `Retry-After` is RATE_LIMITED. The message is `HTTP <status> <code>: <message>`, or the body's
    /// first 200 bytes when the vendor named neither; it is scrubbed of `secret`.
    pub fn failure(self, provider: &str, secret: Option<&Secret>) -> VendorFailure {
        let status = self.status;
        let mut outcome = self.outcome.unwrap_or(if status == 200 {
            Outcome::UpstreamError
        } else {
            outcome_for_status(status)
        });
        // A 503 that says when to come back is the server shedding load: an overload signal
        // (RATE_LIMITED: cooled as asked, and it lowers an adaptive key's effective capacity).
        let now = SystemTime::now();
        if status == 503
            && outcome == Outcome::UpstreamError
            && retry_after_header_ms(self.headers, now).is_some()
        {
            outcome = Outcome::RateLimited;
        }
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
            retry_after_ms(self.headers, now),
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
#[path = "classify_tests.rs"]
mod tests;
