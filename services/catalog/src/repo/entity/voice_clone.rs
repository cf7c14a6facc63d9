//! Entity of `voice_clones` (one row per pack and clone scope; see the migration).

use sea_orm::entity::prelude::*;

/// A `voice_clones` row. Times are microseconds since the Unix epoch.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "voice_clones")]
pub struct Model {
    /// The pack.
    #[sea_orm(primary_key, auto_increment = false)]
    pub pack_id: String,
    /// `upstream` or `upstream/key`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub scope: String,
    /// The vendor's voice id in the scope, once known.
    pub vendor_voice_id: Option<String>,
    /// `PENDING` | `TRAINING` | `READY` | `FAILED` | `EXPIRED` | `RECLAIMED`.
    pub state: String,
    /// When the row was created.
    pub created_at_us: i64,
    /// When synthesis last spoke with the clone.
    pub last_used_at_us: Option<i64>,
    /// When the vendor drops the clone unless used.
    pub expires_at_us: Option<i64>,
    /// Why it failed or expired.
    pub error: Option<String>,
    /// `NONE` | `CREATE` | `POLL` | `DELETE` | `KEEPALIVE`.
    pub work: String,
    /// When the work is due.
    pub due_at_us: i64,
    /// The worker holding the lease.
    pub lease_owner: Option<String>,
    /// When the lease ends.
    pub lease_until_us: Option<i64>,
    /// The token a report must carry.
    pub lease_token: Option<String>,
    /// Claims of the current step.
    pub attempts: i32,
    /// Last change.
    pub updated_at_us: i64,
}

/// Relations are not navigated; the foreign key lives in the migration.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
