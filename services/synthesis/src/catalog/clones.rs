//! Managed voice clones as synthesis reads and writes them in the catalog (admin token):
//! `ListClones` (cached per replica for [`LIST_TTL`]), `CloneVoice` on need, `MarkGone` when a
//! vendor says a clone is not in its scope (the cache replaced, the id remembered gone for
//! [`GONE_KEPT`]), `MarkUsed` after a synthesis on one (at most once per clone per
//! [`USED_EVERY`] per replica).
//!
//! Single flight per replica: a pack's reads and clone requests run one at a time under the
//! pack's lock, so 50 requests arriving together for a pack with no clone make one
//! `CloneVoice`; across replicas the catalog's primary key (pack, scope) makes one row.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use voxpool_domain::{contract::CatalogReason, secret::Secret};
use voxpool_proto::catalog::v1 as pb;
use voxpool_runtime::auth::AdminAuth;

use super::{Catalog, request};
use crate::error::SynthesisError;

/// How long a replica serves a pack's clones from its cache before reading them again.
pub const LIST_TTL: Duration = Duration::from_secs(3);
/// Least time between two `MarkUsed` of one clone from one replica.
pub const USED_EVERY: Duration = Duration::from_secs(60);
/// Least time between two requests for more room (a clone in another scope) for one pack
/// from one replica.
pub const SPILL_EVERY: Duration = Duration::from_secs(10);
/// How long a replica remembers a vendor id found gone, so that requests routed to it before
/// do not send it to the vendor again.
pub const GONE_KEPT: Duration = Duration::from_secs(300);
/// Most packs whose clones a replica keeps in its cache (older entries go first).
const MAX_PACKS: usize = 4_096;

/// A clone's state, as the catalog names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloneState {
    /// Asked for; the vendor has not been called yet.
    Pending,
    /// The vendor trains it.
    Training,
    /// Usable in its scope.
    Ready,
    /// The vendor refused it.
    Failed,
    /// The vendor dropped it.
    Expired,
    /// The vendor took the slot back.
    Reclaimed,
}

impl CloneState {
    fn of(raw: i32) -> Option<Self> {
        use pb::voice_clone::CloneState as S;
        Some(match S::try_from(raw).ok()? {
            S::Pending => Self::Pending,
            S::Training => Self::Training,
            S::Ready => Self::Ready,
            S::Failed => Self::Failed,
            S::Expired => Self::Expired,
            S::Reclaimed => Self::Reclaimed,
            S::Unspecified => return None,
        })
    }

    /// Being made: PENDING or TRAINING.
    pub fn in_progress(self) -> bool {
        matches!(self, Self::Pending | Self::Training)
    }
}

/// One clone of a pack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Clone {
    /// `upstream` or `upstream/key`.
    pub scope: String,
    /// Its state.
    pub state: CloneState,
    /// The vendor's id in the scope; empty until known.
    pub vendor_voice_id: String,
    /// Why it failed or expired (escaped by the catalog).
    pub error: String,
}

fn clones_of(list: Vec<pb::VoiceClone>) -> Vec<Clone> {
    list.into_iter()
        .filter_map(|c| {
            Some(Clone {
                state: CloneState::of(c.state)?,
                scope: c.scope,
                vendor_voice_id: c.vendor_voice_id,
                error: c.error,
            })
        })
        .collect()
}

struct Listed {
    at: Instant,
    clones: Arc<Vec<Clone>>,
}

/// What one replica knows of managed clones: each pack's clones as last read, when it last
/// asked for more room or reported a use, and the vendor ids it found gone.
#[derive(Default)]
pub struct CloneBook {
    packs: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Listed>>>>>,
    spilled: Mutex<HashMap<String, Instant>>,
    used: Mutex<HashMap<(String, String), Instant>>,
    gone: Mutex<HashMap<(String, String), Instant>>,
}

impl std::fmt::Debug for CloneBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloneBook").finish_non_exhaustive()
    }
}

impl CloneBook {
    fn pack(&self, pack_id: &str) -> Arc<tokio::sync::Mutex<Option<Listed>>> {
        let mut packs = self.packs.lock().unwrap_or_else(PoisonError::into_inner);
        if packs.len() >= MAX_PACKS && !packs.contains_key(pack_id) {
            packs.retain(|_, slot| Arc::strong_count(slot) > 1);
        }
        packs.entry(pack_id.to_owned()).or_default().clone()
    }

    /// Whether `key` was not seen within `every` (and records it now).
    fn due(map: &Mutex<HashMap<String, Instant>>, key: &str, every: Duration) -> bool {
        let mut map = map.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if map
            .get(key)
            .is_some_and(|at| now.duration_since(*at) < every)
        {
            return false;
        }
        if map.len() >= MAX_PACKS {
            map.retain(|_, at| now.duration_since(*at) < every);
        }
        map.insert(key.to_owned(), now);
        true
    }

    /// Records (`gone`) or forgets that `vendor_voice_id` in `scope` of the pack is gone.
    fn set_gone(&self, pack_id: &str, scope: &str, vendor_voice_id: &str, gone: bool) {
        let key = (pack_id.to_owned(), format!("{scope}\n{vendor_voice_id}"));
        let mut map = self.gone.lock().unwrap_or_else(PoisonError::into_inner);
        if !gone {
            map.remove(&key);
            return;
        }
        let now = Instant::now();
        if map.len() >= MAX_PACKS {
            map.retain(|_, at| now.duration_since(*at) < GONE_KEPT);
        }
        map.insert(key, now);
    }
}

impl Catalog {
    fn token<'a>(&self, admin: &'a AdminAuth, pack_id: &str) -> Result<&'a Secret, SynthesisError> {
        admin.token().ok_or_else(|| SynthesisError::CloneFailed {
            pack_id: pack_id.to_owned(),
            scope: String::new(),
            message: "it is a managed clone, whose clones this synthesis replica reads from the \
                      catalog with the admin token, and it runs without one: start it with \
                      VOXPOOL_ADMIN_TOKEN (or --admin-token-file) set to the catalog's"
                .to_owned(),
        })
    }

    async fn list_clones(
        &self,
        pack_id: &str,
        token: &Secret,
        timeout: Duration,
    ) -> Result<Vec<Clone>, SynthesisError> {
        let req = request(
            pb::ListClonesRequest {
                pack_id: pack_id.to_owned(),
            },
            token,
            timeout,
        )
        .map_err(|message| self.unusable_token(pack_id, message))?;
        let mut admin = self.admin.clone();
        let answer = tokio::time::timeout(timeout, admin.list_clones(req))
            .await
            .map_err(|_| self.no_answer(timeout))?
            .map_err(|s| self.clone_refusal(pack_id, &s))?;
        Ok(clones_of(answer.into_inner().clones))
    }

    async fn clone_voice(
        &self,
        pack_id: &str,
        scopes: &[String],
        token: &Secret,
        timeout: Duration,
    ) -> Result<Vec<Clone>, SynthesisError> {
        let req = request(
            pb::CloneVoiceRequest {
                pack_id: pack_id.to_owned(),
                scopes: scopes.to_vec(),
                max_scopes: 0,
            },
            token,
            timeout,
        )
        .map_err(|message| self.unusable_token(pack_id, message))?;
        let mut admin = self.admin.clone();
        let answer = tokio::time::timeout(timeout, admin.clone_voice(req))
            .await
            .map_err(|_| self.no_answer(timeout))?
            .map_err(|s| self.clone_refusal(pack_id, &s))?;
        tracing::info!(pack_id, scopes = ?scopes, "asked the catalog for a clone");
        Ok(clones_of(answer.into_inner().clones))
    }

    /// The pack's clones (from this replica's cache while younger than [`LIST_TTL`], unless
    /// `fresh`). When none is READY, being made or FAILED, asks the catalog to clone it
    /// (`CloneVoice` without scopes: the catalog picks the scopes) and answers what it made.
    pub async fn clones_or_clone(
        &self,
        admin: &AdminAuth,
        pack_id: &str,
        fresh: bool,
        timeout: Duration,
    ) -> Result<Arc<Vec<Clone>>, SynthesisError> {
        let token = self.token(admin, pack_id)?;
        let slot = self.book.pack(pack_id);
        let mut held = slot.lock().await;
        let cached = held
            .as_ref()
            .filter(|l| !fresh && l.at.elapsed() < LIST_TTL)
            .map(|l| l.clones.clone());
        let from_cache = cached.is_some();
        let clones = match cached {
            Some(clones) => clones,
            None => Arc::new(self.list_clones(pack_id, token, timeout).await?),
        };
        let stuck = clones.iter().all(|c| {
            !(c.state == CloneState::Ready
                || c.state.in_progress()
                || c.state == CloneState::Failed)
        });
        if from_cache && !stuck {
            // Served from the cache: its age stands, so a busy pack still reads again.
            return Ok(clones);
        }
        let clones = if stuck {
            Arc::new(self.clone_voice(pack_id, &[], token, timeout).await?)
        } else {
            clones
        };
        *held = Some(Listed {
            at: Instant::now(),
            clones: clones.clone(),
        });
        Ok(clones)
    }

    /// Every READY scope of the pack is full or down: asks the catalog for a clone in one more
    /// scope (`CloneVoice` without scopes, which honours the pack's `max_scopes`), at most once
    /// per [`SPILL_EVERY`] per pack from this replica. Answers the scopes where a clone is
    /// being made (empty: none, the pack is in as many scopes as it may be).
    pub async fn more_room(
        &self,
        admin: &AdminAuth,
        pack_id: &str,
        timeout: Duration,
    ) -> Result<Vec<String>, SynthesisError> {
        let token = self.token(admin, pack_id)?;
        let slot = self.book.pack(pack_id);
        let mut held = slot.lock().await;
        let clones = if CloneBook::due(&self.book.spilled, pack_id, SPILL_EVERY) {
            let clones = Arc::new(self.clone_voice(pack_id, &[], token, timeout).await?);
            *held = Some(Listed {
                at: Instant::now(),
                clones: clones.clone(),
            });
            clones
        } else {
            held.as_ref().map(|l| l.clones.clone()).unwrap_or_default()
        };
        Ok(in_progress(&clones))
    }

    /// Whether this replica found `vendor_voice_id` gone from `scope` (within [`GONE_KEPT`]):
    /// a request routed to it before must not send it to the vendor.
    pub fn found_gone(&self, pack_id: &str, scope: &str, vendor_voice_id: &str) -> bool {
        let key = (pack_id.to_owned(), format!("{scope}\n{vendor_voice_id}"));
        let gone = self
            .book
            .gone
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        gone.get(&key).is_some_and(|at| at.elapsed() < GONE_KEPT)
    }

    /// A vendor answered that it does not hold `vendor_voice_id` in `scope`: the catalog marks
    /// the clone EXPIRED (a row already gone, deleted meanwhile, is gone too) and is asked to
    /// clone it there again; this replica stops using the id at once and reads the pack's clones
    /// anew. A request finding the scope's clone being made again answers from the cache.
    /// Answers the scopes where a clone is being made.
    pub async fn clone_gone(
        &self,
        admin: &AdminAuth,
        pack_id: &str,
        scope: &str,
        vendor_voice_id: &str,
        error: &str,
        timeout: Duration,
    ) -> Result<Vec<String>, SynthesisError> {
        let token = self.token(admin, pack_id)?;
        self.book.set_gone(pack_id, scope, vendor_voice_id, true);
        let slot = self.book.pack(pack_id);
        let mut held = slot.lock().await;
        let remaking = |l: &&Listed| {
            l.at.elapsed() < LIST_TTL
                && l.clones
                    .iter()
                    .any(|c| c.scope == scope && c.state.in_progress())
        };
        if let Some(listed) = held.as_ref().filter(remaking) {
            return Ok(in_progress(&listed.clones));
        }
        *held = None;
        match self
            .remade(pack_id, scope, vendor_voice_id, error, token, timeout)
            .await
        {
            Ok(clones) => {
                let clones = Arc::new(clones);
                *held = Some(Listed {
                    at: Instant::now(),
                    clones: clones.clone(),
                });
                Ok(in_progress(&clones))
            }
            Err(e) => {
                // Not recorded: the next request that meets the id reports it again.
                self.book.set_gone(pack_id, scope, vendor_voice_id, false);
                Err(e)
            }
        }
    }

    /// MarkGone, then CloneVoice in `scope`: the pack's clones.
    async fn remade(
        &self,
        pack_id: &str,
        scope: &str,
        vendor_voice_id: &str,
        error: &str,
        token: &Secret,
        timeout: Duration,
    ) -> Result<Vec<Clone>, SynthesisError> {
        let req = request(
            pb::MarkCloneGoneRequest {
                pack_id: pack_id.to_owned(),
                scope: scope.to_owned(),
                vendor_voice_id: vendor_voice_id.to_owned(),
                error: error.to_owned(),
            },
            token,
            timeout,
        )
        .map_err(|message| self.unusable_token(pack_id, message))?;
        let mut work = self.work.clone();
        match tokio::time::timeout(timeout, work.mark_gone(req))
            .await
            .map_err(|_| self.no_answer(timeout))?
        {
            Ok(_) => tracing::info!(
                pack_id,
                scope,
                "the vendor no longer holds the clone: marked gone"
            ),
            // No row in the scope any more (deleted meanwhile): gone already.
            Err(s) if CatalogReason::of(&s) == Some(CatalogReason::CloneNotFound) => {
                tracing::info!(
                    pack_id,
                    scope,
                    "the vendor no longer holds the clone, whose row is gone too"
                );
            }
            Err(s) => return Err(self.clone_refusal(pack_id, &s)),
        }
        self.clone_voice(pack_id, &[scope.to_owned()], token, timeout)
            .await
    }

    /// A synthesis on the clone `vendor_voice_id` in `scope` succeeded: tells the catalog
    /// (in the background, at most once per [`USED_EVERY`] per clone from this replica), so
    /// a vendor that drops unused clones sees it kept alive.
    pub fn clone_used(&self, admin: &AdminAuth, pack_id: &str, scope: &str, vendor_voice_id: &str) {
        let Some(token) = admin.token() else { return };
        {
            let key = (pack_id.to_owned(), format!("{scope}\n{vendor_voice_id}"));
            let mut used = self
                .book
                .used
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            if used
                .get(&key)
                .is_some_and(|at| now.duration_since(*at) < USED_EVERY)
            {
                return;
            }
            if used.len() >= MAX_PACKS {
                used.retain(|_, at| now.duration_since(*at) < USED_EVERY);
            }
            used.insert(key, now);
        }
        let Ok(req) = request(
            pb::MarkCloneUsedRequest {
                pack_id: pack_id.to_owned(),
                scope: scope.to_owned(),
                vendor_voice_id: vendor_voice_id.to_owned(),
            },
            token,
            Duration::from_secs(5),
        ) else {
            return;
        };
        let mut work = self.work.clone();
        let (pack_id, scope) = (pack_id.to_owned(), scope.to_owned());
        tokio::spawn(async move {
            if let Err(s) = work.mark_used(req).await {
                tracing::debug!(%pack_id, %scope, code = ?s.code(), error = %voxpool_domain::untrusted::quote(s.message()), "could not record a clone's use; the next use tries again");
            }
        });
    }
}

/// The scopes where a clone is being made.
fn in_progress(clones: &[Clone]) -> Vec<String> {
    clones
        .iter()
        .filter(|c| c.state.in_progress())
        .map(|c| c.scope.clone())
        .collect()
}
