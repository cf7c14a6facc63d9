//! `voice_clone_imports`: a request to read one scope's clones from the vendor's list API,
//! leased to a synthesis replica the way clone rows are (conditional claim, token-checked
//! report).

use std::collections::HashMap;

use sea_orm::{
    ActiveValue::Set,
    ColumnTrait, Condition, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
    sea_query::{Expr, ExprTrait},
};

use super::{
    CloneError,
    model::{CloneState, FinishedImport, Import, ImportResult, QueuedImport, Work},
    store::{CloneStore, live_states, pending, to_row},
    transition::{MAX_ATTEMPTS, backoff_ms, error_text},
};
use crate::{
    error::CatalogError,
    repo::entity::{clone_import, voice_clone},
};

/// Waiting for a worker.
pub const REQUESTED: &str = "REQUESTED";
/// Ran; `result` holds what it found.
pub const DONE: &str = "DONE";
/// Gave up; `error` says why.
pub const FAILED: &str = "FAILED";

/// An import leased to a worker: scope, pool, token, attempt.
pub type ClaimedImport = (String, String, String, u32);

/// How an import run ended.
#[derive(Clone, Debug)]
pub enum ImportEnd {
    /// It read the list and bound what it could.
    Done(ImportResult),
    /// It failed for good.
    Failed(String),
    /// It failed for now: again after `after_ms` (or the back-off).
    Retry {
        /// The vendor's wait.
        after_ms: u64,
        /// Why.
        error: String,
    },
}

fn from_row(m: clone_import::Model) -> Import {
    let last = m
        .result
        .as_deref()
        .and_then(|r| serde_json::from_str::<FinishedImport>(r).ok())
        .or_else(|| legacy_finished(&m));
    let queued = (m.state == REQUESTED).then(|| QueuedImport {
        requested_at_us: m.requested_at_us,
        error: m.error.clone(),
    });
    Import {
        scope: m.scope,
        last,
        queued,
    }
}

/// A run finished before results recorded their own state and times: the row's.
fn legacy_finished(m: &clone_import::Model) -> Option<FinishedImport> {
    let result = match m.state.as_str() {
        DONE => serde_json::from_str(m.result.as_deref()?).ok()?,
        FAILED => ImportResult::default(),
        _ => return None,
    };
    Some(FinishedImport {
        state: m.state.clone(),
        requested_at_us: m.requested_at_us,
        finished_at_us: m.updated_at_us,
        result,
        error: m.error.clone(),
    })
}

fn due(now_us: i64) -> Condition {
    use clone_import::Column;
    Condition::all()
        .add(Column::State.eq(REQUESTED))
        .add(Column::DueAtUs.lte(now_us))
        .add(
            Condition::any()
                .add(Column::LeaseUntilUs.is_null())
                .add(Column::LeaseUntilUs.lte(now_us)),
        )
}

impl CloneStore {
    /// The vendor voice ids of `scope`'s live clones, with their packs.
    pub async fn held_ids(&self, scope: &str) -> Result<HashMap<String, String>, CatalogError> {
        use voice_clone::Column;
        Ok(voice_clone::Entity::find()
            .filter(Column::Scope.eq(scope))
            .filter(Column::State.is_in(live_states()))
            .filter(Column::VendorVoiceId.is_not_null())
            .all(self.db())
            .await?
            .into_iter()
            .filter_map(|m| Some((m.vendor_voice_id?, m.pack_id)))
            .collect())
    }

    /// Records a clone the vendor already holds as READY (import), unless the pack has a
    /// live clone in the scope. Whether it was bound.
    pub async fn bind(
        &self,
        pack_id: &str,
        scope: &str,
        vendor_voice_id: &str,
        now_us: i64,
    ) -> Result<bool, CatalogError> {
        if self
            .get(pack_id, scope)
            .await?
            .is_some_and(|c| c.state.is_live())
        {
            return Ok(false);
        }
        let mut row = pending(pack_id, scope, now_us);
        row.state = CloneState::Ready;
        row.work = Work::None;
        row.vendor_voice_id = Some(vendor_voice_id.to_owned());
        voice_clone::Entity::insert(to_row(&row, now_us))
            .on_conflict(
                sea_orm::sea_query::OnConflict::columns([
                    voice_clone::Column::PackId,
                    voice_clone::Column::Scope,
                ])
                .update_columns([
                    voice_clone::Column::VendorVoiceId,
                    voice_clone::Column::State,
                    voice_clone::Column::Work,
                    voice_clone::Column::Error,
                    voice_clone::Column::DueAtUs,
                    voice_clone::Column::UpdatedAtUs,
                ])
                .to_owned(),
            )
            .exec_without_returning(self.db())
            .await?;
        Ok(true)
    }

    /// Asks for an import of `scope` (of `pool`); one already waiting is left alone. The last
    /// finished run stays in `result` until the new one finishes.
    pub async fn request_import(
        &self,
        scope: &str,
        pool: &str,
        now_us: i64,
    ) -> Result<(), CatalogError> {
        use clone_import::Column;
        let row = clone_import::ActiveModel {
            scope: Set(scope.to_owned()),
            pool: Set(pool.to_owned()),
            state: Set(REQUESTED.to_owned()),
            requested_at_us: Set(now_us),
            due_at_us: Set(now_us),
            lease_owner: Set(None),
            lease_until_us: Set(None),
            lease_token: Set(None),
            attempts: Set(0),
            result: Set(None),
            error: Set(None),
            updated_at_us: Set(now_us),
        };
        let existing = clone_import::Entity::find_by_id(scope.to_owned())
            .one(self.db())
            .await?;
        match existing {
            Some(current) if current.state == REQUESTED => Ok(()),
            Some(_) => {
                clone_import::Entity::update_many()
                    .col_expr(Column::State, Expr::value(REQUESTED))
                    .col_expr(Column::RequestedAtUs, Expr::value(now_us))
                    .col_expr(Column::DueAtUs, Expr::value(now_us))
                    .col_expr(Column::Attempts, Expr::value(0))
                    .col_expr(Column::Error, Expr::value(Option::<String>::None))
                    .col_expr(Column::UpdatedAtUs, Expr::value(now_us))
                    .filter(Column::Scope.eq(scope))
                    .filter(Column::State.ne(REQUESTED))
                    .exec(self.db())
                    .await?;
                Ok(())
            }
            None => {
                clone_import::Entity::insert(row)
                    .on_conflict_do_nothing_on([Column::Scope])
                    .exec_without_returning(self.db())
                    .await?;
                Ok(())
            }
        }
    }

    /// The imports of `scopes`, in scope order.
    pub async fn imports(&self, scopes: &[String]) -> Result<Vec<Import>, CatalogError> {
        Ok(clone_import::Entity::find()
            .filter(clone_import::Column::Scope.is_in(scopes.iter().map(String::as_str)))
            .order_by_asc(clone_import::Column::Scope)
            .all(self.db())
            .await?
            .into_iter()
            .map(from_row)
            .collect())
    }

    /// Leases up to `max` waiting imports of `scopes` (as [`CloneStore::claim`] does rows).
    pub async fn claim_imports(
        &self,
        worker: &str,
        scopes: &[String],
        max: u32,
        lease_us: i64,
        now_us: i64,
    ) -> Result<Vec<ClaimedImport>, CatalogError> {
        use clone_import::Column;
        let candidates = clone_import::Entity::find()
            .filter(due(now_us))
            .filter(Column::Scope.is_in(scopes.iter().map(String::as_str)))
            .order_by_asc(Column::DueAtUs)
            .limit(u64::from(max))
            .all(self.db())
            .await?;
        let mut out = Vec::new();
        for row in candidates {
            let token = hex::encode(rand::random::<[u8; 16]>());
            let claimed = clone_import::Entity::update_many()
                .col_expr(Column::LeaseOwner, Expr::value(worker))
                .col_expr(Column::LeaseUntilUs, Expr::value(now_us + lease_us))
                .col_expr(Column::LeaseToken, Expr::value(token.as_str()))
                .col_expr(Column::Attempts, Expr::col(Column::Attempts).add(1))
                .col_expr(Column::UpdatedAtUs, Expr::value(now_us))
                .filter(Column::Scope.eq(row.scope.as_str()))
                .filter(due(now_us))
                .exec(self.db())
                .await?;
            if claimed.rows_affected == 1 {
                let attempt = u32::try_from(row.attempts).unwrap_or(0) + 1;
                out.push((row.scope, row.pool, token, attempt));
            }
        }
        Ok(out)
    }

    /// The attempts, pool and request time of the import `token` leases. Errors:
    /// [`CloneError::LeaseLost`].
    pub async fn leased_import(
        &self,
        scope: &str,
        token: &str,
    ) -> Result<(u32, String, i64), CatalogError> {
        let row = clone_import::Entity::find_by_id(scope.to_owned())
            .one(self.db())
            .await?;
        match row {
            Some(r) if r.lease_token.as_deref() == Some(token) => Ok((
                u32::try_from(r.attempts).unwrap_or(0),
                r.pool,
                r.requested_at_us,
            )),
            _ => Err(import_lease_lost(scope)),
        }
    }

    /// Ends the import `token` leases. Errors: [`CloneError::LeaseLost`].
    pub async fn settle_import(
        &self,
        scope: &str,
        token: &str,
        end: &ImportEnd,
        now_us: i64,
    ) -> Result<(), CatalogError> {
        use clone_import::Column;
        let (attempts, _, requested_at_us) = self.leased_import(scope, token).await?;
        let finished = |state: &str, result: &ImportResult, error: Option<String>| {
            let run = FinishedImport {
                state: state.to_owned(),
                requested_at_us,
                finished_at_us: now_us,
                result: result.clone(),
                error: error.clone(),
            };
            (Some(serde_json::to_string(&run).unwrap_or_default()), error)
        };
        let none = ImportResult::default();
        let (state, due_at, (result, error)) = match end {
            ImportEnd::Done(result) => (DONE, now_us, finished(DONE, result, None)),
            ImportEnd::Failed(e) => (FAILED, now_us, finished(FAILED, &none, Some(error_text(e)))),
            ImportEnd::Retry { error, .. } if attempts >= MAX_ATTEMPTS => (
                FAILED,
                now_us,
                finished(FAILED, &none, Some(error_text(error))),
            ),
            ImportEnd::Retry { after_ms, error } => {
                let wait = Ord::max(*after_ms, backoff_ms(attempts));
                let wait_us = i64::try_from(wait.saturating_mul(1_000)).unwrap_or(i64::MAX);
                // The last finished run's result stays.
                let kept = clone_import::Entity::find_by_id(scope.to_owned())
                    .one(self.db())
                    .await?
                    .and_then(|r| r.result);
                (
                    REQUESTED,
                    now_us.saturating_add(wait_us),
                    (kept, Some(error_text(error))),
                )
            }
        };
        let changed = clone_import::Entity::update_many()
            .col_expr(Column::State, Expr::value(state))
            .col_expr(Column::DueAtUs, Expr::value(due_at))
            .col_expr(Column::Result, Expr::value(result))
            .col_expr(Column::Error, Expr::value(error))
            .col_expr(Column::LeaseOwner, Expr::value(Option::<String>::None))
            .col_expr(Column::LeaseUntilUs, Expr::value(Option::<i64>::None))
            .col_expr(Column::LeaseToken, Expr::value(Option::<String>::None))
            .col_expr(Column::UpdatedAtUs, Expr::value(now_us))
            .filter(Column::Scope.eq(scope))
            .filter(Column::LeaseToken.eq(token))
            .exec(self.db())
            .await?;
        if changed.rows_affected == 1 {
            Ok(())
        } else {
            Err(import_lease_lost(scope))
        }
    }
}

fn import_lease_lost(scope: &str) -> CatalogError {
    CloneError::LeaseLost {
        what: format!("the import of scope {scope:?}"),
    }
    .into()
}
