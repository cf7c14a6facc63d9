//! Fake Volcengine `POST /api/v1/tts`: `Authorization: Bearer;<token>` (semicolon; a space or a
//! missing header is a 401), JSON body `app` {appid, token, cluster}, `user.uid`, `audio`
//! {voice_type, encoding mp3|wav|pcm|ogg_opus, rate 8000|16000|24000, speed_ratio 0.2–3,
//! volume_ratio 0.1–3, pitch_ratio 0.1–3, loudness_ratio 0.5–2 (not together with
//! pitch_ratio: large-model voices have no pitch)}, `request` {reqid (unique: a reused one is
//! 3006), text (≤ 1024 UTF-8 bytes, else 3010), text_type plain|ssml, operation query}.
//! Bad bodies get HTTP 400 with code 3001. Concurrency is counted per **appid**.
//!
//! Answers are JSON `{"reqid","code","message",…}`: 3000 + base64 `data` on success; 3003
//! "quota exceeded for types: concurrency" (HTTP 200) over the cap; 3005 busy; a
//! `…_lifetime` quota message for the quota fault; 3011 invalid text; HTTP 401 "requested grant
//! not found" (echoing the appid and token) for a bad key.
//!
//! V1 never streams: with [`Streaming`](crate::Streaming) on it answers at `first_byte + rest`,
//! and a mid-stream break cuts its JSON document in half and drops the connection. The V3
//! streaming route lives in `volcengine_v3.rs` and shares this fake's keys.

use std::sync::Arc;

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode, Uri},
    response::Response,
    routing::post,
};
use base64::Engine as _;
use serde_json::{Value, json};

use super::{
    audio::Encoding,
    control::{Admission, Mode, Shared},
    knobs::Fault,
    stream::{self, Framed},
};

pub(super) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/api/v1/tts", post(tts))
        .merge(super::volcengine_v3::routes())
        .merge(crate::cloning::volcengine::routes())
}

fn answer(status: StatusCode, reqid: &str, code: i64, message: &str) -> Response {
    super::json(
        status,
        json!({"reqid": reqid, "code": code, "message": message}),
    )
}

fn fault_response(fault: &Fault, reqid: &str, appid: &str, token: &str) -> Response {
    match fault {
        Fault::RateLimited { retry_after_secs } => super::with_retry_after(
            answer(
                StatusCode::OK,
                reqid,
                3003,
                "quota exceeded for types: concurrency",
            ),
            *retry_after_secs,
        ),
        Fault::ErrorIn200 => answer(
            StatusCode::OK,
            reqid,
            3003,
            "quota exceeded for types: concurrency",
        ),
        Fault::Busy => answer(StatusCode::OK, reqid, 3005, "server busy"),
        Fault::ServerError => super::bare_503(),
        Fault::Unauthorized => answer(
            StatusCode::UNAUTHORIZED,
            reqid,
            3001,
            &format!("[appid={appid} token={token}] requested grant not found"),
        ),
        Fault::QuotaExhausted => answer(
            StatusCode::OK,
            reqid,
            3003,
            "quota exceeded for types: text_words_lifetime",
        ),
        Fault::InvalidText => answer(StatusCode::OK, reqid, 3011, "invalid text"),
    }
}

struct Parsed {
    encoding: Encoding,
    rate: u32,
    text: String,
}

/// Validates everything but the appid/token (already read). `Err((code, message))`.
fn validate(shared: &Shared, v: &Value) -> Result<Parsed, (i64, String)> {
    let bad = |m: String| (3001, m);
    super::only_fields(v, "body", &["app", "user", "audio", "request"]).map_err(bad)?;
    let app = &v["app"];
    super::only_fields(app, "app", &["appid", "token", "cluster"]).map_err(bad)?;
    super::required_str(app, "cluster").map_err(bad)?;
    super::required_str(&v["user"], "uid").map_err(|m| bad(format!("user.{m}")))?;
    let a = &v["audio"];
    super::only_fields(
        a,
        "audio",
        &[
            "voice_type",
            "encoding",
            "rate",
            "speed_ratio",
            "volume_ratio",
            "pitch_ratio",
            "loudness_ratio",
        ],
    )
    .map_err(bad)?;
    super::required_str(a, "voice_type").map_err(|m| bad(format!("audio.{m}")))?;
    let encoding = match a["encoding"].as_str() {
        Some("mp3") => Encoding::Mp3,
        Some("wav") => Encoding::Wav,
        Some("pcm") => Encoding::Pcm,
        Some("ogg_opus") => Encoding::OggOpus,
        other => {
            return Err(bad(format!(
                "audio.encoding {other:?} is not mp3, wav, pcm or ogg_opus"
            )));
        }
    };
    let rate = match a.get("rate").map(Value::as_u64) {
        None => 24_000,
        Some(Some(r @ (8_000 | 16_000 | 24_000))) => r as u32,
        Some(other) => {
            return Err(bad(format!(
                "audio.rate {other:?} is not 8000, 16000 or 24000"
            )));
        }
    };
    super::number_in(a, "speed_ratio", 0.2, 3.0).map_err(bad)?;
    super::number_in(a, "volume_ratio", 0.1, 3.0).map_err(bad)?;
    let pitch = super::number_in(a, "pitch_ratio", 0.1, 3.0).map_err(bad)?;
    let loudness = super::number_in(a, "loudness_ratio", 0.5, 2.0).map_err(bad)?;
    if pitch.is_some() && loudness.is_some() {
        return Err(bad(
            "pitch_ratio with loudness_ratio: large-model voices have no pitch".into(),
        ));
    }
    let r = &v["request"];
    super::only_fields(r, "request", &["reqid", "text", "text_type", "operation"]).map_err(bad)?;
    let reqid = super::required_str(r, "reqid").map_err(|m| bad(format!("request.{m}")))?;
    let text = super::required_str(r, "text").map_err(|m| bad(format!("request.{m}")))?;
    if text.len() > 1024 {
        return Err((3010, format!("text is {} bytes, over 1024", text.len())));
    }
    if !matches!(r["text_type"].as_str(), None | Some("plain" | "ssml")) {
        return Err(bad("request.text_type must be plain or ssml".into()));
    }
    if r["operation"].as_str() != Some("query") {
        return Err(bad("request.operation must be query".into()));
    }
    if !shared.first_use(reqid) {
        return Err((3006, format!("duplicate reqid {reqid}")));
    }
    Ok(Parsed {
        encoding,
        rate,
        text: text.to_owned(),
    })
}

async fn tts(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let token = match super::header_str(&headers, "authorization")
        .and_then(|a| a.strip_prefix("Bearer;"))
    {
        Some(t) if !t.trim().is_empty() => t.trim().to_owned(),
        _ => {
            return answer(
                StatusCode::UNAUTHORIZED,
                "",
                3001,
                "authorization must be 'Bearer;<token>'",
            );
        }
    };
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return answer(
                StatusCode::BAD_REQUEST,
                "",
                3001,
                &format!("body is not JSON: {e}"),
            );
        }
    };
    let reqid = v["request"]["reqid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let (Some(appid), Some(body_token)) = (v["app"]["appid"].as_str(), v["app"]["token"].as_str())
    else {
        return answer(
            StatusCode::BAD_REQUEST,
            &reqid,
            3001,
            "app.appid and app.token are required",
        );
    };
    if appid.is_empty() || body_token.is_empty() {
        return answer(
            StatusCode::BAD_REQUEST,
            &reqid,
            3001,
            "app.appid and app.token must not be empty",
        );
    }
    let appid = appid.to_owned();
    if !shared.key_allowed(&appid) {
        return fault_response(&Fault::Unauthorized, &reqid, &appid, &token);
    }
    let slot = match shared.enter(&appid) {
        Admission::OverCap(_slot, fault) => return fault_response(&fault, &reqid, &appid, &token),
        Admission::Admitted(slot) => slot,
    };
    super::record(&shared, &appid, &uri, &headers, &body);
    let parsed = match validate(&shared, &v) {
        Ok(p) => p,
        Err((code, m)) => return answer(StatusCode::BAD_REQUEST, &reqid, code, &m),
    };
    let voice = crate::billing::voice_in(&body, &["audio", "voice_type"]);
    if !shared.clones.admits(&appid, &voice) {
        let message =
            format!("speaker permission denied: {voice} is not a usable voice of this AppID");
        return answer(StatusCode::OK, &reqid, 3050, &message);
    }
    slot.bill(&voice, &parsed.text);
    let delivery = match shared.proceed(&slot, Mode::Document).await {
        Ok(d) => d,
        Err(fault) => return fault_response(&fault, &reqid, &appid, &token),
    };
    let tone_ms = shared.settings().tone_ms;
    match super::render(&shared, parsed.encoding, parsed.rate, &parsed.text) {
        Ok(bytes) => {
            let document = json!({
                "reqid": reqid,
                "code": 3000,
                "message": "Success",
                "sequence": -1,
                "data": base64::engine::general_purpose::STANDARD.encode(bytes),
                "addition": {"duration": tone_ms.to_string()},
            });
            let document = document.to_string().into_bytes();
            let framed = Framed::raw(&delivery.cut(&document, 1));
            stream::respond(shared, slot, delivery, "application/json", framed)
        }
        Err(e) => super::internal(e),
    }
}
