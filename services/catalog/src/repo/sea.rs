//! [`PackRepository`] over sea-orm: the same code serves SQLite and PostgreSQL.
//!
//! Writes run in transactions that start as write transactions on SQLite (`BEGIN
//! IMMEDIATE`), so concurrent writers queue on the database lock (busy timeout) instead of
//! failing to upgrade a read lock; on PostgreSQL the default isolation (read committed) is
//! enough because the version check is part of the `UPDATE`'s `WHERE`.
//!
//! A pack's clips are read with it (`get` checks the version did not move while it read
//! them, so a pack and its clips are one version's; lists, one query per page, may show a
//! page's clips one change ahead) and
//! written in the transaction of the version that changes them: added clips are upserted
//! (a clip removed earlier comes back), clips left out get `remove_time_us`.

use async_trait::async_trait;
use sea_orm::{
    ColumnTrait, Condition, DatabaseConnection, DatabaseTransaction, DbErr, EntityTrait,
    QueryFilter, QueryOrder, QuerySelect, SqlErr, SqliteTransactionMode, TransactionOptions,
    TransactionTrait,
    sea_query::{Expr, ExprTrait},
};

use super::{
    ClipEdit, Edit, ListQuery, PackRepository,
    clips::{clips_of, sync_references, with_clips},
    entity::{reference, revision, voice_pack},
    rows,
};
use crate::{
    error::CatalogError,
    filter::Term,
    identity::identity,
    model::{Action, ListedReference, PackSpec, Revision, VoicePack, now},
};

/// Most attempts of an update without `expected_version` before giving up with
/// [`CatalogError::Contention`].
const MAX_ATTEMPTS: u32 = 64;

/// The sea-orm repository. Cheap to clone (the connection is a pool handle).
#[derive(Clone, Debug)]
pub struct SeaRepository {
    db: DatabaseConnection,
}

/// Computes the action and next state of a pack from its current state; `None` = nothing to
/// change.
type Change<'a> =
    dyn Fn(&VoicePack) -> Result<Option<(Action, VoicePack)>, CatalogError> + Send + Sync + 'a;

/// Outcome of one optimistic write attempt.
enum Write {
    Done,
    /// Another writer changed the pack since it was read.
    Lost,
}

impl SeaRepository {
    /// A repository over `db` (migrated: see `voxpool_migrations::Migrator`).
    pub fn new(db: DatabaseConnection) -> Self {
        Self { db }
    }

    /// The underlying connection pool.
    pub fn connection(&self) -> &DatabaseConnection {
        &self.db
    }

    async fn begin_write(&self) -> Result<DatabaseTransaction, CatalogError> {
        let options = TransactionOptions {
            sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
            ..Default::default()
        };
        Ok(self.db.begin_with_options(options).await?)
    }

    /// The pack holding `spec`'s identity, as an AlreadyExists error.
    async fn identity_clash(&self, spec: &PackSpec, id: &str) -> CatalogError {
        let owner = voice_pack::Entity::find()
            .filter(voice_pack::Column::Identity.eq(identity(spec)))
            .one(&self.db)
            .await;
        match owner {
            Ok(Some(owner)) => CatalogError::AlreadyExists {
                existing_id: owner.id,
            },
            Ok(None) => CatalogError::Contention {
                id: id.to_owned(),
                attempts: 1,
            },
            Err(e) => e.into(),
        }
    }

    /// Writes `next` over `current` (same id) if nobody changed it meanwhile.
    async fn write_next(
        &self,
        current: &VoicePack,
        next: &VoicePack,
        action: Action,
    ) -> Result<Write, CatalogError> {
        let txn = self.begin_write().await?;
        let updated = voice_pack::Entity::update_many()
            .set(rows::active_model(next))
            .filter(voice_pack::Column::Id.eq(current.id.as_str()))
            .filter(voice_pack::Column::Version.eq(current.version))
            .exec(&txn)
            .await;
        let updated = match updated {
            Ok(r) => r,
            Err(e) => {
                txn.rollback().await?;
                return Err(if is_unique_violation(&e) {
                    self.identity_clash(&next.spec, &next.id).await
                } else {
                    e.into()
                });
            }
        };
        if updated.rows_affected == 0 {
            txn.rollback().await?;
            return Ok(Write::Lost);
        }
        if current.spec.references != next.spec.references {
            sync_references(
                &txn,
                &next.id,
                &current.spec.references,
                &next.spec.references,
            )
            .await?;
        }
        revision::Entity::insert(rows::revision_model(action, next))
            .exec_without_returning(&txn)
            .await?;
        txn.commit().await?;
        Ok(Write::Done)
    }

    /// Read-modify-write with optimistic concurrency. `change` returns the action and new
    /// pack, or `None` when there is nothing to change.
    async fn modify(
        &self,
        id: &str,
        expected_version: Option<i64>,
        change: &Change<'_>,
    ) -> Result<VoicePack, CatalogError> {
        for _ in 0..MAX_ATTEMPTS {
            let current = self.get(id).await?;
            if let Some(expected) = expected_version
                && current.version != expected
            {
                return Err(CatalogError::VersionConflict {
                    id: id.to_owned(),
                    expected,
                    current: current.version,
                });
            }
            let Some((action, next)) = change(&current)? else {
                return Ok(current);
            };
            match self.write_next(&current, &next, action).await? {
                Write::Done => return Ok(next),
                Write::Lost if expected_version.is_some() => {
                    let latest = self.get(id).await?;
                    return Err(CatalogError::VersionConflict {
                        id: id.to_owned(),
                        expected: current.version,
                        current: latest.version,
                    });
                }
                Write::Lost => tokio::task::yield_now().await,
            }
        }
        Err(CatalogError::Contention {
            id: id.to_owned(),
            attempts: MAX_ATTEMPTS,
        })
    }
}

fn is_unique_violation(e: &DbErr) -> bool {
    matches!(e.sql_err(), Some(SqlErr::UniqueConstraintViolation(_)))
}

/// A fresh pack id: `vp_` + 24 lowercase hex digits (96 random bits).
fn new_id() -> String {
    format!("vp_{}", hex::encode(rand::random::<[u8; 12]>()))
}

/// The next version of `current`: content, state and times.
fn successor(current: &VoicePack, spec: PackSpec, enabled: bool) -> VoicePack {
    VoicePack {
        id: current.id.clone(),
        spec,
        enabled,
        version: current.version + 1,
        create_time: current.create_time,
        update_time: Ord::max(now(), current.update_time),
    }
}

#[async_trait]
impl PackRepository for SeaRepository {
    async fn create(&self, spec: PackSpec) -> Result<VoicePack, CatalogError> {
        let time = now();
        let pack = VoicePack {
            id: new_id(),
            spec,
            enabled: true,
            version: 1,
            create_time: time,
            update_time: time,
        };
        let txn = self.begin_write().await?;
        if let Err(e) = voice_pack::Entity::insert(rows::active_model(&pack))
            .exec_without_returning(&txn)
            .await
        {
            txn.rollback().await?;
            return Err(if is_unique_violation(&e) {
                self.identity_clash(&pack.spec, &pack.id).await
            } else {
                e.into()
            });
        }
        if !pack.spec.references.is_empty() {
            sync_references(&txn, &pack.id, &[], &pack.spec.references).await?;
        }
        revision::Entity::insert(rows::revision_model(Action::Create, &pack))
            .exec_without_returning(&txn)
            .await?;
        txn.commit().await?;
        Ok(pack)
    }

    async fn get(&self, id: &str) -> Result<VoicePack, CatalogError> {
        let row = voice_pack::Entity::find_by_id(id.to_owned())
            .one(&self.db)
            .await?;
        let mut pack =
            rows::pack_from_row(row.ok_or_else(|| CatalogError::NotFound { id: id.to_owned() })?)?;
        // The clips must be the version's (a snapshot freezes both): read them, then check the
        // version did not move meanwhile; if it did, read again.
        for _ in 0..MAX_ATTEMPTS {
            let clips = clips_of(&self.db, &[id])
                .await?
                .remove(id)
                .unwrap_or_default();
            let latest = voice_pack::Entity::find_by_id(id.to_owned())
                .one(&self.db)
                .await?
                .ok_or_else(|| CatalogError::NotFound { id: id.to_owned() })?;
            if latest.version == pack.version {
                pack.spec.references = clips;
                return Ok(pack);
            }
            pack = rows::pack_from_row(latest)?;
        }
        Err(CatalogError::Contention {
            id: id.to_owned(),
            attempts: MAX_ATTEMPTS,
        })
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<VoicePack>, CatalogError> {
        use voice_pack::Column;
        let mut condition = Condition::all();
        if query.enabled_only {
            condition = condition.add(Column::Enabled.eq(true));
        }
        for term in &query.filter.terms {
            condition = condition.add(match term {
                Term::Tier(t) => Column::Tier.eq(t.as_str()),
                Term::Provider(p) => Column::Provider.eq(p.as_str()),
                Term::TtsModelId(m) => Column::TtsModelId.eq(m.as_str()),
                // Locales are canonical BCP 47 tags ([A-Za-z0-9-] only, so no LIKE
                // wildcards) stored as a compact JSON array.
                Term::Locale(l) => Column::Locales.like(format!("%\"{l}\"%")),
            });
        }
        if let Some(after) = &query.after {
            // A row-value comparison, so both databases can seek the (create_time_us, id)
            // indexes instead of evaluating an OR per row.
            condition = condition.add(
                Expr::tuple([Expr::col(Column::CreateTimeUs), Expr::col(Column::Id)]).gt(
                    Expr::tuple([
                        Expr::val(after.create_time_us),
                        Expr::val(after.id.as_str()),
                    ]),
                ),
            );
        }
        let packs = voice_pack::Entity::find()
            .filter(condition)
            .order_by_asc(Column::CreateTimeUs)
            .order_by_asc(Column::Id)
            .limit(query.limit)
            .all(&self.db)
            .await?
            .into_iter()
            .map(rows::pack_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        with_clips(&self.db, packs).await
    }

    async fn update(
        &self,
        id: &str,
        expected_version: Option<i64>,
        edit: &Edit<'_>,
    ) -> Result<VoicePack, CatalogError> {
        self.modify(id, expected_version, &|current| {
            let spec = edit(current)?;
            Ok(Some((
                Action::Update,
                successor(current, spec, current.enabled),
            )))
        })
        .await
    }

    async fn set_enabled(&self, id: &str, enabled: bool) -> Result<VoicePack, CatalogError> {
        let action = if enabled {
            Action::Enable
        } else {
            Action::Disable
        };
        self.modify(id, None, &|current| {
            Ok((current.enabled != enabled)
                .then(|| (action, successor(current, current.spec.clone(), enabled))))
        })
        .await
    }

    async fn revisions(&self, id: &str) -> Result<Vec<Revision>, CatalogError> {
        let found = revision::Entity::find()
            .filter(revision::Column::PackId.eq(id))
            .order_by_asc(revision::Column::Version)
            .all(&self.db)
            .await?;
        if found.is_empty() {
            return Err(CatalogError::NotFound { id: id.to_owned() });
        }
        found.into_iter().map(rows::revision_from_row).collect()
    }

    async fn set_references(
        &self,
        id: &str,
        action: Action,
        edit: &ClipEdit<'_>,
    ) -> Result<VoicePack, CatalogError> {
        self.modify(id, None, &|current| {
            let mut spec = current.spec.clone();
            spec.references = edit(current)?;
            Ok(Some((action, successor(current, spec, current.enabled))))
        })
        .await
    }

    async fn references(
        &self,
        id: &str,
        include_removed: bool,
    ) -> Result<Vec<ListedReference>, CatalogError> {
        use reference::Column;
        // NotFound for an unknown pack, not an empty list.
        voice_pack::Entity::find_by_id(id.to_owned())
            .one(&self.db)
            .await?
            .ok_or_else(|| CatalogError::NotFound { id: id.to_owned() })?;
        let mut query = reference::Entity::find().filter(Column::PackId.eq(id));
        if !include_removed {
            query = query.filter(Column::RemoveTimeUs.is_null());
        }
        query
            .order_by_asc(Column::AddTimeUs)
            .order_by_asc(Column::Digest)
            .all(&self.db)
            .await?
            .into_iter()
            .map(rows::reference_from_row)
            .collect()
    }

    async fn ping(&self) -> Result<(), CatalogError> {
        Ok(self.db.ping().await?)
    }

    fn database(&self) -> Option<DatabaseConnection> {
        Some(self.db.clone())
    }
}
