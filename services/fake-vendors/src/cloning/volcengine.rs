//! Fake Volcengine 声音复刻 (voice cloning), bound to the **AppID** that bought the slot (the
//! `appid` of the body; its scope in [`CloneConfig::scopes`](super::CloneConfig::scopes), by
//! default the AppID itself). Auth as the V1 speech route: `Authorization: Bearer;<token>`.
//! - `POST /api/v1/mega_tts/audio/upload` (header `Resource-Id`, e.g.
//!   `volc.megatts.voiceclone` or `seed-icl-2.0`), JSON `appid`, `speaker_id`, `audios`
//!   (exactly one `{audio_bytes: base64, audio_format?, text?}`), `source` (must be 2), optional
//!   `language` and `model_type`: `{"BaseResp": {"StatusCode": 0, "StatusMessage": ""},
//!   "speaker_id"}`. Training then takes [`CloneConfig::training`](super::CloneConfig::training)
//!   of fake time before `Success`. A new speaker id takes one of the AppID's bought slots; the
//!   same speaker id trains again up to
//!   [`CloneConfig::trainings_per_slot`](super::CloneConfig::trainings_per_slot) times. There is
//!   no delete: slots are bought.
//! - `POST /api/v1/mega_tts/status`, JSON `appid`, `speaker_id`: `{BaseResp, speaker_id,
//!   status, create_time (ms), version, demo_audio, available_training_times, state}` where
//!   `status` is 0 NotFound, 1 Training, 2 Success, 3 Failed, 4 Active (used for synthesis). A
//!   clone a test marked `Expired` or `Reclaimed` answers status 0; `state` names the state in
//!   the words of the vendor's management API (`Training`, `Success`, `Active`, `Failed`,
//!   `Expired`, `Reclaimed`, `NotFound`), a convenience of this fake.
//!
//! Refusals (HTTP 200, `BaseResp.StatusCode`): 1001 a bad body; 1107 a new speaker id when the
//! AppID's slots are all taken (the message names the AppID and its slot count); 1105 a speaker
//! id trained its allowed times. Speech (V1 `/api/v1/tts`, V3 `/api/v3/tts/unidirectional`)
//! with a speaker id that is a clone of another AppID, or not usable in its own (training,
//! failed, expired, reclaimed), is refused: V1 code 3050, V3 a line with code 45000000
//! `speaker permission denied`, both HTTP 200.
//!
//! Facts relied on: the upload route, its headers and body, `source: 2` and the answer's
//! `BaseResp` (<https://www.volcengine.com/docs/6561/1305191>). Not confirmed: the status
//! route's numbers (from the same API family's documentation as read by integrations), the
//! refusal codes 1105 and 1107, and the speech codes for a foreign speaker.

use std::sync::Arc;

use axum::{
    Json, Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::post,
};
use base64::Engine as _;
use serde_json::{Value, json};

use super::{CloneState, Refusal};
use crate::control::Shared;

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/api/v1/mega_tts/audio/upload", post(upload))
        .route("/api/v1/mega_tts/status", post(status))
}

fn answer(status: StatusCode, code: i64, message: &str, extra: Value) -> Response {
    let mut body = json!({"BaseResp": {"StatusCode": code, "StatusMessage": message}});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    (status, Json(body)).into_response()
}

fn bad(message: &str) -> Response {
    answer(StatusCode::BAD_REQUEST, 1001, message, json!({}))
}

/// The body's `appid` and `speaker_id` after the auth header, or the refusal.
fn open(headers: &HeaderMap, body: &[u8]) -> Result<(Value, String, String), String> {
    let token = crate::header_str(headers, "authorization")
        .and_then(|a| a.strip_prefix("Bearer;"))
        .map(str::trim)
        .filter(|t| !t.is_empty());
    if token.is_none() {
        return Err("authorization must be 'Bearer;<token>'".into());
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    let appid = crate::required_str(&v, "appid")?.to_owned();
    let speaker = crate::required_str(&v, "speaker_id")?.to_owned();
    Ok((v, appid, speaker))
}

fn check_upload(headers: &HeaderMap, v: &Value) -> Result<(), String> {
    if crate::header_str(headers, "resource-id").is_none() {
        return Err("header Resource-Id is required".into());
    }
    crate::only_fields(
        v,
        "body",
        &[
            "appid",
            "speaker_id",
            "audios",
            "source",
            "language",
            "model_type",
        ],
    )?;
    if v["source"].as_i64() != Some(2) {
        return Err("source must be 2".into());
    }
    let [audio] = v["audios"].as_array().map_or(&[][..], Vec::as_slice) else {
        return Err("audios must hold exactly one audio".into());
    };
    crate::only_fields(audio, "audios[0]", &["audio_bytes", "audio_format", "text"])?;
    let bytes = crate::required_str(audio, "audio_bytes")?;
    match base64::engine::general_purpose::STANDARD.decode(bytes) {
        Ok(decoded) if !decoded.is_empty() => Ok(()),
        _ => Err("audios[0].audio_bytes must be non-empty base64".into()),
    }
}

async fn upload(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let (v, appid, speaker) = match open(&headers, &body) {
        Ok(opened) => opened,
        Err(m) => return bad(&m),
    };
    if !shared.key_allowed(&appid) {
        return answer(
            StatusCode::UNAUTHORIZED,
            1001,
            "requested grant not found",
            json!({}),
        );
    }
    let clones = &shared.clones;
    let scope = clones.scope_of(&appid);
    clones.count(&scope, |c| c.create += 1);
    if let Err(m) = check_upload(&headers, &v) {
        clones.count(&scope, |c| c.refused += 1);
        return bad(&m);
    }
    match clones.create(&scope, &speaker, &speaker, CloneState::Training) {
        Ok(_) => answer(StatusCode::OK, 0, "", json!({"speaker_id": speaker})),
        Err(refusal) => {
            clones.count(&scope, |c| c.refused += 1);
            let (code, message) = match refusal {
                Refusal::SlotsFull { slots } => (
                    1107,
                    format!(
                        "SpeakerIDNotFound: AppID {appid} holds all of its {slots} bought voice \
                         slots; buy a slot or train an existing speaker id"
                    ),
                ),
                Refusal::RetrainsExhausted { allowed } => (
                    1105,
                    format!(
                        "ExceedUploadLimit: speaker id {speaker} was trained its {allowed} times"
                    ),
                ),
                Refusal::RateLimited => (1001, "too many trainings this minute".to_owned()),
            };
            answer(StatusCode::OK, code, &message, json!({}))
        }
    }
}

async fn status(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let (_, appid, speaker) = match open(&headers, &body) {
        Ok(opened) => opened,
        Err(m) => return bad(&m),
    };
    let clones = &shared.clones;
    let scope = clones.scope_of(&appid);
    clones.count(&scope, |c| c.status += 1);
    let voice = clones.get(&scope, &speaker);
    let (status, state) = match voice.as_ref().map(|v| v.state) {
        None => (0, "NotFound"),
        Some(CloneState::Training) => (1, "Training"),
        Some(CloneState::Success) => (2, "Success"),
        Some(CloneState::Failed) => (3, "Failed"),
        Some(CloneState::Active) => (4, "Active"),
        Some(CloneState::Expired) => (0, "Expired"),
        Some(CloneState::Reclaimed) => (0, "Reclaimed"),
    };
    let trainings = voice.as_ref().map_or(0, |v| v.trainings);
    let extra = json!({
        "speaker_id": speaker,
        "status": status,
        "state": state,
        "create_time": voice.as_ref().map_or(0, |v| v.created_at * 1000),
        "version": format!("V{}", trainings.max(1)),
        "demo_audio": "",
        "available_training_times": clones.config.trainings_per_slot.saturating_sub(trainings),
    });
    answer(StatusCode::OK, 0, "", extra)
}
