//! Shared plumbing of the cloud vendor adapters: one pooled HTTP client, the error
//! classification of VENDORS.md ("How errors must be classified"), secret scrubbing, audio
//! sanity checks and the param-refusal helpers every adapter's `check` uses.
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

use std::{
    collections::BTreeMap,
    fmt::Display,
    io::Cursor,
    sync::OnceLock,
    time::{Duration, SystemTime},
};

use bytes::Bytes;
use reqwest::{Client, RequestBuilder, StatusCode, header::HeaderMap};
use voxpool_shared::contract::Outcome;
use voxpool_shared::{secret::Secret, snapshot::Snapshot};

use super::{AudioFormat, KeyCredential, ParamError, VendorFailure};

/// `User-Agent` sent to every vendor (Azure requires one).
pub const USER_AGENT: &str = concat!("voxpool-synthesis/", env!("CARGO_PKG_VERSION"));

/// Largest response body accepted (a 10-minute 48 kHz WAV is ~58 MiB).
pub const MAX_BODY_BYTES: usize = 64 << 20;

/// Longest vendor message kept in a [`VendorFailure`], in characters.
const MAX_MESSAGE_CHARS: usize = 300;

/// Builds a pooled HTTP client (rustls, HTTP/2 by ALPN, keep-alive pool). Per-attempt
/// timeouts are set on each request ([`send`]), not here.
pub fn build_client() -> Result<Client, reqwest::Error> {
    Client::builder()
        .user_agent(USER_AGENT)
        .connect_timeout(Duration::from_secs(5))
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(256)
        .tcp_nodelay(true)
        .build()
}

/// The process-wide client, built once on first use and shared by every adapter (cloning a
/// `reqwest::Client` shares its connection pool). The error is the build error's text.
pub fn shared_client() -> Result<Client, String> {
    static SHARED: OnceLock<Result<Client, String>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            build_client().map_err(|e| format!("cannot build the vendor HTTP client: {e}"))
        })
        .clone()
}

/// A fully read HTTP response.
#[derive(Debug)]
pub struct HttpReply {
    /// Status code.
    pub status: StatusCode,
    /// Response headers.
    pub headers: HeaderMap,
    /// The whole body (at most [`MAX_BODY_BYTES`]).
    pub body: Bytes,
}

/// Sends `builder` with the per-attempt `timeout` (covering connect, headers and the whole
/// body) and reads the body. Transport problems become `TIMEOUT` failures.
pub async fn send(
    provider: &str,
    builder: RequestBuilder,
    timeout: Duration,
    secret: Option<&Secret>,
) -> Result<HttpReply, VendorFailure> {
    let mut response = builder
        .timeout(timeout)
        .send()
        .await
        .map_err(|e| transport_failure(provider, &e, None, timeout, secret))?;
    let status = response.status();
    let headers = response.headers().clone();
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > MAX_BODY_BYTES {
                    return Err(failure(
                        provider,
                        Outcome::UpstreamError,
                        Some(status.as_u16()),
                        None,
                        format!("response body larger than {MAX_BODY_BYTES} bytes"),
                        secret,
                    ));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(e) => {
                return Err(transport_failure(
                    provider,
                    &e,
                    Some(status.as_u16()),
                    timeout,
                    secret,
                ));
            }
        }
    }
    Ok(HttpReply {
        status,
        headers,
        body: body.into(),
    })
}

/// Classifies a transport error: timeouts, connect errors and resets are `TIMEOUT`; a request
/// that could not even be built (bad `base_url`) is `UPSTREAM_ERROR` so the pool fails over to
/// another upstream. The URL is never part of the message.
pub fn transport_failure(
    provider: &str,
    err: &reqwest::Error,
    http_status: Option<u16>,
    timeout: Duration,
    secret: Option<&Secret>,
) -> VendorFailure {
    let (outcome, what) = if err.is_timeout() {
        (
            Outcome::Timeout,
            format!("no complete answer within {} ms", timeout.as_millis()),
        )
    } else if err.is_connect() {
        (Outcome::Timeout, "could not connect".to_owned())
    } else if err.is_builder() {
        (
            Outcome::UpstreamError,
            "invalid upstream request (check the upstream base_url)".to_owned(),
        )
    } else if err.is_body() || err.is_decode() {
        (
            Outcome::Timeout,
            "connection failed while reading the response".to_owned(),
        )
    } else {
        (Outcome::Timeout, "connection failed".to_owned())
    };
    let mut causes = Vec::new();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        causes.push(cause.to_string());
        source = cause.source();
    }
    let message = if causes.is_empty() {
        what
    } else {
        format!("{what}: {}", causes.join(": "))
    };
    failure(provider, outcome, http_status, None, message, secret)
}

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
/// date relative to `now`) in milliseconds. A date in the past gives 0; garbage gives `None`.
pub fn retry_after_ms(headers: &HeaderMap, now: SystemTime) -> Option<u64> {
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

/// True when `bytes` plausibly is audio in `format`: RIFF/WAVE, an ID3 tag or an MPEG frame
/// sync, `OggS`, or non-empty 16-bit PCM (even length).
pub fn audio_matches(format: AudioFormat, bytes: &[u8]) -> bool {
    match format {
        AudioFormat::Wav => bytes.len() >= 44 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WAVE",
        AudioFormat::Mp3 => {
            bytes.starts_with(b"ID3")
                || (bytes.len() >= 4 && bytes[0] == 0xFF && bytes[1] & 0xE0 == 0xE0)
        }
        AudioFormat::OggOpus => bytes.starts_with(b"OggS"),
        AudioFormat::Pcm => !bytes.is_empty() && bytes.len().is_multiple_of(2),
    }
}

/// Wraps raw signed 16-bit little-endian mono PCM in a RIFF/WAVE header whose sizes match the
/// data (used where a vendor streams PCM and the caller asked for WAV).
pub fn wav_from_pcm16(pcm: &[u8], sample_rate_hz: u32) -> Result<Vec<u8>, String> {
    if !pcm.len().is_multiple_of(2) {
        return Err(format!("PCM has an odd length ({} bytes)", pcm.len()));
    }
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: sample_rate_hz,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut out = Cursor::new(Vec::with_capacity(pcm.len() + 44));
    {
        let mut writer = hound::WavWriter::new(&mut out, spec).map_err(|e| e.to_string())?;
        for pair in pcm.chunks_exact(2) {
            writer
                .write_sample(i16::from_le_bytes([pair[0], pair[1]]))
                .map_err(|e| e.to_string())?;
        }
        writer.finalize().map_err(|e| e.to_string())?;
    }
    Ok(out.into_inner())
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
    if !audio_matches(format, &reply.body) {
        return Err(failure(
            provider,
            Outcome::UpstreamError,
            status,
            None,
            format!("HTTP 200 but the body is not {} audio", format_name(format)),
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

/// The upstream's `base_url` without a trailing slash, or `default`.
pub fn base_url(configured: Option<&str>, default: &str) -> String {
    configured
        .unwrap_or(default)
        .trim_end_matches('/')
        .to_owned()
}

/// A string option of the upstream (`params` in the config), e.g. Volcengine `cluster`.
pub fn upstream_str<'a>(
    params: &'a BTreeMap<String, serde_json::Value>,
    name: &str,
) -> Option<&'a str> {
    params.get(name).and_then(serde_json::Value::as_str)
}

/// The model to send: the snapshot's `model` when set, else the pool's.
pub fn model_of<'a>(voice: &'a Snapshot, pool_model: &'a str) -> &'a str {
    if voice.model.is_empty() {
        pool_model
    } else {
        &voice.model
    }
}

// ---- param refusal helpers (invariant 8) ----

/// A refusal naming `param`, its `value` and the `provider`.
pub fn refuse(
    provider: &str,
    param: &str,
    value: impl Display,
    reason: impl Into<String>,
) -> ParamError {
    ParamError {
        param: param.to_owned(),
        value: value.to_string(),
        provider: provider.to_owned(),
        reason: reason.into(),
    }
}

/// Formats a number the way snapshots do (`10`, `1.2`, `-0` as `0`).
pub fn num(v: f64) -> String {
    voxpool_shared::snapshot::canonical_number(v)
}

/// `wire` when it is finite and within `lo..=hi`, else a refusal quoting the snapshot value
/// `given` and the accepted range (`what` describes the conversion). Never clamps.
pub fn require_range(
    provider: &str,
    param: &str,
    given: f64,
    wire: f64,
    lo: f64,
    hi: f64,
    what: &str,
) -> Result<f64, ParamError> {
    if !given.is_finite() || !wire.is_finite() {
        return Err(refuse(provider, param, num(given), "not a finite number"));
    }
    if wire < lo || wire > hi {
        return Err(refuse(
            provider,
            param,
            num(given),
            format!(
                "{what} = {} is outside the vendor's range {}..{}",
                num(wire),
                num(lo),
                num(hi)
            ),
        ));
    }
    Ok(wire)
}

/// `1 + pct/100`, computed as `(100 + pct) / 100` so whole percents give the closest double
/// (`-90` → exactly `0.1`, where `1 + -0.9` would be `0.09999…` and fail a `0.1..` range).
pub fn pct_to_ratio(pct: f64) -> f64 {
    (100.0 + pct) / 100.0
}

/// True when a relative param is unset or exactly 0 (no change): such a value is applied by
/// sending nothing, so even vendors without that control accept it.
pub fn is_neutral(v: Option<f64>) -> bool {
    v.is_none_or(|v| v == 0.0)
}

/// Refuses a relative param the vendor has no control for, unless it is neutral.
pub fn refuse_if_set(
    provider: &str,
    param: &str,
    v: Option<f64>,
    why: &str,
) -> Result<(), ParamError> {
    match v {
        Some(v) if !is_neutral(Some(v)) => Err(refuse(provider, param, num(v), why)),
        _ => Ok(()),
    }
}

/// Refuses every `extra` key not in `allowed`, naming it `extra.<key>`.
pub fn refuse_unknown_extra(
    provider: &str,
    voice: &Snapshot,
    allowed: &[&str],
) -> Result<(), ParamError> {
    match voice
        .extra
        .iter()
        .find(|(k, _)| !allowed.contains(&k.as_str()))
    {
        None => Ok(()),
        Some((k, v)) => Err(refuse(
            provider,
            &format!("extra.{k}"),
            v,
            if allowed.is_empty() {
                "this vendor takes no extra options".to_owned()
            } else {
                format!("unknown option; accepted: {}", allowed.join(", "))
            },
        )),
    }
}

/// `extra.<key>` as a number within `lo..=hi`, when present.
pub fn extra_f64(
    provider: &str,
    voice: &Snapshot,
    key: &str,
    lo: f64,
    hi: f64,
) -> Result<Option<f64>, ParamError> {
    let Some(raw) = voice.extra.get(key) else {
        return Ok(None);
    };
    let param = format!("extra.{key}");
    let v: f64 = raw.trim().parse().map_err(|_| {
        refuse(
            provider,
            &param,
            raw,
            format!("not a number; expected {}..{}", num(lo), num(hi)),
        )
    })?;
    require_range(provider, &param, v, v, lo, hi, key).map(Some)
}

/// `extra.<key>` as `true` / `false`, when present.
pub fn extra_bool(provider: &str, voice: &Snapshot, key: &str) -> Result<Option<bool>, ParamError> {
    match voice.extra.get(key).map(|s| s.trim()) {
        None => Ok(None),
        Some("true") => Ok(Some(true)),
        Some("false") => Ok(Some(false)),
        Some(other) => Err(refuse(
            provider,
            &format!("extra.{key}"),
            other,
            "expected true or false",
        )),
    }
}

/// Refuses an empty voice id.
pub fn require_voice_id(provider: &str, voice: &Snapshot) -> Result<(), ParamError> {
    if voice.voice_id.trim().is_empty() {
        return Err(refuse(
            provider,
            "voiceId",
            "\"\"",
            "a voice id is required",
        ));
    }
    Ok(())
}

/// Refuses a sample rate not in `accepted` (the vendor's list for this format).
pub fn require_sample_rate(
    provider: &str,
    format: AudioFormat,
    rate: u32,
    accepted: &[u32],
) -> Result<u32, ParamError> {
    if accepted.contains(&rate) {
        return Ok(rate);
    }
    let list = accepted
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    Err(refuse(
        provider,
        "sample_rate_hz",
        rate,
        format!("{} accepts {list} Hz", format_name(format)),
    ))
}

/// A `ParamError` found while building the request (after `check` passed, e.g. a snapshot the
/// orchestrator did not check) as a `CLIENT_ERROR` failure.
pub fn param_failure(provider: &str, e: &ParamError) -> VendorFailure {
    failure(
        provider,
        Outcome::ClientError,
        None,
        None,
        e.to_string(),
        None,
    )
}

/// `extra` entries of a test table row.
#[cfg(test)]
pub(crate) type Extra = &'static [(&'static str, &'static str)];

/// A refusal test row: params, extra, format, sample rate, the param the refusal must name.
#[cfg(test)]
pub(crate) type Refusal = (
    voxpool_shared::snapshot::Params,
    Extra,
    AudioFormat,
    Option<u32>,
    &'static str,
);

#[cfg(test)]
mod tests {
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
        assert!(audio_matches(AudioFormat::Mp3, &[0xFF, 0xFB, 0x90, 0xC0]));
        assert!(!audio_matches(AudioFormat::Mp3, b"{\"a\":1}"));
        assert!(!audio_matches(AudioFormat::Pcm, &[1, 2, 3]));
    }

    #[test]
    fn pcm_is_wrapped_into_a_wav_whose_sizes_match() {
        let pcm: Vec<u8> = (0..200i16).flat_map(i16::to_le_bytes).collect();
        let wav = wav_from_pcm16(&pcm, 16_000).unwrap();
        assert_eq!(wav.len(), 44 + pcm.len());
        let reader = hound::WavReader::new(Cursor::new(&wav)).unwrap();
        assert_eq!(reader.spec().sample_rate, 16_000);
        assert_eq!(reader.len(), 200);
        assert!(wav_from_pcm16(&[1, 2, 3], 16_000).is_err());
    }

    #[test]
    fn range_refusals_name_param_value_and_range() {
        let e = require_range("minimax", "params.rate", 3.0, 3.0, 0.5, 2.0, "speed").unwrap_err();
        assert_eq!(e.param, "params.rate");
        assert_eq!(e.value, "3");
        assert!(e.to_string().contains("minimax"), "{e}");
        assert!(e.reason.contains("0.5..2"), "{e}");
        assert!(require_range("x", "p", f64::NAN, f64::NAN, 0.0, 1.0, "p").is_err());
    }
}
