//! Entity of `voice_clone_imports` (a request to read one scope's clones from the vendor).

use sea_orm::entity::prelude::*;

/// A `voice_clone_imports` row. Times are microseconds since the Unix epoch.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "voice_clone_imports")]
pub struct Model {
    /// The scope.
    #[sea_orm(primary_key, auto_increment = false)]
    pub scope: String,
    /// Its pool.
    pub pool: String,
    /// `REQUESTED` | `DONE` | `FAILED`.
    pub state: String,
    /// When it was (last) requested.
    pub requested_at_us: i64,
    /// When a worker may claim it.
    pub due_at_us: i64,
    /// The worker holding the lease.
    pub lease_owner: Option<String>,
    /// When the lease ends.
    pub lease_until_us: Option<i64>,
    /// The token a report must carry.
    pub lease_token: Option<String>,
    /// Claims since requested.
    pub attempts: i32,
    /// What the last import found (JSON, see `clones::model::ImportResult`).
    pub result: Option<String>,
    /// Why the last import failed.
    pub error: Option<String>,
    /// Last change.
    pub updated_at_us: i64,
}

/// Relations are not navigated.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
