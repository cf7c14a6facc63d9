//! Waiting for a dependency at start-up, the same way in every server: the server binds and
//! answers gRPC health NOT_SERVING at once, and [`wait_for`] retries what it needs (the lease
//! store, the catalog database, the scheduler and catalog) with capped exponential back-off
//! and jitter until it answers. Only a configuration error ([`NotReady::Config`]) ends the
//! wait, and with it the process (non-zero exit): a dependency that is not up yet (refused
//! connection, cluster still converging) is the normal case when everything restarts at once,
//! and exiting would turn it into a crash loop with growing back-off.
//!
//! Logs: one warning per back-off step (each names the reason and the delay before the next
//! try), one line when the dependency answers.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable as _};
use tokio_util::sync::CancellationToken;

/// First delay between tries.
pub const FIRST_DELAY: Duration = Duration::from_millis(200);
/// Longest delay between tries (before jitter).
pub const MAX_DELAY: Duration = Duration::from_secs(10);

/// Why a try did not get the dependency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotReady {
    /// Not up or not reachable yet: try again later (one-line reason, no password).
    Unreachable(String),
    /// The configuration names it wrongly (malformed URL, unknown scheme): retrying cannot
    /// help (one-line reason, no password).
    Config(String),
}

impl std::fmt::Display for NotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unreachable(why) | Self::Config(why) => f.write_str(why),
        }
    }
}

/// The back-off [`wait_for`] uses: 200 ms doubling to 10 s, with jitter, tried forever.
pub fn backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(FIRST_DELAY)
        .with_max_delay(MAX_DELAY)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
}

/// Calls `attempt` until it succeeds, sleeping [`backoff`] between tries (module doc).
/// `Ok(None)` when `shutdown` is cancelled first. Errors: the reason of a
/// [`NotReady::Config`].
pub async fn wait_for<T, F, Fut>(
    dependency: &'static str,
    attempt: F,
    shutdown: &CancellationToken,
) -> Result<Option<T>, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, NotReady>>,
{
    let waiting = attempt
        .retry(backoff())
        .when(|e| matches!(e, NotReady::Unreachable(_)))
        .notify(|e, delay| {
            tracing::warn!(
                %dependency,
                reason = %e,
                retry_in_ms = delay.as_millis(),
                "not reachable yet; health is NOT_SERVING until it answers"
            );
        });
    tokio::select! {
        result = waiting => match result {
            Ok(value) => {
                tracing::info!(%dependency, "reachable; starting to serve");
                Ok(Some(value))
            }
            Err(e) => Err(e.to_string()),
        },
        () = shutdown.cancelled() => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    };

    use super::*;

    #[tokio::test]
    async fn retries_until_the_dependency_answers() {
        let tries = Arc::new(AtomicU32::new(0));
        let counted = tries.clone();
        let got = wait_for(
            "test dependency",
            move || {
                let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
                async move {
                    if n < 3 {
                        Err(NotReady::Unreachable(format!("try {n}: refused")))
                    } else {
                        Ok(n)
                    }
                }
            },
            &CancellationToken::new(),
        )
        .await;
        assert_eq!(got, Ok(Some(3)));
        assert_eq!(tries.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_config_error_ends_the_wait_at_once() {
        let tries = Arc::new(AtomicU32::new(0));
        let counted = tries.clone();
        let got: Result<Option<()>, String> = wait_for(
            "test dependency",
            move || {
                counted.fetch_add(1, Ordering::SeqCst);
                async { Err(NotReady::Config("not a Redis URL".into())) }
            },
            &CancellationToken::new(),
        )
        .await;
        assert_eq!(got, Err("not a Redis URL".into()));
        assert_eq!(tries.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn shutdown_ends_the_wait() {
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        let got: Result<Option<()>, String> = wait_for(
            "test dependency",
            || async { Err(NotReady::Unreachable("refused".into())) },
            &shutdown,
        )
        .await;
        assert_eq!(got, Ok(None));
    }

    #[test]
    fn the_back_off_grows_to_its_cap() {
        use backon::BackoffBuilder as _;
        let delays: Vec<Duration> = backoff().build().take(12).collect();
        assert!(
            delays[0] >= FIRST_DELAY && delays[0] < FIRST_DELAY * 2,
            "{delays:?}"
        );
        assert!(delays.iter().all(|d| *d < MAX_DELAY * 2), "{delays:?}");
        assert!(delays[11] >= MAX_DELAY, "{delays:?}");
    }
}
