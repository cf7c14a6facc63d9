//! `voice_clones` and `voice_clone_settings` over sea-orm: the same statements on SQLite and
//! PostgreSQL. Every time is passed in (`now_us`), so lease expiry and back-off are tested
//! without waiting.
//!
//! Exactly one worker holds a step: a claim is a conditional `UPDATE … WHERE` the step is still
//! due and its lease free or run out, and it counts only when it changed a row (on PostgreSQL
//! the second of two racing updates waits for the first and then finds the lease taken; on
//! SQLite writers queue on the database lock). A report applies only while the row still
//! carries the claim's token. One clone per pack and scope comes from the primary key.

use sea_orm::{
    ActiveValue::Set, ColumnTrait, Condition, DatabaseConnection, DatabaseTransaction, EntityTrait,
    QueryFilter, QueryOrder, SqliteTransactionMode, TransactionOptions, TransactionTrait,
    sea_query::Expr,
};

use super::{
    CloneError,
    model::{CloneState, VoiceClone, Work},
    transition::Next,
};
use crate::{
    error::CatalogError,
    repo::entity::{clone_setting, voice_clone},
};

/// Most scopes a pack is cloned into when nobody said otherwise.
pub const DEFAULT_MAX_SCOPES: u32 = 1;

/// The clone rows of one database. Cheap to clone.
#[derive(Clone, Debug)]
pub struct CloneStore {
    db: DatabaseConnection,
}

/// A fresh lease token: 128 random bits in hex.
pub(super) fn new_token() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

pub(super) fn live_states() -> Vec<&'static str> {
    CloneState::ALL
        .into_iter()
        .filter(|s| s.is_live())
        .map(CloneState::as_str)
        .collect()
}

/// Decodes a row (a hand-edited state is [`CatalogError::CorruptRow`]).
pub fn from_row(m: voice_clone::Model) -> Result<VoiceClone, CatalogError> {
    let corrupt = |column: &str, value: &str| CatalogError::CorruptRow {
        id: m.pack_id.clone(),
        message: format!("clone in scope {:?}: column {column}: {value:?}", m.scope),
    };
    let state = CloneState::parse(&m.state).ok_or_else(|| corrupt("state", &m.state))?;
    let work = Work::parse(&m.work).ok_or_else(|| corrupt("work", &m.work))?;
    Ok(VoiceClone {
        state,
        work,
        attempts: u32::try_from(m.attempts).unwrap_or(0),
        pack_id: m.pack_id,
        scope: m.scope,
        vendor_voice_id: m.vendor_voice_id,
        created_at_us: m.created_at_us,
        last_used_at_us: m.last_used_at_us,
        expires_at_us: m.expires_at_us,
        error: m.error,
        due_at_us: m.due_at_us,
    })
}

/// Every column of `c` (the lease columns cleared), for insert or full update.
pub(super) fn to_row(c: &VoiceClone, now_us: i64) -> voice_clone::ActiveModel {
    voice_clone::ActiveModel {
        pack_id: Set(c.pack_id.clone()),
        scope: Set(c.scope.clone()),
        vendor_voice_id: Set(c.vendor_voice_id.clone()),
        state: Set(c.state.as_str().to_owned()),
        created_at_us: Set(c.created_at_us),
        last_used_at_us: Set(c.last_used_at_us),
        expires_at_us: Set(c.expires_at_us),
        error: Set(c.error.clone()),
        work: Set(c.work.as_str().to_owned()),
        due_at_us: Set(c.due_at_us),
        lease_owner: Set(None),
        lease_until_us: Set(None),
        lease_token: Set(None),
        attempts: Set(i32::try_from(c.attempts).unwrap_or(i32::MAX)),
        updated_at_us: Set(now_us),
    }
}

/// A new PENDING clone of `pack_id` in `scope` with CREATE due at `now_us`.
pub fn pending(pack_id: &str, scope: &str, now_us: i64) -> VoiceClone {
    VoiceClone {
        pack_id: pack_id.to_owned(),
        scope: scope.to_owned(),
        vendor_voice_id: None,
        state: CloneState::Pending,
        created_at_us: now_us,
        last_used_at_us: None,
        expires_at_us: None,
        error: None,
        work: Work::Create,
        due_at_us: now_us,
        attempts: 0,
    }
}

pub(super) fn pk(pack_id: &str, scope: &str) -> Condition {
    Condition::all()
        .add(voice_clone::Column::PackId.eq(pack_id))
        .add(voice_clone::Column::Scope.eq(scope))
}

impl CloneStore {
    /// The clones of the migrated database `db`.
    pub fn new(db: DatabaseConnection) -> Self {
        Self { db }
    }

    /// The connection (imports share it).
    pub(super) fn db(&self) -> &DatabaseConnection {
        &self.db
    }

    pub(super) async fn begin_write(&self) -> Result<DatabaseTransaction, CatalogError> {
        let options = TransactionOptions {
            sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
            ..Default::default()
        };
        Ok(self.db.begin_with_options(options).await?)
    }

    /// The clones of a pack, by scope.
    pub async fn list(&self, pack_id: &str) -> Result<Vec<VoiceClone>, CatalogError> {
        voice_clone::Entity::find()
            .filter(voice_clone::Column::PackId.eq(pack_id))
            .order_by_asc(voice_clone::Column::Scope)
            .all(&self.db)
            .await?
            .into_iter()
            .map(from_row)
            .collect()
    }

    /// The clone of a pack in one scope.
    pub async fn get(
        &self,
        pack_id: &str,
        scope: &str,
    ) -> Result<Option<VoiceClone>, CatalogError> {
        voice_clone::Entity::find()
            .filter(pk(pack_id, scope))
            .one(&self.db)
            .await?
            .map(from_row)
            .transpose()
    }

    /// The pack's `max_scopes` ([`DEFAULT_MAX_SCOPES`] when never set).
    pub async fn max_scopes(&self, pack_id: &str) -> Result<u32, CatalogError> {
        let row = clone_setting::Entity::find_by_id(pack_id.to_owned())
            .one(&self.db)
            .await?;
        Ok(row.map_or(DEFAULT_MAX_SCOPES, |r| {
            u32::try_from(r.max_scopes).unwrap_or(DEFAULT_MAX_SCOPES)
        }))
    }

    /// Sets the pack's `max_scopes`.
    pub async fn set_max_scopes(
        &self,
        pack_id: &str,
        n: u32,
        now_us: i64,
    ) -> Result<(), CatalogError> {
        let row = clone_setting::ActiveModel {
            pack_id: Set(pack_id.to_owned()),
            max_scopes: Set(i32::try_from(n).unwrap_or(i32::MAX)),
            updated_at_us: Set(now_us),
        };
        clone_setting::Entity::insert(row)
            .on_conflict(
                sea_orm::sea_query::OnConflict::column(clone_setting::Column::PackId)
                    .update_columns([
                        clone_setting::Column::MaxScopes,
                        clone_setting::Column::UpdatedAtUs,
                    ])
                    .to_owned(),
            )
            .exec_without_returning(&self.db)
            .await?;
        Ok(())
    }

    /// Asks for the pack's clone in `scope` to be deleted: a row the vendor may hold turns
    /// work DELETE due now; one it cannot hold (no vendor id, no live lease) goes at once.
    /// Answers the row as it stands and whether it is gone already. Errors:
    /// [`CloneError::NotFound`].
    pub async fn delete(
        &self,
        pack_id: &str,
        scope: &str,
        now_us: i64,
    ) -> Result<(VoiceClone, bool), CatalogError> {
        let txn = self.begin_write().await?;
        let row = voice_clone::Entity::find()
            .filter(pk(pack_id, scope))
            .one(&txn)
            .await?;
        let Some(row) = row else {
            txn.rollback().await?;
            return Err(CloneError::NotFound {
                pack_id: pack_id.to_owned(),
                scope: scope.to_owned(),
            }
            .into());
        };
        let leased = row.lease_until_us.is_some_and(|until| until > now_us);
        let mut clone = from_row(row)?;
        if clone.vendor_voice_id.is_none() && !leased {
            voice_clone::Entity::delete_many()
                .filter(pk(pack_id, scope))
                .exec(&txn)
                .await?;
            txn.commit().await?;
            return Ok((clone, true));
        }
        clone.work = Work::Delete;
        clone.due_at_us = now_us;
        clone.attempts = 0;
        due_delete(&txn, pack_id, scope, now_us).await?;
        txn.commit().await?;
        Ok((clone, false))
    }

    /// The row `token` leases, or why not: [`CloneError::NotFound`], [`CloneError::LeaseLost`].
    pub async fn leased(
        &self,
        pack_id: &str,
        scope: &str,
        token: &str,
    ) -> Result<VoiceClone, CatalogError> {
        let row = voice_clone::Entity::find()
            .filter(pk(pack_id, scope))
            .one(&self.db)
            .await?
            .ok_or_else(|| CloneError::NotFound {
                pack_id: pack_id.to_owned(),
                scope: scope.to_owned(),
            })?;
        if row.lease_token.as_deref() != Some(token) {
            return Err(lease_lost(pack_id, scope));
        }
        from_row(row)
    }

    /// Writes `next` over the row while it still carries `token` and the work `current`
    /// had (the lease is cleared). `false`: the work changed meanwhile (DeleteClone): read
    /// the row again and recompute. Errors: [`CloneError::LeaseLost`] when the token is no
    /// longer the row's.
    pub async fn settle(
        &self,
        current: &VoiceClone,
        token: &str,
        next: &Next,
        now_us: i64,
    ) -> Result<bool, CatalogError> {
        let (pack_id, scope) = (&current.pack_id, &current.scope);
        let held = Condition::all()
            .add(pk(pack_id, scope))
            .add(voice_clone::Column::LeaseToken.eq(token))
            .add(voice_clone::Column::Work.eq(current.work.as_str()));
        let changed = match next {
            Next::Remove => {
                voice_clone::Entity::delete_many()
                    .filter(held)
                    .exec(&self.db)
                    .await?
                    .rows_affected
            }
            Next::Update(row) => {
                voice_clone::Entity::update_many()
                    .set(to_row(row, now_us))
                    .filter(held)
                    .exec(&self.db)
                    .await?
                    .rows_affected
            }
        };
        if changed == 1 {
            return Ok(true);
        }
        // Not written: either the lease moved on, or only the work changed.
        self.leased(pack_id, scope, token).await.map(|_| false)
    }
}

/// Gives the row work DELETE due at `now_us`. The lease stays: a worker mid-step reports what
/// it made, and the delete follows.
pub(super) async fn due_delete(
    txn: &DatabaseTransaction,
    pack_id: &str,
    scope: &str,
    now_us: i64,
) -> Result<(), CatalogError> {
    voice_clone::Entity::update_many()
        .col_expr(
            voice_clone::Column::Work,
            Expr::value(Work::Delete.as_str()),
        )
        .col_expr(voice_clone::Column::DueAtUs, Expr::value(now_us))
        .col_expr(voice_clone::Column::Attempts, Expr::value(0))
        .col_expr(voice_clone::Column::UpdatedAtUs, Expr::value(now_us))
        .filter(pk(pack_id, scope))
        .exec(txn)
        .await?;
    Ok(())
}

fn lease_lost(pack_id: &str, scope: &str) -> CatalogError {
    CloneError::LeaseLost {
        what: format!("the clone of {pack_id} in scope {scope:?}"),
    }
    .into()
}
