//! Fake MiniMax T2A v2 `POST /v1/t2a_v2` (optional `GroupId` query): bearer key; JSON body
//! `model`, `text` (< 10000 chars), `stream` (bool, default false), `stream_options`
//! {exclude_aggregated_audio bool}, `voice_setting` {voice_id, speed 0.5–2, vol (0,10], pitch
//! integer −12..12, emotion}, `audio_setting` {sample_rate 8000|16000|22050|24000|32000|44100,
//! bitrate, format mp3|pcm|wav (wav only with `stream` false; flac is real but not rendered
//! here), channel 1|2}, `output_format`, `language_boost`. Bad bodies: HTTP 400 with
//! `base_resp.status_code` 2013.
//!
//! Answers are JSON with HTTP 200 and the status in `base_resp`: 0 + hex `data.audio` on
//! success; 1002 over the cap; 1000 busy; 1004 bad key; 1008 balance; 2013 invalid text. These
//! errors are the same JSON document with `stream: true` (nothing has been streamed yet).
//!
//! With `stream: true` a success is HTTP 200 `text/event-stream`, one `data: {json}\n\n` event
//! per piece — `{"data":{"audio":"<hex of the piece>","status":1,"ced":""},"trace_id",
//! "base_resp":{"status_code":0,"status_msg":""}}` — then a last event `{"data":{"audio":
//! "<hex of the whole audio>","status":2,"ced":""},"extra_info":{audio_length (ms),
//! audio_sample_rate, audio_size (bytes), bitrate, word_count, usage_characters, audio_format,
//! audio_channel},"trace_id","base_resp":{"status_code":0,"status_msg":"success"}}`. Like the real
//! vendor, the last event **repeats the whole audio** unless `stream_options.
//! exclude_aggregated_audio` is true (then its `data.audio` is `""`): a client must not append
//! it. Events are paced by [`Streaming`](crate::Streaming) (one piece when it is off). A
//! mid-stream break sends `{"trace_id","base_resp":{"status_code":1000,"status_msg":"unknown
//! error"}}` as the event after the first piece, and no `status: 2` event.
//!
//! Facts relied on (<https://platform.minimax.io/docs/api-reference/speech-t2a-http>): `stream`
//! defaults to false; `data.status` 1 = synthesizing, 2 = done; the last chunk holds the
//! concatenated audio hex unless `exclude_aggregated_audio`; wav only without streaming;
//! `extra_info.audio_length` in ms. Unverified: the exact keys of intermediate events (whether
//! they carry `base_resp`), the shape of a mid-stream error event, and whether an excluded
//! aggregate is `""` or absent.

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
    stream::{self, Failure, Framed},
    wire,
};

pub(super) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/v1/t2a_v2", post(t2a))
        .merge(crate::cloning::minimax::routes())
}

fn fault_response(fault: &Fault) -> Response {
    match fault {
        Fault::RateLimited { retry_after_secs } => super::with_retry_after(
            wire::minimax_base_resp(StatusCode::OK, 1002, "rate limit exceeded"),
            *retry_after_secs,
        ),
        Fault::ErrorIn200 => wire::minimax_base_resp(StatusCode::OK, 1002, "rate limit exceeded"),
        Fault::Busy => wire::minimax_base_resp(StatusCode::OK, 1000, "unknown error"),
        Fault::ServerError => super::bare_503(),
        Fault::Unauthorized => wire::minimax_base_resp(
            StatusCode::OK,
            1004,
            "login fail: please check your API key",
        ),
        Fault::QuotaExhausted => {
            wire::minimax_base_resp(StatusCode::OK, 1008, "insufficient balance")
        }
        Fault::InvalidText => wire::minimax_base_resp(StatusCode::OK, 2013, "invalid params: text"),
    }
}

/// A valid request.
struct Parsed {
    encoding: Encoding,
    rate: u32,
    text: String,
    stream: bool,
    exclude_aggregated_audio: bool,
    format: &'static str,
    bitrate: u64,
    channel: u64,
}

fn validate(body: &[u8]) -> Result<Parsed, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    super::only_fields(
        &v,
        "body",
        &[
            "model",
            "text",
            "stream",
            "stream_options",
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
    let stream = match v.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => return Err(format!("stream must be a boolean, got {other}")),
    };
    let mut exclude_aggregated_audio = false;
    if let Some(options) = v.get("stream_options") {
        super::only_fields(options, "stream_options", &["exclude_aggregated_audio"])?;
        exclude_aggregated_audio = match options.get("exclude_aggregated_audio") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(format!(
                    "stream_options.exclude_aggregated_audio must be a boolean, got {other}"
                ));
            }
        };
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
    let (encoding, format) = match a.get("format").map(Value::as_str) {
        None | Some(Some("mp3")) => (Encoding::Mp3, "mp3"),
        Some(Some("pcm")) => (Encoding::Pcm, "pcm"),
        Some(Some("wav")) if stream => {
            return Err("format wav is only supported with stream false".into());
        }
        Some(Some("wav")) => (Encoding::Wav, "wav"),
        Some(other) => {
            return Err(format!(
                "format {other:?} is not served by this fake (mp3, pcm, wav)"
            ));
        }
    };
    let channel = match a.get("channel").map(Value::as_u64) {
        None => 1,
        Some(Some(c @ (1 | 2))) => c,
        Some(_) => return Err("channel must be 1 or 2".into()),
    };
    Ok(Parsed {
        encoding,
        rate,
        text: text.to_owned(),
        stream,
        exclude_aggregated_audio,
        format,
        bitrate: a.get("bitrate").and_then(Value::as_u64).unwrap_or(128_000),
        channel,
    })
}

fn event(data: &Value) -> axum::body::Bytes {
    format!("data: {data}\n\n").into()
}

/// The `text/event-stream` framing of `pieces` of `audio` (module doc).
fn events(parsed: &Parsed, tone_ms: u32, audio: &[u8], pieces: &[&[u8]]) -> Framed {
    let piece = |p: &[u8]| {
        event(&json!({
            "data": {"audio": hex::encode(p), "status": 1, "ced": ""},
            "trace_id": "fake",
            "base_resp": {"status_code": 0, "status_msg": ""},
        }))
    };
    let aggregated = if parsed.exclude_aggregated_audio {
        String::new()
    } else {
        hex::encode(audio)
    };
    let chars = parsed.text.chars().count();
    let end = event(&json!({
        "data": {"audio": aggregated, "status": 2, "ced": ""},
        "extra_info": {
            "audio_length": tone_ms,
            "audio_sample_rate": parsed.rate,
            "audio_size": audio.len(),
            "bitrate": parsed.bitrate,
            "word_count": chars,
            "usage_characters": chars,
            "audio_format": parsed.format,
            "audio_channel": parsed.channel,
        },
        "trace_id": "fake",
        "base_resp": {"status_code": 0, "status_msg": "success"},
    }));
    let failure = event(&json!({
        "trace_id": "fake",
        "base_resp": {"status_code": 1000, "status_msg": "unknown error"},
    }));
    Framed {
        pieces: pieces.iter().map(|p| piece(p)).collect(),
        end,
        failure: Failure::Frame(failure),
    }
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
    let parsed = match validate(&body) {
        Ok(p) => p,
        Err(m) => {
            return wire::minimax_base_resp(
                StatusCode::BAD_REQUEST,
                2013,
                &format!("invalid params: {m}"),
            );
        }
    };
    let voice = crate::billing::voice_in(&body, &["voice_setting", "voice_id"]);
    if let Some(refused) = crate::cloning::minimax::refusal(&shared, &key, &voice) {
        return refused;
    }
    let mode = if parsed.stream {
        Mode::Stream
    } else {
        Mode::Document
    };
    slot.bill(&voice, &parsed.text);
    let delivery = match shared.proceed(&slot, mode).await {
        Ok(d) => d,
        Err(fault) => return fault_response(&fault),
    };
    let tone_ms = shared.settings().tone_ms;
    let bytes = match super::render(&shared, parsed.encoding, parsed.rate, &parsed.text) {
        Ok(b) => b,
        Err(e) => return super::internal(e),
    };
    if parsed.stream {
        let framed = events(&parsed, tone_ms, &bytes, &delivery.cut(&bytes, 1));
        return stream::respond(shared, slot, delivery, "text/event-stream", framed);
    }
    let document = json!({
        "data": {"audio": hex::encode(&bytes), "status": 2},
        "extra_info": {"audio_length": tone_ms, "audio_sample_rate": parsed.rate, "audio_size": bytes.len()},
        "trace_id": "fake",
        "base_resp": {"status_code": 0, "status_msg": "success"},
    });
    let document = document.to_string().into_bytes();
    let framed = Framed::raw(&delivery.cut(&document, 1));
    stream::respond(shared, slot, delivery, "application/json", framed)
}
