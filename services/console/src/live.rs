//! The pools page's live feed: one poller per console process, however many browsers watch.
//!
//! Invariant: the scheduler is asked for the pools' status (one ListPools call answers every
//! pool) at most once per second in total: every read, the poller's and a page load's, goes
//! through [`Hub::refresh`], which starts a call only a full [`PERIOD`] after the previous one
//! started, and a page load takes the last answer while it is younger than [`STALE`]. The
//! poller runs only while a browser is subscribed ([`Hub::subscribe`]), and each answer goes
//! to every subscriber as one pre-serialized server-sent event.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use serde::Serialize;
use tokio::sync::{Mutex, Notify, watch};

use crate::{
    backend::{Backend, BackendError},
    view::PoolView,
};

/// Least time between two status calls.
pub const PERIOD: Duration = Duration::from_secs(1);

/// A page load takes the last answer while it is younger than this.
pub const STALE: Duration = Duration::from_secs(2);

/// One answer of the scheduler, as pages and the feed use it.
#[derive(Debug)]
pub struct Status {
    /// The pools, or why the scheduler did not answer.
    pub pools: Result<Vec<PoolView>, BackendError>,
    /// The server-sent event's data (compact JSON).
    pub event: String,
    /// When the call that produced it started.
    pub at: Instant,
}

/// The live feed's state.
#[derive(Debug)]
pub struct Hub {
    backend: Backend,
    latest: watch::Sender<Option<Arc<Status>>>,
    /// Held while a call is under way (single flight).
    calling: Mutex<Option<Instant>>,
    watched: Notify,
}

/// The feed's JSON for one key: `[key, in flight, effective, capacity, state, cooling ms]`.
#[derive(Serialize)]
struct KeyEvent<'a>(&'a str, i32, i32, i32, &'a str, i64);

#[derive(Serialize)]
struct PoolEvent<'a> {
    pool: &'a str,
    in_flight: i32,
    capacity: i32,
    waiting: i32,
    keys: Vec<KeyEvent<'a>>,
}

#[derive(Serialize)]
struct Event<'a> {
    pools: Vec<PoolEvent<'a>>,
    error: Option<String>,
}

fn event(pools: &Result<Vec<PoolView>, BackendError>) -> String {
    let event = match pools {
        Ok(pools) => Event {
            pools: pools
                .iter()
                .map(|p| PoolEvent {
                    pool: &p.pool,
                    in_flight: p.in_flight,
                    capacity: p.capacity,
                    waiting: p.waiting,
                    keys: p
                        .keys
                        .iter()
                        .map(|k| {
                            KeyEvent(
                                &k.key,
                                k.in_flight,
                                k.effective,
                                k.capacity,
                                k.state,
                                k.cooling_ms,
                            )
                        })
                        .collect(),
                })
                .collect(),
            error: None,
        },
        Err(e) => Event {
            pools: Vec::new(),
            error: Some(e.summary()),
        },
    };
    serde_json::to_string(&event).unwrap_or_else(|_| "{}".to_owned())
}

impl Hub {
    /// The feed over `backend`; its poller starts with [`Hub::run`].
    pub fn new(backend: Backend) -> Arc<Self> {
        Arc::new(Self {
            backend,
            latest: watch::channel(None).0,
            calling: Mutex::new(None),
            watched: Notify::new(),
        })
    }

    /// Polls once per [`PERIOD`] while anyone subscribes; forever (spawn it).
    pub async fn run(self: Arc<Self>) {
        loop {
            if self.latest.receiver_count() == 0 {
                self.watched.notified().await;
                continue;
            }
            self.refresh().await;
        }
    }

    /// A receiver of every new answer (the poller runs while one lives).
    pub fn subscribe(&self) -> watch::Receiver<Option<Arc<Status>>> {
        let receiver = self.latest.subscribe();
        self.watched.notify_one();
        receiver
    }

    /// The last answer if younger than [`STALE`], else a new one.
    pub async fn current(&self) -> Arc<Status> {
        if let Some(status) = self.latest.borrow().clone()
            && status.at.elapsed() < STALE
        {
            return status;
        }
        self.refresh().await
    }

    /// A new answer, started at least [`PERIOD`] after the previous call started (waiting
    /// for that if needed); a caller that waited behind another call takes its answer.
    pub async fn refresh(&self) -> Arc<Status> {
        let asked = Instant::now();
        let mut last = self.calling.lock().await;
        if let Some(status) = self.latest.borrow().clone()
            && status.at >= asked
        {
            return status;
        }
        if let Some(previous) = *last {
            tokio::time::sleep_until((previous + PERIOD).into()).await;
        }
        let at = Instant::now();
        *last = Some(at);
        let pools = self.backend.pools().await;
        let status = Arc::new(Status {
            event: event(&pools),
            pools,
            at,
        });
        self.latest.send_replace(Some(status.clone()));
        status
    }
}
