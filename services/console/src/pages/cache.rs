//! `/cache`: the audio cache's stats (what it holds, what this synthesis replica counted per
//! pool) and, for admin sessions, the purge of a pack's or a snapshot's entries.

use askama::Template;
use axum::{
    Form, Router,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::Deserialize;

use super::{Nav, Shared, Signed, render};
use crate::{backend::BackendError, view::CacheView};

pub fn routes() -> axum::Router<Shared> {
    Router::new()
        .route("/cache", get(page))
        .route("/cache/purge", post(purge))
}

#[derive(Template)]
#[template(path = "cache.html")]
struct Cache {
    nav: Nav,
    stats: Result<CacheView, BackendError>,
    done: String,
    error: String,
}

async fn page(State(app): State<Shared>, Signed(session): Signed) -> Response {
    render(&Cache {
        nav: Nav::new("cache", &session),
        stats: app.backend.cache_stats().await,
        done: String::new(),
        error: String::new(),
    })
}

#[derive(Deserialize)]
struct Purge {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    pack_id: String,
    #[serde(default)]
    snapshot_digest: String,
}

async fn purge(State(app): State<Shared>, signed: Signed, Form(form): Form<Purge>) -> Response {
    let session = match signed.admin_with(&form.csrf) {
        Ok(s) => s.clone(),
        Err(refused) => return refused.into_response(),
    };
    let (status, done, error) = match app
        .backend
        .purge_cache(&form.pack_id, &form.snapshot_digest)
        .await
    {
        Ok((entries, bytes)) => {
            tracing::info!(
                entries,
                bytes,
                "the audio cache was purged from the console"
            );
            (
                StatusCode::OK,
                format!("Purged {entries} entries ({bytes} bytes)."),
                String::new(),
            )
        }
        Err(e) => (StatusCode::BAD_REQUEST, String::new(), e.summary()),
    };
    (
        status,
        render(&Cache {
            nav: Nav::new("cache", &session),
            stats: app.backend.cache_stats().await,
            done,
            error,
        }),
    )
        .into_response()
}
