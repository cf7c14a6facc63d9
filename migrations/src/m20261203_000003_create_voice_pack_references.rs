//! Creates `voice_pack_references`: a pack's reference clips (one pack, many clips), for
//! packs whose provider speaks from reference audio. `voice_packs` stays the only identity:
//! a clip row belongs to one pack (foreign key) and is named by its digest within it.
//!
//! The primary key `(pack_id, digest)` makes a clip appear once per pack; removal is soft
//! (`remove_time_us` set), because snapshots frozen with the clip keep naming it and its bytes
//! stay in the blob store. The clip bytes never live in the database.

use sea_orm_migration::{prelude::*, schema::*};

use crate::VoicePacks;

/// Migration: create `voice_pack_references`.
#[derive(DeriveMigrationName)]
pub struct Migration;

/// Table and column names of `voice_pack_references`.
#[derive(DeriveIden)]
pub enum VoicePackReferences {
    /// The table.
    Table,
    /// The pack (`voice_packs.id`).
    PackId,
    /// `sha256:<64 hex>` over the clip's bytes; the blob is `references/<64 hex>`.
    Digest,
    /// What the clip says.
    Transcript,
    /// BCP 47 language of the clip.
    Language,
    /// Optional tag (`''` = none).
    Emotion,
    /// Relative weight in the roll among clips, 1..=1000.
    Weight,
    /// Duration in milliseconds.
    DurationMs,
    /// `audio/wav`, `audio/mpeg` or `audio/flac`.
    MediaType,
    /// Size of the clip in bytes.
    SizeBytes,
    /// When the clip was (last) added, microseconds since the Unix epoch.
    AddTimeUs,
    /// When RemoveReference took it out; NULL while it is part of the pack.
    RemoveTimeUs,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(VoicePackReferences::Table)
                    .if_not_exists()
                    .col(string(VoicePackReferences::PackId))
                    .col(string(VoicePackReferences::Digest))
                    .col(text(VoicePackReferences::Transcript))
                    .col(string(VoicePackReferences::Language))
                    .col(string(VoicePackReferences::Emotion))
                    .col(integer(VoicePackReferences::Weight))
                    .col(big_integer(VoicePackReferences::DurationMs))
                    .col(string(VoicePackReferences::MediaType))
                    .col(big_integer(VoicePackReferences::SizeBytes))
                    .col(big_integer(VoicePackReferences::AddTimeUs))
                    .col(big_integer_null(VoicePackReferences::RemoveTimeUs))
                    .primary_key(
                        Index::create()
                            .col(VoicePackReferences::PackId)
                            .col(VoicePackReferences::Digest),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_voice_pack_references_pack")
                            .from(VoicePackReferences::Table, VoicePackReferences::PackId)
                            .to(VoicePacks::Table, VoicePacks::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(VoicePackReferences::Table).to_owned())
            .await
    }
}
