//! Entity of `voice_pack_references` (one row per clip of a pack; see the migration).

use sea_orm::entity::prelude::*;

/// A `voice_pack_references` row. Times are microseconds since the Unix epoch.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "voice_pack_references")]
pub struct Model {
    /// The pack.
    #[sea_orm(primary_key, auto_increment = false)]
    pub pack_id: String,
    /// `sha256:<64 hex>` over the clip's bytes.
    #[sea_orm(primary_key, auto_increment = false)]
    pub digest: String,
    /// What the clip says.
    pub transcript: String,
    /// BCP 47 language.
    pub language: String,
    /// Tag; `''` = none.
    pub emotion: String,
    /// 1..=1000.
    pub weight: i32,
    /// Milliseconds.
    pub duration_ms: i64,
    /// `audio/wav` | `audio/mpeg` | `audio/flac`.
    pub media_type: String,
    /// Bytes.
    pub size_bytes: i64,
    /// When it was (last) added.
    pub add_time_us: i64,
    /// When it was removed; `None` while part of the pack.
    pub remove_time_us: Option<i64>,
}

/// Relations are not navigated; the foreign key lives in the migration.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
