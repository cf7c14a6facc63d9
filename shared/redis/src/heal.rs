//! Noticing a client that keeps failing, for the topologies whose client the `redis` crate
//! never rebuilds by itself (Sentinel, Cluster; a single node's `ConnectionManager` reconnects
//! on its own).
//!
//! A [`Streak`] counts consecutive connection-class failures ([`is_connection_class`]) across
//! every concurrent call of one client; any answer from the server resets it. Once
//! [`REBUILD_AFTER`] failures come in a row it hands out one rebuild at a time (single-flight)
//! and none within a cooldown of the previous attempt, so a store that is simply down costs one
//! cheap rebuild per cooldown, never a storm. A call cancelled before it finished (the store's
//! own bound, a caller gone) counts neither way.

use std::{
    sync::{
        Mutex, PoisonError,
        atomic::{AtomicBool, AtomicU32, Ordering},
    },
    time::Duration,
};

use redis::{ErrorKind, RedisError, RedisResult, ServerErrorKind};
use tokio::time::Instant;

/// Failed calls in a row, with no answer between them, after which the client is rebuilt.
pub(super) const REBUILD_AFTER: u32 = 3;

/// True for failures that say the connection, not the command, is at fault: timeouts, I/O,
/// dropped or refused connections, a cluster that is down or moving (CLUSTERDOWN, TRYAGAIN),
/// a primary the sentinels cannot name, or a demoted primary (READONLY, MASTERDOWN).
pub(super) fn is_connection_class(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.kind(),
            ErrorKind::ClusterConnectionNotFound
                | ErrorKind::MasterNameNotFoundBySentinel
                | ErrorKind::Server(
                    ServerErrorKind::ClusterDown
                        | ServerErrorKind::TryAgain
                        | ServerErrorKind::MasterDown
                        | ServerErrorKind::ReadOnly
                )
        )
}

/// The error a call bounded by the connection's own timeout ends with.
pub(super) fn timed_out(what: &str, timeout: Duration) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("{what}: no answer within {timeout:?}"),
    ))
}

/// Consecutive connection-class failures of one client (module doc).
#[derive(Debug)]
pub(super) struct Streak {
    failures: AtomicU32,
    rebuilding: AtomicBool,
    /// When the last rebuild attempt ended.
    last_attempt: Mutex<Option<Instant>>,
    cooldown: Duration,
}

impl Streak {
    /// A streak whose rebuilds are at least `cooldown` apart.
    pub(super) fn new(cooldown: Duration) -> Self {
        Self {
            failures: AtomicU32::new(0),
            rebuilding: AtomicBool::new(false),
            last_attempt: Mutex::new(None),
            cooldown,
        }
    }

    /// Counts `result`. `Some(failures in a row)` means the caller is to rebuild the client
    /// now and then call [`Streak::rebuilt`]; nobody else gets `Some` meanwhile.
    pub(super) fn record<T>(&self, result: &RedisResult<T>) -> Option<u32> {
        match result {
            Err(e) if is_connection_class(e) => self.failed(),
            // An answer, even an error reply, means the connection works.
            _ => {
                self.failures.store(0, Ordering::Relaxed);
                None
            }
        }
    }

    /// Counts one connection-class failure (see [`Streak::record`]).
    pub(super) fn failed(&self) -> Option<u32> {
        let failures = self
            .failures
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        if failures < REBUILD_AFTER {
            return None;
        }
        let cooling = self
            .last_attempt
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|at| at.elapsed() < self.cooldown);
        if cooling
            || self
                .rebuilding
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return None;
        }
        Some(failures)
    }

    /// Ends the rebuild [`Streak::record`] handed out; `ok` (a new client is in place) starts
    /// a new count.
    pub(super) fn rebuilt(&self, ok: bool) {
        *self
            .last_attempt
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        if ok {
            self.failures.store(0, Ordering::Relaxed);
        }
        self.rebuilding.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeout() -> RedisResult<()> {
        Err(timed_out("PING", Duration::from_millis(1)))
    }

    #[test]
    fn a_rebuild_is_handed_out_once_after_failures_in_a_row() {
        let streak = Streak::new(Duration::from_secs(60));
        for _ in 1..REBUILD_AFTER {
            assert_eq!(streak.record(&timeout()), None);
        }
        assert_eq!(streak.record(&timeout()), Some(REBUILD_AFTER));
        // Single-flight: others fail meanwhile without starting a second one.
        assert_eq!(streak.record(&timeout()), None);
        streak.rebuilt(true);
        // Cooldown: failures right after a rebuild do not start another.
        for _ in 0..2 * REBUILD_AFTER {
            assert_eq!(streak.record(&timeout()), None);
        }
    }

    #[test]
    fn any_answer_resets_the_count() {
        let streak = Streak::new(Duration::ZERO);
        for _ in 0..5 {
            for _ in 1..REBUILD_AFTER {
                assert_eq!(streak.record(&timeout()), None);
            }
            assert_eq!(streak.record(&Ok(())), None);
            let script_error: RedisResult<()> =
                Err(RedisError::from((ErrorKind::Client, "a script failed")));
            assert_eq!(streak.record(&script_error), None);
        }
        assert!(is_connection_class(&RedisError::from((
            ErrorKind::Server(ServerErrorKind::ClusterDown),
            "CLUSTERDOWN"
        ))));
    }
}
