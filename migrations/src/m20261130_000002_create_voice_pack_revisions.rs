//! Creates `voice_pack_revisions`: the audit trail, one row per pack version.
//!
//! The primary key `(pack_id, version)` guarantees at the database level that two writers can
//! never both record the same version of a pack.

use sea_orm_migration::{prelude::*, schema::*};

use crate::VoicePacks;

/// Migration: create `voice_pack_revisions`.
#[derive(DeriveMigrationName)]
pub struct Migration;

/// Table and column names of `voice_pack_revisions`.
#[derive(DeriveIden)]
pub enum VoicePackRevisions {
    /// The table.
    Table,
    /// The pack (`voice_packs.id`).
    PackId,
    /// The pack version this revision produced.
    Version,
    /// `create`, `update`, `disable` or `enable`.
    Action,
    /// The full pack as of this version, JSON.
    Pack,
    /// When the change was made, microseconds since the Unix epoch.
    TimeUs,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(VoicePackRevisions::Table)
                    .if_not_exists()
                    .col(string(VoicePackRevisions::PackId))
                    .col(big_integer(VoicePackRevisions::Version))
                    .col(string(VoicePackRevisions::Action))
                    .col(text(VoicePackRevisions::Pack))
                    .col(big_integer(VoicePackRevisions::TimeUs))
                    .primary_key(
                        Index::create()
                            .col(VoicePackRevisions::PackId)
                            .col(VoicePackRevisions::Version),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_voice_pack_revisions_pack")
                            .from(VoicePackRevisions::Table, VoicePackRevisions::PackId)
                            .to(VoicePacks::Table, VoicePacks::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(VoicePackRevisions::Table).to_owned())
            .await
    }
}
