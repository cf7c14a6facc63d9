//! The worker loop: claim → one vendor step per task → report, until shutdown.
//!
//! - Claims up to [`WorkerOptions::max`] due steps of the scopes this replica holds a key for,
//!   leased for [`WorkerOptions::lease`]; runs them side by side; reports each with its lease
//!   token. A full batch is followed by the next claim at once; an empty one by a pause of
//!   [`WorkerOptions::idle`], cut short by [`Worker::waker`] (no busy loop).
//! - A step runs at most until its lease ends (less a margin); one that would run past it is
//!   abandoned unreported, and a result that comes back after the lease, or that the catalog
//!   refuses as stale (`CLONE_LEASE_LOST`: the step was handed to another worker), is dropped
//!   (logged at debug). The catalog hands a step whose lease ran out to the next claim, so a
//!   replica that dies mid-step loses nothing: the row is the work.
//! - A catalog that does not answer is logged (at most one warning per
//!   [`LOG_EVERY`], with the count of failures in between) and tried again with back-off up to
//!   [`MAX_BACKOFF`]; it never stops synthesis.
//! - Shutdown stops claiming; steps under way finish (within their lease) and are reported.

use std::{
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{
    Outcome, ScopeKeys, Task,
    client::{ClientError, CloneWorkClientHandle},
    flows,
    step::Context,
};

/// At most one warning about an unreachable catalog this often.
pub const LOG_EVERY: Duration = Duration::from_secs(30);
/// Longest pause between claims while the catalog fails.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A step stops this long before its lease ends, to leave time for the report.
const MARGIN: Duration = Duration::from_secs(2);
/// Longest one vendor call of a step may take.
const MAX_CALL: Duration = Duration::from_secs(30);

/// How the worker claims.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// Its name (lease owner): host-pid-random.
    pub name: String,
    /// Most steps per claim.
    pub max: u32,
    /// How long a claimed step is leased.
    pub lease: Duration,
    /// Pause after an empty claim.
    pub idle: Duration,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        Self {
            name: super::worker_name(),
            max: 4,
            lease: Duration::from_secs(60),
            idle: Duration::from_secs(1),
        }
    }
}

/// A clone worker (module doc).
#[derive(Debug)]
pub struct Worker {
    client: CloneWorkClientHandle,
    scopes: Vec<ScopeKeys>,
    ctx: Context,
    options: WorkerOptions,
    wake: Arc<Notify>,
}

impl Worker {
    /// A worker for `scopes` (non-empty) claiming from `client`.
    pub fn new(
        client: CloneWorkClientHandle,
        scopes: Vec<ScopeKeys>,
        ctx: Context,
        options: WorkerOptions,
    ) -> Self {
        Self {
            client,
            scopes,
            ctx,
            options,
            wake: Arc::new(Notify::new()),
        }
    }

    /// Wakes the worker from its pause (e.g. after asking the catalog for a clone).
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// Runs until `shutdown` (module doc).
    pub async fn run(self, shutdown: CancellationToken) {
        let ids: Vec<String> = self.scopes.iter().map(|s| s.id.clone()).collect();
        tracing::info!(worker = %self.options.name, scopes = %ids.join(", "), catalog = %self.client.url(), "clone worker claiming");
        let mut failures = 0u32;
        let mut last_warning: Option<Instant> = None;
        while !shutdown.is_cancelled() {
            let claimed = tokio::select! {
                () = shutdown.cancelled() => break,
                c = self.client.claim(&self.options.name, &ids, self.options.max, self.options.lease) => c,
            };
            let pause = match claimed {
                Ok(tasks) => {
                    if failures > 0 {
                        tracing::info!(failures, "clone worker: the catalog answers again");
                        failures = 0;
                    }
                    let full = tasks.len() >= self.options.max as usize;
                    futures::future::join_all(tasks.iter().map(|t| self.step(t))).await;
                    if full {
                        continue;
                    }
                    self.options.idle
                }
                Err(e) => {
                    failures += 1;
                    if last_warning.is_none_or(|at| at.elapsed() >= LOG_EVERY) {
                        tracing::warn!(failures, error = %e, "clone worker: cannot claim clone work; trying again");
                        last_warning = Some(Instant::now());
                    }
                    backoff(self.options.idle, failures)
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = self.wake.notified() => {}
                () = tokio::time::sleep(pause) => {}
            }
        }
        tracing::info!(worker = %self.options.name, "clone worker stopped claiming");
    }

    /// Runs one task and reports it while its lease holds.
    async fn step(&self, task: &Task) {
        let Some(scope) = self.scopes.iter().find(|s| s.id == task.scope) else {
            // Never claimed for: left to its lease.
            return;
        };
        let Some(budget) = remaining(task.lease_until).and_then(|d| d.checked_sub(MARGIN)) else {
            tracing::debug!(pack_id = %task.pack_id, scope = %task.scope, "clone step claimed with no lease time left; left to the next claim");
            return;
        };
        let call = budget.min(MAX_CALL);
        let run = flows::run(&self.ctx, task, scope, call);
        let Ok(outcome) = tokio::time::timeout(budget, run).await else {
            tracing::warn!(pack_id = %task.pack_id, scope = %task.scope, work = task.work.as_str(),
                "clone step did not finish within its lease; another claim runs it again");
            return;
        };
        log_outcome(task, &outcome);
        if remaining(task.lease_until).is_none() {
            tracing::debug!(pack_id = %task.pack_id, scope = %task.scope, "clone step finished after its lease; result dropped");
            return;
        }
        match self.client.report(task, &outcome).await {
            Ok(()) => {}
            Err(ClientError::Stale(why)) => {
                tracing::debug!(pack_id = %task.pack_id, scope = %task.scope, why = %why, "clone step result dropped: the lease was handed on");
            }
            Err(ClientError::Failed(why)) => {
                tracing::warn!(pack_id = %task.pack_id, scope = %task.scope, error = %why,
                    "clone step result not reported; the step runs again after its lease");
            }
        }
    }
}

/// Time left until `until`, `None` when it has passed.
fn remaining(until: SystemTime) -> Option<Duration> {
    until
        .duration_since(SystemTime::now())
        .ok()
        .filter(|d| !d.is_zero())
}

/// `idle` doubled per failure, at most [`MAX_BACKOFF`].
fn backoff(idle: Duration, failures: u32) -> Duration {
    idle.saturating_mul(1 << failures.min(6)).min(MAX_BACKOFF)
}

fn log_outcome(task: &Task, outcome: &Outcome) {
    let (pack_id, scope, work) = (&task.pack_id, &task.scope, task.work.as_str());
    match outcome {
        Outcome::Failed(error) => {
            tracing::warn!(%pack_id, %scope, work, error = ?error, "clone step: the vendor refused");
        }
        Outcome::Retry { error, .. } => {
            tracing::info!(%pack_id, %scope, work, attempt = task.attempt, error = ?error, "clone step: again later");
        }
        Outcome::Expired { error, .. } => {
            tracing::info!(%pack_id, %scope, work, error = ?error, "clone step: the vendor reports the clone gone");
        }
        other => {
            let kind = match other {
                Outcome::Training { .. } => "training",
                Outcome::Ready { .. } => "ready",
                Outcome::Deleted => "deleted",
                _ => "imported",
            };
            tracing::info!(%pack_id, %scope, work, outcome = kind, "clone step done");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_cap() {
        let idle = Duration::from_secs(1);
        assert_eq!(backoff(idle, 1), Duration::from_secs(2));
        assert_eq!(backoff(idle, 3), Duration::from_secs(8));
        assert_eq!(backoff(idle, 40), MAX_BACKOFF);
    }
}
