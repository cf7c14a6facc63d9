//! The gRPC services: `voxpool.catalog.v1.VoiceCatalog` (read side, no auth),
//! `voxpool.catalog.v1.VoiceCatalogAdmin` (write side, bearer token) and
//! `voxpool.catalog.v1.Usage` (the usage ledger, bearer token). All three are thin: decode
//! and validate the request, call the repository, encode the answer; every error goes
//! through the one `From<CatalogError> for Status`.

mod admin;
mod catalog;
mod clone_work;
mod clones;
mod list;
mod reference_audio;
mod usage;

use std::sync::Arc;

pub use admin::AdminService;
pub use catalog::CatalogService;
pub use clone_work::CloneWorkService;
pub use clones::{clone_to_pb, state_to_pb};
pub use list::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE};
pub use usage::{DEFAULT_USAGE_PAGE, MAX_USAGE_PAGE, UsageService, filter_of, row_to_pb};

use crate::repo::PackRepository;

/// The shared repository handle the services hold.
pub type Repo = Arc<dyn PackRepository>;

/// The request field carrying a pack id (`id` or `pack_id`), checked non-empty.
fn require_id(field: &str, id: &str) -> Result<(), crate::error::CatalogError> {
    if id.trim().is_empty() {
        return Err(crate::error::CatalogError::invalid(
            field,
            "required: a voice pack id such as vp_…",
        ));
    }
    // Checked before any lookup, so no error message or log line carries a caller's huge or
    // control-character-laden value (ids the catalog assigns are short and plain).
    voxpool_domain::untrusted::check_field(id, MAX_PACK_ID_CHARS).map_err(|problem| {
        crate::error::CatalogError::invalid(
            field,
            format!("{problem}; voice pack ids look like vp_…"),
        )
    })
}

/// Longest voice pack id accepted in a request.
pub const MAX_PACK_ID_CHARS: usize = 128;
