//! The catalog repository: where packs and their revisions live.
//!
//! [`PackRepository`] is the contract the services use; [`sea::SeaRepository`] implements it
//! over sea-orm for SQLite and PostgreSQL alike (one conformance suite, `tests/repository.rs`,
//! runs against both). Invariants it guards:
//! - identity uniqueness (a unique index; a clash is [`CatalogError::AlreadyExists`] naming
//!   the pack that holds the identity);
//! - one writer per version: every change is `UPDATE .. WHERE id = ? AND version = ?` plus
//!   its revision row in one transaction, so concurrent writers cannot both produce version
//!   n, and no accepted change is lost;
//! - revisions are contiguous: version v of a pack has exactly one revision row;
//! - a pack's clips (`voice_pack_references`) change in the same transaction as the version
//!   that records them, so a pack read at version v has exactly version v's clips.

mod clips;
pub mod connecting;
pub mod entity;
mod rows;
pub mod sea;

use async_trait::async_trait;

use crate::{
    error::CatalogError,
    filter::Filter,
    model::{Action, ListedReference, PackReference, PackSpec, Revision, VoicePack},
    page_token::Cursor,
};

/// Computes a pack's new content from its current state (validation included). Called
/// again with the fresh state when a concurrent writer got there first.
pub type Edit<'a> = dyn Fn(&VoicePack) -> Result<PackSpec, CatalogError> + Send + Sync + 'a;

/// Computes a pack's new clip list from its current state (checks included).
pub type ClipEdit<'a> =
    dyn Fn(&VoicePack) -> Result<Vec<PackReference>, CatalogError> + Send + Sync + 'a;

/// One page request over the `(create_time, id)` order.
#[derive(Clone, Debug, Default)]
pub struct ListQuery {
    /// Only enabled packs (the market list) or all (the admin list).
    pub enabled_only: bool,
    /// Conditions every returned pack meets.
    pub filter: Filter,
    /// Start strictly after this position; `None` = from the beginning.
    pub after: Option<Cursor>,
    /// Most packs to return.
    pub limit: u64,
}

/// Storage of voice packs. Every method is a short transaction or a single query.
#[async_trait]
pub trait PackRepository: Send + Sync {
    /// Stores a new enabled pack at version 1 and its `create` revision.
    ///
    /// Errors: [`CatalogError::AlreadyExists`] when another pack has the same identity.
    async fn create(&self, spec: PackSpec) -> Result<VoicePack, CatalogError>;

    /// The pack with this id, enabled or not. Errors: [`CatalogError::NotFound`].
    async fn get(&self, id: &str) -> Result<VoicePack, CatalogError>;

    /// Up to `query.limit` packs after `query.after`, in `(create_time, id)` order.
    async fn list(&self, query: &ListQuery) -> Result<Vec<VoicePack>, CatalogError>;

    /// Replaces the pack's content with `edit(current)` as version current+1 and records an
    /// `update` revision.
    ///
    /// With `expected_version`, the update applies only to that version
    /// ([`CatalogError::VersionConflict`] otherwise, also when a concurrent writer wins the
    /// race). Without it, a lost race re-reads the pack and applies `edit` again, up to a
    /// bound ([`CatalogError::Contention`]). Also: NotFound, AlreadyExists (the new content
    /// has another pack's identity), and whatever `edit` returns.
    async fn update(
        &self,
        id: &str,
        expected_version: Option<i64>,
        edit: &Edit<'_>,
    ) -> Result<VoicePack, CatalogError>;

    /// Enables or disables the pack, recording an `enable` / `disable` revision. A pack
    /// already in that state is returned unchanged (no new version). Errors: NotFound.
    async fn set_enabled(&self, id: &str, enabled: bool) -> Result<VoicePack, CatalogError>;

    /// Every revision of the pack, oldest first. Errors: NotFound.
    async fn revisions(&self, id: &str) -> Result<Vec<Revision>, CatalogError>;

    /// Replaces the pack's clips with `edit(current)` as version current+1, recording an
    /// `action` revision (`add_reference` / `remove_reference`); a clip left out is marked
    /// removed, not deleted. Lost races re-read and apply `edit` again, as [`Self::update`]
    /// without `expected_version`. Errors: NotFound, AlreadyExists (the new clip set gives
    /// another pack's identity), Contention, and whatever `edit` returns.
    async fn set_references(
        &self,
        id: &str,
        action: Action,
        edit: &ClipEdit<'_>,
    ) -> Result<VoicePack, CatalogError>;

    /// The pack's clips in the order they were added; removed ones too with
    /// `include_removed`. Errors: NotFound.
    async fn references(
        &self,
        id: &str,
        include_removed: bool,
    ) -> Result<Vec<ListedReference>, CatalogError>;

    /// Checks the database answers. Errors: [`CatalogError::Unavailable`] and friends.
    async fn ping(&self) -> Result<(), CatalogError>;

    /// The open, migrated database connection (the usage ledger lives in the same database);
    /// `None` while it is still being opened.
    fn database(&self) -> Option<sea_orm::DatabaseConnection> {
        None
    }
}
