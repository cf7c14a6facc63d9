//! `GET /v1/audio/voices` and `GET /v1/models`: the catalog's market listing (enabled packs)
//! for the pools this replica can serve (configured here, with at least one key whose
//! credential it holds: a pack of a keyless pool would answer every call 503), in OpenAI's
//! list shape.
//!
//! - voices: `{"object": "list", "data": [{"id": <pack id>, "object": "voice", "name",
//!   "description", "provider", "model": <pool id>, "tier", "locales"}]}`; `id` is what a
//!   speech request sends as `voice`.
//! - models: `{"object": "list", "data": [{"id": <pool id>, "object": "model", "created": 0,
//!   "owned_by": "voxpool"}]}`, one per pool a listed voice pins (`model` is accepted in a
//!   speech request but does not route: the voice's pack pins its pool).
//!
//! A catalog that does not answer is 503 naming its URL.

use std::time::Duration;

use axum::{Json, response::IntoResponse, response::Response};
use serde_json::json;

use super::{Front, error::ApiError};
use crate::catalog::MarketPack;

/// How long a listing may take, all pages together.
const LIST_TIMEOUT: Duration = Duration::from_secs(10);

async fn served_packs(front: &Front) -> Result<Vec<MarketPack>, ApiError> {
    let packs = front
        .core
        .catalog
        .market(LIST_TIMEOUT)
        .await
        .map_err(|e| ApiError::of(&e))?;
    Ok(packs
        .into_iter()
        .filter(|p| {
            front
                .core
                .pools
                .get(&p.tts_model_id)
                .is_some_and(|pool| pool.has_usable_key())
        })
        .collect())
}

/// `GET /v1/audio/voices`.
pub async fn voices(front: &Front) -> Response {
    match served_packs(front).await {
        Ok(packs) => {
            let data: Vec<_> = packs
                .into_iter()
                .map(|p| {
                    json!({
                        "id": p.id,
                        "object": "voice",
                        "name": p.name,
                        "description": p.description,
                        "provider": p.provider,
                        "model": p.tts_model_id,
                        "tier": p.tier,
                        "locales": p.locales,
                    })
                })
                .collect();
            Json(json!({"object": "list", "data": data})).into_response()
        }
        Err(e) => e.into_response(),
    }
}

/// `GET /v1/models`.
pub async fn models(front: &Front) -> Response {
    match served_packs(front).await {
        Ok(packs) => {
            let mut pools: Vec<String> = packs.into_iter().map(|p| p.tts_model_id).collect();
            pools.sort_unstable();
            pools.dedup();
            let data: Vec<_> = pools
                .into_iter()
                .map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": "voxpool"}))
                .collect();
            Json(json!({"object": "list", "data": data})).into_response()
        }
        Err(e) => e.into_response(),
    }
}
