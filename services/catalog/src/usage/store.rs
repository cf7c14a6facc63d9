//! The ledger's tables over sea-orm, one code path for SQLite and PostgreSQL: a batch of
//! stream records applied in one transaction, the sweep of unsettled charges, retention.
//!
//! Exactly once (invariant of docs/OPERATIONS.md#usage-ledger): a record is inserted into
//! `usage_events` once (primary key `(record_id, attempt, kind)`, `ON CONFLICT DO NOTHING …
//! RETURNING` says which rows are new) and only new rows change `usage_daily`; an attempt's
//! characters enter the totals once, by whoever inserts its `usage_counted` row first (its
//! Settle or the sweep of its Charge), and the request once (attempt -1, its Done or the
//! sweep). On PostgreSQL two replicas racing for one key serialize on the unique index (the
//! second insert waits for the first transaction and then does nothing); on SQLite writes
//! are serialized by the database lock (`BEGIN IMMEDIATE`).

use std::collections::{BTreeMap, HashSet};

use sea_orm::{
    ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbErr, SqliteTransactionMode,
    TransactionOptions, TransactionTrait, Value,
};
use voxpool_domain::usage::{AttemptUsage, DoneUsage, UsageEvent};

use super::{
    UsageFilter, UsageRow, read,
    sql::{DayKey, Delta, add_totals, close, day_key, day_of, int, mark, stmt},
};

/// Rows per multi-row INSERT (27 columns: well under SQLite's bound on parameters).
const INSERT_CHUNK: usize = 200;
/// Charges the sweep takes per transaction.
const SWEEP_CHUNK: u64 = 500;

/// The ledger's tables. Cheap to clone (the connection is a pool handle).
#[derive(Clone, Debug)]
pub struct UsageStore {
    db: DatabaseConnection,
}

/// What one batch did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Records stored for the first time.
    pub new: u64,
    /// Records already stored (a redelivery): counted nothing.
    pub repeated: u64,
}

/// The quantities of an attempt that a Settle replaces a Charge by.
#[derive(Clone, Copy, Debug, Default)]
struct Charged {
    characters: i64,
    billed_characters: i64,
    gpu_ms: i64,
    cost_micros: i64,
}

impl Charged {
    fn of(a: &AttemptUsage) -> Self {
        Self {
            characters: int(a.characters),
            billed_characters: int(a.billed_characters),
            gpu_ms: int(a.gpu_ms),
            cost_micros: a.cost_micros,
        }
    }
}

const EVENT_COLUMNS: &str = "record_id, attempt, kind, tenant, caller, request_id, path, \
    pack_id, snapshot_digest, tier, pool, provider, key_id, upstream_id, characters, \
    billed_characters, cached_characters, audio_ms, gpu_ms, cost_micros, currency, outcome, \
    failed_attempts, at_ms, day, received_at_ms, open";
const EVENT_ARITY: usize = 27;

/// The idempotency key of `e`: `(record_id, attempt, kind)`, attempt -1 for a Done.
pub fn key_of(e: &UsageEvent) -> (String, i32, &'static str) {
    let attempt = match e {
        UsageEvent::Charge { attempt, .. } | UsageEvent::Settle { attempt, .. } => {
            i32::try_from(attempt.attempt).unwrap_or(i32::MAX)
        }
        UsageEvent::Done { .. } => -1,
    };
    (e.context().record_id.clone(), attempt, e.kind())
}

fn event_values(e: &UsageEvent, received_at_ms: i64, out: &mut Vec<Value>) {
    let c = e.context();
    let (record_id, attempt, kind) = key_of(e);
    let none = AttemptUsage {
        attempt: 0,
        key_id: String::new(),
        upstream_id: String::new(),
        characters: 0,
        billed_characters: 0,
        audio_ms: 0,
        gpu_ms: 0,
        cost_micros: 0,
        outcome: String::new(),
    };
    let (a, done) = match e {
        UsageEvent::Charge { attempt, .. } | UsageEvent::Settle { attempt, .. } => (attempt, None),
        UsageEvent::Done { done, .. } => (&none, Some(done)),
    };
    let (cached, audio, cost, failed) = match done {
        Some(d) => (
            int(d.cached_characters),
            int(d.audio_ms),
            d.cached_cost_micros,
            i32::try_from(d.failed_attempts).unwrap_or(i32::MAX),
        ),
        None => (0, int(a.audio_ms), a.cost_micros, 0),
    };
    let open = i16::from(matches!(e, UsageEvent::Charge { .. }));
    out.extend([
        record_id.into(),
        attempt.into(),
        kind.into(),
        c.tenant.clone().into(),
        c.caller.clone().into(),
        c.request_id.clone().into(),
        c.path.clone().into(),
        c.pack_id.clone().into(),
        c.snapshot_digest.clone().into(),
        c.tier
            .map(voxpool_domain::snapshot::Tier::as_str)
            .unwrap_or_default()
            .into(),
        c.pool.clone().into(),
        c.provider.as_str().into(),
        a.key_id.clone().into(),
        a.upstream_id.clone().into(),
        int(a.characters).into(),
        int(a.billed_characters).into(),
        cached.into(),
        audio.into(),
        int(a.gpu_ms).into(),
        cost.into(),
        c.currency.clone().into(),
        a.outcome.clone().into(),
        failed.into(),
        c.at_ms.into(),
        day_of(c.at_ms).unwrap_or_default().into(),
        received_at_ms.into(),
        open.into(),
    ]);
}

impl UsageStore {
    /// The ledger over `db` (migrated: `voxpool_migrations::Migrator`).
    pub fn new(db: DatabaseConnection) -> Self {
        Self { db }
    }

    async fn begin(&self) -> Result<DatabaseTransaction, DbErr> {
        let options = TransactionOptions {
            sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
            ..Default::default()
        };
        self.db.begin_with_options(options).await
    }

    /// Applies `events` in one transaction: each stored once, and only those stored for the
    /// first time change the daily totals (module doc). `now_ms` is their receipt time.
    pub async fn apply(&self, events: &[UsageEvent], now_ms: i64) -> Result<Applied, DbErr> {
        let mut unique: BTreeMap<(String, i32, &'static str), &UsageEvent> = BTreeMap::new();
        for e in events {
            unique.entry(key_of(e)).or_insert(e);
        }
        let txn = self.begin().await?;
        let backend = txn.get_database_backend();
        let mut inserted: HashSet<(String, i32, String)> = HashSet::new();
        let all: Vec<&UsageEvent> = unique.values().copied().collect();
        for chunk in all.chunks(INSERT_CHUNK) {
            let mut values = Vec::with_capacity(chunk.len() * EVENT_ARITY);
            for e in chunk {
                event_values(e, now_ms, &mut values);
            }
            let row = format!("({})", vec!["?"; EVENT_ARITY].join(", "));
            let sql = format!(
                "INSERT INTO usage_events ({EVENT_COLUMNS}) VALUES {} ON CONFLICT DO NOTHING \
                 RETURNING record_id, attempt, kind",
                vec![row; chunk.len()].join(", ")
            );
            for r in txn.query_all_raw(stmt(backend, &sql, values)).await? {
                inserted.insert((
                    r.try_get_by_index(0)?,
                    r.try_get_by_index(1)?,
                    r.try_get_by_index(2)?,
                ));
            }
        }
        let mut totals: BTreeMap<DayKey, Delta> = BTreeMap::new();
        for ((record, attempt, kind), e) in &unique {
            if !inserted.contains(&(record.clone(), *attempt, (*kind).to_owned())) {
                continue;
            }
            if matches!(e, UsageEvent::Charge { .. }) {
                continue; // counted by its Settle, or by the sweep
            }
            let delta = totals.entry(day_key(e.context())).or_default();
            match e {
                UsageEvent::Charge { .. } => {}
                UsageEvent::Settle { attempt: a, .. } => {
                    settle(&txn, record, *attempt, a, now_ms, delta).await?;
                }
                UsageEvent::Done { done, .. } => finish(&txn, record, done, now_ms, delta).await?,
            }
        }
        add_totals(&txn, totals).await?;
        txn.commit().await?;
        let new = inserted.len() as u64;
        Ok(Applied {
            new,
            repeated: events.len() as u64 - new,
        })
    }

    /// Counts as charged the charges stored before `cutoff_ms` that nothing settled (each
    /// once, module doc); returns how many it counted.
    pub async fn sweep(&self, cutoff_ms: i64, now_ms: i64) -> Result<u64, DbErr> {
        let mut counted = 0;
        loop {
            let txn = self.begin().await?;
            let backend = txn.get_database_backend();
            let sql = "SELECT record_id, attempt, tenant, tier, pack_id, pool, day, currency, \
                       characters, billed_characters, gpu_ms, cost_micros FROM usage_events \
                       WHERE open = 1 AND received_at_ms < ? ORDER BY received_at_ms, record_id, \
                       attempt LIMIT ?";
            let rows = txn
                .query_all_raw(stmt(
                    backend,
                    sql,
                    vec![cutoff_ms.into(), int(SWEEP_CHUNK).into()],
                ))
                .await?;
            let mut totals: BTreeMap<DayKey, Delta> = BTreeMap::new();
            for r in &rows {
                let record: String = r.try_get_by_index(0)?;
                let attempt: i32 = r.try_get_by_index(1)?;
                let key: DayKey = (
                    r.try_get_by_index(2)?,
                    r.try_get_by_index(3)?,
                    r.try_get_by_index(4)?,
                    r.try_get_by_index(5)?,
                    r.try_get_by_index(6)?,
                    r.try_get_by_index(7)?,
                );
                let delta = totals.entry(key).or_default();
                if mark(&txn, &record, attempt, "sweep", now_ms).await? {
                    counted += 1;
                    let characters = r.try_get_by_index::<i64>(8)?;
                    let cost_micros = r.try_get_by_index::<i64>(11)?;
                    delta.characters += characters;
                    delta.unsettled_characters += characters;
                    delta.billed_characters += r.try_get_by_index::<i64>(9)?;
                    delta.gpu_ms += r.try_get_by_index::<i64>(10)?;
                    delta.cost_micros += cost_micros;
                    delta.unsettled_cost_micros += cost_micros;
                    if mark(&txn, &record, -1, "sweep", now_ms).await? {
                        delta.requests += 1;
                    }
                }
                close(&txn, &record, attempt).await?;
            }
            add_totals(&txn, totals).await?;
            txn.commit().await?;
            if (rows.len() as u64) < SWEEP_CHUNK {
                return Ok(counted);
            }
        }
    }

    /// Deletes raw records (and which attempts were counted) stored before `cutoff_ms`; the
    /// daily totals stay. Returns the raw records deleted.
    pub async fn expire(&self, cutoff_ms: i64) -> Result<u64, DbErr> {
        let backend = self.db.get_database_backend();
        let events = self
            .db
            .execute_raw(stmt(
                backend,
                "DELETE FROM usage_events WHERE received_at_ms < ? AND open = 0",
                vec![cutoff_ms.into()],
            ))
            .await?
            .rows_affected();
        self.db
            .execute_raw(stmt(
                backend,
                "DELETE FROM usage_counted WHERE counted_at_ms < ?",
                vec![cutoff_ms.into()],
            ))
            .await?;
        Ok(events)
    }

    /// Up to `limit` rows `filter` matches after the key `after`, in key order.
    pub async fn rows(
        &self,
        filter: &UsageFilter,
        after: Option<&[String]>,
        limit: u64,
    ) -> Result<Vec<UsageRow>, DbErr> {
        read::rows(&self.db, filter, after, limit).await
    }

    /// Raw records stored (audit and tests).
    pub async fn raw_count(&self) -> Result<i64, DbErr> {
        let backend = self.db.get_database_backend();
        let row = self
            .db
            .query_one_raw(stmt(backend, "SELECT COUNT(*) FROM usage_events", vec![]))
            .await?;
        row.map_or(Ok(0), |r| r.try_get_by_index(0))
    }
}

/// A new Settle: its quantities, or (its Charge already swept) the difference, taking the
/// swept Charge out of the unsettled figure.
async fn settle(
    txn: &DatabaseTransaction,
    record: &str,
    attempt: i32,
    a: &AttemptUsage,
    now_ms: i64,
    delta: &mut Delta,
) -> Result<(), DbErr> {
    let settled = Charged::of(a);
    let before = if mark(txn, record, attempt, "settle", now_ms).await? {
        Charged::default()
    } else {
        let sql = "SELECT characters, billed_characters, gpu_ms, cost_micros FROM usage_events \
                   WHERE record_id = ? AND attempt = ? AND kind = 'charge'";
        let row = txn
            .query_one_raw(stmt(
                txn.get_database_backend(),
                sql,
                vec![record.into(), attempt.into()],
            ))
            .await?;
        match row {
            Some(r) => Charged {
                characters: r.try_get_by_index(0)?,
                billed_characters: r.try_get_by_index(1)?,
                gpu_ms: r.try_get_by_index(2)?,
                cost_micros: r.try_get_by_index(3)?,
            },
            None => Charged::default(),
        }
    };
    delta.characters += settled.characters - before.characters;
    delta.billed_characters += settled.billed_characters - before.billed_characters;
    delta.gpu_ms += settled.gpu_ms - before.gpu_ms;
    delta.cost_micros += settled.cost_micros - before.cost_micros;
    // The swept charge is settled now: no longer part of the unsettled figure.
    delta.unsettled_characters -= before.characters;
    delta.unsettled_cost_micros -= before.cost_micros;
    close(txn, record, attempt).await
}

/// A new Done: the request (unless a sweep counted it), audio, cache hits, failures, and
/// whether it was refused: it ended without its audio, nothing served from the cache, no
/// attempt failed and no Charge of it is stored (no vendor was sent its text: a budget or
/// key quota refused it, no key was free, or its caller left while it waited).
async fn finish(
    txn: &DatabaseTransaction,
    record: &str,
    done: &DoneUsage,
    now_ms: i64,
    delta: &mut Delta,
) -> Result<(), DbErr> {
    if mark(txn, record, -1, "done", now_ms).await? {
        delta.requests += 1;
    }
    delta.cached_characters += int(done.cached_characters);
    delta.audio_ms += int(done.audio_ms);
    delta.cost_micros += done.cached_cost_micros;
    delta.failed_attempts += i64::from(done.failed_attempts);
    let unserved =
        !done.ok && done.audio_ms == 0 && done.cached_characters == 0 && done.failed_attempts == 0;
    if unserved && !charged(txn, record).await? {
        delta.refused_requests += 1;
    }
    Ok(())
}

/// Whether any Charge of request `record` is stored (a vendor was about to be sent its text).
async fn charged(txn: &DatabaseTransaction, record: &str) -> Result<bool, DbErr> {
    let sql = "SELECT 1 FROM usage_events WHERE record_id = ? AND kind = 'charge' LIMIT 1";
    let found = txn
        .query_one_raw(stmt(txn.get_database_backend(), sql, vec![record.into()]))
        .await?;
    Ok(found.is_some())
}
