//! Fake Azure Speech `POST /cognitiveservices/v1`: key in `Ocp-Apim-Subscription-Key`,
//! `Content-Type: application/ssml+xml` (else 415), `X-Microsoft-OutputFormat` parsed from its
//! name (`riff-`/`raw-` PCM, `audio-…-mp3`, `ogg-…-opus`; else 400), a well-formed SSML body
//! with `<speak version xml:lang>` and `<voice name>` (else 400). Errors are bare statuses
//! like the real service: 429 (+`Retry-After`), 401, 403 (quota: Azure has no distinct code),
//! 400, 503.
//!
//! Streaming (with [`Streaming`](crate::Streaming) on): HTTP 200 with the audio body sent with
//! `Transfer-Encoding: chunked` in paced pieces (slices of the unstreamed bytes; `riff-` formats
//! start with their RIFF header). Facts relied on: the endpoint, headers and output format names
//! (<https://learn.microsoft.com/azure/ai-services/speech-service/rest-text-to-speech>); the
//! answer arrives chunked, long ones in several parts (docs/VENDORS.md,
//! "Streaming"; Azure's own TTS samples note it,
//! <https://github.com/Azure-Samples/Cognitive-Speech-TTS/releases>). Unverified: how early the
//! first chunk leaves relative to synthesis. A mid-stream break aborts the body (no final
//! chunk). The marker text (with markers on) is the SSML's text content: tags removed,
//! entities decoded, outer whitespace trimmed.

use std::sync::Arc;

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode, Uri, header},
    response::{IntoResponse, Response},
    routing::post,
};
use serde_json::json;

use super::{
    audio::Encoding,
    control::{Admission, Mode, Shared},
    knobs::Fault,
    stream::{self, Framed},
    xml,
};

pub(super) fn routes() -> Router<Arc<Shared>> {
    Router::new().route("/cognitiveservices/v1", post(synthesize))
}

fn status(code: StatusCode, text: &str) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "text/plain")],
        text.to_owned(),
    )
        .into_response()
}

fn fault_response(fault: &Fault) -> Response {
    match fault {
        Fault::RateLimited { retry_after_secs } => super::with_retry_after(
            StatusCode::TOO_MANY_REQUESTS.into_response(),
            *retry_after_secs,
        ),
        Fault::Busy => StatusCode::SERVICE_UNAVAILABLE.into_response(),
        Fault::ServerError => super::bare_503(),
        Fault::Unauthorized => StatusCode::UNAUTHORIZED.into_response(),
        Fault::QuotaExhausted => status(StatusCode::FORBIDDEN, "quota exceeded"),
        Fault::InvalidText => status(StatusCode::BAD_REQUEST, "invalid SSML"),
        Fault::ErrorIn200 => super::json(
            StatusCode::OK,
            json!({"error": {"code": "TooManyRequests", "message": "too many requests"}}),
        ),
    }
}

/// `(encoding, sample rate)` of an output format name such as `riff-24khz-16bit-mono-pcm`.
fn parse_output_format(name: &str) -> Option<(Encoding, u32)> {
    let parts: Vec<&str> = name.split('-').collect();
    let rate = |token: &str| -> Option<u32> {
        if let Some(k) = token.strip_suffix("khz") {
            k.parse::<u32>().ok().map(|k| k * 1000)
        } else {
            token.strip_suffix("hz")?.parse().ok()
        }
    };
    match parts.as_slice() {
        ["riff", r, "16bit", "mono", "pcm"] => Some((Encoding::Wav, rate(r)?)),
        ["raw", r, "16bit", "mono", "pcm"] => Some((Encoding::Pcm, rate(r)?)),
        ["audio", r, bitrate, "mono", "mp3"] if bitrate.ends_with("kbitrate") => {
            Some((Encoding::Mp3, rate(r)?))
        }
        ["ogg", r, "16bit", "mono", "opus"] => Some((Encoding::OggOpus, rate(r)?)),
        _ => None,
    }
}

/// The text content of valid SSML.
fn validate_ssml(body: &[u8]) -> Result<String, String> {
    let text = std::str::from_utf8(body).map_err(|_| "SSML is not UTF-8".to_owned())?;
    let tags = xml::check(text)?;
    let speak = tags
        .first()
        .filter(|t| t.name == "speak")
        .ok_or("the root element must be <speak>")?;
    if speak.attr("version").is_none() || speak.attr("xml:lang").is_none_or(str::is_empty) {
        return Err("<speak> needs version and xml:lang".into());
    }
    if !tags
        .iter()
        .any(|t| t.name == "voice" && t.attr("name").is_some_and(|n| !n.is_empty()))
    {
        return Err("<voice name='…'> is required".into());
    }
    Ok(xml::text(text))
}

async fn synthesize(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(key) = super::header_str(&headers, "ocp-apim-subscription-key").map(str::to_owned)
    else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    if !shared.key_allowed(&key) {
        return fault_response(&Fault::Unauthorized);
    }
    let slot = match shared.enter(&key) {
        Admission::OverCap(_slot, fault) => return fault_response(&fault),
        Admission::Admitted(slot) => slot,
    };
    super::record(&shared, &key, &uri, &headers, &body);
    let content_type = super::header_str(&headers, "content-type").unwrap_or_default();
    if !content_type.starts_with("application/ssml+xml") {
        return status(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/ssml+xml",
        );
    }
    let Some((encoding, rate)) =
        super::header_str(&headers, "x-microsoft-outputformat").and_then(parse_output_format)
    else {
        return status(
            StatusCode::BAD_REQUEST,
            "missing or unsupported X-Microsoft-OutputFormat",
        );
    };
    let text = match validate_ssml(&body) {
        Ok(t) => t,
        Err(m) => return status(StatusCode::BAD_REQUEST, &m),
    };
    slot.bill(&crate::billing::azure_voice(&body), &text);
    let delivery = match shared.proceed(&slot, Mode::Stream).await {
        Ok(d) => d,
        Err(fault) => return fault_response(&fault),
    };
    let content_type = match encoding {
        Encoding::Wav => "audio/x-wav",
        Encoding::Pcm => "audio/basic",
        Encoding::Mp3 => "audio/mpeg",
        Encoding::OggOpus => "audio/ogg",
    };
    match super::render(&shared, encoding, rate, &text) {
        Ok(bytes) => {
            let framed = Framed::raw(&delivery.cut(&bytes, 1));
            stream::respond(Arc::clone(&shared), slot, delivery, content_type, framed)
        }
        Err(e) => super::internal(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_format_names_parse() {
        assert_eq!(
            parse_output_format("riff-24khz-16bit-mono-pcm"),
            Some((Encoding::Wav, 24_000))
        );
        assert_eq!(
            parse_output_format("raw-22050hz-16bit-mono-pcm"),
            Some((Encoding::Pcm, 22_050))
        );
        assert_eq!(
            parse_output_format("audio-48khz-192kbitrate-mono-mp3"),
            Some((Encoding::Mp3, 48_000))
        );
        assert_eq!(
            parse_output_format("ogg-16khz-16bit-mono-opus"),
            Some((Encoding::OggOpus, 16_000))
        );
        assert_eq!(parse_output_format("webm-24khz-16bit-mono-opus"), None);
    }
}
