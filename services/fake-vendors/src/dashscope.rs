//! Fake DashScope `POST /api/v1/services/audio/tts/SpeechSynthesizer`: bearer key; JSON body
//! `model`, `input` {text, voice, format pcm|wav|mp3 (opus is real but not rendered here),
//! sample_rate 8000|16000|22050|24000|44100|48000, volume integer 0–100, rate 0.5–2, pitch
//! 0.5–2}, optional `parameters`; anything else is a 400 `InvalidParameter`.
//!
//! With `X-DashScope-SSE: enable` the audio comes as `text/event-stream`: two `result` events
//! with base64 chunks in `output.audio.data` (the second with `finish_reason: "stop"`);
//! without it, one JSON document. Errors before the stream are JSON `{"code","message",
//! "request_id"}` with a status (429 `Throttling` over the cap, 503 `ModelServingError`, 401
//! `InvalidApiKey`, 400 `Arrearage` / `InvalidParameter`); the 200-with-error fault is an
//! `event:error` with `:HTTP_STATUS/429` and `Throttling.RateQuota`.

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
    Fault, audio,
    audio::Encoding,
    control::{Admission, Shared},
};

pub(super) fn routes() -> Router<Arc<Shared>> {
    Router::new().route(
        "/api/v1/services/audio/tts/SpeechSynthesizer",
        post(synthesize),
    )
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

fn validate(body: &[u8]) -> Result<(Encoding, u32), String> {
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
    super::required_str(input, "text")?;
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
    Ok((encoding, rate))
}

fn event(id: usize, b64: &str, finish: &str) -> String {
    let data =
        json!({"output": {"finish_reason": finish, "audio": {"data": b64}}, "request_id": "fake"});
    format!("id:{id}\nevent:result\n:HTTP_STATUS/200\ndata:{data}\n\n")
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
    let (encoding, rate) = match validate(&body) {
        Ok(p) => p,
        Err(m) => return error(StatusCode::BAD_REQUEST, "InvalidParameter", &m),
    };
    if let Some(fault) = shared.proceed(&slot).await {
        return fault_response(&fault, streaming);
    }
    let bytes = match audio::render(encoding, rate, shared.settings().tone_ms) {
        Ok(b) => b,
        Err(e) => return super::internal(e),
    };
    shared.served(&slot);
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    if streaming {
        // Split on an even byte count so PCM chunks stay whole samples.
        let mid = (bytes.len() / 2) & !1;
        sse(format!(
            "{}{}",
            event(1, &b64(&bytes[..mid]), "null"),
            event(2, &b64(&bytes[mid..]), "stop")
        ))
    } else {
        super::json(
            StatusCode::OK,
            json!({"output": {"finish_reason": "stop", "audio": {"data": b64(&bytes)}}, "usage": {"characters": 1}, "request_id": "fake"}),
        )
    }
}
