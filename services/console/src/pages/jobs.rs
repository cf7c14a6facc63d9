//! jobs (to come).

use super::Shared;

pub fn routes() -> axum::Router<Shared> {
    axum::Router::new()
}
