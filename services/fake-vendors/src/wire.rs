//! Request and answer helpers every fake shares: recording a request (credential headers left
//! out), reading auth headers, the small answer builders (JSON, `Retry-After`, a fault in the
//! vendor's shape, a bare 503) and the body checks that name the field a request got wrong.

use axum::{
    Json,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};

use crate::{
    audio,
    control::{RecordedRequest, Shared},
};

/// Header names never recorded.
const SECRET_HEADERS: &[&str] = &[
    "authorization",
    "xi-api-key",
    "ocp-apim-subscription-key",
    "x-api-access-key",
    "x-api-key",
    "cookie",
];

pub(crate) fn record(
    shared: &Shared,
    key: &str,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    body: &[u8],
) {
    let headers = headers
        .iter()
        .filter(|(name, _)| !SECRET_HEADERS.contains(&name.as_str()))
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    shared.record(RecordedRequest {
        key: key.to_owned(),
        uri: uri.to_string(),
        headers,
        body: String::from_utf8_lossy(body).into_owned(),
    });
}

/// The token of `Authorization: Bearer <token>` (case-insensitive scheme).
pub(crate) fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty())
        .then(|| token.trim().to_owned())
}

pub(crate) fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

pub(crate) fn json(status: StatusCode, body: serde_json::Value) -> Response {
    (status, Json(body)).into_response()
}

pub(crate) fn with_retry_after(mut response: Response, secs: Option<u64>) -> Response {
    if let Some(secs) = secs {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

/// The audio of one answer at the current `tone_ms`, marked with `text` when markers are on.
pub(crate) fn render(
    shared: &Shared,
    encoding: audio::Encoding,
    sample_rate_hz: u32,
    text: &str,
) -> Result<Vec<u8>, String> {
    let settings = shared.settings();
    let marker = settings.markers.then(|| audio::marker(text));
    audio::render_marked(
        encoding,
        sample_rate_hz,
        settings.tone_ms,
        marker.as_deref(),
    )
}

pub(crate) fn bare_503() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::CONTENT_TYPE, "text/plain")],
        "service unavailable",
    )
        .into_response()
}

pub(crate) fn internal(message: String) -> Response {
    (StatusCode::INTERNAL_SERVER_ERROR, message).into_response()
}

/// A field of a JSON object as a number within `lo..=hi`, if present.
pub(crate) fn number_in(
    v: &serde_json::Value,
    field: &str,
    lo: f64,
    hi: f64,
) -> Result<Option<f64>, String> {
    match v.get(field) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(n) => match n.as_f64() {
            Some(x) if (lo..=hi).contains(&x) => Ok(Some(x)),
            _ => Err(format!("{field} must be a number in {lo}..{hi}, got {n}")),
        },
    }
}

/// A required non-empty string field.
pub(crate) fn required_str<'a>(v: &'a serde_json::Value, field: &str) -> Result<&'a str, String> {
    v.get(field)
        .and_then(serde_json::Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| format!("{field} is required (a non-empty string)"))
}

/// Refuses fields of `v` outside `allowed`.
pub(crate) fn only_fields(
    v: &serde_json::Value,
    what: &str,
    allowed: &[&str],
) -> Result<(), String> {
    match v.as_object() {
        None => Err(format!("{what} must be a JSON object")),
        Some(map) => match map.keys().find(|k| !allowed.contains(&k.as_str())) {
            Some(k) => Err(format!("unrecognized field {what}.{k}")),
            None => Ok(()),
        },
    }
}

/// An ElevenLabs error answer: `{"detail": {type, code, message, status, request_id}}`, as the
/// speech and voice routes send it.
pub(crate) fn elevenlabs_detail(
    status: StatusCode,
    kind: &str,
    code: &str,
    message: &str,
) -> Response {
    json(
        status,
        serde_json::json!({"detail": {"type": kind, "code": code, "message": message, "status": code, "request_id": "fake"}}),
    )
}

/// A MiniMax answer carrying only its outcome: `{"trace_id", "base_resp": {status_code,
/// status_msg}}`, as the speech and voice routes send it.
pub(crate) fn minimax_base_resp(status: StatusCode, code: i64, message: &str) -> Response {
    json(
        status,
        serde_json::json!({"trace_id": "fake", "base_resp": {"status_code": code, "status_msg": message}}),
    )
}
