//! Fake DashScope `POST /api/v1/services/audio/tts/SpeechSynthesizer`: bearer key; JSON body
//! `model`, `input` {text, voice, format pcm|wav|mp3 (opus is real but not rendered here),
//! sample_rate 8000|16000|22050|24000|44100|48000, volume integer 0–100, rate 0.5–2, pitch
//! 0.5–2}, optional `parameters`; anything else is a 400 `InvalidParameter`.
//!
//! With `X-DashScope-SSE: enable` the audio comes as `text/event-stream`: `result` events
//! `id:<n>\nevent:result\n:HTTP_STATUS/200\ndata:{"output":{"finish_reason":"null",
//! "audio":{"data":"<base64 piece>"}},"request_id":"fake"}\n\n`, the last one with
//! `finish_reason: "stop"` — two events at once when [`Streaming`](crate::Streaming) is off,
//! else one per piece, paced. Without the header, one JSON document (with streaming on, sent
//! at `first_byte + rest`). Errors before the stream are JSON `{"code","message",
//! "request_id"}` with a status (429 `Throttling` over the cap, 503 `ModelServingError`, 401
//! `InvalidApiKey`, 400 `Arrearage` / `InvalidParameter`); the 200-with-error fault is an
//! `event:error` with `:HTTP_STATUS/429` and `Throttling.RateQuota`. A mid-stream break sends,
//! after the first `result` event, `id:2\nevent:error\n:HTTP_STATUS/500\ndata:{"code":
//! "InternalError","message":"…","request_id":"fake"}\n\n` and no `stop` event. Facts relied
//! on: the path and the `X-DashScope-SSE: enable` switch between one JSON document and a
//! stream (<https://www.alibabacloud.com/help/en/model-studio/qwen-audio-tts-http-api>), the
//! error codes of docs/VENDORS.md. Unverified: the exact `id:`/`event:`/`:HTTP_STATUS/` framing of
//! the audio events, and the code of a mid-stream internal failure.

use std::sync::Arc;

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode, Uri, header},
    response::{IntoResponse, Response},
    routing::post,
};
use base64::Engine as _;
use serde_json::{Value, json};

use super::{
    audio::Encoding,
    control::{Admission, Mode, Shared},
    knobs::Fault,
    stream::{self, Failure, Framed},
};

pub(super) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route(
            "/api/v1/services/audio/tts/SpeechSynthesizer",
            post(synthesize),
        )
        .merge(crate::cloning::dashscope::routes())
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    super::json(
        status,
        json!({"code": code, "message": message, "request_id": "fake"}),
    )
}

fn sse(body: String) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/event-stream")],
        body,
    )
        .into_response()
}

fn fault_response(fault: &Fault, streaming: bool) -> Response {
    match fault {
        Fault::RateLimited { retry_after_secs } => super::with_retry_after(
            error(StatusCode::TOO_MANY_REQUESTS, "Throttling", "Requests throttling triggered."),
            *retry_after_secs,
        ),
        Fault::Busy => error(StatusCode::SERVICE_UNAVAILABLE, "ModelServingError", "Model serving error, please retry"),
        Fault::ServerError => super::bare_503(),
        Fault::Unauthorized => error(StatusCode::UNAUTHORIZED, "InvalidApiKey", "Invalid API-key provided."),
        Fault::QuotaExhausted => error(
            StatusCode::BAD_REQUEST,
            "Arrearage",
            "Access denied, please make sure your account is in good standing.",
        ),
        Fault::InvalidText => error(StatusCode::BAD_REQUEST, "InvalidParameter", "input.text is invalid"),
        Fault::ErrorIn200 if streaming => sse(
            "id:1\nevent:error\n:HTTP_STATUS/429\ndata:{\"code\":\"Throttling.RateQuota\",\"message\":\"Requests rate limit exceeded\",\"request_id\":\"fake\"}\n\n"
                .to_owned(),
        ),
        Fault::ErrorIn200 => error(StatusCode::OK, "Throttling.RateQuota", "Requests rate limit exceeded"),
    }
}

/// `(encoding, sample rate, input.text)` of a valid body.
fn validate(body: &[u8]) -> Result<(Encoding, u32, String), String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    super::only_fields(&v, "body", &["model", "input", "parameters"])?;
    super::required_str(&v, "model")?;
    let input = &v["input"];
    super::only_fields(
        input,
        "input",
        &[
            "text",
            "voice",
            "format",
            "sample_rate",
            "volume",
            "rate",
            "pitch",
        ],
    )?;
    let text = super::required_str(input, "text")?.to_owned();
    super::required_str(input, "voice")?;
    let encoding = match input.get("format").map(Value::as_str) {
        None | Some(Some("mp3")) => Encoding::Mp3,
        Some(Some("pcm")) => Encoding::Pcm,
        Some(Some("wav")) => Encoding::Wav,
        Some(other) => {
            return Err(format!(
                "input.format {other:?} is not served by this fake (pcm, wav, mp3)"
            ));
        }
    };
    let rate = match input.get("sample_rate").map(Value::as_u64) {
        None => 22_050,
        Some(Some(r @ (8_000 | 16_000 | 22_050 | 24_000 | 44_100 | 48_000))) => r as u32,
        Some(other) => return Err(format!("input.sample_rate {other:?} is not supported")),
    };
    if let Some(volume) = input.get("volume") {
        match volume.as_i64() {
            Some(0..=100) => {}
            _ => {
                return Err(format!(
                    "input.volume must be an integer in 0..100, got {volume}"
                ));
            }
        }
    }
    super::number_in(input, "rate", 0.5, 2.0)?;
    super::number_in(input, "pitch", 0.5, 2.0)?;
    Ok((encoding, rate, text))
}

fn event(id: usize, b64: &str, finish: &str) -> String {
    let data =
        json!({"output": {"finish_reason": finish, "audio": {"data": b64}}, "request_id": "fake"});
    format!("id:{id}\nevent:result\n:HTTP_STATUS/200\ndata:{data}\n\n")
}

/// The SSE framing of `pieces` (module doc).
fn events(pieces: &[&[u8]]) -> Framed {
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let last = pieces.len().saturating_sub(1);
    let failure = format!(
        "id:2\nevent:error\n:HTTP_STATUS/500\ndata:{}\n\n",
        json!({"code": "InternalError", "message": "An internal error has occurred during synthesis", "request_id": "fake"})
    );
    Framed {
        pieces: pieces
            .iter()
            .enumerate()
            .map(|(k, p)| event(k + 1, &b64(p), if k == last { "stop" } else { "null" }).into())
            .collect(),
        end: Bytes::new(),
        failure: Failure::Frame(failure.into()),
    }
}

async fn synthesize(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let streaming = super::header_str(&headers, "x-dashscope-sse").is_some_and(|v| v == "enable");
    let Some(key) = super::bearer(&headers) else {
        return error(
            StatusCode::UNAUTHORIZED,
            "InvalidApiKey",
            "No API-key provided.",
        );
    };
    if !shared.key_allowed(&key) {
        return fault_response(&Fault::Unauthorized, streaming);
    }
    let slot = match shared.enter(&key) {
        Admission::OverCap(_slot, fault) => return fault_response(&fault, streaming),
        Admission::Admitted(slot) => slot,
    };
    super::record(&shared, &key, &uri, &headers, &body);
    let (encoding, rate, text) = match validate(&body) {
        Ok(p) => p,
        Err(m) => return error(StatusCode::BAD_REQUEST, "InvalidParameter", &m),
    };
    if let Some(refused) = crate::cloning::dashscope::refusal(&shared, &key, &body) {
        return refused;
    }
    let mode = if streaming {
        Mode::Stream
    } else {
        Mode::Document
    };
    slot.bill(&crate::billing::voice_in(&body, &["input", "voice"]), &text);
    let delivery = match shared.proceed(&slot, mode).await {
        Ok(d) => d,
        Err(fault) => return fault_response(&fault, streaming),
    };
    let bytes = match super::render(&shared, encoding, rate, &text) {
        Ok(b) => b,
        Err(e) => return super::internal(e),
    };
    if streaming {
        // Unstreamed: two events, split on an even byte count (whole PCM samples).
        let framed = events(&delivery.cut(&bytes, 2));
        return stream::respond(shared, slot, delivery, "text/event-stream", framed);
    }
    let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
    let document = json!({"output": {"finish_reason": "stop", "audio": {"data": b64}}, "usage": {"characters": 1}, "request_id": "fake"});
    let document = document.to_string().into_bytes();
    let framed = Framed::raw(&delivery.cut(&document, 1));
    stream::respond(shared, slot, delivery, "application/json", framed)
}
