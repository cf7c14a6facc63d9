//! `/pools`: every pool and key with its saturation, state, quota and waiting line, kept live
//! by `/pools/events` (server-sent events from the one poller, `crate::live`); `/pools/key`:
//! one key's admin actions (disable, enable, set capacity), a page of its own so each action
//! is confirmed before it is posted.

use std::{convert::Infallible, sync::Arc, time::Duration};

use askama::Template;
use axum::{
    Form, Router,
    extract::{Query, State},
    http::StatusCode,
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
    routing::get,
};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use tokio_stream::wrappers::WatchStream;

use super::{Nav, Shared, Signed, problem, query, render};
use crate::{
    backend::{BackendError, pools::KeyAction},
    live::Status,
    view::{KeyView, PoolView},
};

pub fn routes() -> axum::Router<Shared> {
    Router::new()
        .route("/pools", get(page))
        .route("/pools/events", get(events))
        .route("/pools/key", get(key_page).post(key_action))
}

#[derive(Template)]
#[template(path = "pools.html")]
struct Pools<'a> {
    nav: Nav,
    pools: &'a Result<Vec<PoolView>, BackendError>,
}

impl Pools<'_> {
    fn key_link(k: &KeyView) -> String {
        format!("/pools/key?pool={}&key={}", query(&k.pool), query(&k.key))
    }
}

async fn page(State(app): State<Shared>, Signed(session): Signed) -> Response {
    let status: Arc<Status> = app.hub.current().await;
    render(&Pools {
        nav: Nav::new("pools", &session),
        pools: &status.pools,
    })
}

/// The live feed: the latest status now, then every new one (about once per second).
async fn events(
    State(app): State<Shared>,
    Signed(_): Signed,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let stream = WatchStream::new(app.hub.subscribe())
        .filter_map(|status| async move { status })
        .map(|status| Ok(Event::default().data(status.event.as_str())));
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

#[derive(Deserialize)]
struct KeyRef {
    #[serde(default)]
    pool: String,
    #[serde(default)]
    key: String,
}

#[derive(Template)]
#[template(path = "key.html")]
struct KeyPage<'a> {
    nav: Nav,
    pool: &'a str,
    key: Option<&'a KeyView>,
    error: Option<String>,
    done: &'a str,
}

fn find<'a>(pools: &'a [PoolView], pool: &str, key: &str) -> Option<&'a KeyView> {
    pools
        .iter()
        .find(|p| p.pool == pool)
        .and_then(|p| p.keys.iter().find(|k| k.key == key))
}

async fn key_page(
    State(app): State<Shared>,
    Signed(session): Signed,
    Query(r): Query<KeyRef>,
) -> Response {
    let status = app.hub.current().await;
    let (key, error) = match &status.pools {
        Ok(pools) => match find(pools, &r.pool, &r.key) {
            Some(k) => (Some(k), None),
            None => (None, Some("the scheduler has no such key in that pool: go back to the pools page and pick one".to_owned())),
        },
        Err(e) => (None, Some(e.summary())),
    };
    render(&KeyPage {
        nav: Nav::new("pools", &session),
        pool: &r.pool,
        key,
        error,
        done: "",
    })
}

#[derive(Deserialize)]
struct KeyPost {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    pool: String,
    #[serde(default)]
    key: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    capacity: String,
}

async fn key_action(
    State(app): State<Shared>,
    signed: Signed,
    Form(form): Form<KeyPost>,
) -> Response {
    let session = match signed.admin_with(&form.csrf) {
        Ok(s) => s.clone(),
        Err(refused) => return refused.into_response(),
    };
    let action = match form.action.as_str() {
        "disable" => KeyAction::Disable,
        "enable" => KeyAction::Enable,
        "capacity" => match form.capacity.trim().parse::<i32>() {
            Ok(c) if (0..=100_000).contains(&c) => KeyAction::SetCapacity(c),
            _ => {
                return problem(
                    StatusCode::BAD_REQUEST,
                    "Capacity not set",
                    "capacity must be a whole number from 0 to 100000 (0 disables the key): go back and correct it",
                );
            }
        },
        _ => {
            return problem(
                StatusCode::BAD_REQUEST,
                "Unknown action",
                "the form asked for no known action (disable, enable, capacity): reload the key's page",
            );
        }
    };
    let answer = app.backend.key_action(&form.pool, &form.key, &action).await;
    if answer.is_ok() {
        tracing::info!(action = ?action, "an admin key action was applied");
    }
    let done = match &action {
        KeyAction::Disable => "The key is disabled: it takes no new lease until enabled.",
        KeyAction::Enable => "The key is enabled: it takes leases again.",
        KeyAction::SetCapacity(_) => "The key's capacity is set.",
    };
    let (key, error, done) = match &answer {
        Ok(k) => (Some(k), None, done),
        Err(e) => (None, Some(e.summary()), ""),
    };
    let status = match &answer {
        Ok(_) => StatusCode::OK,
        Err(e) if e.code == tonic::Code::NotFound => StatusCode::NOT_FOUND,
        Err(e) if e.code == tonic::Code::InvalidArgument => StatusCode::BAD_REQUEST,
        Err(_) => StatusCode::BAD_GATEWAY,
    };
    (
        status,
        render(&KeyPage {
            nav: Nav::new("pools", &session),
            pool: &form.pool,
            key,
            error,
            done,
        }),
    )
        .into_response()
}
