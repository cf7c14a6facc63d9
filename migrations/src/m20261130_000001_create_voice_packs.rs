//! Creates `voice_packs` with its identity uniqueness and listing-order indexes.
//!
//! Lists and maps (`upstream_ids`, `locales`, `params`, `extra`) are JSON text so the column
//! types are the same on SQLite and PostgreSQL. Times are integer microseconds since the Unix
//! epoch (UTC): the keyset page cursor `(create_time_us, id)` then compares identically on
//! both backends, with no driver-specific timestamp text formats involved.

use sea_orm_migration::{prelude::*, schema::*};

/// Migration: create `voice_packs`.
#[derive(DeriveMigrationName)]
pub struct Migration;

/// Table and column names of `voice_packs`.
#[derive(DeriveIden)]
pub enum VoicePacks {
    /// The table.
    Table,
    /// Server-assigned id, `vp_` + 24 lowercase hex digits.
    Id,
    /// 1..200 characters.
    DisplayName,
    /// Free text, may be empty.
    Description,
    /// Provider (adapter) id, e.g. `volcengine`.
    Provider,
    /// Vendor model id.
    Model,
    /// Vendor voice id.
    VoiceId,
    /// The tts model id (scheduler pool) the pack pins.
    TtsModelId,
    /// `STANDARD` or `CLONED`.
    Kind,
    /// JSON array of upstream ids holding the voice.
    UpstreamIds,
    /// Canonical JSON object of the prosody params.
    Params,
    /// JSON object of vendor options.
    Extra,
    /// `sha256:<hex>` fingerprint of provider, model, voice id, params and extra (unique).
    Identity,
    /// `LITE`, `STANDARD`, `PRO` or `PREMIUM`.
    Tier,
    /// JSON array of BCP 47 locales.
    Locales,
    /// False once disabled.
    Enabled,
    /// 1 on create, +1 per change.
    Version,
    /// Creation time, microseconds since the Unix epoch.
    CreateTimeUs,
    /// Last change time, microseconds since the Unix epoch.
    UpdateTimeUs,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(VoicePacks::Table)
                    .if_not_exists()
                    .col(string(VoicePacks::Id).primary_key())
                    .col(string(VoicePacks::DisplayName))
                    .col(text(VoicePacks::Description))
                    .col(string(VoicePacks::Provider))
                    .col(string(VoicePacks::Model))
                    .col(string(VoicePacks::VoiceId))
                    .col(string(VoicePacks::TtsModelId))
                    .col(string(VoicePacks::Kind))
                    .col(text(VoicePacks::UpstreamIds))
                    .col(text(VoicePacks::Params))
                    .col(text(VoicePacks::Extra))
                    .col(string(VoicePacks::Identity))
                    .col(string(VoicePacks::Tier))
                    .col(text(VoicePacks::Locales))
                    .col(boolean(VoicePacks::Enabled))
                    .col(big_integer(VoicePacks::Version))
                    .col(big_integer(VoicePacks::CreateTimeUs))
                    .col(big_integer(VoicePacks::UpdateTimeUs))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ux_voice_packs_identity")
                    .table(VoicePacks::Table)
                    .col(VoicePacks::Identity)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_voice_packs_order")
                    .table(VoicePacks::Table)
                    .col(VoicePacks::CreateTimeUs)
                    .col(VoicePacks::Id)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_voice_packs_enabled_order")
                    .table(VoicePacks::Table)
                    .col(VoicePacks::Enabled)
                    .col(VoicePacks::CreateTimeUs)
                    .col(VoicePacks::Id)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(VoicePacks::Table).to_owned())
            .await
    }
}
