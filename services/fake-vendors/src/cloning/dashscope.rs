//! Fake DashScope CosyVoice voice cloning (voice enrollment), bound to the **account** of the
//! bearer key (its scope in [`CloneConfig::scopes`](super::CloneConfig::scopes): keys of one
//! main account and region share it) and to the **`target_model`** the voice was enrolled for:
//! a voice speaks only through that model. One route, `POST
//! /api/v1/services/audio/tts/customization`, JSON `{"model": "voice-enrollment", "input":
//! {"action", …}}`; answers `{"output": {…}, "usage": {"count": 1}, "request_id"}`:
//! - `create_voice`: `target_model`, `prefix` (1–10 letters and digits) and `url` (an `http(s)`
//!   URL, taken as is, or a `data:<audio type>;base64,<bytes>` URI with non-empty bytes),
//!   optional `language_hints` (array), `max_prompt_audio_length`, `enable_preprocess`:
//!   `{"voice_id": "<target_model>-<prefix>-<32 hex>"}`. The voice is `DEPLOYING` for
//!   [`CloneConfig::training`](super::CloneConfig::training) of fake time, then `OK`.
//! - `query_voice`, `voice_id`: `{voice_id, gmt_create, gmt_modified, target_model,
//!   resource_link, status}`, `status` `DEPLOYING`, `OK` or `UNDEPLOYED` (a failed enrollment,
//!   set by a test as `Failed`).
//! - `list_voice`, optional `prefix`, `page_index` (from 0), `page_size` (default 10, at most
//!   1000): `{"voice_list": [{voice_id, gmt_create, gmt_modified, status}]}`.
//! - `update_voice`, `voice_id`, `url`: enrolls the voice again from the new sample (`DEPLOYING`
//!   again): `{}`.
//! - `delete_voice`, `voice_id`: `{}`; frees its slot.
//!
//! Slots: [`CloneConfig::slots`](super::CloneConfig::slots) per scope (1,000 by default, as per
//! main account). Lifetime: a voice not used by a synthesis for
//! [`CloneConfig::unused_lifetime`](super::CloneConfig::unused_lifetime) (a year by default)
//! goes offline: gone from the account. Errors are DashScope's `{"code", "message",
//! "request_id"}` with a status: 401 `InvalidApiKey`; 400 `InvalidParameter` for a bad body, a
//! voice the account does not hold (`voice not found: <id>`: another account's, deleted,
//! offline) and a full account (`voice quota exceeded (n / n)`); 429 `Throttling` over the clone
//! rate limit. Synthesis with a clone the key's account does not hold gets the same 400
//! `voice not found`; with a voice of the account through another model, 400 `InvalidParameter`
//! naming both models.
//!
//! Facts relied on: the route, `model: voice-enrollment`, the actions and their fields, the
//! voice id format, the `DEPLOYING` / `OK` / `UNDEPLOYED` statuses and `query_voice`'s answer
//! (<https://www.alibabacloud.com/help/en/model-studio/cosyvoice-clone-api>,
//! <https://docs.qwencloud.com/api-reference/speech-synthesis/voice-cloning/cosyvoice/create-voice>,
//! <https://docs.qwencloud.com/api-reference/speech-synthesis/voice-cloning/cosyvoice/query-voice>);
//! the data URI sample and the binding to `target_model`
//! (<https://www.alibabacloud.com/help/doc-detail/2861519.html>); 1,000 voices per main account
//! and a year unused (<https://help.aliyun.com/model-studio/cosyvoice-clone-api>). Not
//! confirmed: the codes and messages of a missing voice, a full account and a model mismatch
//! (this fake's choices), and the fields of `list_voice` items.

use std::sync::Arc;

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::Response,
    routing::post,
};
use base64::Engine as _;
use serde_json::{Value, json};

use super::{CloneState, ClonedVoice, Refusal};
use crate::control::Shared;

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new().route("/api/v1/services/audio/tts/customization", post(customize))
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    crate::json(
        status,
        json!({"code": code, "message": message, "request_id": "fake"}),
    )
}

fn invalid(message: &str) -> Response {
    error(StatusCode::BAD_REQUEST, "InvalidParameter", message)
}

fn ok(output: Value) -> Response {
    crate::json(
        StatusCode::OK,
        json!({"output": output, "usage": {"count": 1}, "request_id": "fake"}),
    )
}

/// The answer to a voice id the account does not hold.
fn not_found(voice_id: &str) -> Response {
    invalid(&format!("voice not found: {voice_id}"))
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) of fake-clock seconds.
fn gmt(secs: u64) -> String {
    let days = (secs / 86_400) as i64 + 719_468;
    let era = days.div_euclid(146_097);
    let doe = days - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let s = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        s / 3_600,
        s / 60 % 60,
        s % 60
    )
}

/// The vendor's status word of a voice the account holds.
fn status(state: CloneState) -> &'static str {
    match state {
        CloneState::Training => "DEPLOYING",
        CloneState::Failed => "UNDEPLOYED",
        _ => "OK",
    }
}

/// True when the account holds the voice (any status but gone).
fn held(voice: &ClonedVoice) -> bool {
    voice.state.holds_slot()
}

fn check_sample(url: &str) -> Result<(), String> {
    if url.starts_with("http://") || url.starts_with("https://") {
        return Ok(());
    }
    let Some((head, data)) = url
        .strip_prefix("data:")
        .and_then(|rest| rest.split_once(','))
    else {
        return Err("url must be a public http(s) URL or a data URI".into());
    };
    let Some(media) = head.strip_suffix(";base64") else {
        return Err("a data URI sample must be base64 (data:<type>;base64,…)".into());
    };
    if !media.starts_with("audio/") {
        return Err(format!("the data URI's type {media:?} is not audio/*"));
    }
    match base64::engine::general_purpose::STANDARD.decode(data) {
        Ok(bytes) if !bytes.is_empty() => Ok(()),
        _ => Err("the data URI's bytes must be non-empty base64".into()),
    }
}

fn valid_prefix(prefix: &str) -> bool {
    (1..=10).contains(&prefix.len()) && prefix.chars().all(|c| c.is_ascii_alphanumeric())
}

async fn customize(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let scope = match crate::bearer(&headers) {
        Some(key) if shared.key_allowed(&key) => shared.clones.scope_of(&key),
        Some(_) => {
            return error(
                StatusCode::UNAUTHORIZED,
                "InvalidApiKey",
                "Invalid API-key provided.",
            );
        }
        None => {
            return error(
                StatusCode::UNAUTHORIZED,
                "InvalidApiKey",
                "No API-key provided.",
            );
        }
    };
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return invalid(&format!("body is not JSON: {e}")),
    };
    if let Err(m) = crate::only_fields(&v, "body", &["model", "input"]) {
        return invalid(&m);
    }
    if v["model"].as_str() != Some("voice-enrollment") {
        return invalid("model must be voice-enrollment");
    }
    let input = &v["input"];
    match input["action"].as_str().unwrap_or_default() {
        "create_voice" => create(&shared, &scope, input),
        "query_voice" => query(&shared, &scope, input),
        "list_voice" => list(&shared, &scope, input),
        "update_voice" => update(&shared, &scope, input),
        "delete_voice" => delete(&shared, &scope, input),
        other => invalid(&format!(
            "input.action {other:?} is not create_voice, query_voice, list_voice, update_voice or delete_voice"
        )),
    }
}

fn create(shared: &Shared, scope: &str, input: &Value) -> Response {
    let clones = &shared.clones;
    clones.count(scope, |c| c.create += 1);
    let refused = |r: Response| {
        clones.count(scope, |c| c.refused += 1);
        r
    };
    let fields = [
        "action",
        "target_model",
        "prefix",
        "url",
        "language_hints",
        "max_prompt_audio_length",
        "enable_preprocess",
    ];
    let parsed = crate::only_fields(input, "input", &fields)
        .and_then(|()| {
            let model = crate::required_str(input, "target_model")?;
            let prefix = crate::required_str(input, "prefix")?;
            let url = crate::required_str(input, "url")?;
            Ok((model, prefix, url))
        })
        .and_then(|(model, prefix, url)| {
            if !valid_prefix(prefix) {
                return Err(format!(
                    "prefix {prefix:?} must be 1 to 10 letters and digits"
                ));
            }
            if input.get("language_hints").is_some_and(|h| !h.is_array()) {
                return Err("language_hints must be an array".into());
            }
            check_sample(url)?;
            Ok((model, prefix))
        });
    let (model, prefix) = match parsed {
        Ok(p) => p,
        Err(m) => return refused(invalid(&m)),
    };
    let voice_id = format!("{model}-{prefix}-{:032x}", rand::random::<u128>());
    match clones.create(scope, &voice_id, model, CloneState::Training) {
        Ok(_) => ok(json!({ "voice_id": voice_id })),
        Err(Refusal::SlotsFull { slots }) => refused(invalid(&format!(
            "voice quota exceeded ({slots} / {slots}): delete a voice of this account first"
        ))),
        Err(Refusal::RateLimited | Refusal::RetrainsExhausted { .. }) => refused(error(
            StatusCode::TOO_MANY_REQUESTS,
            "Throttling",
            "Requests throttling triggered.",
        )),
    }
}

/// The voice of `input.voice_id` the account holds, or the refusal.
fn voice_of(
    shared: &Shared,
    scope: &str,
    input: &Value,
    fields: &[&str],
) -> Result<ClonedVoice, Box<Response>> {
    crate::only_fields(input, "input", fields).map_err(|m| Box::new(invalid(&m)))?;
    let id = crate::required_str(input, "voice_id").map_err(|m| Box::new(invalid(&m)))?;
    shared
        .clones
        .get(scope, id)
        .filter(held)
        .ok_or_else(|| Box::new(not_found(id)))
}

fn describe(v: &ClonedVoice) -> Value {
    json!({
        "voice_id": v.voice_id,
        "gmt_create": gmt(v.created_at),
        "gmt_modified": gmt(v.created_at),
        "status": status(v.state),
    })
}

fn query(shared: &Shared, scope: &str, input: &Value) -> Response {
    shared.clones.count(scope, |c| c.status += 1);
    match voice_of(shared, scope, input, &["action", "voice_id"]) {
        Ok(v) => {
            let mut out = describe(&v);
            out["target_model"] = json!(v.name);
            out["resource_link"] = json!("");
            ok(out)
        }
        Err(r) => *r,
    }
}

fn list(shared: &Shared, scope: &str, input: &Value) -> Response {
    shared.clones.count(scope, |c| c.list += 1);
    let fields = ["action", "prefix", "page_index", "page_size"];
    if let Err(m) = crate::only_fields(input, "input", &fields) {
        return invalid(&m);
    }
    let prefix = input["prefix"].as_str().unwrap_or_default();
    let index = input["page_index"].as_u64().unwrap_or(0) as usize;
    let size = input["page_size"].as_u64().unwrap_or(10) as usize;
    if !(1..=1_000).contains(&size) {
        return invalid("page_size must be 1 to 1000");
    }
    let voices: Vec<Value> = shared
        .clones
        .voices_of(scope)
        .iter()
        .filter(|v| held(v))
        .filter(|v| prefix.is_empty() || v.voice_id.contains(&format!("-{prefix}-")))
        .skip(index.saturating_mul(size))
        .take(size)
        .map(describe)
        .collect();
    ok(json!({ "voice_list": voices }))
}

fn update(shared: &Shared, scope: &str, input: &Value) -> Response {
    let clones = &shared.clones;
    clones.count(scope, |c| c.create += 1);
    let voice = match voice_of(shared, scope, input, &["action", "voice_id", "url"]) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let checked = crate::required_str(input, "url").and_then(check_sample);
    if let Err(m) = checked {
        clones.count(scope, |c| c.refused += 1);
        return invalid(&m);
    }
    match clones.create(scope, &voice.voice_id, &voice.name, CloneState::Training) {
        Ok(_) => ok(json!({})),
        Err(_) => {
            clones.count(scope, |c| c.refused += 1);
            error(
                StatusCode::TOO_MANY_REQUESTS,
                "Throttling",
                "Requests throttling triggered.",
            )
        }
    }
}

fn delete(shared: &Shared, scope: &str, input: &Value) -> Response {
    shared.clones.count(scope, |c| c.delete += 1);
    match voice_of(shared, scope, input, &["action", "voice_id"]) {
        Ok(v) if shared.clones.delete(scope, &v.voice_id) => ok(json!({})),
        Ok(v) => not_found(&v.voice_id),
        Err(r) => *r,
    }
}

/// Synthesis from `key` with the speech body `body`: the vendor's refusal when its
/// `input.voice` is a clone the key's account does not hold (counted as `not_found`), or a
/// voice of the account enrolled for another `target_model` than the body's `model`. A usable
/// clone is marked used; ids that never were clones are the vendor's own voices.
pub(crate) fn refusal(shared: &Shared, key: &str, body: &[u8]) -> Option<Response> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let voice = v["input"]["voice"].as_str()?;
    let model = v["model"].as_str().unwrap_or_default();
    let clones = &shared.clones;
    if !clones.is_clone_id(voice) {
        return None;
    }
    let scope = clones.scope_of(key);
    if let Some(held) = clones.get(&scope, voice)
        && held.state.usable()
        && held.name != model
    {
        return Some(invalid(&format!(
            "voice {voice} was enrolled for target_model {}, not model {model}",
            held.name
        )));
    }
    if clones.admits(key, voice) {
        None
    } else {
        Some(not_found(voice))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_urls_or_audio_data_uris() {
        assert!(check_sample("https://example.com/a.wav").is_ok());
        assert!(check_sample("data:audio/wav;base64,UklGRg==").is_ok());
        assert!(check_sample("data:audio/wav;base64,").is_err());
        assert!(check_sample("data:text/plain;base64,UklGRg==").is_err());
        assert!(check_sample("data:audio/wav,raw").is_err());
        assert!(check_sample("ftp://x").is_err());
        assert!(valid_prefix("vp0a1b2c3d") && !valid_prefix("vp_0a") && !valid_prefix(""));
        assert_eq!(gmt(0), "1970-01-01 00:00:00");
        assert_eq!(gmt(86_400 + 3_661), "1970-01-02 01:01:01");
    }
}
