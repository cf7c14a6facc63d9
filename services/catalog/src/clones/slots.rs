//! A scope's slots: how asking for a clone takes one, making room by evicting the least
//! recently used clone where the vendor frees a slot on delete, and when a clone waiting for
//! that room may go to the vendor.
//!
//! **Holding a slot.** A clone holds one of its scope's slots from the moment it is asked for
//! (PENDING) while it is live (PENDING, TRAINING, READY) and not being deleted. A request is
//! taken while fewer than `slots` clones hold one.
//!
//! **Eviction.** When every slot is held and the vendor can delete ([`can_evict`]: ElevenLabs,
//! MiniMax, DashScope), the least recently used READY clone of another pack (never-used ones
//! first, oldest created first; then by `last_used_at`) gets a DELETE step due now, in the same
//! transaction that makes the new clone PENDING. No PENDING or TRAINING clone is evicted, nor
//! one already being deleted. Where the vendor cannot delete (Volcengine: slots are bought),
//! or nothing can be evicted, the request is refused naming the scope and its slots.
//!
//! **Minimum residence.** Nor is a clone evicted that was made (its CREATE handed out, or
//! bound by an import) or used within the scope's `min_residence` (default 10 minutes): with
//! more packs in use than slots, evicting on every request would delete and create a clone at
//! the vendor per request (each create is paid). When every clone that could be evicted is
//! that recent, the request is refused ([`CloneError::AllRecent`]) naming the scope, its slots
//! and the residence: the caller waits, or an operator adds slots.
//!
//! **Waiting for the vendor's slot.** The evicted clone still takes its slot at the vendor
//! until its delete is reported, so a new clone's CREATE is handed out by a claim only while
//! fewer than `slots` clones *occupy* the scope: live ones whose CREATE went out (claimed at
//! least once, or past PENDING), those being deleted included. A PENDING clone never claimed
//! occupies nothing yet. Outside eviction this never holds a CREATE back (a request is taken
//! only with a slot free).

use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DbBackend, EntityTrait, Order, PaginatorTrait,
    QueryFilter, QueryOrder, Statement, TryInsertResult,
    sea_query::{Expr, ExprTrait, Func},
};
use voxpool_config::CloneScope;
use voxpool_domain::provider::Provider;

use super::{
    CloneError, Clones, micros_now,
    model::{CloneState, VoiceClone, Work},
    store::{CloneStore, due_delete, from_row, live_states, pending, pk, to_row},
};
use crate::{error::CatalogError, repo::entity::voice_clone};

/// Whether `provider`'s vendor frees a slot when a clone is deleted, so a full scope makes room
/// by evicting: ElevenLabs, MiniMax and DashScope do; Volcengine's slots are bought.
pub fn can_evict(provider: &str) -> bool {
    matches!(
        provider.parse::<Provider>(),
        Ok(Provider::ElevenLabs | Provider::MiniMax | Provider::DashScope)
    )
}

/// Clones of `scope` holding a slot: live and not being deleted.
fn holding(scope: &str) -> Condition {
    use voice_clone::Column;
    Condition::all()
        .add(Column::Scope.eq(scope))
        .add(Column::State.is_in(live_states()))
        .add(Column::Work.ne(Work::Delete.as_str()))
}

/// Clones of `scope` occupying a slot at the vendor: live, and their CREATE went out.
fn occupying(scope: &str) -> Condition {
    use voice_clone::Column;
    let waiting = Condition::all()
        .add(Column::State.eq(CloneState::Pending.as_str()))
        .add(Column::Work.eq(Work::Create.as_str()))
        .add(Column::Attempts.eq(0));
    Condition::all()
        .add(Column::Scope.eq(scope))
        .add(Column::State.is_in(live_states()))
        .add(waiting.not())
}

/// Whether `row` is a CREATE never handed out (module doc: it occupies no slot yet).
pub fn is_waiting(row: &VoiceClone) -> bool {
    row.state == CloneState::Pending && row.work == Work::Create && row.attempts == 0
}

/// Where `clone` stands in eviction order, smallest first: never used before used, then by
/// last use, then by creation (module doc).
pub fn lru_key(clone: &VoiceClone) -> (i64, i64) {
    (clone.last_used_at_us.unwrap_or(0), clone.created_at_us)
}

/// The latest time a clone of `scope` may have been made or used to be evicted at `now_us`
/// (module doc: minimum residence).
pub fn residence_cutoff(scope: &CloneScope, now_us: i64) -> i64 {
    let residence = i64::try_from(scope.min_residence.as_micros()).unwrap_or(i64::MAX);
    now_us.saturating_sub(residence)
}

/// `10m`, `1h`, `90s`: a residence as the config writes it.
pub fn residence_text(scope: &CloneScope) -> String {
    let secs = scope.min_residence.as_secs();
    match secs {
        0 => "0s".to_owned(),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// The least recently used clone of `scope` that `pack_id`'s clone may evict (module doc),
/// among those made and used no later than `cutoff_us` when given.
async fn lru_victim<C: ConnectionTrait>(
    db: &C,
    scope: &str,
    pack_id: &str,
    cutoff_us: Option<i64>,
) -> Result<Option<VoiceClone>, CatalogError> {
    use voice_clone::Column;
    let last_used = Func::coalesce([Expr::col(Column::LastUsedAtUs), Expr::val(0i64)]);
    let mut find = voice_clone::Entity::find();
    if let Some(cutoff) = cutoff_us {
        find = find
            .filter(Expr::expr(last_used.clone()).lte(cutoff))
            .filter(Column::CreatedAtUs.lte(cutoff));
    }
    find.filter(Column::Scope.eq(scope))
        .filter(Column::State.eq(CloneState::Ready.as_str()))
        .filter(Column::Work.ne(Work::Delete.as_str()))
        .filter(Column::PackId.ne(pack_id))
        .order_by(Expr::from(last_used), Order::Asc)
        .order_by_asc(Column::CreatedAtUs)
        .order_by_asc(Column::PackId)
        .one(db)
        .await?
        .map(from_row)
        .transpose()
}

impl CloneStore {
    /// Clones holding a slot of `scope` (module doc).
    pub async fn holding_count(&self, scope: &str) -> Result<u32, CatalogError> {
        let n = voice_clone::Entity::find()
            .filter(holding(scope))
            .count(self.db())
            .await?;
        Ok(u32::try_from(n).unwrap_or(u32::MAX))
    }

    /// Clones occupying a slot of `scope` at the vendor (module doc).
    pub async fn occupied_count(&self, scope: &str) -> Result<u64, CatalogError> {
        Ok(voice_clone::Entity::find()
            .filter(occupying(scope))
            .count(self.db())
            .await?)
    }

    /// The clone `pack_id` would evict from `scope` at `now_us`, if any, and whether a clone
    /// is held back only by the scope's minimum residence (module doc).
    pub async fn eviction_candidate(
        &self,
        scope: &CloneScope,
        pack_id: &str,
        now_us: i64,
    ) -> Result<(Option<VoiceClone>, bool), CatalogError> {
        let cutoff = residence_cutoff(scope, now_us);
        let victim = lru_victim(self.db(), &scope.id, pack_id, Some(cutoff)).await?;
        let recent = victim.is_none()
            && lru_victim(self.db(), &scope.id, pack_id, None)
                .await?
                .is_some();
        Ok((victim, recent))
    }

    /// Makes the pack's clone in `scope` PENDING with CREATE due now, unless it is live
    /// already (then unchanged) or, with a `cap`, the pack already has that many live clones
    /// (then nothing happens: a scope picked for the pack by one caller is not added to by
    /// another that picked a different one at the same time); with every slot held, evicts
    /// where the vendor can delete (module doc). Answers the clone it evicted.
    ///
    /// Errors: [`CloneError::SlotsFull`] (the vendor cannot delete),
    /// [`CloneError::NothingToEvict`], [`CloneError::AllRecent`].
    pub async fn request(
        &self,
        pack_id: &str,
        scope: &CloneScope,
        cap: Option<u32>,
        now_us: i64,
    ) -> Result<Option<VoiceClone>, CatalogError> {
        let txn = self.begin_write().await?;
        if let Some(cap) = cap {
            // One request per pack at a time: SQLite's write transaction is one already;
            // PostgreSQL locks the pack's row.
            if txn.get_database_backend() == DbBackend::Postgres {
                txn.execute_raw(Statement::from_sql_and_values(
                    DbBackend::Postgres,
                    "SELECT id FROM voice_packs WHERE id = $1 FOR UPDATE",
                    [pack_id.into()],
                ))
                .await?;
            }
            let live = voice_clone::Entity::find()
                .filter(voice_clone::Column::PackId.eq(pack_id))
                .filter(voice_clone::Column::State.is_in(live_states()))
                .count(&txn)
                .await?;
            if live >= u64::from(cap) {
                txn.rollback().await?;
                return Ok(None);
            }
        }
        let current = voice_clone::Entity::find()
            .filter(pk(pack_id, &scope.id))
            .one(&txn)
            .await?
            .map(from_row)
            .transpose()?;
        if current.as_ref().is_some_and(|c| c.state.is_live()) {
            txn.rollback().await?;
            return Ok(None);
        }
        let held = voice_clone::Entity::find()
            .filter(holding(&scope.id))
            .count(&txn)
            .await?;
        let evicting = can_evict(&scope.provider);
        let mut evicted = None;
        if held >= u64::from(scope.slots) {
            let cutoff = residence_cutoff(scope, now_us);
            let victim = if evicting {
                lru_victim(&txn, &scope.id, pack_id, Some(cutoff)).await?
            } else {
                None
            };
            let Some(victim) = victim else {
                let recent =
                    evicting && lru_victim(&txn, &scope.id, pack_id, None).await?.is_some();
                txn.rollback().await?;
                let (id, slots) = (scope.id.clone(), scope.slots);
                return Err(if recent {
                    CloneError::AllRecent {
                        scope: id,
                        slots,
                        min_residence: residence_text(scope),
                    }
                } else if evicting {
                    CloneError::NothingToEvict { scope: id, slots }
                } else {
                    CloneError::SlotsFull { scope: id, slots }
                }
                .into());
            };
            evicted = Some(victim);
        }
        let mut fresh = pending(pack_id, &scope.id, now_us);
        let written = if let Some(old) = &current {
            fresh.created_at_us = old.created_at_us;
            fresh.last_used_at_us = old.last_used_at_us;
            voice_clone::Entity::update_many()
                .set(to_row(&fresh, now_us))
                .filter(pk(pack_id, &scope.id))
                .filter(voice_clone::Column::State.is_not_in(live_states()))
                .exec(&txn)
                .await?
                .rows_affected
        } else {
            match voice_clone::Entity::insert(to_row(&fresh, now_us))
                .on_conflict_do_nothing_on([
                    voice_clone::Column::PackId,
                    voice_clone::Column::Scope,
                ])
                .exec_without_returning(&txn)
                .await?
            {
                TryInsertResult::Inserted(n) => n,
                TryInsertResult::Empty | TryInsertResult::Conflicted => 0,
            }
        };
        if written == 0 {
            // A racing request from another replica made it first: that one stands, and it
            // made any room it needed.
            txn.rollback().await?;
            return Ok(None);
        }
        if let Some(victim) = &evicted {
            due_delete(&txn, &victim.pack_id, &victim.scope, now_us).await?;
        }
        txn.commit().await?;
        Ok(evicted)
    }
}

impl Clones {
    /// Up to `max` scopes minus the live ones: those with free slots, fewest clones first,
    /// then full ones with a clone to evict, least recently used clone first ([`slots`]).
    pub(super) async fn pick<'a>(
        &self,
        store: &CloneStore,
        pack_id: &str,
        pool: &str,
        known: &[&'a CloneScope],
        max: u32,
    ) -> Result<Vec<&'a CloneScope>, CatalogError> {
        let current = store.list(pack_id).await?;
        let live: Vec<&str> = current
            .iter()
            .filter(|c| c.state.is_live())
            .map(|c| c.scope.as_str())
            .collect();
        let wanted = (max as usize).saturating_sub(live.len());
        if wanted == 0 {
            return Ok(Vec::new());
        }
        let mut free = Vec::new();
        let mut evicting = Vec::new();
        // Full scopes whose clones are all within their minimum residence.
        let mut recent = Vec::new();
        let now_us = micros_now();
        for scope in known.iter().filter(|s| !live.contains(&s.id.as_str())) {
            let held = store.holding_count(&scope.id).await?;
            if held < scope.slots {
                free.push((held, *scope));
            } else if can_evict(&scope.provider) {
                match store.eviction_candidate(scope, pack_id, now_us).await? {
                    (Some(lru), _) => evicting.push((lru_key(&lru), *scope)),
                    (None, true) => recent.push(*scope),
                    (None, false) => {}
                }
            }
        }
        if free.is_empty() && evicting.is_empty() && live.is_empty() {
            return Err(match recent.as_slice() {
                [only] if known.len() == 1 => CloneError::AllRecent {
                    scope: only.id.clone(),
                    slots: only.slots,
                    min_residence: residence_text(only),
                },
                _ => CloneError::AllScopesFull {
                    pool: pool.to_owned(),
                    listing: full_listing(known, &recent),
                },
            }
            .into());
        }
        free.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.id.cmp(&b.1.id)));
        evicting.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.id.cmp(&b.1.id)));
        Ok(free
            .into_iter()
            .map(|(_, s)| s)
            .chain(evicting.into_iter().map(|(_, s)| s))
            .take(wanted)
            .collect())
    }
}

/// `listing`, each scope in `recent` adding that every clone in it was made or used within
/// its minimum residence: `a (2 slots, every clone made or used within the last 10m)`.
fn full_listing(scopes: &[&CloneScope], recent: &[&CloneScope]) -> String {
    scopes
        .iter()
        .map(|s| {
            if recent.iter().any(|r| r.id == s.id) {
                format!(
                    "{} ({} slots, every clone made or used within the last {})",
                    s.id,
                    s.slots,
                    residence_text(s)
                )
            } else {
                format!("{} ({} slots)", s.id, s.slots)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}
