//! Replica acknowledgements, group-committed: one `WAIT` answers every grant written before it.
//!
//! Redis's `WAIT n t` blocks the client (our one multiplexed connection) until `n` replicas hold
//! *every write that client sent before it*, or `t` passes. One WAIT per grant would therefore
//! serialize the whole connection behind replication round trips. Instead, per pool (in a
//! cluster a pool's writes all go to its slot's primary), at most one WAIT is in flight: a grant
//! whose write was answered before that WAIT was sent is covered by its result; a grant written
//! later waits for the next WAIT, which the first such grant sends.
//!
//! Invariant guarded: a grant is reported acknowledged only by a WAIT *sent after its write's
//! reply arrived* on the same connection, and only if that WAIT counted at least the replicas
//! the grant needs. WAITs are numbered as they are sent (`started`); a grant notes the number
//! after its write, and only a WAIT with a higher number counts for it.
//!
//! A connection replaced between a write and its WAIT (a rebuilt cluster connection, a new
//! Sentinel primary connection: `conn::Conn::generation`) would make the WAIT count nothing of
//! that write, so a WAIT counts only for grants whose write went to the connection of the same
//! generation; the others fail (withdrawn, retried by the caller). What it cannot see: the
//! cluster client reconnecting one node by itself between a write and its WAIT. That needs the
//! connection to break in that sub-millisecond gap and the primary to die before replicating:
//! a double fault.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::{sync::watch, time::Instant};

use super::conn::Conn;

/// The group commit of one pool (module doc).
#[derive(Debug)]
struct Batch {
    /// WAITs sent so far; the next one gets `started + 1`.
    started: AtomicU64,
    /// Held by the grant whose WAIT is in flight.
    leader: tokio::sync::Mutex<()>,
    /// `(number, replicas acknowledged, connection generation)` of the last WAIT that
    /// finished; -1 replicas = it failed.
    done: watch::Sender<(u64, i64, u64)>,
}

/// How a wait for acknowledgements ended.
#[derive(Debug)]
pub enum AckError {
    /// The newest WAIT that covered the grant counted too few replicas in time.
    Short {
        /// Replicas that acknowledged.
        acked: i64,
    },
    /// Redis failed the WAIT.
    Redis(redis::RedisError),
}

/// Group commits of every pool of one store (module doc).
#[derive(Debug, Default)]
pub struct Acks {
    batches: Mutex<HashMap<String, Arc<Batch>>>,
    /// When a withdrawal was last logged (they come in bursts: one per grant).
    warned: Mutex<Option<Instant>>,
}

impl Acks {
    /// True at most once per 10 s: whether to log this withdrawal.
    pub fn should_warn(&self) -> bool {
        let mut warned = self
            .warned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        if warned.is_some_and(|at| now.duration_since(at) < Duration::from_secs(10)) {
            return false;
        }
        *warned = Some(now);
        true
    }

    fn batch(&self, pool: &str) -> Arc<Batch> {
        let mut batches = self
            .batches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        batches
            .entry(pool.to_owned())
            .or_insert_with(|| {
                Arc::new(Batch {
                    started: AtomicU64::new(0),
                    leader: tokio::sync::Mutex::new(()),
                    done: watch::channel((0, 0, 0)).0,
                })
            })
            .clone()
    }

    /// Waits until `want` replicas hold every write `conn` answered for `pool` so far, at most
    /// `timeout`. Call it after the write's reply arrived. `key` routes the WAIT (a key of the
    /// pool). Errors: [`AckError`].
    pub async fn wait(
        &self,
        conn: &Conn,
        pool: &str,
        key: &str,
        want: u32,
        timeout: Duration,
    ) -> Result<(), AckError> {
        let batch = self.batch(pool);
        // The connection our write went to, and WAITs numbered above this one are sent after
        // our write was answered.
        let generation = conn.generation();
        let ticket = batch.started.load(Ordering::SeqCst);
        let deadline = Instant::now() + timeout;
        let mut finished = batch.done.subscribe();
        let mut acked = 0;
        loop {
            let (number, count, waited_on) = *finished.borrow_and_update();
            if number > ticket {
                if waited_on != generation {
                    return Err(AckError::Redis(redis::RedisError::from(
                        std::io::Error::other(
                            "the connection that wrote the grant was replaced before its WAIT; it cannot be checked",
                        ),
                    )));
                }
                if count >= i64::from(want) {
                    return Ok(());
                }
                acked = count.max(0);
            }
            if Instant::now() >= deadline {
                return Err(AckError::Short { acked });
            }
            if let Ok(_leading) = batch.leader.try_lock() {
                let number = batch.started.fetch_add(1, Ordering::SeqCst) + 1;
                let left = deadline.saturating_duration_since(Instant::now());
                let result = conn.wait_replicas(key, want, left, generation).await;
                let count = result.as_ref().map_or(-1, |n| *n);
                batch.done.send_replace((number, count, generation));
                return match result {
                    Ok(n) if n >= i64::from(want) => Ok(()),
                    Ok(n) => Err(AckError::Short { acked: n }),
                    Err(e) => Err(AckError::Redis(e)),
                };
            }
            tokio::select! {
                changed = finished.changed() => {
                    if changed.is_err() {
                        return Err(AckError::Short { acked });
                    }
                }
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }
}
