//! Managed voice clones as synthesis reads and writes them in the catalog (admin token):
//! `ListClones` (cached per replica for [`LIST_TTL`]), `CloneVoice` on need, `MarkGone` when a
//! vendor says a clone is not in its scope, `MarkUsed` after a synthesis on one (at most once
//! per clone per [`USED_EVERY`] per replica).
//!
//! Single flight per replica: a pack's reads and clone requests run one at a time under the
//! pack's lock, so 50 requests arriving together for a pack with no clone make one
//! `CloneVoice`; across replicas the catalog's primary key (pack, scope) makes one row.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use tonic::{Code, Status};
use voxpool_domain::{
    contract::{CatalogReason, Reason as _, Retry, is_transport},
    secret::Secret,
};
use voxpool_proto::catalog::v1 as pb;
use voxpool_runtime::auth::AdminAuth;

use super::Catalog;
use crate::error::SynthesisError;

/// How long a replica serves a pack's clones from its cache before reading them again.
pub const LIST_TTL: Duration = Duration::from_secs(3);
/// Least time between two `MarkUsed` of one clone from one replica.
pub const USED_EVERY: Duration = Duration::from_secs(60);
/// Least time between two requests for more room (a clone in another scope) for one pack
/// from one replica.
pub const SPILL_EVERY: Duration = Duration::from_secs(10);
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

/// What one replica knows of managed clones: each pack's clones as last read, and when it
/// last asked for more room or reported a use.
#[derive(Default)]
pub struct CloneBook {
    packs: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Listed>>>>>,
    spilled: Mutex<HashMap<String, Instant>>,
    used: Mutex<HashMap<(String, String), Instant>>,
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
}

/// What clone calls are asked with: the admin token as bearer metadata, and a deadline.
fn request<T>(message: T, token: &Secret, timeout: Duration) -> Result<tonic::Request<T>, String> {
    let mut req = tonic::Request::new(message);
    req.set_timeout(timeout);
    let value = format!("Bearer {}", token.expose())
        .parse()
        .map_err(|_| "the admin token is not valid metadata".to_owned())?;
    req.metadata_mut().insert("authorization", value);
    Ok(req)
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

    /// A catalog answer to a clone call, as a synthesis error.
    fn clone_refusal(&self, pack_id: &str, s: &Status) -> SynthesisError {
        let message = voxpool_domain::untrusted::quote(s.message());
        let url = self.url.clone();
        let scope = tonic_types::StatusExt::get_error_details(s)
            .error_info()
            .and_then(|i| i.metadata.get("scope").cloned())
            .unwrap_or_default();
        match (CatalogReason::of(s), s.code()) {
            (Some(reason), _) if reason.retry() == Retry::Again => {
                SynthesisError::CatalogUnavailable { url, message }
            }
            (_, Code::NotFound) => SynthesisError::CatalogNotFound {
                pack_id: pack_id.to_owned(),
                message,
            },
            (_, Code::FailedPrecondition | Code::ResourceExhausted | Code::InvalidArgument) => {
                SynthesisError::CloneFailed {
                    pack_id: pack_id.to_owned(),
                    scope,
                    message,
                }
            }
            (_, Code::Unauthenticated | Code::PermissionDenied) => SynthesisError::CloneFailed {
                pack_id: pack_id.to_owned(),
                scope,
                message: format!(
                    "the catalog refused this replica's admin token ({message}): synthesis and \
                     the catalog must share VOXPOOL_ADMIN_TOKEN"
                ),
            },
            (_, code)
                if is_transport(s)
                    || matches!(
                        code,
                        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled
                    ) =>
            {
                SynthesisError::CatalogUnavailable { url, message }
            }
            (_, code) => SynthesisError::CatalogFailed {
                url,
                message: format!("{code:?}: {message}"),
            },
        }
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

    fn no_answer(&self, timeout: Duration) -> SynthesisError {
        SynthesisError::CatalogUnavailable {
            url: self.url.clone(),
            message: format!("no answer within {}ms", timeout.as_millis()),
        }
    }

    fn unusable_token(&self, pack_id: &str, message: String) -> SynthesisError {
        SynthesisError::CloneFailed {
            pack_id: pack_id.to_owned(),
            scope: String::new(),
            message,
        }
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

    /// A vendor answered that it does not hold `vendor_voice_id` in `scope`: the catalog marks
    /// the clone EXPIRED and is asked to clone it there again. Answers the scopes where a
    /// clone is being made.
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
        let slot = self.book.pack(pack_id);
        let mut held = slot.lock().await;
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
        tokio::time::timeout(timeout, work.mark_gone(req))
            .await
            .map_err(|_| self.no_answer(timeout))?
            .map_err(|s| self.clone_refusal(pack_id, &s))?;
        tracing::info!(
            pack_id,
            scope,
            "the vendor no longer holds the clone: marked gone"
        );
        let clones = Arc::new(
            self.clone_voice(pack_id, &[scope.to_owned()], token, timeout)
                .await?,
        );
        *held = Some(Listed {
            at: Instant::now(),
            clones: clones.clone(),
        });
        Ok(in_progress(&clones))
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
