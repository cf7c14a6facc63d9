//! The gRPC services: `voxpool.catalog.v1.VoiceCatalog` (read side, no auth) and
//! `voxpool.catalog.v1.VoiceCatalogAdmin` (write side, bearer token). Both are thin: decode
//! and validate the request, call the repository, encode the answer; every error goes
//! through the one `From<CatalogError> for Status`.

mod admin;
mod catalog;
mod list;

use std::sync::Arc;

pub use admin::AdminService;
pub use catalog::CatalogService;
pub use list::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE};

use crate::repo::PackRepository;

/// The shared repository handle the services hold.
pub type Repo = Arc<dyn PackRepository>;

/// The request field carrying a pack id (`id` or `pack_id`), checked non-empty.
fn require_id(field: &str, id: &str) -> Result<(), crate::error::CatalogError> {
    if id.trim().is_empty() {
        Err(crate::error::CatalogError::invalid(
            field,
            "required: a voice pack id such as vp_…",
        ))
    } else {
        Ok(())
    }
}
