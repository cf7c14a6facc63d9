//! Fake Volcengine (Doubao) V3 HTTP chunked stream `POST /api/v3/tts/unidirectional`, served by
//! the Volcengine fake next to V1 and counted per **app id** like V1's `appid`.
//!
//! Request: headers `X-Api-App-Id` (the key), `X-Api-Access-Key`, `X-Api-Resource-Id` (any
//! non-empty id, e.g. `seed-tts-1.0`, `seed-tts-2.0`, `volc.service_type.10029`), optional
//! `X-Api-Request-Id` and `X-Control-Require-Usage-Tokens-Return`. With an allow-list
//! ([`FakeConfig::valid_keys`](crate::FakeConfig::valid_keys)) a request is accepted when the
//! list holds its app id (as for V1) or its access key. JSON body: `user` {uid},
//! `namespace`, `req_params` {`text` or `ssml` (one non-empty), `speaker` (required), `model`,
//! `additions` (a JSON object *as a string*; `post_process.pitch` −12..12 and
//! `silence_duration` 0..30000 checked), `context_texts`, `mix_speaker`, `audio_params`
//! (required) {`format` mp3|ogg_opus|pcm (default mp3; the real service accepts wav but repeats
//! its header in a stream, so this fake refuses it), `sample_rate` 8000|16000|22050|24000|32000|
//! 44100|48000 (default 24000), `bit_rate`, `emotion`, `emotion_scale` 1–5, `speech_rate`
//! −50..100, `loudness_rate` −50..100 (100 = 2×, −50 = 0.5×), `enable_timestamp`,
//! `enable_subtitle` bools}}; other fields are refused.
//!
//! Success: HTTP 200, `Content-Type: application/json`, header `X-Tt-Logid`, a body of JSON
//! objects each on its own line (`\n`-terminated): one `{"code":0,"message":"","data":"<base64
//! of the piece>"}` per piece (paced by [`Streaming`](crate::Streaming); one piece when it is
//! off), then `{"code":0,"message":"","data":null,"sentence":{"text":"<the text>","words":[]}}`,
//! then `{"code":20000000,"message":"ok","data":null}` (plus `"usage":{"text_words":<chars>}`
//! when `X-Control-Require-Usage-Tokens-Return` was sent). A client must skip `data: null`
//! lines and stop at 20000000.
//!
//! Errors, each one such line (`data: null`): over the cap HTTP 200 code **45000292** `quota
//! exceeded for types: concurrency` (+ `Retry-After` when configured); quota fault HTTP 200
//! 45000292 `quota exceeded for types: text_words_lifetime`; busy HTTP 200 55000000; invalid
//! text HTTP 200 40402003 `TTSExceededTextLimit:exceed max limit`; bad key HTTP 401 45000000
//! `[appid=… access_key=…] requested grant not found` (echoing both on purpose, like V1); bad
//! body HTTP 400 45000001 `[Invalid argument] …` (45000000 `payload unmarshal: …` when it is
//! not JSON); the bare-503 fault. A mid-stream break sends, after the first audio line,
//! `{"code":55000000,"message":"synthesis interrupted: server error","data":null}` and ends.
//!
//! Facts relied on (<https://www.volcengine.com/docs/6561/1598757>, "HTTP Chunked/SSE单向流式-V3"):
//! the path, the three headers and the resource ids, the body fields and ranges above, lines
//! `{"code":0,"message":"","data":<base64>}`, sentence lines with `data: null`, the end line
//! code 20000000 (message `ok` in the chunked section, `OK` in the SSE example: match the code),
//! the codes 40402003, 45000000 and 55000000, and that a concurrency refusal carries the message
//! `quota exceeded for types: concurrency`. Unverified: the code of that refusal (the table's row
//! has no code of its own, i.e. 45000000; deployed clients report 45000292, which this fake
//! sends — classify by the message), the HTTP status of every error (this fake uses 200 for
//! in-band refusals like V1, 401 for auth, 400 for bad bodies), the auth-failure code and
//! message, 45000001 for bad arguments, the response `Content-Type`, the shape of a mid-stream
//! failure, and the text length limit (none enforced here).

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
    xml,
};

/// The end line's code.
const DONE: i64 = 20_000_000;
/// The code this fake sends with "quota exceeded for types: …" (concurrency and quota).
const QUOTA: i64 = 45_000_292;
/// The generic client-error code (auth failures, unreadable payloads).
const CLIENT_ERROR: i64 = 45_000_000;
/// Invalid arguments.
const INVALID_ARGUMENT: i64 = 45_000_001;
/// Text over the limit (this fake's invalid-text fault).
const TEXT_LIMIT: i64 = 40_402_003;
/// The generic server-error code.
const SERVER_ERROR: i64 = 55_000_000;

pub(super) fn routes() -> Router<Arc<Shared>> {
    Router::new().route("/api/v3/tts/unidirectional", post(unidirectional))
}

/// One `\n`-terminated JSON line.
fn line(v: &Value) -> Bytes {
    format!("{v}\n").into()
}

fn error_line(status: StatusCode, code: i64, message: &str) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::HeaderName::from_static("x-tt-logid"), "fake"),
        ],
        line(&json!({"code": code, "message": message, "data": null})),
    )
        .into_response()
}

fn fault_response(fault: &Fault, app_id: &str, access_key: &str) -> Response {
    let concurrency = "quota exceeded for types: concurrency";
    match fault {
        Fault::RateLimited { retry_after_secs } => super::with_retry_after(
            error_line(StatusCode::OK, QUOTA, concurrency),
            *retry_after_secs,
        ),
        Fault::ErrorIn200 => error_line(StatusCode::OK, QUOTA, concurrency),
        Fault::Busy => error_line(StatusCode::OK, SERVER_ERROR, "server busy, please retry"),
        Fault::ServerError => super::bare_503(),
        Fault::Unauthorized => error_line(
            StatusCode::UNAUTHORIZED,
            CLIENT_ERROR,
            &format!("[appid={app_id} access_key={access_key}] requested grant not found"),
        ),
        Fault::QuotaExhausted => error_line(
            StatusCode::OK,
            QUOTA,
            "quota exceeded for types: text_words_lifetime",
        ),
        Fault::InvalidText => error_line(
            StatusCode::OK,
            TEXT_LIMIT,
            "TTSExceededTextLimit:exceed max limit",
        ),
    }
}

/// A valid request.
struct Parsed {
    encoding: Encoding,
    rate: u32,
    text: String,
}

/// A number field of `v` that must be an integer within `lo..=hi`, if present.
fn integer_in(v: &Value, field: &str, lo: i64, hi: i64) -> Result<(), String> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(()),
        Some(n) => match n.as_f64() {
            Some(x) if x.fract() == 0.0 && (lo as f64..=hi as f64).contains(&x) => Ok(()),
            _ => Err(format!("{field} must be an integer in {lo}..{hi}, got {n}")),
        },
    }
}

fn bool_field(v: &Value, field: &str) -> Result<(), String> {
    match v.get(field) {
        None | Some(Value::Null | Value::Bool(_)) => Ok(()),
        Some(other) => Err(format!("{field} must be a boolean, got {other}")),
    }
}

fn validate_additions(additions: &Value) -> Result<(), String> {
    let Some(text) = additions.as_str() else {
        return Err("req_params.additions must be a JSON object encoded as a string".into());
    };
    let v: Value =
        serde_json::from_str(text).map_err(|e| format!("req_params.additions is not JSON: {e}"))?;
    if !v.is_object() {
        return Err("req_params.additions must encode a JSON object".into());
    }
    integer_in(&v, "silence_duration", 0, 30_000)?;
    if let Some(post) = v.get("post_process") {
        integer_in(post, "pitch", -12, 12).map_err(|m| format!("post_process.{m}"))?;
    }
    Ok(())
}

fn validate(v: &Value) -> Result<Parsed, String> {
    super::only_fields(v, "body", &["user", "namespace", "req_params"])?;
    if let Some(user) = v.get("user") {
        super::only_fields(user, "user", &["uid"])?;
        if user.get("uid").is_some_and(|u| !u.is_string()) {
            return Err("user.uid must be a string".into());
        }
    }
    if v.get("namespace").is_some_and(|n| !n.is_string()) {
        return Err("namespace must be a string".into());
    }
    let r = &v["req_params"];
    super::only_fields(
        r,
        "req_params",
        &[
            "text",
            "ssml",
            "model",
            "speaker",
            "audio_params",
            "additions",
            "context_texts",
            "mix_speaker",
        ],
    )?;
    super::required_str(r, "speaker").map_err(|m| format!("req_params.{m}"))?;
    let text = match (
        super::required_str(r, "ssml").ok(),
        super::required_str(r, "text").ok(),
    ) {
        (Some(ssml), _) => xml::text(ssml),
        (None, Some(text)) => text.to_owned(),
        (None, None) => return Err("req_params.text or req_params.ssml is required".into()),
    };
    if let Some(additions) = r.get("additions") {
        validate_additions(additions)?;
    }
    let a = &r["audio_params"];
    super::only_fields(
        a,
        "req_params.audio_params",
        &[
            "format",
            "sample_rate",
            "bit_rate",
            "emotion",
            "emotion_scale",
            "speech_rate",
            "loudness_rate",
            "enable_timestamp",
            "enable_subtitle",
        ],
    )?;
    let encoding = match a.get("format").map(Value::as_str) {
        None | Some(Some("mp3")) => Encoding::Mp3,
        Some(Some("ogg_opus")) => Encoding::OggOpus,
        Some(Some("pcm")) => Encoding::Pcm,
        Some(other) => {
            return Err(format!(
                "audio_params.format {other:?} is not served by this fake (mp3, ogg_opus, pcm)"
            ));
        }
    };
    let rate = match a.get("sample_rate").map(Value::as_u64) {
        None => 24_000,
        Some(Some(r @ (8_000 | 16_000 | 22_050 | 24_000 | 32_000 | 44_100 | 48_000))) => r as u32,
        Some(other) => {
            return Err(format!(
                "audio_params.sample_rate {other:?} is not supported"
            ));
        }
    };
    for field in ["speech_rate", "loudness_rate"] {
        super::number_in(a, field, -50.0, 100.0).map_err(|m| format!("audio_params.{m}"))?;
    }
    super::number_in(a, "emotion_scale", 1.0, 5.0).map_err(|m| format!("audio_params.{m}"))?;
    for field in ["enable_timestamp", "enable_subtitle"] {
        bool_field(a, field).map_err(|m| format!("audio_params.{m}"))?;
    }
    Ok(Parsed {
        encoding,
        rate,
        text,
    })
}

/// The JSON-lines framing of `pieces` (module doc).
fn lines(text: &str, usage: bool, pieces: &[&[u8]]) -> Framed {
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let mut done = json!({"code": DONE, "message": "ok", "data": null});
    if usage {
        done["usage"] = json!({"text_words": text.chars().count()});
    }
    let sentence =
        json!({"code": 0, "message": "", "data": null, "sentence": {"text": text, "words": []}});
    let mut end = line(&sentence).to_vec();
    end.extend_from_slice(&line(&done));
    let failure = json!({"code": SERVER_ERROR, "message": "synthesis interrupted: server error", "data": null});
    Framed {
        pieces: pieces
            .iter()
            .map(|p| line(&json!({"code": 0, "message": "", "data": b64(p)})))
            .collect(),
        end: end.into(),
        failure: Failure::Frame(line(&failure)),
    }
}

async fn unidirectional(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (Some(app_id), Some(access_key)) = (
        super::header_str(&headers, "x-api-app-id").map(str::to_owned),
        super::header_str(&headers, "x-api-access-key").map(str::to_owned),
    ) else {
        return error_line(
            StatusCode::UNAUTHORIZED,
            CLIENT_ERROR,
            "X-Api-App-Id and X-Api-Access-Key are required",
        );
    };
    if !shared.key_allowed(&app_id) && !shared.key_allowed(&access_key) {
        return fault_response(&Fault::Unauthorized, &app_id, &access_key);
    }
    let slot = match shared.enter(&app_id) {
        Admission::OverCap(_slot, fault) => return fault_response(&fault, &app_id, &access_key),
        Admission::Admitted(slot) => slot,
    };
    super::record(&shared, &app_id, &uri, &headers, &body);
    if super::header_str(&headers, "x-api-resource-id").is_none() {
        return error_line(
            StatusCode::BAD_REQUEST,
            INVALID_ARGUMENT,
            "[Invalid argument] X-Api-Resource-Id is required",
        );
    }
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return error_line(
                StatusCode::BAD_REQUEST,
                CLIENT_ERROR,
                &format!("payload unmarshal: {e}"),
            );
        }
    };
    let parsed = match validate(&v) {
        Ok(p) => p,
        Err(m) => {
            return error_line(
                StatusCode::BAD_REQUEST,
                INVALID_ARGUMENT,
                &format!("[Invalid argument] {m}"),
            );
        }
    };
    let speaker = crate::billing::voice_in(&body, &["req_params", "speaker"]);
    if !shared.clones.admits(&app_id, &speaker) {
        let message =
            format!("speaker permission denied: {speaker} is not a usable voice of this AppID");
        return error_line(StatusCode::OK, CLIENT_ERROR, &message);
    }
    slot.bill(&speaker, &parsed.text);
    let delivery = match shared.proceed(&slot, Mode::Stream).await {
        Ok(d) => d,
        Err(fault) => return fault_response(&fault, &app_id, &access_key),
    };
    let bytes = match super::render(&shared, parsed.encoding, parsed.rate, &parsed.text) {
        Ok(b) => b,
        Err(e) => return super::internal(e),
    };
    let usage = headers.contains_key("x-control-require-usage-tokens-return");
    let framed = lines(&parsed.text, usage, &delivery.cut(&bytes, 1));
    let mut response = stream::respond(shared, slot, delivery, "application/json", framed);
    response
        .headers_mut()
        .insert("x-tt-logid", header::HeaderValue::from_static("fake"));
    response
}
