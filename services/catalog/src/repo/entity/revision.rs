//! Entity of `voice_pack_revisions` (one row per pack version).

use sea_orm::entity::prelude::*;

/// A `voice_pack_revisions` row.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "voice_pack_revisions")]
pub struct Model {
    /// The pack.
    #[sea_orm(primary_key, auto_increment = false)]
    pub pack_id: String,
    /// The version this revision produced.
    #[sea_orm(primary_key, auto_increment = false)]
    pub version: i64,
    /// `create` | `update` | `disable` | `enable`.
    pub action: String,
    /// The full pack as of this version (JSON, see `repo::rows::StoredPack`).
    pub pack: String,
    /// Microseconds since the Unix epoch.
    pub time_us: i64,
}

/// Relations are not navigated; the foreign key lives in the migration.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
