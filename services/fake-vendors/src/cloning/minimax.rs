//! Fake MiniMax voice cloning, bound to the **account** (GroupId) of the bearer key (its scope
//! in [`CloneConfig::scopes`](super::CloneConfig::scopes)). Every answer is HTTP 200 with the
//! outcome in `base_resp` `{status_code, status_msg}`, like the speech route:
//! - `POST /v1/files/upload`, multipart `purpose` (`voice_clone` or `prompt_audio`) and `file`:
//!   `{"file": {file_id (integer), bytes, created_at, filename, purpose}, "base_resp"}`. A file
//!   belongs to the scope that uploaded it.
//! - `POST /v1/voice_clone`, JSON `file_id` (a `voice_clone` file of the scope), `voice_id`
//!   (chosen by the caller: at least 8 characters, letters, digits, `_` or `-`, starting with a
//!   letter) and the optional `clone_prompt`, `text`, `model`, `need_noise_reduction`,
//!   `need_volume_normalization`, `accuracy`, `language_boost`: `{"input_sensitive": false,
//!   "input_sensitive_type": 0, "demo_audio": "", "base_resp"}`. Ready at once.
//! - `POST /v1/get_voice`, `{"voice_type": "system"|"voice_cloning"|"voice_generation"|"all"}`:
//!   `system_voice` / `voice_cloning` / `voice_generation` lists (`voice_cloning` items:
//!   `{voice_id, description: [], created_time: "YYYY-MM-DD"}`, live clones only).
//! - `POST /v1/delete_voice`, `{"voice_type": "voice_cloning", "voice_id"}`: `{voice_id,
//!   created_time, base_resp}`; frees the slot.
//!
//! Lifetime: a clone not used by a synthesis (`/v1/t2a_v2`) within
//! [`CloneConfig::unused_lifetime`](super::CloneConfig::unused_lifetime) (7 days) of its
//! creation expires; one synthesis keeps it for good. Synthesis with a clone the account does
//! not hold (another account's, expired, deleted) gets `base_resp` 2054 `voice id not exist`.
//! Codes: 1004 bad key; 2013 invalid params (a bad body, a file of another account, a full
//! account: `voice slots full (n / n)`); 2039 a `voice_id` the account holds already; 1002 over
//! the clone rate limit (60 a minute by default).
//!
//! Facts relied on: the upload, clone and T2A routes, their fields, and the 7-day rule
//! (<https://platform.minimax.io/docs/api-reference/voice-cloning-clone>,
//! <https://platform.minimax.io/docs/api-reference/voice-cloning-uploadcloneaudio>,
//! <https://platform.minimax.io/docs/guides/speech-voice-clone>); 1002, 1004 and 2013
//! (<https://platform.minimax.io/docs/api-reference/errorcode>). Seen in public client code, not
//! confirmed in the reference: `get_voice` / `delete_voice` and their answers, 2054 for a
//! missing voice. Not confirmed anywhere: the codes for a duplicate id (2039 here) and a full
//! account (2013 here).

use std::sync::Arc;

use axum::{
    Json, Router,
    extract::{FromRequest, Multipart, Request, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::post,
};
use serde_json::{Value, json};

use super::{CloneState, Refusal};
use crate::{control::Shared, wire};

/// The system voices every account has.
const SYSTEM: &[(&str, &str)] = &[
    ("male-qn-qingse", "青涩青年音色"),
    ("female-shaonv", "少女音色"),
];

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/v1/files/upload", post(upload))
        .route("/v1/voice_clone", post(clone_voice))
        .route("/v1/get_voice", post(get_voice))
        .route("/v1/delete_voice", post(delete_voice))
}

fn ok(mut body: Value) -> Response {
    body["base_resp"] = json!({"status_code": 0, "status_msg": "success"});
    Json(body).into_response()
}

fn invalid(message: &str) -> Response {
    wire::minimax_base_resp(StatusCode::OK, 2013, &format!("invalid params, {message}"))
}

/// The scope of the bearer key, or the vendor's auth answer.
fn scope(shared: &Shared, headers: &HeaderMap) -> Result<String, Box<Response>> {
    match crate::bearer(headers) {
        Some(key) if shared.key_allowed(&key) => Ok(shared.clones.scope_of(&key)),
        _ => Err(Box::new(wire::minimax_base_resp(
            StatusCode::OK,
            1004,
            "login fail: please check your API key",
        ))),
    }
}

/// `YYYY-MM-DD` of fake-clock seconds (proleptic Gregorian, UTC).
fn date(secs: u64) -> String {
    let days = (secs / 86_400) as i64 + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

async fn upload(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    request: Request,
) -> Response {
    let scope = match scope(&shared, &headers) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    shared.clones.count(&scope, |c| c.upload += 1);
    let mut form = match Multipart::from_request(request, &()).await {
        Ok(form) => form,
        Err(e) => return invalid(&format!("not a multipart form: {e}")),
    };
    let (mut purpose, mut file) = (None, None);
    loop {
        match form.next_field().await {
            Ok(Some(field)) => {
                let name = field.name().unwrap_or_default().to_owned();
                let filename = field.file_name().unwrap_or("sample").to_owned();
                let Ok(data) = field.bytes().await else {
                    return invalid(&format!("form field {name:?} could not be read"));
                };
                match name.as_str() {
                    "purpose" => purpose = Some(String::from_utf8_lossy(&data).into_owned()),
                    "file" if !data.is_empty() => file = Some((filename, data.len())),
                    "file" => return invalid("file is empty"),
                    other => return invalid(&format!("unexpected form field {other:?}")),
                }
            }
            Ok(None) => break,
            Err(e) => return invalid(&format!("bad multipart body: {e}")),
        }
    }
    let purpose = match purpose.as_deref() {
        Some(p @ ("voice_clone" | "prompt_audio")) => p.to_owned(),
        other => {
            return invalid(&format!(
                "purpose {other:?} is not voice_clone or prompt_audio"
            ));
        }
    };
    let Some((filename, bytes)) = file else {
        return invalid("file is required");
    };
    let file_id = shared.clones.add_file(&scope, &purpose);
    ok(json!({"file": {
        "file_id": file_id, "bytes": bytes, "created_at": shared.clones.clock.now(),
        "filename": filename, "purpose": purpose,
    }}))
}

/// The voice id rule: at least 8 characters, letters, digits, `_` or `-`, a letter first.
fn valid_voice_id(id: &str) -> bool {
    id.len() >= 8
        && id.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn parse_clone(body: &[u8]) -> Result<(u64, String), String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    crate::only_fields(
        &v,
        "body",
        &[
            "file_id",
            "voice_id",
            "clone_prompt",
            "text",
            "model",
            "need_noise_reduction",
            "need_volume_normalization",
            "accuracy",
            "language_boost",
        ],
    )?;
    let file_id = v["file_id"]
        .as_u64()
        .ok_or("file_id is required (an integer from /v1/files/upload)")?;
    let voice_id = crate::required_str(&v, "voice_id")?;
    if !valid_voice_id(voice_id) {
        return Err(format!(
            "voice_id {voice_id:?} must be at least 8 letters, digits, _ or -, starting with a letter"
        ));
    }
    crate::number_in(&v, "accuracy", 0.0, 1.0)?;
    Ok((file_id, voice_id.to_owned()))
}

async fn clone_voice(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let scope = match scope(&shared, &headers) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let clones = &shared.clones;
    clones.count(&scope, |c| c.create += 1);
    let refused = |r: Response| {
        clones.count(&scope, |c| c.refused += 1);
        r
    };
    let (file_id, voice_id) = match parse_clone(&body) {
        Ok(p) => p,
        Err(m) => return refused(invalid(&m)),
    };
    if !clones.file_of(&scope, file_id, "voice_clone") {
        return refused(invalid(&format!(
            "file_id {file_id} is not a voice_clone file of this account"
        )));
    }
    if clones
        .get(&scope, &voice_id)
        .is_some_and(|v| v.state.usable())
    {
        return refused(wire::minimax_base_resp(
            StatusCode::OK,
            2039,
            "voice clone voice id duplicate",
        ));
    }
    match clones.create(&scope, &voice_id, &voice_id, CloneState::Success) {
        Ok(_) => ok(json!({"input_sensitive": false, "input_sensitive_type": 0, "demo_audio": ""})),
        Err(Refusal::SlotsFull { slots }) => refused(invalid(&format!(
            "voice slots full ({slots} / {slots}); delete a cloned voice first"
        ))),
        Err(Refusal::RateLimited | Refusal::RetrainsExhausted { .. }) => {
            refused(wire::minimax_base_resp(StatusCode::OK, 1002, "rate limit"))
        }
    }
}

fn voice_type(body: &[u8], allowed: &[&str]) -> Result<(String, Value), String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    let kind = crate::required_str(&v, "voice_type")?;
    if !allowed.contains(&kind) {
        return Err(format!("voice_type {kind:?} must be one of {allowed:?}"));
    }
    Ok((kind.to_owned(), v))
}

async fn get_voice(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let scope = match scope(&shared, &headers) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    shared.clones.count(&scope, |c| c.list += 1);
    let kinds = ["system", "voice_cloning", "voice_generation", "all"];
    let kind = match voice_type(&body, &kinds) {
        Ok((kind, v)) => match crate::only_fields(&v, "body", &["voice_type"]) {
            Ok(()) => kind,
            Err(m) => return invalid(&m),
        },
        Err(m) => return invalid(&m),
    };
    let mut answer = json!({});
    if matches!(kind.as_str(), "system" | "all") {
        answer["system_voice"] = SYSTEM
            .iter()
            .map(|(id, name)| json!({"voice_id": id, "voice_name": name, "description": []}))
            .collect();
    }
    if matches!(kind.as_str(), "voice_cloning" | "all") {
        answer["voice_cloning"] = shared
            .clones
            .voices_of(&scope)
            .into_iter()
            .filter(|v| v.state.usable())
            .map(|v| json!({"voice_id": v.voice_id, "description": [], "created_time": date(v.created_at)}))
            .collect();
    }
    if matches!(kind.as_str(), "voice_generation" | "all") {
        answer["voice_generation"] = json!([]);
    }
    ok(answer)
}

async fn delete_voice(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let scope = match scope(&shared, &headers) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    shared.clones.count(&scope, |c| c.delete += 1);
    let v = match voice_type(&body, &["voice_cloning", "voice_generation"]) {
        Ok((_, v)) => v,
        Err(m) => return invalid(&m),
    };
    if let Err(m) = crate::only_fields(&v, "body", &["voice_type", "voice_id"]) {
        return invalid(&m);
    }
    let voice_id = match crate::required_str(&v, "voice_id") {
        Ok(id) => id,
        Err(m) => return invalid(&m),
    };
    let held = shared.clones.get(&scope, voice_id);
    match held {
        Some(voice) if voice.state.usable() && shared.clones.delete(&scope, voice_id) => {
            ok(json!({"voice_id": voice_id, "created_time": date(voice.created_at)}))
        }
        _ => wire::minimax_base_resp(StatusCode::OK, 2054, "voice id not exist"),
    }
}

/// Synthesis with `voice_id` from `key`: the vendor's not-found answer when the id is
/// a clone the key's scope cannot use ([`super::Clones::admits`]).
pub(crate) fn refusal(shared: &Shared, key: &str, voice_id: &str) -> Option<Response> {
    if shared.clones.admits(key, voice_id) {
        None
    } else {
        Some(wire::minimax_base_resp(
            StatusCode::OK,
            2054,
            "voice id not exist",
        ))
    }
}
