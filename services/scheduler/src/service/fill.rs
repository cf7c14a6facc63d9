//! The fill-lock RPCs at the gRPC edge (AcquireFill, RenewFill, ReleaseFill): decode and check
//! the fields (INVALID_ARGUMENT naming `key`, `fill_id`, `ttl_ms` or `wait_ms`, before anything
//! logs them), cap the wait by the call's deadline, and call the domain (`domain::fill`), which
//! owns the waiting. Authentication is the data plane's, as for Acquire (`server`'s layer).

use std::time::Duration;

use tokio::time::Instant;
use voxpool_config::MAX_FILL_TTL_MS;
use voxpool_proto::scheduler::v1 as pb;

use super::{SchedulerService, validate};
use crate::{
    domain::FillAnswer,
    error::SchedulerError,
    model::{FillId, FillKey},
};

/// Longest accepted `wait_ms` (10 minutes, as Acquire's `wait_timeout_ms`).
pub const MAX_FILL_WAIT_MS: u32 = 600_000;

fn key(raw: &str) -> Result<FillKey, SchedulerError> {
    FillKey::parse(raw).map_err(|why| validate::invalid("key", why))
}

fn fill_id(raw: &str) -> Result<FillId, SchedulerError> {
    FillId::parse(raw).ok_or_else(|| {
        validate::invalid(
            "fill_id",
            "expected the 32 lowercase hex digits AcquireFill granted",
        )
    })
}

fn to_u32(ms: u64) -> u32 {
    u32::try_from(ms).unwrap_or(u32::MAX)
}

impl SchedulerService {
    /// `ttl_ms`: 0 = `scheduler.fill_ttl_ms`, else 1..=[`MAX_FILL_TTL_MS`].
    fn fill_ttl(&self, ttl_ms: u32) -> Result<u64, SchedulerError> {
        match u64::from(ttl_ms) {
            0 => Ok(self.settings.fill_ttl_ms),
            t if t <= MAX_FILL_TTL_MS => Ok(t),
            t => Err(validate::invalid(
                "ttl_ms",
                format!(
                    "must be 0 (server default, scheduler.fill_ttl_ms = {}) or 1..={MAX_FILL_TTL_MS} ms, got {t}",
                    self.settings.fill_ttl_ms
                ),
            )),
        }
    }

    /// AcquireFill: the wait ends at `wait_ms` or just before the caller's `deadline`.
    pub(super) async fn acquire_fill_pb(
        &self,
        r: &pb::AcquireFillRequest,
        deadline: Option<Instant>,
    ) -> Result<pb::AcquireFillResponse, SchedulerError> {
        let key = key(&r.key)?;
        let ttl_ms = self.fill_ttl(r.ttl_ms)?;
        if r.wait_ms > MAX_FILL_WAIT_MS {
            return Err(validate::invalid(
                "wait_ms",
                format!(
                    "must be 0..={MAX_FILL_WAIT_MS} ms (0 = answer at once), got {}",
                    r.wait_ms
                ),
            ));
        }
        let wait_until = (r.wait_ms > 0).then(|| {
            let asked = Instant::now() + Duration::from_millis(u64::from(r.wait_ms));
            deadline.map_or(asked, |d| d.min(asked))
        });
        let answer = self
            .scheduler
            .acquire_fill(&key, ttl_ms, wait_until)
            .await?;
        use pb::acquire_fill_response::State;
        Ok(match answer {
            FillAnswer::Granted { fill_id, ttl_ms } => {
                tracing::debug!(key = %key, "fill lock granted");
                pb::AcquireFillResponse {
                    state: State::Granted as i32,
                    fill_id: fill_id.as_str().to_owned(),
                    ttl_ms: to_u32(ttl_ms),
                    held_ttl_ms: 0,
                }
            }
            FillAnswer::Released => pb::AcquireFillResponse {
                state: State::Released as i32,
                ..Default::default()
            },
            FillAnswer::Held { ttl_left_ms } => pb::AcquireFillResponse {
                state: State::Held as i32,
                held_ttl_ms: to_u32(ttl_left_ms),
                ..Default::default()
            },
        })
    }

    /// RenewFill.
    pub(super) async fn renew_fill_pb(
        &self,
        r: &pb::RenewFillRequest,
    ) -> Result<pb::RenewFillResponse, SchedulerError> {
        let (key, id) = (key(&r.key)?, fill_id(&r.fill_id)?);
        let ttl_ms = self.fill_ttl(r.ttl_ms)?;
        let ttl_ms = self.scheduler.renew_fill(&key, &id, ttl_ms).await?;
        Ok(pb::RenewFillResponse {
            ttl_ms: to_u32(ttl_ms),
        })
    }

    /// ReleaseFill.
    pub(super) async fn release_fill_pb(
        &self,
        r: &pb::ReleaseFillRequest,
    ) -> Result<pb::ReleaseFillResponse, SchedulerError> {
        let (key, id) = (key(&r.key)?, fill_id(&r.fill_id)?);
        let released = self.scheduler.release_fill(&key, &id).await?;
        if released {
            tracing::debug!(key = %key, "fill lock released");
        }
        Ok(pb::ReleaseFillResponse { released })
    }
}
