//! `/market`: the enabled packs as cards (name, tier badge, provider, locales, kind), filtered
//! by `?tier=`, `?locale=`, `?provider=` (the catalog applies the filter and its message shows
//! when it refuses one), each with an audition player.

use askama::Template;
use axum::{
    Router,
    extract::{Query, State},
    response::Response,
    routing::get,
};

use super::{Nav, Shared, Signed, render};
use crate::{
    backend::{BackendError, catalog::MarketFilter},
    view::PackView,
};

pub fn routes() -> axum::Router<Shared> {
    Router::new().route("/market", get(page))
}

#[derive(Template)]
#[template(path = "market.html")]
struct Market {
    nav: Nav,
    filter: MarketFilter,
    tiers: [&'static str; 4],
    locales: Vec<String>,
    providers: Vec<String>,
    packs: Result<Vec<PackView>, BackendError>,
}

impl Market {
    fn selected(current: &str, value: &str) -> bool {
        current == value
    }
}

/// The distinct values of `of` over `packs`, sorted.
fn choices(packs: &[PackView], of: impl Fn(&PackView) -> Vec<String>) -> Vec<String> {
    let mut all: Vec<String> = packs.iter().flat_map(of).collect();
    all.sort();
    all.dedup();
    all
}

async fn page(
    State(app): State<Shared>,
    Signed(session): Signed,
    Query(filter): Query<MarketFilter>,
) -> Response {
    let everything = MarketFilter::default();
    let (all, packs) = tokio::join!(
        app.backend.packs(&everything, false),
        app.backend.packs(&filter, false)
    );
    let all = all.unwrap_or_default();
    render(&Market {
        nav: Nav::new("market", &session),
        tiers: ["LITE", "STANDARD", "PRO", "PREMIUM"],
        locales: choices(&all, |p| p.locales.clone()),
        providers: choices(&all, |p| vec![p.provider.clone()]),
        filter,
        packs,
    })
}
