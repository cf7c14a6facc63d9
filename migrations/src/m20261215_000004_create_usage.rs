//! Creates the usage ledger: `usage_events` (the raw records synthesis wrote to the usage
//! stream, kept for audit for `[usage] retention_days`), `usage_counted` (which vendor
//! attempts and requests the daily totals already hold) and `usage_daily` (the totals per
//! tenant × tier × pack × pool × UTC day, kept for good).
//!
//! Exactly once rests on two primary keys: `usage_events (record_id, attempt, kind)` (a record
//! read twice is inserted once, and only an inserted record changes a total) and
//! `usage_counted (record_id, attempt)` (an attempt's characters enter the totals once, from
//! its Settle or from the sweep of its unsettled Charge, whichever inserts the row first; the
//! request itself is attempt -1). `usage_daily.unsettled_characters` / `unsettled_cost_micros`
//! say how much of a total rests on swept charges nothing settled since.

use sea_orm_migration::{prelude::*, schema::*};

/// Migration: create `usage_events`, `usage_counted` and `usage_daily`.
#[derive(DeriveMigrationName)]
pub struct Migration;

/// Table and column names of `usage_events`.
#[derive(DeriveIden)]
pub enum UsageEvents {
    /// The table.
    Table,
    /// The request's id (UUID, made by synthesis).
    RecordId,
    /// The vendor attempt (0, 1, …); -1 on a `done` record.
    Attempt,
    /// `charge`, `settle` or `done`.
    Kind,
    /// Tenant (`''` = the shared tenant).
    Tenant,
    /// Caller identity.
    Caller,
    /// The caller's request id.
    RequestId,
    /// `grpc`, `grpc_stream`, `http` or `job`.
    Path,
    /// The pack spoken with (`''` = none).
    PackId,
    /// `sha256:<hex>` of the snapshot.
    SnapshotDigest,
    /// The pack's tier (`''` = none).
    Tier,
    /// The pool (tts model id).
    Pool,
    /// The pool's provider.
    Provider,
    /// `upstream/key` of the attempt.
    KeyId,
    /// The attempt's upstream.
    UpstreamId,
    /// Characters by the provider's billing rule.
    Characters,
    /// Characters the vendor said it billed.
    BilledCharacters,
    /// Characters served from the audio cache (`done`).
    CachedCharacters,
    /// Audio, ms.
    AudioMs,
    /// Server time, ms.
    GpuMs,
    /// Cost in millionths of `currency`.
    CostMicros,
    /// ISO 4217 code.
    Currency,
    /// The attempt's outcome (`SUCCESS`, …); `''` on a charge.
    Outcome,
    /// Failed attempts of the request (`done`).
    FailedAttempts,
    /// When the request began, ms since the Unix epoch.
    AtMs,
    /// The request's UTC day, `YYYY-MM-DD`.
    Day,
    /// When the catalog stored the record, ms since the Unix epoch (retention, sweep).
    ReceivedAtMs,
    /// 1 while a charge is neither settled nor swept (the sweep's work list), else 0.
    Open,
}

/// Table and column names of `usage_counted`.
#[derive(DeriveIden)]
pub enum UsageCounted {
    /// The table.
    Table,
    /// The request.
    RecordId,
    /// The attempt; -1 = the request itself.
    Attempt,
    /// `settle`, `sweep`, `done`: what put it in the totals.
    CountedBy,
    /// When, ms since the Unix epoch (retention).
    CountedAtMs,
}

/// Table and column names of `usage_daily`.
#[derive(DeriveIden)]
pub enum UsageDaily {
    /// The table.
    Table,
    /// Tenant (`''` = the shared tenant).
    Tenant,
    /// Tier (`''` = none).
    Tier,
    /// Pack (`''` = none).
    PackId,
    /// Pool.
    Pool,
    /// UTC day, `YYYY-MM-DD`.
    Day,
    /// Requests.
    Requests,
    /// Vendor characters.
    Characters,
    /// Characters vendors said they billed.
    BilledCharacters,
    /// Characters served from the audio cache.
    CachedCharacters,
    /// Audio delivered, ms.
    AudioMs,
    /// Server time, ms.
    GpuMs,
    /// Cost, millionths of `currency`.
    CostMicros,
    /// Failed vendor attempts.
    FailedAttempts,
    /// ISO 4217 code.
    Currency,
    /// Of `characters`: those the sweep counted from charges still unsettled (the replica
    /// stopped before the vendor answered; the vendor may never have received them). A late
    /// Settle takes its swept charge back out.
    UnsettledCharacters,
    /// Of `cost_micros`: the cost of those unsettled charges.
    UnsettledCostMicros,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        use UsageEvents as E;
        manager
            .create_table(
                Table::create()
                    .table(E::Table)
                    .if_not_exists()
                    .col(string(E::RecordId))
                    .col(integer(E::Attempt))
                    .col(string(E::Kind))
                    .col(string(E::Tenant))
                    .col(string(E::Caller))
                    .col(string(E::RequestId))
                    .col(string(E::Path))
                    .col(string(E::PackId))
                    .col(string(E::SnapshotDigest))
                    .col(string(E::Tier))
                    .col(string(E::Pool))
                    .col(string(E::Provider))
                    .col(string(E::KeyId))
                    .col(string(E::UpstreamId))
                    .col(big_integer(E::Characters))
                    .col(big_integer(E::BilledCharacters))
                    .col(big_integer(E::CachedCharacters))
                    .col(big_integer(E::AudioMs))
                    .col(big_integer(E::GpuMs))
                    .col(big_integer(E::CostMicros))
                    .col(string(E::Currency))
                    .col(string(E::Outcome))
                    .col(integer(E::FailedAttempts))
                    .col(big_integer(E::AtMs))
                    .col(string(E::Day))
                    .col(big_integer(E::ReceivedAtMs))
                    .col(small_integer(E::Open))
                    .primary_key(
                        Index::create()
                            .col(E::RecordId)
                            .col(E::Attempt)
                            .col(E::Kind),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_usage_events_open")
                    .table(E::Table)
                    .col(E::Open)
                    .col(E::ReceivedAtMs)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_usage_events_received")
                    .table(E::Table)
                    .col(E::ReceivedAtMs)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(UsageCounted::Table)
                    .if_not_exists()
                    .col(string(UsageCounted::RecordId))
                    .col(integer(UsageCounted::Attempt))
                    .col(string(UsageCounted::CountedBy))
                    .col(big_integer(UsageCounted::CountedAtMs))
                    .primary_key(
                        Index::create()
                            .col(UsageCounted::RecordId)
                            .col(UsageCounted::Attempt),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_usage_counted_at")
                    .table(UsageCounted::Table)
                    .col(UsageCounted::CountedAtMs)
                    .to_owned(),
            )
            .await?;
        use UsageDaily as D;
        manager
            .create_table(
                Table::create()
                    .table(D::Table)
                    .if_not_exists()
                    .col(string(D::Tenant))
                    .col(string(D::Tier))
                    .col(string(D::PackId))
                    .col(string(D::Pool))
                    .col(string(D::Day))
                    .col(big_integer(D::Requests))
                    .col(big_integer(D::Characters))
                    .col(big_integer(D::BilledCharacters))
                    .col(big_integer(D::CachedCharacters))
                    .col(big_integer(D::AudioMs))
                    .col(big_integer(D::GpuMs))
                    .col(big_integer(D::CostMicros))
                    .col(big_integer(D::FailedAttempts))
                    .col(string(D::Currency))
                    .col(big_integer(D::UnsettledCharacters).default(0))
                    .col(big_integer(D::UnsettledCostMicros).default(0))
                    .primary_key(
                        Index::create()
                            .col(D::Tenant)
                            .col(D::Tier)
                            .col(D::PackId)
                            .col(D::Pool)
                            .col(D::Day),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_usage_daily_day")
                    .table(D::Table)
                    .col(D::Day)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            UsageDaily::Table.into_iden(),
            UsageCounted::Table.into_iden(),
            UsageEvents::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}
