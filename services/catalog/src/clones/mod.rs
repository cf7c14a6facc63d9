//! Managed voice clones: the catalog keeps, per pack and clone scope, the vendor's voice id,
//! its state and lifetime, and the one vendor step due on it; synthesis replicas (which hold
//! the credentials) lease the steps through `CloneWork` and report what the vendor said.
//!
//! [`Clones`] is the one facade the gRPC edge calls (no protobuf below it); [`store`] keeps
//! the rows, [`claim`] leases due steps under each scope's clone rate, [`slots`] picks scopes
//! and takes their slots (evicting the least recently used clone where the vendor can delete,
//! never one made or used within the scope's `min_residence`), [`imports`] reads vendor lists,
//! [`transition`] says what an outcome does to a row, [`model`] holds the types.
//! Invariants:
//! - one clone per pack and scope (primary key), so asking twice, from any replica, creates
//!   one; a scope never holds more clones at the vendor than its slots: CloneVoice takes a
//!   slot or evicts for one on one database writer (see docs/CATALOG.md for PostgreSQL), and
//!   a CREATE waiting for an evicted clone's slot is not handed out before its delete;
//! - a step is leased to one worker at a time, and only the current lease's token changes
//!   its row: a worker whose lease ran out cannot overwrite what the next one did;
//! - vendor voice ids live here only, never in a snapshot (they differ per scope).

pub mod claim;
pub mod error;
pub mod imports;
pub mod marks;
pub mod model;
pub mod slots;
pub mod store;
pub mod transition;

use std::sync::Arc;

use voxpool_config::CloneScope;
use voxpool_domain::snapshot::Kind;

pub use error::CloneError;
use imports::ImportEnd;
use model::{Import, ImportResult, Outcome, Recipe, Sample, VoiceClone};
use store::CloneStore;
use transition::Next;

use crate::{
    error::CatalogError,
    model::{PackSpec, VoicePack, now},
    pools::ServedPools,
    repo::PackRepository,
};

/// Whether `spec` is a managed clone's content: CLONED, no voice id, no upstream ids (its
/// clips come later, through AddReference).
pub fn is_managed(spec: &PackSpec) -> bool {
    spec.kind == Kind::Cloned && spec.voice_id.is_empty() && spec.upstream_ids.is_empty()
}

/// Checks `pack` is a managed clone with clips. Errors: [`CloneError::NotManaged`].
pub fn managed(pack: &VoicePack) -> Result<(), CloneError> {
    let spec = &pack.spec;
    let why = if spec.kind != Kind::Cloned {
        "its kind is STANDARD (a stock voice)"
    } else if !spec.voice_id.is_empty() || !spec.upstream_ids.is_empty() {
        "it names a voice_id and upstream_ids, so it is a hand-made clone that already exists"
    } else if spec.references.is_empty() {
        "it has no reference clips to clone from yet (add them with AddReference)"
    } else {
        return Ok(());
    };
    Err(CloneError::NotManaged {
        id: pack.id.clone(),
        why: why.to_owned(),
    })
}

fn micros_now() -> i64 {
    now().timestamp_micros()
}

/// The facade over packs, clone rows and the configured scopes.
#[derive(Clone)]
pub struct Clones {
    repo: Arc<dyn PackRepository>,
    pools: Arc<ServedPools>,
}

impl Clones {
    /// Clones of the packs in `repo`, in the scopes `pools` declares.
    pub fn new(repo: Arc<dyn PackRepository>, pools: Arc<ServedPools>) -> Self {
        Self { repo, pools }
    }

    fn store(&self) -> Result<CloneStore, CatalogError> {
        self.repo.database().map(CloneStore::new).ok_or_else(|| {
            CatalogError::from(sea_orm::DbErr::ConnectionAcquire(
                sea_orm::ConnAcquireErr::Timeout,
            ))
        })
    }

    /// The clone scopes of `pool`. Errors: [`CloneError::NoScopes`].
    fn scopes_of(&self, pool: &str) -> Result<Vec<&CloneScope>, CloneError> {
        let why = match self.pools.clone_scopes(pool) {
            Some(scopes) if !scopes.is_empty() => return Ok(scopes),
            Some(_) => format!(
                "pool {pool:?} has no clone scope (from {}): give an upstream of it a clone table, \
                 e.g. clone = {{ slots = 10 }}",
                self.pools.source()
            ),
            None => "the catalog runs without the pools file, so it knows no clone scope: start \
                     it with --config (the file the scheduler and synthesis read)"
                .to_owned(),
        };
        Err(CloneError::NoScopes {
            pool: pool.to_owned(),
            why,
        })
    }

    /// Checks `pool` is configured (when the pools are known). Errors: INVALID_ARGUMENT `pool`.
    fn known_pool(&self, pool: &str) -> Result<(), CatalogError> {
        let probe = PackSpec {
            display_name: String::new(),
            description: String::new(),
            provider: String::new(),
            model: String::new(),
            voice_id: String::new(),
            tts_model_id: pool.to_owned(),
            kind: Kind::default(),
            upstream_ids: Vec::new(),
            params: Default::default(),
            extra: Default::default(),
            tier: voxpool_domain::snapshot::Tier::Standard,
            locales: Vec::new(),
            references: Vec::new(),
        };
        match self
            .pools
            .check(&probe, "pool")
            .into_iter()
            .find(|v| v.field == "pool.tts_model_id")
        {
            Some(v) => Err(CatalogError::invalid(
                "pool",
                format!(
                    "{} is no configured pool: {}",
                    voxpool_domain::untrusted::quote(pool),
                    v.description
                ),
            )),
            None => Ok(()),
        }
    }

    /// Clones the managed clone pack `pack_id` into `scopes` (or, when empty, up to its
    /// `max_scopes` scopes with free slots, fewest clones first, then full ones to evict
    /// from, see [`slots`]). `max_scopes` > 0 sets the
    /// pack's limit. Answers every clone of the pack.
    ///
    /// Errors: NotFound, [`CloneError::NotManaged`], [`CloneError::NoScopes`], INVALID_ARGUMENT
    /// `scopes[i]` naming the known scopes, [`CloneError::SlotsFull`],
    /// [`CloneError::NothingToEvict`], [`CloneError::AllScopesFull`].
    pub async fn clone_voice(
        &self,
        pack_id: &str,
        scopes: &[String],
        max_scopes: u32,
    ) -> Result<Vec<VoiceClone>, CatalogError> {
        let pack = self.repo.get(pack_id).await?;
        managed(&pack)?;
        let pool = pack.spec.tts_model_id.as_str();
        let known = self.scopes_of(pool)?;
        let store = self.store()?;
        let now_us = micros_now();
        if max_scopes > 0 {
            store.set_max_scopes(pack_id, max_scopes, now_us).await?;
        }
        let (targets, cap): (Vec<&CloneScope>, _) = if scopes.is_empty() {
            let max = if max_scopes > 0 {
                max_scopes
            } else {
                store.max_scopes(pack_id).await?
            };
            // Picked outside the write: each request re-checks the pack's live clones
            // against `max` in its own transaction.
            (
                self.pick(&store, pack_id, pool, &known, max).await?,
                Some(max),
            )
        } else {
            let mut out = Vec::new();
            for (i, id) in scopes.iter().enumerate() {
                let found = known.iter().find(|s| s.id == *id).ok_or_else(|| {
                    CatalogError::invalid(
                        format!("scopes[{i}]"),
                        format!(
                            "{} is no clone scope of pool {pool:?}; its scopes: {}",
                            voxpool_domain::untrusted::quote(id),
                            listing(&known)
                        ),
                    )
                })?;
                out.push(*found);
            }
            (out, None)
        };
        for scope in targets {
            let evicted = store.request(pack_id, scope, cap, now_us).await?;
            tracing::info!(pack_id, scope = %scope.id, "clone requested");
            if let Some(lru) = evicted {
                tracing::info!(
                    pack_id = %lru.pack_id,
                    scope = %lru.scope,
                    for_pack = pack_id,
                    "scope full: least recently used clone evicted"
                );
            }
        }
        store.list(pack_id).await
    }

    /// The clones of a pack. Errors: NotFound.
    pub async fn list(&self, pack_id: &str) -> Result<Vec<VoiceClone>, CatalogError> {
        self.repo.get(pack_id).await?;
        self.store()?.list(pack_id).await
    }

    /// Deletes the pack's clone in `scope` (at once when the vendor cannot hold it, else by a
    /// worker's DELETE step). Answers it as it stands. Errors: NotFound (no such pack),
    /// [`CloneError::NotManaged`] (no such clone, and the pack is no managed clone),
    /// [`CloneError::NotFound`].
    pub async fn delete(&self, pack_id: &str, scope: &str) -> Result<VoiceClone, CatalogError> {
        let (clone, gone) = match self.store()?.delete(pack_id, scope, micros_now()).await {
            Err(CatalogError::Clone(not_found @ CloneError::NotFound { .. })) => {
                let pack = self.repo.get(pack_id).await?;
                if !is_managed(&pack.spec) {
                    managed(&pack)?;
                }
                return Err(not_found.into());
            }
            other => other?,
        };
        tracing::info!(pack_id, scope, removed_now = gone, "clone delete requested");
        Ok(clone)
    }

    /// Asks for an import of `scope` of `pool` (every clone scope of the pool when empty);
    /// answers, per scope, the last finished run and the queued one. Errors: INVALID_ARGUMENT
    /// `pool` (no such pool), NoScopes, INVALID_ARGUMENT `scope`.
    pub async fn import(&self, pool: &str, scope: &str) -> Result<Vec<Import>, CatalogError> {
        self.known_pool(pool)?;
        let known = self.scopes_of(pool)?;
        let ids: Vec<String> = if scope.is_empty() {
            known.iter().map(|s| s.id.clone()).collect()
        } else if known.iter().any(|s| s.id == scope) {
            vec![scope.to_owned()]
        } else {
            return Err(CatalogError::invalid(
                "scope",
                format!(
                    "{} is no clone scope of pool {pool:?}; its scopes: {}",
                    voxpool_domain::untrusted::quote(scope),
                    listing(&known)
                ),
            ));
        };
        let store = self.store()?;
        let now_us = micros_now();
        for id in &ids {
            store.request_import(id, pool, now_us).await?;
        }
        store.imports(&ids).await
    }

    /// Applies a worker's outcome to the step `token` leases (`pack_id` empty: an import).
    /// Answers the clone as it now stands (as it was, when the outcome removed it).
    ///
    /// Errors: [`CloneError::LeaseLost`], [`CloneError::NotFound`], INVALID_ARGUMENT an
    /// import outcome on a clone or the other way round.
    pub async fn report(
        &self,
        pack_id: &str,
        scope: &str,
        token: &str,
        outcome: &Outcome,
    ) -> Result<VoiceClone, CatalogError> {
        let store = self.store()?;
        if pack_id.is_empty() {
            return self.report_import(&store, scope, token, outcome).await;
        }
        if matches!(outcome, Outcome::Imported(_)) {
            return Err(CatalogError::invalid(
                "imported",
                "answers an IMPORT task (one with an empty pack_id); report this step's own outcome",
            ));
        }
        let pack = self.repo.get(pack_id).await?;
        let keep_alive_us = self
            .pools
            .clone_scope(&pack.spec.tts_model_id, scope)
            .and_then(|s| s.keep_alive)
            .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
        for _ in 0..8 {
            let current = store.leased(pack_id, scope, token).await?;
            let now_us = micros_now();
            let next = transition::apply(&current, outcome, keep_alive_us, now_us);
            if store.settle(&current, token, &next, now_us).await? {
                let after = match next {
                    Next::Update(row) => row,
                    Next::Remove => current,
                };
                tracing::info!(
                    pack_id,
                    scope,
                    state = after.state.as_str(),
                    work = after.work.as_str(),
                    "clone work reported"
                );
                return Ok(after);
            }
        }
        Err(CatalogError::Contention {
            id: pack_id.to_owned(),
            attempts: 8,
        })
    }

    async fn report_import(
        &self,
        store: &CloneStore,
        scope: &str,
        token: &str,
        outcome: &Outcome,
    ) -> Result<VoiceClone, CatalogError> {
        let (_, pool, _) = store.leased_import(scope, token).await?;
        let now_us = micros_now();
        let end = match outcome {
            Outcome::Imported(voices) => {
                let mut result = ImportResult::default();
                let held = store.held_ids(scope).await?;
                for voice in voices {
                    if let Some(pack_id) = held.get(&voice.vendor_voice_id) {
                        // The catalog holds it already: bound to its pack, whatever its name.
                        result
                            .bound
                            .push((pack_id.clone(), voice.vendor_voice_id.clone()));
                        continue;
                    }
                    let pack = self.repo.get(&voice.name).await.ok();
                    let bindable = pack
                        .as_ref()
                        .is_some_and(|p| p.spec.tts_model_id == pool && is_managed(&p.spec));
                    if bindable
                        && store
                            .bind(&voice.name, scope, &voice.vendor_voice_id, now_us)
                            .await?
                    {
                        result
                            .bound
                            .push((voice.name.clone(), voice.vendor_voice_id.clone()));
                    } else {
                        result.unbound.push(voice.vendor_voice_id.clone());
                    }
                }
                ImportEnd::Done(result)
            }
            Outcome::Failed { error } | Outcome::Expired { error, .. } => {
                ImportEnd::Failed(error.clone())
            }
            Outcome::Retry { after_ms, error } => ImportEnd::Retry {
                after_ms: *after_ms,
                error: error.clone(),
            },
            Outcome::Training { .. } | Outcome::Ready { .. } | Outcome::Deleted => {
                return Err(CatalogError::invalid(
                    "outcome",
                    "an IMPORT task answers imported, failed or retry",
                ));
            }
        };
        store.settle_import(scope, token, &end, now_us).await?;
        tracing::info!(scope, pool = %pool, "clone import reported");
        let mut answer = store::pending("", scope, now_us);
        answer.work = model::Work::None;
        Ok(answer)
    }
}

/// `a (10 slots), b (2 slots)`.
fn listing(scopes: &[&CloneScope]) -> String {
    scopes
        .iter()
        .map(|s| format!("{} ({} slots)", s.id, s.slots))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a worker needs to clone `pack`.
fn recipe(pack: &VoicePack) -> Recipe {
    Recipe {
        provider: pack.spec.provider.clone(),
        model: pack.spec.model.clone(),
        target_model: pack
            .spec
            .extra
            .get("target_model")
            .cloned()
            .unwrap_or_default(),
        pool: pack.spec.tts_model_id.clone(),
        samples: pack
            .spec
            .references
            .iter()
            .map(|r| Sample {
                digest: r.digest.clone(),
                content_type: r.media_type.clone(),
                transcript: r.transcript.clone(),
                language: r.language.clone(),
            })
            .collect(),
    }
}
