//! Schema migrations of the voxpool catalog database.
//!
//! Builder-only (`SchemaManager`), so one set of migrations runs unchanged on SQLite and
//! PostgreSQL. Modules are dated (`mYYYYMMDD_NNNNNN_*`) and never rewritten once applied: a
//! schema change is a new module appended to [`Migrator::migrations`].
//!
//! Tables:
//! - `voice_packs`: one row per pack; a unique index on `identity` (the fingerprint of
//!   provider + model + voice id + canonical params + extra) makes "same voice, same params"
//!   a single pack on every backend.
//! - `voice_pack_revisions`: one row per pack version (primary key `(pack_id, version)`, so a
//!   version can only be written once), holding the full pack as JSON.
//! - `voice_pack_references`: a pack's reference clips (primary key `(pack_id, digest)`,
//!   soft removal), their bytes in the blob store by digest.
//! - `usage_events`, `usage_counted`, `usage_daily`: the usage ledger (raw records for audit,
//!   which attempts the totals hold, the totals per tenant × tier × pack × pool × day ×
//!   currency).
//! - `voice_clones`, `voice_clone_settings`, `voice_clone_imports`: managed voice clones per
//!   pack and clone scope (primary key `(pack_id, scope)`), each row also the durable work item
//!   synthesis replicas lease; how many scopes a pack may be cloned into; import requests.

#![warn(missing_docs)]

pub use sea_orm_migration::MigratorTrait;
use sea_orm_migration::prelude::*;

mod m20261130_000001_create_voice_packs;
mod m20261130_000002_create_voice_pack_revisions;
mod m20261203_000003_create_voice_pack_references;
mod m20261215_000004_create_usage;
mod m20261220_000005_create_voice_clones;
mod m20261230_000006_usage_daily_currency;

pub use m20261130_000001_create_voice_packs::VoicePacks;
pub use m20261130_000002_create_voice_pack_revisions::VoicePackRevisions;
pub use m20261203_000003_create_voice_pack_references::VoicePackReferences;
pub use m20261215_000004_create_usage::{UsageCounted, UsageDaily, UsageEvents};
pub use m20261220_000005_create_voice_clones::{
    VoiceCloneImports, VoiceCloneSettings, VoiceClones,
};
pub use m20261230_000006_usage_daily_currency::UsageDailyCurrency;

/// Every catalog migration, oldest first. Run with [`MigratorTrait::up`] (the catalog does at
/// start and in `voxpool-catalog migrate`).
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261130_000001_create_voice_packs::Migration),
            Box::new(m20261130_000002_create_voice_pack_revisions::Migration),
            Box::new(m20261203_000003_create_voice_pack_references::Migration),
            Box::new(m20261215_000004_create_usage::Migration),
            Box::new(m20261220_000005_create_voice_clones::Migration),
            Box::new(m20261230_000006_usage_daily_currency::Migration),
        ]
    }
}
