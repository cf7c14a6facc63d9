//! The SQL pieces the ledger's writes share: placeholders per backend, the daily totals'
//! upsert, the `usage_counted` marks and closing a charge.

use std::collections::BTreeMap;

use sea_orm::{ConnectionTrait, DatabaseTransaction, DbBackend, DbErr, Statement, Value};
use voxpool_domain::usage::UsageContext;

/// The key of a daily total: tenant, tier, pack, pool, day and currency (rows of two
/// currencies are never summed).
pub(super) type DayKey = (String, String, String, String, String, String);

/// What a batch adds to one daily total.
#[derive(Clone, Debug, Default)]
pub(super) struct Delta {
    pub(super) requests: i64,
    pub(super) characters: i64,
    pub(super) billed_characters: i64,
    pub(super) cached_characters: i64,
    pub(super) audio_ms: i64,
    pub(super) gpu_ms: i64,
    pub(super) cost_micros: i64,
    pub(super) failed_attempts: i64,
    /// Requests that ended without their audio before any vendor was sent their text.
    pub(super) refused_requests: i64,
    /// Of `characters` / `cost_micros`: swept from charges still unsettled.
    pub(super) unsettled_characters: i64,
    pub(super) unsettled_cost_micros: i64,
}

/// `v` as a column value (saturating).
pub(super) fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The UTC day (`YYYY-MM-DD`) of `at_ms`, or `None` when it is out of range.
pub fn day_of(at_ms: i64) -> Option<String> {
    chrono::DateTime::from_timestamp_millis(at_ms).map(|t| t.format("%Y-%m-%d").to_string())
}

pub(super) fn day_key(c: &UsageContext) -> DayKey {
    (
        c.tenant.clone(),
        c.tier.map(|t| t.as_str().to_owned()).unwrap_or_default(),
        c.pack_id.clone(),
        c.pool.clone(),
        day_of(c.at_ms).unwrap_or_default(),
        c.currency.clone(),
    )
}

/// `?` placeholders as the backend writes them (`$1`, `$2`, … on PostgreSQL).
pub(super) fn stmt(backend: DbBackend, sql: &str, values: Vec<Value>) -> Statement {
    let sql = if backend == DbBackend::Postgres {
        let mut out = String::with_capacity(sql.len() + 16);
        let mut n = 0;
        for c in sql.chars() {
            if c == '?' {
                n += 1;
                out.push_str(&format!("${n}"));
            } else {
                out.push(c);
            }
        }
        out
    } else {
        sql.to_owned()
    };
    Statement::from_sql_and_values(backend, sql, values)
}

/// Records that `(record, attempt)` is in the totals; false when something already put it
/// there.
pub(super) async fn mark(
    txn: &DatabaseTransaction,
    record: &str,
    attempt: i32,
    by: &str,
    now_ms: i64,
) -> Result<bool, DbErr> {
    let sql = "INSERT INTO usage_counted (record_id, attempt, counted_by, counted_at_ms) \
               VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING";
    let values = vec![record.into(), attempt.into(), by.into(), now_ms.into()];
    let done = txn
        .execute_raw(stmt(txn.get_database_backend(), sql, values))
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Takes the attempt's charge off the sweep's work list.
pub(super) async fn close(
    txn: &DatabaseTransaction,
    record: &str,
    attempt: i32,
) -> Result<(), DbErr> {
    let sql = "UPDATE usage_events SET open = 0 WHERE record_id = ? AND attempt = ? \
               AND kind = 'charge' AND open = 1";
    txn.execute_raw(stmt(
        txn.get_database_backend(),
        sql,
        vec![record.into(), attempt.into()],
    ))
    .await
    .map(drop)
}

/// Adds each delta to its daily total (created at zero), in key order.
pub(super) async fn add_totals(
    txn: &DatabaseTransaction,
    totals: BTreeMap<DayKey, Delta>,
) -> Result<(), DbErr> {
    let sql = "INSERT INTO usage_daily (tenant, tier, pack_id, pool, day, currency, requests, \
               characters, billed_characters, cached_characters, audio_ms, gpu_ms, cost_micros, \
               failed_attempts, refused_requests, unsettled_characters, unsettled_cost_micros) \
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
               ON CONFLICT (tenant, tier, pack_id, pool, day, currency) DO UPDATE SET \
               requests = usage_daily.requests + excluded.requests, \
               characters = usage_daily.characters + excluded.characters, \
               billed_characters = usage_daily.billed_characters + excluded.billed_characters, \
               cached_characters = usage_daily.cached_characters + excluded.cached_characters, \
               audio_ms = usage_daily.audio_ms + excluded.audio_ms, \
               gpu_ms = usage_daily.gpu_ms + excluded.gpu_ms, \
               cost_micros = usage_daily.cost_micros + excluded.cost_micros, \
               failed_attempts = usage_daily.failed_attempts + excluded.failed_attempts, \
               refused_requests = usage_daily.refused_requests + excluded.refused_requests, \
               unsettled_characters = usage_daily.unsettled_characters \
               + excluded.unsettled_characters, \
               unsettled_cost_micros = usage_daily.unsettled_cost_micros \
               + excluded.unsettled_cost_micros";
    let backend = txn.get_database_backend();
    for ((tenant, tier, pack, pool, day, currency), d) in totals {
        let values = vec![
            tenant.into(),
            tier.into(),
            pack.into(),
            pool.into(),
            day.into(),
            currency.into(),
            d.requests.into(),
            d.characters.into(),
            d.billed_characters.into(),
            d.cached_characters.into(),
            d.audio_ms.into(),
            d.gpu_ms.into(),
            d.cost_micros.into(),
            d.failed_attempts.into(),
            d.refused_requests.into(),
            d.unsettled_characters.into(),
            d.unsettled_cost_micros.into(),
        ];
        txn.execute_raw(stmt(backend, sql, values)).await?;
    }
    Ok(())
}
