//! The console's stylesheet and script, compiled into the binary (no build step, no CDN):
//! `/assets/console.css`, `/assets/console.js`.

use axum::{
    Router,
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
    routing::get,
};

use super::Shared;

const CSS: &str = include_str!("../../assets/console.css");
const JS: &str = include_str!("../../assets/console.js");

pub fn routes() -> axum::Router<Shared> {
    Router::new()
        .route(
            "/assets/console.css",
            get(|| async { asset(CSS, "text/css; charset=utf-8") }),
        )
        .route(
            "/assets/console.js",
            get(|| async { asset(JS, "text/javascript; charset=utf-8") }),
        )
}

fn asset(body: &'static str, kind: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(kind)),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=300"),
            ),
        ],
        body,
    )
        .into_response()
}
