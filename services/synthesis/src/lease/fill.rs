//! Fill locks from synthesis' side (docs/SCHEDULER.md "Fill locks"): the scheduler's
//! AcquireFill / RenewFill / ReleaseFill over the same client, token and retries as leases
//! ([`Scheduler::retrying`]), for single-flight filling of the audio cache: of the replicas
//! missing one cache entry at once, one calls the vendor, the others wait and read the cache.
//!
//! Owns a granted lock's life ([`FillLock`]): renewed every third of its TTL while alive, let go
//! by [`FillLock::release`] or, if it is dropped unreleased, by a spawned best-effort release
//! (failing that, it expires at its TTL: a lock never outlives a dead holder by more). Invariant:
//! [`FillLock::lost`] is true as soon as a renewal learns the lock is gone (or could not renew
//! it before it would expire), so the filler knows its cache write may race another's.
//!
//! A retried AcquireFill whose first answer was lost may find the lock held by that unseen
//! grant: it answers HELD until the grant's TTL ends (no second filler; at worst a wait).

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use tokio::task::JoinHandle;
use tonic::{Code, Status};
use tonic_types::StatusExt as _;
use voxpool_domain::contract::SchedulerReason;
use voxpool_proto::scheduler::v1::{self as pb, acquire_fill_response::State};

use super::{SMALL_RPC_TIMEOUT, Scheduler};
use crate::error::SynthesisError;

/// What [`Scheduler::acquire_fill`] got.
#[derive(Debug)]
pub enum FillOutcome {
    /// This caller holds the lock: fill the entry, then [`FillLock::release`].
    Granted(FillLock),
    /// Another caller held it and let go (released, or it expired) while this one waited:
    /// read the cache again, and acquire again if the entry is still missing.
    Released,
    /// Another caller still held it when the wait ran out.
    Held {
        /// At most how long until its lock expires.
        held: Duration,
    },
}

/// A granted fill lock (module doc).
#[derive(Debug)]
pub struct FillLock {
    /// Boxed: a client is large, and a lock is moved around in [`FillOutcome`].
    scheduler: Box<Scheduler>,
    key: String,
    fill_id: String,
    lost: Arc<AtomicBool>,
    renewer: Option<JoinHandle<()>>,
}

fn ms_u32(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

impl Scheduler {
    /// Takes the fill lock of the content `key` (1..=256 characters of `A-Z a-z 0-9 . _ : / -`)
    /// for `ttl` (zero: the scheduler's `scheduler.fill_ttl_ms`; at most 300 s), waiting up to
    /// `wait` while another caller holds it (zero: answer at once). Retried on another
    /// scheduler endpoint after UNAVAILABLE or a transport failure, within `wait` plus the
    /// small-RPC budget. Errors: [`SynthesisError::InvalidArgument`] naming the scheduler's
    /// field (`key`, `ttl_ms`, `wait_ms`); [`SynthesisError::SchedulerUnavailable`] when no
    /// endpoint answers; [`SynthesisError::SchedulerMismatch`] when the scheduler refuses this
    /// replica (its client token) or answers something this client does not know.
    pub async fn acquire_fill(
        &self,
        key: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<FillOutcome, SynthesisError> {
        let budget = wait.saturating_add(SMALL_RPC_TIMEOUT);
        let answer = self
            .retrying("AcquireFill", budget, |left| {
                let mut req = tonic::Request::new(pb::AcquireFillRequest {
                    key: key.to_owned(),
                    ttl_ms: ms_u32(ttl),
                    // The scheduler answers HELD just before the deadline `left` sets.
                    wait_ms: ms_u32(wait.min(left)),
                });
                req.set_timeout(left);
                let mut client = self.client.clone();
                async move {
                    client
                        .acquire_fill(req)
                        .await
                        .map(tonic::Response::into_inner)
                }
            })
            .await
            .map_err(|s| self.fill_error(&s))?;
        match State::try_from(answer.state) {
            Ok(State::Granted) => {
                let ttl = Duration::from_millis(u64::from(answer.ttl_ms));
                Ok(FillOutcome::Granted(FillLock::start(
                    self.clone(),
                    key.to_owned(),
                    answer.fill_id,
                    ttl,
                )))
            }
            Ok(State::Released) => Ok(FillOutcome::Released),
            Ok(State::Held) => Ok(FillOutcome::Held {
                held: Duration::from_millis(u64::from(answer.held_ttl_ms)),
            }),
            Ok(State::Unspecified) | Err(_) => Err(SynthesisError::SchedulerMismatch {
                url: self.url.clone(),
                message: format!("AcquireFill answered state {}", answer.state),
            }),
        }
    }

    /// A failed fill call as synthesis reports it.
    fn fill_error(&self, status: &Status) -> SynthesisError {
        let message = status.message().to_owned();
        match status.code() {
            Code::InvalidArgument => SynthesisError::InvalidArgument {
                field: status
                    .get_error_details()
                    .bad_request()
                    .and_then(|b| b.field_violations.first().map(|v| v.field.clone()))
                    .unwrap_or_else(|| "key".to_owned()),
                message,
            },
            Code::Unauthenticated | Code::PermissionDenied | Code::Unimplemented => {
                SynthesisError::SchedulerMismatch {
                    url: self.url.clone(),
                    message: format!(
                        "the scheduler refused AcquireFill ({message}); give synthesis one of its [[client_tokens]] and run a scheduler with fill locks"
                    ),
                }
            }
            _ => SynthesisError::SchedulerUnavailable {
                url: self.url.clone(),
                message,
            },
        }
    }

    /// RenewFill, retried on another endpoint: `Ok(false)` when the lock is no longer ours.
    async fn renew_fill(&self, key: &str, fill_id: &str, ttl: Duration) -> Result<bool, Status> {
        let answer = self
            .retrying("RenewFill", SMALL_RPC_TIMEOUT, |_| {
                let mut client = self.client.clone();
                let request = pb::RenewFillRequest {
                    key: key.to_owned(),
                    fill_id: fill_id.to_owned(),
                    ttl_ms: ms_u32(ttl),
                };
                async move { client.renew_fill(request).await }
            })
            .await;
        match answer {
            Ok(_) => Ok(true),
            Err(s) if SchedulerReason::of(&s) == Some(SchedulerReason::FillNotHeld) => Ok(false),
            Err(s) => Err(s),
        }
    }

    /// ReleaseFill, retried on another endpoint: `true` if this call let the lock go.
    async fn release_fill(&self, key: &str, fill_id: &str) -> Result<bool, Status> {
        self.retrying("ReleaseFill", SMALL_RPC_TIMEOUT, |_| {
            let mut client = self.client.clone();
            let request = pb::ReleaseFillRequest {
                key: key.to_owned(),
                fill_id: fill_id.to_owned(),
            };
            async move {
                client
                    .release_fill(request)
                    .await
                    .map(|r| r.into_inner().released)
            }
        })
        .await
    }
}

impl FillLock {
    /// The lock `fill_id` on `key`, renewed every third of `ttl` from now on.
    fn start(scheduler: Scheduler, key: String, fill_id: String, ttl: Duration) -> Self {
        let lost = Arc::new(AtomicBool::new(false));
        let renewer = tokio::spawn(renew_loop(
            scheduler.clone(),
            key.clone(),
            fill_id.clone(),
            ttl,
            lost.clone(),
        ));
        Self {
            scheduler: Box::new(scheduler),
            key,
            fill_id,
            lost,
            renewer: Some(renewer),
        }
    }

    /// The content key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// True once a renewal found the lock gone (expired, taken over) or could not renew it
    /// before it would have expired: another caller may be filling the same entry.
    pub fn lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Stops renewing and lets the lock go, waking the callers waiting for it. Best effort:
    /// a release that fails leaves the lock to expire at its TTL.
    pub async fn release(mut self) {
        if let Some(renewer) = self.renewer.take() {
            renewer.abort();
        }
        let fill_id = std::mem::take(&mut self.fill_id);
        if let Err(e) = self.scheduler.release_fill(&self.key, &fill_id).await {
            tracing::debug!(error = %e.message(), "could not release a fill lock; it ends at its TTL");
        }
    }
}

impl Drop for FillLock {
    fn drop(&mut self) {
        if let Some(renewer) = self.renewer.take() {
            renewer.abort();
        }
        if self.fill_id.is_empty() {
            return; // released
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // it expires at its TTL
        };
        let (scheduler, key, fill_id) = (
            (*self.scheduler).clone(),
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.fill_id),
        );
        runtime.spawn(async move {
            if let Err(e) = scheduler.release_fill(&key, &fill_id).await {
                tracing::debug!(error = %e.message(), "could not release a dropped fill lock; it ends at its TTL");
            }
        });
    }
}

/// Renews the lock every third of `ttl` until it is lost (module doc) or the task is aborted.
async fn renew_loop(
    scheduler: Scheduler,
    key: String,
    fill_id: String,
    ttl: Duration,
    lost: Arc<AtomicBool>,
) {
    let period = (ttl / 3).max(Duration::from_millis(10));
    let mut valid_until = tokio::time::Instant::now() + ttl;
    loop {
        tokio::time::sleep_until((tokio::time::Instant::now() + period).min(valid_until)).await;
        if tokio::time::Instant::now() >= valid_until {
            tracing::warn!("fill lock could not be renewed before its TTL; treating it as lost");
            lost.store(true, Ordering::Release);
            return;
        }
        let sent = tokio::time::Instant::now();
        match scheduler.renew_fill(&key, &fill_id, ttl).await {
            Ok(true) => valid_until = sent + ttl,
            Ok(false) => {
                tracing::warn!("fill lock lost (expired or taken over) while filling");
                lost.store(true, Ordering::Release);
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e.message(), "fill lock renewal failed; retrying");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use voxpool_domain::status::{invalid_argument, with_info};
    use voxpool_runtime::auth::ClientToken;

    use super::*;

    fn scheduler() -> Scheduler {
        Scheduler::connect_lazy(
            "http://127.0.0.1:1",
            ClientToken::none(),
            Duration::from_millis(200),
            voxpool_runtime::endpoints::PROBE_INTERVAL,
        )
        .expect("client")
    }

    #[tokio::test]
    async fn fill_errors_name_the_field_or_the_scheduler() {
        let s = scheduler();
        let err = s.fill_error(&invalid_argument("ttl_ms", "must be 0 or 1..=300000 ms"));
        assert!(
            matches!(&err, SynthesisError::InvalidArgument { field, .. } if field == "ttl_ms"),
            "{err:?}"
        );
        let err = s.fill_error(&Status::unauthenticated("send a token"));
        assert!(
            matches!(err, SynthesisError::SchedulerMismatch { .. }),
            "{err:?}"
        );
        let store = with_info(
            Code::Unavailable,
            "store down",
            SchedulerReason::StoreUnavailable.as_str(),
            std::collections::HashMap::new(),
            None,
        );
        let err = s.fill_error(&store);
        assert!(
            matches!(&err, SynthesisError::SchedulerUnavailable { url, .. } if url.contains("127.0.0.1:1")),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn a_silent_scheduler_fails_acquire_fill_fast_as_unavailable() {
        let answer = tokio::time::timeout(
            Duration::from_secs(20),
            scheduler().acquire_fill("k", Duration::ZERO, Duration::from_secs(60)),
        )
        .await
        .expect("ended at the grace, not the 60 s wait");
        assert!(
            matches!(answer, Err(SynthesisError::SchedulerUnavailable { .. })),
            "{answer:?}"
        );
    }
}
