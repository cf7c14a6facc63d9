//! The fakes' clone controls and counters, for tests and experiments:
//! - `GET /_fake/stats/clones`: `{"scopes": {scope: CloneCounts}, "voices": [ClonedVoice]}`;
//! - `POST /_fake/clock/advance` with `{"seconds": N}`: moves the fake clock forward, answers
//!   `{"now": <fake seconds since the epoch>}`;
//! - `POST /_fake/clones/state` with `{"scope", "voice_id", "state"}` (`state` one of
//!   `Training`, `Success`, `Active`, `Failed`, `Expired`, `Reclaimed`): plays the vendor
//!   changing a clone (an expiry, a reclaimed slot); 404 when the scope has no such clone.

use std::{sync::Arc, time::Duration};

use axum::{
    Json, Router,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::Deserialize;
use serde_json::json;

use super::CloneState;
use crate::control::Shared;

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/_fake/stats/clones", get(stats))
        .route("/_fake/clock/advance", post(advance))
        .route("/_fake/clones/state", post(set_state))
}

async fn stats(State(shared): State<Arc<Shared>>) -> Json<serde_json::Value> {
    Json(json!({
        "scopes": shared.clones.counts(),
        "voices": shared.clones.voices(),
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Advance {
    seconds: u64,
}

async fn advance(
    State(shared): State<Arc<Shared>>,
    Json(by): Json<Advance>,
) -> Json<serde_json::Value> {
    let now = shared.clones.clock.advance(Duration::from_secs(by.seconds));
    Json(json!({ "now": now }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetState {
    scope: String,
    voice_id: String,
    state: CloneState,
}

async fn set_state(State(shared): State<Arc<Shared>>, Json(to): Json<SetState>) -> Response {
    if shared.clones.set_state(&to.scope, &to.voice_id, to.state) {
        Json(json!({ "ok": true })).into_response()
    } else {
        (
            StatusCode::NOT_FOUND,
            Json(json!({ "error": format!("scope {:?} holds no clone {:?}; list its clones at /_fake/stats/clones", to.scope, to.voice_id) })),
        )
            .into_response()
    }
}
