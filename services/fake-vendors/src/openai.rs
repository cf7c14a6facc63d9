//! Fake OpenAI-compatible `POST /v1/audio/speech`: bearer key; JSON body `model`, `input`
//! (≤ 4096 chars), `voice`, `response_format` (`mp3`, `opus`, `wav`, `pcm`; `aac`/`flac` are
//! real formats this fake does not render), `speed` 0.25–4, `instructions`, `stream_format`
//! (`audio` only: the real `sse` is not served); any other field is a 400 like the real API's
//! "unrecognized request argument". Audio at 24 kHz. Errors:
//! `{"error":{"message","type","param","code"}}`.
//!
//! Streaming (with [`Streaming`](crate::Streaming) on): the same request; HTTP 200 with the
//! audio body sent with `Transfer-Encoding: chunked` in paced pieces (slices of the unstreamed
//! bytes, WAV header first). Facts relied on: the speech endpoint streams its audio body as it
//! is produced, with chunked transfer encoding
//! (<https://platform.openai.com/docs/guides/text-to-speech>); `stream_format` is `audio`
//! (default) or `sse`, the latter not for `tts-1`/`tts-1-hd`
//! (<https://platform.openai.com/docs/api-reference/audio/createSpeech>, as generated into
//! OpenAPI clients such as async-openai). A mid-stream break aborts the body (no final chunk).

use std::sync::Arc;

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode, Uri},
    response::Response,
    routing::post,
};
use serde_json::{Value, json};

use super::{
    audio::Encoding,
    control::{Admission, Mode, Shared},
    knobs::Fault,
    stream::{self, Framed},
};

pub(super) fn routes() -> Router<Arc<Shared>> {
    Router::new().route("/v1/audio/speech", post(speech))
}

fn error(status: StatusCode, kind: &str, code: Option<&str>, message: &str) -> Response {
    super::json(
        status,
        json!({"error": {"message": message, "type": kind, "param": null, "code": code}}),
    )
}

fn fault_response(fault: &Fault, key: &str) -> Response {
    match fault {
        Fault::RateLimited { retry_after_secs } => super::with_retry_after(
            error(
                StatusCode::TOO_MANY_REQUESTS,
                "requests",
                Some("rate_limit_exceeded"),
                "Rate limit reached for requests",
            ),
            *retry_after_secs,
        ),
        Fault::Busy => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            Some("server_is_overloaded"),
            "The server is overloaded, please try again later",
        ),
        Fault::ServerError => super::bare_503(),
        Fault::Unauthorized => error(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            Some("invalid_api_key"),
            &format!("Incorrect API key provided: {key}."),
        ),
        Fault::QuotaExhausted => error(
            StatusCode::TOO_MANY_REQUESTS,
            "insufficient_quota",
            Some("insufficient_quota"),
            "You exceeded your current quota, please check your plan and billing details",
        ),
        Fault::InvalidText => error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            None,
            "Invalid value for 'input'",
        ),
        Fault::ErrorIn200 => error(
            StatusCode::OK,
            "requests",
            Some("rate_limit_exceeded"),
            "Rate limit reached for requests",
        ),
    }
}

/// `(encoding, input text)` of a valid body.
fn validate(body: &[u8]) -> Result<(Encoding, String), String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    super::only_fields(
        &v,
        "body",
        &[
            "model",
            "input",
            "voice",
            "response_format",
            "speed",
            "instructions",
            "stream_format",
        ],
    )?;
    super::required_str(&v, "model")?;
    super::required_str(&v, "voice")?;
    let input = super::required_str(&v, "input")?;
    if input.chars().count() > 4096 {
        return Err("input is longer than 4096 characters".into());
    }
    super::number_in(&v, "speed", 0.25, 4.0)?;
    if v.get("instructions").is_some_and(|i| !i.is_string()) {
        return Err("instructions must be a string".into());
    }
    if !matches!(
        v.get("stream_format").map(Value::as_str),
        None | Some(Some("audio"))
    ) {
        return Err("stream_format must be \"audio\" (sse is not served by this fake)".into());
    }
    let encoding = match v.get("response_format").map(|f| f.as_str()) {
        None | Some(Some("mp3")) => Encoding::Mp3,
        Some(Some("opus")) => Encoding::OggOpus,
        Some(Some("wav")) => Encoding::Wav,
        Some(Some("pcm")) => Encoding::Pcm,
        Some(other) => {
            return Err(format!(
                "response_format {other:?} is not served by this fake (mp3, opus, wav, pcm)"
            ));
        }
    };
    Ok((encoding, input.to_owned()))
}

async fn speech(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(key) = super::bearer(&headers) else {
        return error(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            None,
            "You didn't provide an API key.",
        );
    };
    if !shared.key_allowed(&key) {
        return fault_response(&Fault::Unauthorized, &key);
    }
    let slot = match shared.enter(&key) {
        Admission::OverCap(_slot, fault) => return fault_response(&fault, &key),
        Admission::Admitted(slot) => slot,
    };
    super::record(&shared, &key, &uri, &headers, &body);
    let (encoding, input) = match validate(&body) {
        Ok(e) => e,
        Err(m) => return error(StatusCode::BAD_REQUEST, "invalid_request_error", None, &m),
    };
    slot.bill(&crate::billing::voice_in(&body, &["voice"]), &input);
    let delivery = match shared.proceed(&slot, Mode::Stream).await {
        Ok(d) => d,
        Err(fault) => return fault_response(&fault, &key),
    };
    let content_type = match encoding {
        Encoding::Wav => "audio/wav",
        Encoding::Pcm => "audio/pcm",
        Encoding::Mp3 => "audio/mpeg",
        Encoding::OggOpus => "audio/ogg",
    };
    match super::render(&shared, encoding, 24_000, &input) {
        Ok(bytes) => {
            let framed = Framed::raw(&delivery.cut(&bytes, 1));
            stream::respond(Arc::clone(&shared), slot, delivery, content_type, framed)
        }
        Err(e) => super::internal(e),
    }
}
