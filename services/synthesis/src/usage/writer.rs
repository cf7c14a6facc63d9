//! The usage stream writer (`--usage-store`): usage records as entries of
//! [`USAGE_STREAM`] (field [`USAGE_FIELD`], JSON), on any of the three Redis topologies
//! (`voxpool_redis`).
//!
//! - A Charge is written at once and awaited ([`Writer::charge`]) once the attempt holds a
//!   key and before the vendor has its text (the request's body waits for it): a replica
//!   killed after sending leaves it for the ledger, one killed while waiting for a key
//!   leaves nothing (the vendor was sent nothing). Charges have a connection of their own,
//!   so they never wait behind a batch's `WAIT` for a replica; each waits for a replica of
//!   its own (Sentinel, Cluster: [`super::append`]) up to 250 ms, and goes on without one.
//! - Settles and Dones are queued ([`Writer::queue`]) to one background task that sends them
//!   in batches (one script call of up to [`BATCH`] XADDs) in the order they were queued,
//!   each batch kept until a replica holds it (Sentinel, Cluster): a failover keeps it. The
//!   first record after a quiet spell waits [`LINGER`] for company, so a light load does not
//!   cost a script call per request.
//! - A Charge the store does not take: with `[usage] on_store_down = "refuse"` (the default,
//!   [`Writer::charge`]) it is tried again with back-off until the attempt's bound, and the
//!   vendor is sent nothing until it is written (the call fails when it never is), so a
//!   replica killed at any moment leaves every text a vendor was sent on the stream. With
//!   `serve` metering never takes synthesis down: the Charge is queued instead (behind
//!   whatever is already waiting, so its Settle never precedes it) and the call goes on.
//! - The queue is retried with back-off, and past [`Writer::capacity`] entries new ones are
//!   dropped, counted (`voxpool.usage.records_dropped`) and logged at most once per 10 s.
//! - [`Writer::drain`] sends what is queued at shutdown, within a bound.
//!
//! The stream is never trimmed here: the catalog's consumer trims what it has committed.
//! A batch whose answer was lost may be sent again; records are idempotent by
//! `(record_id, attempt, kind)`, so the ledger counts them once.

use std::{
    collections::VecDeque,
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use super::append::{Replicated, append};
use tokio::sync::Notify;
use voxpool_config::StoreDown;
use voxpool_domain::usage::{USAGE_FIELD, USAGE_STREAM, UsageEvent};
use voxpool_redis::{
    Conn,
    log_limit::{Admit, Limiter},
    redact,
};

/// Most records sent in one call.
pub const BATCH: usize = 256;
/// Records kept while Redis does not answer, by default.
pub const DEFAULT_CAPACITY: usize = 100_000;
/// How long one write may take before it counts as failed.
const STORE_TIMEOUT: Duration = Duration::from_millis(500);
/// How long a Charge waits for a store that was failing ([`Writer::write_now`]).
const UNHEALTHY_TIMEOUT: Duration = Duration::from_millis(50);

/// How often a store that did not take a Charge is asked whether it answers again.
const PROBE_EVERY: Duration = Duration::from_millis(250);

/// Whether the store answers a `PING` within the store timeout.
async fn probe(conn: &Conn) -> bool {
    let ping = redis::cmd("PING");
    matches!(
        tokio::time::timeout(STORE_TIMEOUT, conn.query(&ping)).await,
        Ok(Ok(_))
    )
}

/// How long the first record after a quiet spell waits for others to share its batch.
const LINGER: Duration = Duration::from_millis(5);

/// The writer's two connections to the store. A batch's `WAIT` holds its connection until a
/// replica acknowledges (up to [`REPLICA_ACK_TIMEOUT`]); Charges, which a request awaits
/// before its vendor call, go on their own so they never queue behind it.
struct Conns {
    charges: Conn,
    batches: Conn,
}

impl Conns {
    async fn connect(url: &str) -> Result<Self, String> {
        Ok(Self {
            charges: Conn::connect(url, STORE_TIMEOUT).await?,
            batches: Conn::connect(url, STORE_TIMEOUT).await?,
        })
    }
}

/// The writer (module doc). Cheap to clone.
#[derive(Clone)]
pub struct Writer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("store", &self.inner.shown)
            .finish_non_exhaustive()
    }
}

struct Inner {
    url: String,
    shown: String,
    conns: OnceLock<Conns>,
    queue: Mutex<VecDeque<String>>,
    capacity: usize,
    notify: Notify,
    /// Whether the last Charge got its answer in time (its bound: [`Writer::write_now`]).
    charges_answer: AtomicBool,
    dropped: AtomicU64,
    /// `[usage] on_store_down`.
    store_down: StoreDown,
    errors: Limiter,
}

impl Writer {
    /// A writer to the Redis at `url` (the scheduler's `--store` forms), connecting in the
    /// background: synthesis serves whether or not it is up. Errors: a URL no retry can fix.
    pub fn start(url: &str, capacity: usize, store_down: StoreDown) -> Result<Self, String> {
        Conn::check_url(url).map_err(|e| format!("--usage-store {}: {e}", redact(url)))?;
        let writer = Self {
            inner: Arc::new(Inner {
                url: url.to_owned(),
                shown: redact(url),
                conns: OnceLock::new(),
                queue: Mutex::new(VecDeque::new()),
                capacity: capacity.max(1),
                notify: Notify::new(),
                charges_answer: AtomicBool::new(false),
                dropped: AtomicU64::new(0),
                store_down,
                errors: Limiter::new(Duration::from_secs(10)),
            }),
        };
        tokio::spawn(run(writer.inner.clone()));
        Ok(writer)
    }

    /// The store, as logs show it.
    pub fn shown(&self) -> &str {
        &self.inner.shown
    }

    /// Records kept while the store does not answer.
    pub fn capacity(&self) -> usize {
        self.inner.capacity
    }

    /// Records waiting to be sent.
    pub fn pending(&self) -> usize {
        self.inner.queue.lock().map_or(0, |q| q.len())
    }

    /// Records dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.inner.dropped.load(Ordering::Relaxed)
    }

    /// Writes `event` now and waits for Redis (at most the store timeout); queued instead
    /// when Redis is not answering (module doc). Records already waiting in the queue do not
    /// hold it back: under load the queue is seldom empty, and a Charge only queued is lost
    /// with a killed replica while its vendor call goes on. (It may then reach the stream
    /// before older records of other requests; the ledger does not depend on their order.)
    pub async fn write_now(&self, event: &UsageEvent) {
        let Some(json) = encode(event) else { return };
        let inner = &self.inner;
        let Some(Conns { charges: conn, .. }) = inner.conns.get() else {
            inner.push(json);
            return;
        };
        // Only a Charge on the stream survives this replica, so it gets the full bound while
        // Charges are answered, whatever the background batches meet (a slow replica, a slow
        // answer under load); once a Charge went unanswered, the next waits at most
        // `UNHEALTHY_TIMEOUT`, so a store that stopped answering costs each call little.
        let bound = if inner.charges_answer.load(Ordering::Relaxed) {
            STORE_TIMEOUT
        } else {
            UNHEALTHY_TIMEOUT
        };
        let mut cmd = redis::cmd("XADD");
        cmd.arg(USAGE_STREAM).arg("*").arg(USAGE_FIELD).arg(&json);
        let why = match tokio::time::timeout(bound, conn.query(&cmd)).await {
            Ok(Ok(_)) => {
                inner.charges_answer.store(true, Ordering::Relaxed);
                return;
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => "no answer in time".to_owned(),
        };
        inner.charges_answer.store(false, Ordering::Relaxed);
        inner.failed(&why);
        inner.push(json);
    }

    /// Writes the Charge `event` before its vendor call may go: with `on_store_down =
    /// "refuse"`, tries until it is written or `until` passes (then the error says why; the
    /// vendor must be sent nothing); with `serve`, [`Writer::write_now`] and always `Ok`.
    pub async fn charge(
        &self,
        event: &UsageEvent,
        until: tokio::time::Instant,
    ) -> Result<(), String> {
        if self.inner.store_down == StoreDown::Serve {
            self.write_now(event).await;
            return Ok(());
        }
        let Some(json) = encode(event) else {
            return Ok(());
        };
        let inner = &self.inner;
        let records = [json];
        let mut backoff = Duration::from_millis(20);
        loop {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            // Held by a replica too where there is one (`append`): a failover right after it
            // keeps the Charge of a text the vendor is about to have.
            let why = match inner.conns.get() {
                None => "never connected since start-up: it refuses or does not answer".to_owned(),
                Some(Conns { charges, .. }) => {
                    let bound = STORE_TIMEOUT.min(left);
                    match tokio::time::timeout(bound, append(charges, &records)).await {
                        Ok(Ok(held)) => {
                            inner.charges_answer.store(true, Ordering::Relaxed);
                            if let Replicated::Short(why) = held {
                                // On the primary: the call goes on rather than wait on a
                                // replica that lags.
                                inner.lagging(&why);
                            }
                            return Ok(());
                        }
                        Ok(Err(e)) => e.to_string(),
                        Err(_) => "no answer in time".to_owned(),
                    }
                }
            };
            inner.failed(&why);
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                // Calls wait before taking a key until the store answers again (`answers`).
                inner.charges_answer.store(false, Ordering::Relaxed);
                return Err(why);
            }
            tokio::time::sleep(backoff.min(left)).await;
            backoff = (backoff * 2).min(STORE_TIMEOUT);
        }
    }

    /// Whether calls may go on to a key: the store took the last Charge (or answers again
    /// since), or `on_store_down = "serve"`. A store that did not take a Charge is probed in
    /// the background until it answers.
    pub fn answers(&self) -> bool {
        self.inner.store_down == StoreDown::Serve
            || self.inner.charges_answer.load(Ordering::Relaxed)
    }

    /// Queues `event` for the background task.
    pub fn queue(&self, event: &UsageEvent) {
        if let Some(json) = encode(event) {
            self.inner.push(json);
        }
    }

    /// Sends what is queued, waiting at most `bound`; returns the records left unsent.
    pub async fn drain(&self, bound: Duration) -> usize {
        let until = tokio::time::Instant::now() + bound;
        while self.pending() > 0 && tokio::time::Instant::now() < until {
            self.inner.notify.notify_one();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let left = self.pending();
        if left > 0 {
            tracing::error!(store = %self.inner.shown, records = left, "usage records not written at shutdown: the usage store did not answer");
        }
        left
    }
}

fn encode(event: &UsageEvent) -> Option<String> {
    serde_json::to_string(event)
        .inspect_err(|e| tracing::error!(error = %e, "usage record not encodable"))
        .ok()
}

impl Inner {
    fn push(&self, json: String) {
        // Only the first record after the queue ran empty wakes the writer: it takes
        // whatever came meanwhile with it, and a queue already waiting is sent next anyway.
        let (full, first) = match self.queue.lock() {
            Ok(mut q) if q.len() < self.capacity => {
                q.push_back(json);
                (false, q.len() == 1)
            }
            _ => (true, false),
        };
        if full {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            crate::metrics::usage_dropped();
            if matches!(self.errors.admit(std::time::Instant::now()), Admit::Pass) {
                tracing::error!(store = %self.shown, capacity = self.capacity, dropped = self.dropped.load(Ordering::Relaxed), held = self.errors.take_held(), "usage records dropped: the usage store has not answered and the queue is full");
            }
        }
        if first {
            self.notify.notify_one();
        }
    }

    /// A batch the primary took but too few replicas acknowledged: logged like a failure,
    /// but the store still answers, so a Charge keeps its full bound ([`Writer::write_now`]).
    fn lagging(&self, why: &str) {
        if matches!(self.errors.admit(std::time::Instant::now()), Admit::Pass) {
            tracing::warn!(store = %self.shown, error = %why, pending = self.queue.lock().map_or(0, |q| q.len()), "usage records not yet held by a replica; sending them again");
        }
    }

    fn failed(&self, why: &str) {
        if matches!(self.errors.admit(std::time::Instant::now()), Admit::Pass) {
            tracing::error!(store = %self.shown, error = %why, pending = self.queue.lock().map_or(0, |q| q.len()), "usage store write failed; records are kept and retried");
        }
    }

    /// The first `BATCH` records waiting, without taking them.
    fn peek(&self) -> Vec<String> {
        self.queue
            .lock()
            .map(|q| q.iter().take(BATCH).cloned().collect())
            .unwrap_or_default()
    }

    fn sent(&self, n: usize) {
        if let Ok(mut q) = self.queue.lock() {
            let n = n.min(q.len());
            q.drain(..n);
        }
    }
}

/// The background task: connects, then sends the queue in batches, backing off while the
/// store does not answer.
async fn run(inner: Arc<Inner>) {
    let mut backoff = Duration::from_millis(50);
    let mut idle = true;
    loop {
        let conn = match inner.conns.get() {
            Some(conns) => conns.batches.clone(),
            None => match Conns::connect(&inner.url).await {
                Ok(conns) => {
                    tracing::info!(store = %inner.shown, "usage store connected");
                    inner.charges_answer.store(true, Ordering::Relaxed);
                    inner.conns.get_or_init(|| conns).batches.clone()
                }
                Err(e) => {
                    inner.failed(&e);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    continue;
                }
            },
        };
        let mut answers = inner.charges_answer.load(Ordering::Relaxed);
        if !answers && probe(&conn).await {
            // Calls waiting for the store (`Writer::answers`) may ask for keys again, whatever
            // the batches meet meanwhile.
            tracing::info!(store = %inner.shown, "usage store answers again");
            inner.charges_answer.store(true, Ordering::Relaxed);
            answers = true;
        }
        let batch = inner.peek();
        if batch.is_empty() {
            let wait = if answers {
                Duration::from_secs(1)
            } else {
                PROBE_EVERY
            };
            let _ = tokio::time::timeout(wait, inner.notify.notified()).await;
            idle = true;
            continue;
        }
        if idle && batch.len() < BATCH {
            // The first record after a quiet spell: let the requests ending meanwhile join
            // its batch (their Charges are on the stream already).
            idle = false;
            tokio::time::sleep(LINGER).await;
            continue;
        }
        idle = false;
        let sent = tokio::time::timeout(STORE_TIMEOUT * 2, append(&conn, &batch)).await;
        if matches!(sent, Ok(Ok(_))) {
            // The primary answered: a Charge written now is held there.
            inner.charges_answer.store(true, Ordering::Relaxed);
        }
        match sent {
            Ok(Ok(Replicated::Yes)) => {
                inner.sent(batch.len());
                if backoff > Duration::from_millis(50) {
                    tracing::info!(store = %inner.shown, pending = inner.queue.lock().map_or(0, |q| q.len()), "usage store answers again; the records kept meanwhile are being sent");
                }
                backoff = Duration::from_millis(50);
            }
            Ok(Ok(Replicated::Short(why))) => {
                // A slow replica, not a store that does not answer: the batch is sent again
                // (the ledger counts a record once) and Charges keep their full bound.
                inner.lagging(&why);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
            Ok(Err(e)) => {
                inner.failed(&e.to_string());
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
            Err(_) => {
                inner.failed("no answer in time");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}
