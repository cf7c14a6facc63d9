//! Keys `usage_daily` by currency too and adds `refused_requests`.
//!
//! Before, a daily total was one row per tenant × tier × pack × pool × day and took the
//! currency of whatever was added last, so a day on which `[usage] currency` changed summed
//! two currencies under one code. Now the currency is part of the primary key (a row never
//! holds two currencies) and `refused_requests` counts the requests that ended without their
//! audio before any vendor was sent their text (docs/OPERATIONS.md#usage-ledger).
//!
//! SQLite cannot change a primary key in place, so the table is rebuilt on both backends:
//! created under a new name, filled from the old one (existing rows keep the currency they
//! hold, `refused_requests` 0: the old records never said), the old one dropped, the new one
//! renamed, its index made again. All in one transaction on both backends (every step on one
//! connection: on a pool of SQLite connections the steps would otherwise run on several).

use sea_orm_migration::{prelude::*, schema::*};

use crate::m20261215_000004_create_usage::UsageDaily as D;

/// Migration: `usage_daily` keyed by currency, with `refused_requests`.
#[derive(DeriveMigrationName)]
pub struct Migration;

/// The columns this migration adds, and the table's name while it is rebuilt.
#[derive(DeriveIden)]
pub enum UsageDailyCurrency {
    /// `usage_daily` while rebuilt.
    UsageDailyNext,
    /// Requests that ended without their audio before any vendor was sent their text.
    RefusedRequests,
}

/// The columns both shapes of the table share.
const SHARED: &str = "tenant, tier, pack_id, pool, day, requests, characters, billed_characters, \
    cached_characters, audio_ms, gpu_ms, cost_micros, failed_attempts, currency, \
    unsettled_characters, unsettled_cost_micros";

fn table(name: impl IntoIden, by_currency: bool) -> TableCreateStatement {
    let mut key = Index::create();
    key.col(D::Tenant)
        .col(D::Tier)
        .col(D::PackId)
        .col(D::Pool)
        .col(D::Day);
    if by_currency {
        key.col(D::Currency);
    }
    let mut t = Table::create();
    t.table(name)
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
        .col(big_integer(D::UnsettledCostMicros).default(0));
    if by_currency {
        t.col(big_integer(UsageDailyCurrency::RefusedRequests).default(0));
    }
    t.primary_key(&mut key).to_owned()
}

/// Replaces `usage_daily` by a table of the new (or old) shape holding `copy`'s rows.
async fn rebuild(manager: &SchemaManager<'_>, by_currency: bool, copy: &str) -> Result<(), DbErr> {
    use UsageDailyCurrency::UsageDailyNext as Next;
    manager.create_table(table(Next, by_currency)).await?;
    manager.get_connection().execute_unprepared(copy).await?;
    manager
        .drop_table(Table::drop().table(D::Table).to_owned())
        .await?;
    manager
        .rename_table(Table::rename().table(Next, D::Table).to_owned())
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

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let copy = format!(
            "INSERT INTO usage_daily_next ({SHARED}, refused_requests) \
             SELECT {SHARED}, 0 FROM usage_daily"
        );
        rebuild(manager, true, &copy).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // Back to one row per day whatever the currency: the old shape cannot hold two.
        let copy = format!(
            "INSERT INTO usage_daily_next ({SHARED}) SELECT tenant, tier, pack_id, pool, day, \
             SUM(requests), SUM(characters), SUM(billed_characters), SUM(cached_characters), \
             SUM(audio_ms), SUM(gpu_ms), SUM(cost_micros), SUM(failed_attempts), MAX(currency), \
             SUM(unsettled_characters), SUM(unsettled_cost_micros) FROM usage_daily \
             GROUP BY tenant, tier, pack_id, pool, day"
        );
        rebuild(manager, false, &copy).await
    }
}
