//! Creates the state of managed voice clones: `voice_clones` (one row per pack and clone
//! scope: the vendor's voice id, its state and lifetime, and the one step of vendor work due
//! on it), `voice_clone_settings` (how many scopes a pack may be cloned into) and
//! `voice_clone_imports` (a request to read a scope's clones from the vendor's list API).
//!
//! A `voice_clones` row is also the durable work item: synthesis replicas claim due rows
//! (`work` other than `NONE`, `due_at_us` passed, lease free or expired), take a lease
//! (`lease_owner`, `lease_until_us`, a fresh `lease_token`), run one vendor step and report it
//! with that token. The primary key `(pack_id, scope)` makes "one clone of a pack per scope"
//! hold on every backend, so two callers asking for the same clone create it once.
//! Vendor voice ids live only here, never in a snapshot: they are per scope.

use sea_orm_migration::{prelude::*, schema::*};

use crate::VoicePacks;

/// Migration: create `voice_clones`, `voice_clone_settings` and `voice_clone_imports`.
#[derive(DeriveMigrationName)]
pub struct Migration;

/// Table and column names of `voice_clones`.
#[derive(DeriveIden)]
pub enum VoiceClones {
    /// The table.
    Table,
    /// The pack (`voice_packs.id`).
    PackId,
    /// The clone scope: an upstream id, or `upstream/key` where each key is a scope.
    Scope,
    /// The vendor's voice id in that scope; NULL until the vendor assigned one.
    VendorVoiceId,
    /// `PENDING`, `TRAINING`, `READY`, `FAILED`, `EXPIRED` or `RECLAIMED`.
    State,
    /// When the row was created, microseconds since the Unix epoch.
    CreatedAtUs,
    /// When synthesis last spoke with the clone; NULL = never.
    LastUsedAtUs,
    /// When the vendor drops the clone unless it is used; NULL = no such rule.
    ExpiresAtUs,
    /// Why the clone failed or expired (vendor text, escaped); NULL = none.
    Error,
    /// The vendor step due: `NONE`, `CREATE`, `POLL`, `DELETE` or `KEEPALIVE`.
    Work,
    /// When the step is due, microseconds since the Unix epoch.
    DueAtUs,
    /// The worker holding the lease; NULL = none.
    LeaseOwner,
    /// When the lease ends; NULL = none.
    LeaseUntilUs,
    /// The token a report must carry; a new one at every claim.
    LeaseToken,
    /// Claims of the current step (back-off).
    Attempts,
    /// Last change, microseconds since the Unix epoch.
    UpdatedAtUs,
}

/// Table and column names of `voice_clone_settings`.
#[derive(DeriveIden)]
pub enum VoiceCloneSettings {
    /// The table.
    Table,
    /// The pack (`voice_packs.id`).
    PackId,
    /// Most scopes the pack is cloned into at once.
    MaxScopes,
    /// Last change, microseconds since the Unix epoch.
    UpdatedAtUs,
}

/// Table and column names of `voice_clone_imports`.
#[derive(DeriveIden)]
pub enum VoiceCloneImports {
    /// The table.
    Table,
    /// The clone scope to read.
    Scope,
    /// Its pool.
    Pool,
    /// `REQUESTED`, `DONE` or `FAILED`.
    State,
    /// When it was (last) requested, microseconds since the Unix epoch.
    RequestedAtUs,
    /// When a worker may claim it, microseconds since the Unix epoch.
    DueAtUs,
    /// The worker holding the lease; NULL = none.
    LeaseOwner,
    /// When the lease ends; NULL = none.
    LeaseUntilUs,
    /// The token a report must carry.
    LeaseToken,
    /// Claims since requested.
    Attempts,
    /// What the last import found (JSON); NULL = not run yet.
    Result,
    /// Why the last import failed; NULL = none.
    Error,
    /// Last change, microseconds since the Unix epoch.
    UpdatedAtUs,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(VoiceClones::Table)
                    .if_not_exists()
                    .col(string(VoiceClones::PackId))
                    .col(string(VoiceClones::Scope))
                    .col(string_null(VoiceClones::VendorVoiceId))
                    .col(string(VoiceClones::State))
                    .col(big_integer(VoiceClones::CreatedAtUs))
                    .col(big_integer_null(VoiceClones::LastUsedAtUs))
                    .col(big_integer_null(VoiceClones::ExpiresAtUs))
                    .col(text_null(VoiceClones::Error))
                    .col(string(VoiceClones::Work))
                    .col(big_integer(VoiceClones::DueAtUs))
                    .col(string_null(VoiceClones::LeaseOwner))
                    .col(big_integer_null(VoiceClones::LeaseUntilUs))
                    .col(string_null(VoiceClones::LeaseToken))
                    .col(integer(VoiceClones::Attempts))
                    .col(big_integer(VoiceClones::UpdatedAtUs))
                    .primary_key(
                        Index::create()
                            .col(VoiceClones::PackId)
                            .col(VoiceClones::Scope),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_voice_clones_pack")
                            .from(VoiceClones::Table, VoiceClones::PackId)
                            .to(VoicePacks::Table, VoicePacks::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_voice_clones_due")
                    .table(VoiceClones::Table)
                    .col(VoiceClones::Work)
                    .col(VoiceClones::DueAtUs)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_voice_clones_scope")
                    .table(VoiceClones::Table)
                    .col(VoiceClones::Scope)
                    .col(VoiceClones::State)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(VoiceCloneSettings::Table)
                    .if_not_exists()
                    .col(string(VoiceCloneSettings::PackId).primary_key())
                    .col(integer(VoiceCloneSettings::MaxScopes))
                    .col(big_integer(VoiceCloneSettings::UpdatedAtUs))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_voice_clone_settings_pack")
                            .from(VoiceCloneSettings::Table, VoiceCloneSettings::PackId)
                            .to(VoicePacks::Table, VoicePacks::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(VoiceCloneImports::Table)
                    .if_not_exists()
                    .col(string(VoiceCloneImports::Scope).primary_key())
                    .col(string(VoiceCloneImports::Pool))
                    .col(string(VoiceCloneImports::State))
                    .col(big_integer(VoiceCloneImports::RequestedAtUs))
                    .col(big_integer(VoiceCloneImports::DueAtUs))
                    .col(string_null(VoiceCloneImports::LeaseOwner))
                    .col(big_integer_null(VoiceCloneImports::LeaseUntilUs))
                    .col(string_null(VoiceCloneImports::LeaseToken))
                    .col(integer(VoiceCloneImports::Attempts))
                    .col(text_null(VoiceCloneImports::Result))
                    .col(text_null(VoiceCloneImports::Error))
                    .col(big_integer(VoiceCloneImports::UpdatedAtUs))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            VoiceCloneImports::Table.into_iden(),
            VoiceCloneSettings::Table.into_iden(),
            VoiceClones::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}
