//! Fake MiniMax T2A v2 `POST /v1/t2a_v2` (optional `GroupId` query): bearer key; JSON body
//! `model`, `text` (< 10000 chars), `stream` (false only), `voice_setting` {voice_id, speed
//! 0.5–2, vol (0,10], pitch integer −12..12}, `audio_setting` {sample_rate 8000|16000|22050|
//! 24000|32000|44100, bitrate, format mp3|pcm|wav (flac is real but not rendered here),
//! channel 1|2}. Bad bodies: HTTP 400 with `base_resp.status_code` 2013.
//!
//! Answers are JSON with HTTP 200 and the status in `base_resp`: 0 + hex `data.audio` on
//! success; 1002 over the cap; 1000 busy; 1004 bad key; 1008 balance; 2013 invalid text.

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
    Fault, audio,
    audio::Encoding,
    control::{Admission, Shared},
};

pub(super) fn routes() -> Router<Arc<Shared>> {
    Router::new().route("/v1/t2a_v2", post(t2a))
}

fn base_resp(status: StatusCode, code: i64, message: &str) -> Response {
    super::json(
        status,
        json!({"trace_id": "fake", "base_resp": {"status_code": code, "status_msg": message}}),
    )
}

fn fault_response(fault: &Fault) -> Response {
    match fault {
        Fault::RateLimited { retry_after_secs } => super::with_retry_after(
            base_resp(StatusCode::OK, 1002, "rate limit exceeded"),
            *retry_after_secs,
        ),
        Fault::ErrorIn200 => base_resp(StatusCode::OK, 1002, "rate limit exceeded"),
        Fault::Busy => base_resp(StatusCode::OK, 1000, "unknown error"),
        Fault::ServerError => super::bare_503(),
        Fault::Unauthorized => base_resp(
            StatusCode::OK,
            1004,
            "login fail: please check your API key",
        ),
        Fault::QuotaExhausted => base_resp(StatusCode::OK, 1008, "insufficient balance"),
        Fault::InvalidText => base_resp(StatusCode::OK, 2013, "invalid params: text"),
    }
}

fn validate(body: &[u8]) -> Result<(Encoding, u32), String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    super::only_fields(
        &v,
        "body",
        &[
            "model",
            "text",
            "stream",
            "voice_setting",
            "audio_setting",
            "output_format",
            "language_boost",
        ],
    )?;
    super::required_str(&v, "model")?;
    let text = super::required_str(&v, "text")?;
    if text.chars().count() >= 10_000 {
        return Err("text must be shorter than 10000 characters".into());
    }
    if v.get("stream").is_some_and(|s| s != &Value::Bool(false)) {
        return Err("this fake answers stream=false only".into());
    }
    let vs = &v["voice_setting"];
    super::only_fields(
        vs,
        "voice_setting",
        &["voice_id", "speed", "vol", "pitch", "emotion"],
    )?;
    super::required_str(vs, "voice_id")?;
    super::number_in(vs, "speed", 0.5, 2.0)?;
    if super::number_in(vs, "vol", 0.0, 10.0)? == Some(0.0) {
        return Err("vol must be above 0".into());
    }
    if let Some(pitch) = vs.get("pitch") {
        match pitch.as_i64() {
            Some(-12..=12) => {}
            _ => return Err(format!("pitch must be an integer in -12..12, got {pitch}")),
        }
    }
    let a = &v["audio_setting"];
    super::only_fields(
        a,
        "audio_setting",
        &["sample_rate", "bitrate", "format", "channel"],
    )?;
    let rate = match a.get("sample_rate").map(Value::as_u64) {
        None => 32_000,
        Some(Some(r @ (8_000 | 16_000 | 22_050 | 24_000 | 32_000 | 44_100))) => r as u32,
        Some(other) => return Err(format!("sample_rate {other:?} is not supported")),
    };
    let encoding = match a.get("format").map(Value::as_str) {
        None | Some(Some("mp3")) => Encoding::Mp3,
        Some(Some("pcm")) => Encoding::Pcm,
        Some(Some("wav")) => Encoding::Wav,
        Some(other) => {
            return Err(format!(
                "format {other:?} is not served by this fake (mp3, pcm, wav)"
            ));
        }
    };
    if !matches!(
        a.get("channel").map(Value::as_u64),
        None | Some(Some(1 | 2))
    ) {
        return Err("channel must be 1 or 2".into());
    }
    Ok((encoding, rate))
}

async fn t2a(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(key) = super::bearer(&headers) else {
        return fault_response(&Fault::Unauthorized);
    };
    if !shared.key_allowed(&key) {
        return fault_response(&Fault::Unauthorized);
    }
    let slot = match shared.enter(&key) {
        Admission::OverCap(_slot, fault) => return fault_response(&fault),
        Admission::Admitted(slot) => slot,
    };
    super::record(&shared, &key, &uri, &headers, &body);
    let (encoding, rate) = match validate(&body) {
        Ok(p) => p,
        Err(m) => {
            return base_resp(
                StatusCode::BAD_REQUEST,
                2013,
                &format!("invalid params: {m}"),
            );
        }
    };
    if let Some(fault) = shared.proceed(&slot).await {
        return fault_response(&fault);
    }
    let tone_ms = shared.settings().tone_ms;
    match audio::render(encoding, rate, tone_ms) {
        Ok(bytes) => {
            shared.served(&slot);
            super::json(
                StatusCode::OK,
                json!({
                    "data": {"audio": hex::encode(&bytes), "status": 2},
                    "extra_info": {"audio_length": tone_ms, "audio_sample_rate": rate, "audio_size": bytes.len()},
                    "trace_id": "fake",
                    "base_resp": {"status_code": 0, "status_msg": "success"},
                }),
            )
        }
        Err(e) => super::internal(e),
    }
}
