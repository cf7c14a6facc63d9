//! Entity of `voice_clone_settings` (how many scopes a pack is cloned into).

use sea_orm::entity::prelude::*;

/// A `voice_clone_settings` row.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "voice_clone_settings")]
pub struct Model {
    /// The pack.
    #[sea_orm(primary_key, auto_increment = false)]
    pub pack_id: String,
    /// Most scopes at once.
    pub max_scopes: i32,
    /// Last change, microseconds since the Unix epoch.
    pub updated_at_us: i64,
}

/// Relations are not navigated; the foreign key lives in the migration.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
