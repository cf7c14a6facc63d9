//! The `redis` crate's own warnings, at most one line per [`WINDOW`] and a count of the rest.
//!
//! The crate logs through `log` (bridged into `tracing` by the subscriber) a warning for every
//! call that finds a cluster node's connection lost, every slot refresh and reconnect it
//! begins, and every node it fails to reach: one line per call in flight, so a Cluster
//! failover under load wrote thousands of identical lines per scheduler (128 for 60 callers in
//! `tests/redis_warnings.rs`, 2,000–3,800 under heavier load), burying everything else. They
//! say one thing: a node went away and the client is finding the new primary, which our own
//! lines already say (`cluster.rs`: the rebuild; the store's health turning NOT_SERVING).
//!
//! [`layer`] lets the first warning (or error) of the `redis` crate in a window through, holds
//! back the others, and at the window's end writes one line (target
//! `voxpool_redis::log_limit`, field `suppressed`) with how many it held back. Every other
//! target and level passes untouched. Install it in the subscriber before the formatting
//! layer (`voxpool_runtime::telemetry` does).

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use tracing::{Event, Level, Subscriber};
use tracing_log::NormalizeEvent as _;
use tracing_subscriber::layer::{Context, Layer};

/// One line per this long, at most.
pub const WINDOW: Duration = Duration::from_secs(10);

/// The layer to add to a subscriber (module doc).
pub fn layer() -> LogLimit {
    LogLimit {
        limiter: Arc::new(Limiter::new(WINDOW)),
    }
}

/// Rate-limits the `redis` crate's warnings (module doc).
#[derive(Clone, Debug)]
pub struct LogLimit {
    limiter: Arc<Limiter>,
}

/// Whether an event with `target` at `level` is one of the `redis` crate's warnings or errors.
fn limited(target: &str, level: Level) -> bool {
    level <= Level::WARN && (target == "redis" || target.starts_with("redis::"))
}

impl<S: Subscriber> Layer<S> for LogLimit {
    fn event_enabled(&self, event: &Event<'_>, _ctx: Context<'_, S>) -> bool {
        // A `log` record bridged into `tracing` has target `log`; its own is in a field.
        let normalized = event.normalized_metadata();
        let meta = normalized.as_ref().unwrap_or_else(|| event.metadata());
        if !limited(meta.target(), *meta.level()) {
            return true;
        }
        match self.limiter.admit(Instant::now()) {
            Admit::Pass => true,
            Admit::Hold { summary_at } => {
                if let Some(at) = summary_at {
                    // A line cannot be written from inside the subscriber: a thread writes it.
                    let limiter = self.limiter.clone();
                    let spawned = std::thread::Builder::new()
                        .name("redis-log-summary".into())
                        .spawn(move || {
                            std::thread::sleep(at.saturating_duration_since(Instant::now()));
                            summarize(&limiter);
                        });
                    if spawned.is_err() {
                        // Counted still: the next window's summary says it.
                        self.limiter.unschedule();
                    }
                }
                false
            }
        }
    }
}

/// Writes the summary of what `limiter` held back, if anything.
fn summarize(limiter: &Limiter) {
    let suppressed = limiter.take_held();
    if suppressed > 0 {
        tracing::warn!(
            target: "voxpool_redis::log_limit",
            suppressed,
            window_s = WINDOW.as_secs(),
            "the redis client logged {suppressed} more warnings in the last {}s (connections lost, slot refreshes and reconnects while a node fails over), not shown one by one",
            WINDOW.as_secs()
        );
    }
}

/// What to do with one limited event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Write it: the first of its window.
    Pass,
    /// Hold it back; `summary_at`: when the caller should have the summary written (set for
    /// the first event held since the last summary).
    Hold {
        /// When to write the summary, if the caller is the one to arrange it.
        summary_at: Option<Instant>,
    },
}

/// The counting behind [`LogLimit`], on a clock the caller passes.
#[derive(Debug)]
pub struct Limiter {
    window: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The end of the window whose first event passed.
    window_end: Option<Instant>,
    /// Events held back since the last summary.
    held: u64,
    /// A summary is arranged and not written yet.
    scheduled: bool,
}

impl Limiter {
    /// One event per `window`.
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            state: Mutex::new(State::default()),
        }
    }

    /// Decides for an event at `now` (module doc).
    pub fn admit(&self, now: Instant) -> Admit {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match s.window_end {
            Some(end) if now < end => {
                s.held += 1;
                let summary_at = (!s.scheduled).then_some(end);
                s.scheduled = true;
                Admit::Hold { summary_at }
            }
            _ => {
                s.window_end = Some(now + self.window);
                Admit::Pass
            }
        }
    }

    /// The events held back since the last call; the next held event arranges a summary again.
    pub fn take_held(&self) -> u64 {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.scheduled = false;
        std::mem::take(&mut s.held)
    }

    /// A summary could not be arranged: the next held event tries again.
    fn unschedule(&self) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .scheduled = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_warning_of_a_window_passes_the_rest_are_counted_for_one_summary() {
        let limiter = Limiter::new(WINDOW);
        let t0 = Instant::now();
        assert_eq!(limiter.admit(t0), Admit::Pass);
        assert_eq!(
            limiter.admit(t0 + Duration::from_millis(1)),
            Admit::Hold {
                summary_at: Some(t0 + WINDOW)
            },
            "the first held one arranges the summary at the window's end"
        );
        for i in 2..2_000 {
            assert_eq!(
                limiter.admit(t0 + Duration::from_millis(i)),
                Admit::Hold { summary_at: None }
            );
        }
        assert_eq!(limiter.take_held(), 1_999);
        assert_eq!(limiter.take_held(), 0, "counted once");
        assert_eq!(limiter.admit(t0 + WINDOW), Admit::Pass, "a new window");
        assert_eq!(
            limiter.admit(t0 + WINDOW + Duration::from_secs(1)),
            Admit::Hold {
                summary_at: Some(t0 + WINDOW + WINDOW)
            }
        );
    }

    #[test]
    fn only_the_redis_crates_warnings_and_errors_are_limited() {
        assert!(limited(
            "redis::cluster_handling::async_connection",
            Level::WARN
        ));
        assert!(limited("redis", Level::ERROR));
        assert!(!limited("redis::cluster_handling", Level::INFO));
        assert!(!limited("voxpool_redis::cluster", Level::WARN));
        assert!(!limited("voxpool_redis::log_limit", Level::WARN));
        assert!(!limited("redis_test", Level::WARN));
    }
}
