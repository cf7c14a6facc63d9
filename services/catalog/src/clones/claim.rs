//! Claiming due clone steps: the lease (one worker per step) and the scope's clone rate.
//!
//! A step is leased by a conditional `UPDATE … WHERE` it is still due and its lease free or
//! run out, counted only when it changed the row (see [`super::store`]).
//!
//! **Clone rate.** A scope's `max_clones_per_minute` bounds the CREATE steps handed out in it:
//! a CREATE is claimed only while fewer than that many were claimed in the scope in the last
//! [`RATE_WINDOW_US`]. The count is read from the database, so it holds across catalog
//! replicas: claiming a CREATE stamps the row's `created_at_us` with the claim's time (the
//! clone is created at the vendor then), and the count is the scope's rows stamped within the
//! window whose CREATE was handed out (claimed at least once, or past PENDING). A row claimed
//! again (a retry) counts once; a clone created and deleted within the window no longer
//! counts. Two catalog replicas over PostgreSQL claiming the last CREATE of a window at the
//! same instant may both hand one out. A CREATE held back stays due and goes out in a later
//! claim once the window has room; other steps (POLL, DELETE, KEEPALIVE, IMPORT) are never
//! held back.
//!
//! **Slots.** A CREATE never handed out is also held back while its scope's slots are all
//! occupied at the vendor: it waits for the delete of a clone it evicted ([`super::slots`]).

use std::collections::{HashMap, HashSet};

use sea_orm::{
    ColumnTrait, Condition, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect,
    sea_query::{Expr, ExprTrait},
};

use super::{
    Clones, micros_now,
    model::{Claimed, CloneState, Target, VoiceClone, Work},
    recipe, slots,
    store::{CloneStore, from_row, new_token, pk},
};
use crate::{error::CatalogError, repo::entity::voice_clone};

/// The window `max_clones_per_minute` counts CREATE steps in, microseconds.
pub const RATE_WINDOW_US: i64 = 60_000_000;

/// Rows whose step is due at `now_us` and whose lease is free or ran out.
fn due(now_us: i64) -> Condition {
    use voice_clone::Column;
    Condition::all()
        .add(Column::Work.ne(Work::None.as_str()))
        .add(Column::DueAtUs.lte(now_us))
        .add(
            Condition::any()
                .add(Column::LeaseUntilUs.is_null())
                .add(Column::LeaseUntilUs.lte(now_us)),
        )
}

impl CloneStore {
    /// Up to `limit` steps due at `now_us` in `scopes`, oldest due first.
    pub async fn due(
        &self,
        scopes: &[String],
        limit: u64,
        now_us: i64,
    ) -> Result<Vec<VoiceClone>, CatalogError> {
        use voice_clone::Column;
        voice_clone::Entity::find()
            .filter(due(now_us))
            .filter(Column::Scope.is_in(scopes.iter().map(String::as_str)))
            .order_by_asc(Column::DueAtUs)
            .order_by_asc(Column::PackId)
            .order_by_asc(Column::Scope)
            .limit(limit)
            .all(self.db())
            .await?
            .into_iter()
            .map(from_row)
            .collect()
    }

    /// Leases the step of `row` (as [`CloneStore::due`] read it) to `worker` until
    /// `now_us + lease_us` when it is still that step and still due: its fresh token, or
    /// `None` when another worker took it or the step changed. A CREATE stamps
    /// `created_at_us` (module doc).
    pub async fn lease(
        &self,
        row: &VoiceClone,
        worker: &str,
        lease_us: i64,
        now_us: i64,
    ) -> Result<Option<String>, CatalogError> {
        use voice_clone::Column;
        let token = new_token();
        let mut update = voice_clone::Entity::update_many()
            .col_expr(Column::LeaseOwner, Expr::value(worker))
            .col_expr(Column::LeaseUntilUs, Expr::value(now_us + lease_us))
            .col_expr(Column::LeaseToken, Expr::value(token.as_str()))
            .col_expr(Column::Attempts, Expr::col(Column::Attempts).add(1))
            .col_expr(Column::UpdatedAtUs, Expr::value(now_us));
        if row.work == Work::Create {
            update = update.col_expr(Column::CreatedAtUs, Expr::value(now_us));
        }
        let claimed = update
            .filter(pk(&row.pack_id, &row.scope))
            .filter(Column::Work.eq(row.work.as_str()))
            .filter(due(now_us))
            .exec(self.db())
            .await?;
        Ok((claimed.rows_affected == 1).then_some(token))
    }

    /// Leases up to `max` due steps in `scopes` to `worker` until `now_us + lease_us`, oldest
    /// due first: each with a fresh token and its attempt count (this claim included). No
    /// clone rate: [`Clones::claim`] applies it.
    pub async fn claim(
        &self,
        worker: &str,
        scopes: &[String],
        max: u32,
        lease_us: i64,
        now_us: i64,
    ) -> Result<Vec<(VoiceClone, String)>, CatalogError> {
        let mut out = Vec::new();
        for row in self.due(scopes, u64::from(max) * 2, now_us).await? {
            if out.len() >= max as usize {
                break;
            }
            if let Some(token) = self.lease(&row, worker, lease_us, now_us).await?
                && let Some(fresh) = self.get(&row.pack_id, &row.scope).await?
            {
                out.push((fresh, token));
            }
        }
        Ok(out)
    }

    /// CREATE steps of `scope` handed out in the [`RATE_WINDOW_US`] before `now_us` (module
    /// doc).
    pub async fn recent_creates(&self, scope: &str, now_us: i64) -> Result<u64, CatalogError> {
        use voice_clone::Column;
        let handed_out = Condition::any()
            .add(Column::Attempts.gt(0))
            .add(Column::State.ne(CloneState::Pending.as_str()));
        Ok(voice_clone::Entity::find()
            .filter(Column::Scope.eq(scope))
            .filter(Column::CreatedAtUs.gt(now_us - RATE_WINDOW_US))
            .filter(handed_out)
            .count(self.db())
            .await?)
    }
}

impl Clones {
    /// Leases up to `max` due steps (clone rows first, then imports) in `scopes` to `worker`
    /// for `lease_ms`, each with what the worker needs to run it; a CREATE only while its
    /// scope's clone rate has room (module doc).
    pub async fn claim(
        &self,
        worker: &str,
        scopes: &[String],
        max: u32,
        lease_ms: u32,
    ) -> Result<Vec<Claimed>, CatalogError> {
        let store = self.store()?;
        let now_us = micros_now();
        let lease_us = i64::from(lease_ms) * 1_000;
        let mut out = Vec::new();
        // Scopes whose clone rate is used up in this window.
        let mut full: HashSet<String> = HashSet::new();
        // Waiting CREATEs handed out here, per scope (they occupy a slot from now on).
        let mut taken: HashMap<String, u64> = HashMap::new();
        for row in store.due(scopes, u64::from(max) * 4, now_us).await? {
            if out.len() >= max as usize {
                break;
            }
            let pack = self.repo.get(&row.pack_id).await?;
            if row.work == Work::Create {
                if full.contains(&row.scope) {
                    continue;
                }
                let limit = self
                    .pools
                    .clone_scope(&pack.spec.tts_model_id, &row.scope)
                    .and_then(|s| s.max_clones_per_minute);
                if let Some(limit) = limit
                    && store.recent_creates(&row.scope, now_us).await? >= u64::from(limit)
                {
                    tracing::debug!(scope = %row.scope, limit, "clone rate used up: CREATE held back");
                    full.insert(row.scope.clone());
                    continue;
                }
            }
            let waiting = slots::is_waiting(&row);
            if waiting
                && let Some(scope) = self.pools.clone_scope(&pack.spec.tts_model_id, &row.scope)
            {
                let here = taken.get(&row.scope).copied().unwrap_or(0);
                if store.occupied_count(&row.scope).await? + here >= u64::from(scope.slots) {
                    tracing::debug!(scope = %row.scope, "slots occupied: CREATE waits for a delete");
                    continue;
                }
            }
            let Some(token) = store.lease(&row, worker, lease_us, now_us).await? else {
                continue;
            };
            if waiting {
                *taken.entry(row.scope.clone()).or_default() += 1;
            }
            if let Some(fresh) = store.get(&row.pack_id, &row.scope).await? {
                out.push(Claimed {
                    attempt: fresh.attempts,
                    target: Target::Clone(fresh, recipe(&pack)),
                    lease_token: token,
                    lease_until_us: now_us + lease_us,
                });
            }
        }
        let room = max.saturating_sub(u32::try_from(out.len()).unwrap_or(max));
        if room > 0 {
            for (scope, pool, token, attempt) in store
                .claim_imports(worker, scopes, room, lease_us, now_us)
                .await?
            {
                let provider = self
                    .pools
                    .clone_scope(&pool, &scope)
                    .map(|s| s.provider.clone())
                    .unwrap_or_default();
                out.push(Claimed {
                    target: Target::Import {
                        scope,
                        pool,
                        provider,
                    },
                    lease_token: token,
                    lease_until_us: now_us + lease_us,
                    attempt,
                });
            }
        }
        Ok(out)
    }
}
