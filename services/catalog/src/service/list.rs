//! The paged list shared by ListVoicePacks (enabled only) and ListAllVoicePacks.

use voxpool_proto::catalog::v1 as pb;

use super::Repo;
use crate::{
    convert::pack_to_pb,
    error::CatalogError,
    filter::Filter,
    page_token::{self, Cursor},
    repo::ListQuery,
};

/// Page size when the request says 0.
pub const DEFAULT_PAGE_SIZE: i32 = 50;
/// Largest page size accepted.
pub const MAX_PAGE_SIZE: i32 = 100;

/// Answers one list request. `enabled_only` selects the market list.
///
/// Errors: INVALID_ARGUMENT for `page_size` outside 0..=100, a bad `filter`, or a
/// `page_token` that is not from this list with this filter.
pub async fn list(
    repo: &Repo,
    req: &pb::ListVoicePacksRequest,
    enabled_only: bool,
) -> Result<pb::ListVoicePacksResponse, CatalogError> {
    let page_size = match req.page_size {
        0 => DEFAULT_PAGE_SIZE,
        n if (1..=MAX_PAGE_SIZE).contains(&n) => n,
        n => {
            return Err(CatalogError::invalid(
                "page_size",
                format!("must be 1..{MAX_PAGE_SIZE} (0 = {DEFAULT_PAGE_SIZE}), got {n}"),
            ));
        }
    };
    let filter = Filter::parse(&req.filter)?;
    let scope = if enabled_only { "market" } else { "admin" };
    let binding = page_token::binding(scope, &filter.canonical());
    let after = if req.page_token.is_empty() {
        None
    } else {
        Some(page_token::decode(&req.page_token, &binding)?)
    };
    let page = usize::try_from(page_size).unwrap_or(50);
    let mut packs = repo
        .list(&ListQuery {
            enabled_only,
            filter,
            after,
            limit: page as u64 + 1,
        })
        .await?;
    let next_page_token = if packs.len() > page {
        packs.truncate(page);
        packs
            .last()
            .map(|last| {
                let cursor = Cursor {
                    create_time_us: last.create_time.timestamp_micros(),
                    id: last.id.clone(),
                };
                page_token::encode(&cursor, &binding)
            })
            .unwrap_or_default()
    } else {
        String::new()
    };
    Ok(pb::ListVoicePacksResponse {
        voice_packs: packs.iter().map(pack_to_pb).collect(),
        next_page_token,
    })
}
