//! Fake ElevenLabs instant voice cloning (IVC), bound to the **workspace** of the key
//! (`xi-api-key`, its scope in [`CloneConfig::scopes`](super::CloneConfig::scopes)):
//! - `POST /v1/voices/add`, a multipart form: `name` (required), one or more `files` (also
//!   taken as `files[]`), optional `description`, `labels` (a JSON object as text) and
//!   `remove_background_noise` (`true`/`false`); any other field is a 422. Answers
//!   `{"voice_id", "requires_verification": false}`: IVC is ready at once, no training.
//! - `GET /v1/voices`: `{"voices": [{voice_id, name, category, description, labels}]}`, the
//!   premade voices then the scope's clones (`category: "cloned"`).
//! - `DELETE /v1/voices/{voice_id}`: `{"status": "ok"}`, which frees the slot.
//!
//! Errors, in the `detail` shape of the speech routes: a full workspace is a 400
//! `voice_limit_reached` naming its count (`(10 / 10)`); a scope over its clone rate limit a
//! 429 `rate_limit_exceeded`; deleting or speaking with a clone the workspace does not hold
//! (another workspace's, a deleted one) a 404 `voice_not_found`. Facts relied on: the add
//! route, its fields and answer (<https://elevenlabs.io/docs/api-reference/voices/ivc/create>),
//! the list and delete routes (same reference, "List voices", "Delete voice"). Seen in
//! answers quoted by public client code, not in the reference: the `voice_limit_reached`
//! status with its `(n / n)` count, and `voice_not_found` (a 400 in older answers, a 404 in
//! newer ones).

use std::sync::Arc;

use axum::{
    Json, Router,
    extract::{FromRequest, Multipart, Path, Request, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::{delete, get, post},
};
use rand::Rng as _;
use serde_json::{Value, json};

use super::{CloneState, Refusal};
use crate::{control::Shared, wire};

/// The voices every workspace has.
const PREMADE: &[(&str, &str)] = &[("premade-rachel", "Rachel"), ("premade-adam", "Adam")];

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/v1/voices/add", post(add))
        .route("/v1/voices", get(list))
        .route("/v1/voices/{voice_id}", delete(remove))
}

/// The scope of the request's key, or the vendor's auth error.
fn scope(shared: &Shared, headers: &HeaderMap) -> Result<String, Box<Response>> {
    match crate::header_str(headers, "xi-api-key") {
        Some(key) if shared.key_allowed(key) => Ok(shared.clones.scope_of(key)),
        Some(_) => Err(Box::new(wire::elevenlabs_detail(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid_api_key",
            "Invalid API key",
        ))),
        None => Err(Box::new(wire::elevenlabs_detail(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "missing_api_key",
            "xi-api-key is required",
        ))),
    }
}

fn invalid(message: &str) -> Response {
    wire::elevenlabs_detail(
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_error",
        "invalid_request",
        message,
    )
}

/// A voice id like the vendor's: 20 letters and digits.
fn new_voice_id() -> String {
    let mut rng = rand::rng();
    (0..20)
        .map(|_| char::from(rng.sample(rand::distr::Alphanumeric)))
        .collect()
}

/// The `name` of a valid add form.
async fn read_form(request: Request) -> Result<String, String> {
    let mut form = Multipart::from_request(request, &())
        .await
        .map_err(|e| format!("not a multipart form: {e}"))?;
    let (mut name, mut files) = (None, 0usize);
    while let Some(field) = form
        .next_field()
        .await
        .map_err(|e| format!("bad multipart body: {e}"))?
    {
        let field_name = field.name().unwrap_or_default().to_owned();
        let data = field
            .bytes()
            .await
            .map_err(|e| format!("form field {field_name:?} could not be read: {e}"))?;
        let text = || String::from_utf8_lossy(&data).into_owned();
        match field_name.as_str() {
            "name" => name = Some(text()),
            "files" | "files[]" if data.is_empty() => {
                return Err("files: an audio file is empty".into());
            }
            "files" | "files[]" => files += 1,
            "description" => {}
            "labels" => {
                if !serde_json::from_slice::<Value>(&data).is_ok_and(|v| v.is_object()) {
                    return Err("labels must be a JSON object".into());
                }
            }
            "remove_background_noise" if matches!(text().as_str(), "true" | "false") => {}
            "remove_background_noise" => {
                return Err("remove_background_noise must be true or false".into());
            }
            other => return Err(format!("unexpected form field {other:?}")),
        }
    }
    if files == 0 {
        return Err("files: at least one audio file is required".into());
    }
    name.filter(|n| !n.trim().is_empty())
        .ok_or_else(|| "name is required".into())
}

async fn add(State(shared): State<Arc<Shared>>, headers: HeaderMap, request: Request) -> Response {
    let scope = match scope(&shared, &headers) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    shared.clones.count(&scope, |c| c.create += 1);
    let name = match read_form(request).await {
        Ok(name) => name,
        Err(m) => {
            shared.clones.count(&scope, |c| c.refused += 1);
            return invalid(&m);
        }
    };
    let created = shared
        .clones
        .create(&scope, &new_voice_id(), &name, CloneState::Success);
    match created {
        Ok(voice) => Json(json!({"voice_id": voice.voice_id, "requires_verification": false}))
            .into_response(),
        Err(refusal) => {
            shared.clones.count(&scope, |c| c.refused += 1);
            match refusal {
                Refusal::SlotsFull { slots } => wire::elevenlabs_detail(
                    StatusCode::BAD_REQUEST,
                    "invalid_request",
                    "voice_limit_reached",
                    &format!(
                        "This workspace holds its maximum of custom voices ({slots} / {slots}); \
                         delete one or upgrade the plan for more."
                    ),
                ),
                Refusal::RateLimited | Refusal::RetrainsExhausted { .. } => {
                    wire::elevenlabs_detail(
                        StatusCode::TOO_MANY_REQUESTS,
                        "rate_limit_error",
                        "rate_limit_exceeded",
                        "Too many voice clones were created in the last minute",
                    )
                }
            }
        }
    }
}

async fn list(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let scope = match scope(&shared, &headers) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    shared.clones.count(&scope, |c| c.list += 1);
    let premade = PREMADE.iter().map(|(id, name)| {
        json!({"voice_id": id, "name": name, "category": "premade", "description": "", "labels": {}})
    });
    let cloned = shared
        .clones
        .voices_of(&scope)
        .into_iter()
        .filter(|v| v.state.usable())
        .map(|v| {
            json!({"voice_id": v.voice_id, "name": v.name, "category": "cloned", "description": "", "labels": {}})
        });
    Json(json!({"voices": premade.chain(cloned).collect::<Vec<_>>()})).into_response()
}

async fn remove(
    State(shared): State<Arc<Shared>>,
    Path(voice_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let scope = match scope(&shared, &headers) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    shared.clones.count(&scope, |c| c.delete += 1);
    if shared.clones.delete(&scope, &voice_id) {
        Json(json!({"status": "ok"})).into_response()
    } else {
        not_found(&voice_id)
    }
}

/// The vendor's answer to a voice id the workspace does not hold.
fn not_found(voice_id: &str) -> Response {
    wire::elevenlabs_detail(
        StatusCode::NOT_FOUND,
        "not_found",
        "voice_not_found",
        &format!("A voice with the voice_id {voice_id} was not found."),
    )
}

/// Synthesis with `voice_id` from `key`: the vendor's not-found answer when the id is
/// a clone the key's scope cannot use ([`super::Clones::admits`]).
pub(crate) fn refusal(shared: &Shared, key: &str, voice_id: &str) -> Option<Response> {
    if shared.clones.admits(key, voice_id) {
        None
    } else {
        Some(not_found(voice_id))
    }
}
