//! Entity of `voice_packs` (one row per pack; see the migration for column meanings).

use sea_orm::entity::prelude::*;

/// A `voice_packs` row. JSON text columns hold lists and maps; times are microseconds since
/// the Unix epoch.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "voice_packs")]
pub struct Model {
    /// `vp_` + 24 hex digits.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// 1..200 characters.
    pub display_name: String,
    /// Free text.
    pub description: String,
    /// Provider id.
    pub provider: String,
    /// Vendor model id.
    pub model: String,
    /// Vendor voice id.
    pub voice_id: String,
    /// Pool id.
    pub tts_model_id: String,
    /// `STANDARD` | `CLONED`.
    pub kind: String,
    /// JSON array of strings.
    pub upstream_ids: String,
    /// Canonical JSON object (`Params::canonical`).
    pub params: String,
    /// JSON object of strings.
    pub extra: String,
    /// `sha256:<hex>` identity fingerprint (unique).
    pub identity: String,
    /// `LITE` | `STANDARD` | `PRO` | `PREMIUM`.
    pub tier: String,
    /// JSON array of canonical BCP 47 tags.
    pub locales: String,
    /// False once disabled.
    pub enabled: bool,
    /// 1 on create, +1 per change.
    pub version: i64,
    /// Microseconds since the Unix epoch.
    pub create_time_us: i64,
    /// Microseconds since the Unix epoch.
    pub update_time_us: i64,
}

/// No relations are navigated from a pack.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
