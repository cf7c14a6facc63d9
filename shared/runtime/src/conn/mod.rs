//! Connection limits every listener shares (the four gRPC ports and the HTTP front): a cap on
//! open connections with a clear refusal, a deadline for a connection's first request, an idle
//! timeout, a per-pause request-body timeout and HTTP/2 keep-alive pings.
//!
//! - **Head timeout** (`--head-timeout`, 10 s): a new connection must deliver an HTTP/1.1
//!   request head, or the HTTP/2 preface and its first SETTINGS frame, within it; on a
//!   plaintext HTTP/1.1 connection every later head must be whole within it of its first byte
//!   (an idle keep-alive connection waits for the idle timeout, not this). A slowloris client
//!   that trickles a head is closed when it runs out. On a TLS listener the bytes are
//!   encrypted, so a later head is bounded by hyper's `header_read_timeout` from the moment the
//!   connection waits for it.
//! - **Idle timeout** (`--idle-timeout`, 2 minutes): a connection with no request in flight for
//!   that long is closed. A request is in flight from its head until its response body's last
//!   byte went out, so a long stream is never idle. Two minutes is above the idle timeouts of
//!   the load balancers voxpool runs behind (60 s on AWS ALB, 75 s for nginx's
//!   `keepalive_timeout`), so the balancer closes an idle connection first and never reuses one
//!   this side is closing; clients reconnect transparently (gRPC channels, HTTP pools).
//! - **Body timeout** (`--body-timeout`, 30 s): a request body must arrive whole within it,
//!   counted from the request's head; one trickled slower fails its request (a byte every 20 s
//!   used to hold a connection for the whole request timeout).
//! - **Connection cap** (`--max-connections`, default half the process's open-file limit, at
//!   most 10,000): a connection beyond it is answered with one refusal (gRPC UNAVAILABLE, HTTP
//!   503) and closed, so the process keeps descriptors for its own upstream connections and
//!   files. On a TLS gRPC listener the refusal is a close (the handshake belongs to tonic).
//! - **HTTP/2 keep-alive** (`--http2-keepalive-interval` 30 s, `--http2-keepalive-timeout`
//!   10 s): a peer that does not answer a PING in time is gone and its connection closed.
//!
//! Every close is counted in `voxpool.connections.closed` (attributes `listener`, `reason`:
//! `head_timeout`, `idle`, `refused`).

mod io;
mod refuse;
mod track;

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use opentelemetry::{KeyValue, global, metrics::Counter};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::{OwnedSemaphorePermit, Semaphore},
};

pub use self::{
    io::{ConnState, Guarded},
    refuse::{grpc_refusal, serve_refusal},
    track::{BodyTimeout, InFlight, TrackLayer, Tracked},
};

/// Most connections one listener keeps open when `--max-connections` is not set.
const AUTO_MAX_CONNECTIONS: usize = 10_000;
/// Refusals answered at once per listener; beyond it an over-cap connection is closed at once.
const MAX_REFUSALS: usize = 64;

/// Connection flags every server binary flattens into its CLI (module doc).
#[derive(Clone, Debug, clap::Args)]
pub struct ConnFlags {
    /// How long a new connection may take to deliver its first request head (HTTP/1.1) or the
    /// HTTP/2 preface and first SETTINGS, and an HTTP/1.1 connection its next request head;
    /// then it is closed.
    #[arg(long, env = "VOXPOOL_HEAD_TIMEOUT", default_value = "10s", value_parser = crate::duration::positive_duration)]
    pub head_timeout: Duration,
    /// A connection with no request in flight for this long is closed.
    #[arg(long, env = "VOXPOOL_IDLE_TIMEOUT", default_value = "2m", value_parser = crate::duration::positive_duration)]
    pub idle_timeout: Duration,
    /// A request body must arrive whole within this, counted from the request's head.
    #[arg(long, env = "VOXPOOL_BODY_TIMEOUT", default_value = "30s", value_parser = crate::duration::positive_duration)]
    pub body_timeout: Duration,
    /// Connections one listener keeps open; one more is refused (gRPC UNAVAILABLE, HTTP 503)
    /// and closed. Default: half the process's open-file limit, at most 10000.
    #[arg(long, env = "VOXPOOL_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Time between HTTP/2 PINGs the server sends on a connection.
    #[arg(long, env = "VOXPOOL_HTTP2_KEEPALIVE_INTERVAL", default_value = "30s", value_parser = crate::duration::positive_duration)]
    pub http2_keepalive_interval: Duration,
    /// How long a PING may go unanswered before the connection is closed.
    #[arg(long, env = "VOXPOOL_HTTP2_KEEPALIVE_TIMEOUT", default_value = "10s", value_parser = crate::duration::positive_duration)]
    pub http2_keepalive_timeout: Duration,
}

impl Default for ConnFlags {
    fn default() -> Self {
        Self {
            head_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            body_timeout: Duration::from_secs(30),
            max_connections: None,
            http2_keepalive_interval: Duration::from_secs(30),
            http2_keepalive_timeout: Duration::from_secs(10),
        }
    }
}

impl ConnFlags {
    /// The connection cap: `--max-connections`, else half the open-file limit (module doc).
    pub fn max_connections(&self) -> usize {
        self.max_connections
            .unwrap_or_else(|| (open_file_limit() / 2).clamp(16, AUTO_MAX_CONNECTIONS))
            .max(1)
    }
}

/// The process's soft limit on open files (`RLIMIT_NOFILE`), or 1024 when unknown.
fn open_file_limit() -> usize {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| {
            limits
                .lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3).map(str::to_owned))
        })
        .and_then(|soft| soft.parse().ok())
        .unwrap_or(1024)
}

/// Why a connection was closed (the `reason` attribute of `voxpool.connections.closed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// No request head (or HTTP/2 preface) within `--head-timeout`.
    HeadTimeout,
    /// No request in flight for `--idle-timeout`.
    Idle,
    /// Over `--max-connections`.
    Refused,
}

impl Closed {
    fn as_str(self) -> &'static str {
        match self {
            Self::HeadTimeout => "head_timeout",
            Self::Idle => "idle",
            Self::Refused => "refused",
        }
    }
}

/// One listener's connection bookkeeping (module doc): the cap, the open connections by peer
/// address (how [`TrackLayer`] finds a gRPC request's connection), the limits.
pub struct Gate {
    listener: &'static str,
    tls: bool,
    flags: ConnFlags,
    cap: usize,
    slots: Arc<Semaphore>,
    refusals: Arc<Semaphore>,
    open: Mutex<HashMap<SocketAddr, Weak<ConnState>>>,
    closed: Counter<u64>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("listener", &self.listener)
            .field("cap", &self.cap)
            .finish_non_exhaustive()
    }
}

impl Gate {
    /// The gate of listener `listener` (`grpc`, `http`: the metric attribute) under `flags`;
    /// `tls`: its connections are encrypted, so their requests' bytes cannot be told apart
    /// from HTTP/2's own frames (the HTTP/1.1 head rule is left to hyper).
    pub fn new(listener: &'static str, flags: &ConnFlags, tls: bool) -> Arc<Self> {
        let cap = flags.max_connections();
        Arc::new(Self {
            listener,
            tls,
            flags: flags.clone(),
            cap,
            slots: Arc::new(Semaphore::new(cap)),
            refusals: Arc::new(Semaphore::new(MAX_REFUSALS)),
            open: Mutex::new(HashMap::new()),
            closed: global::meter("voxpool-runtime")
                .u64_counter("voxpool.connections.closed")
                .with_description(
                    "Connections the server closed: head_timeout, idle, refused (over the cap)",
                )
                .build(),
        })
    }

    /// The limits this gate applies.
    pub fn flags(&self) -> &ConnFlags {
        &self.flags
    }

    /// The connection cap.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Takes `tcp` in under the cap, or hands it back (with a slot to answer its refusal in,
    /// when one is free) when the listener is full.
    pub fn admit(self: &Arc<Self>, tcp: TcpStream) -> Result<Guarded<TcpStream>, Refused> {
        let _ = tcp.set_nodelay(true);
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            self.count(Closed::Refused);
            let answer = self.refusals.clone().try_acquire_owned().ok();
            return Err(Refused { tcp, answer });
        };
        let peer = tcp.peer_addr().ok();
        let state = ConnState::new();
        if let Some(peer) = peer {
            self.lock_open().insert(peer, Arc::downgrade(&state));
        }
        Ok(Guarded::new(tcp, state, self.clone(), peer, slot))
    }

    /// The state of the open connection from `peer`, if this gate holds one.
    pub fn connection(&self, peer: SocketAddr) -> Option<Arc<ConnState>> {
        self.lock_open().get(&peer).and_then(Weak::upgrade)
    }

    fn forget(&self, peer: SocketAddr, state: &Arc<ConnState>) {
        let mut open = self.lock_open();
        if open
            .get(&peer)
            .is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(state)))
        {
            open.remove(&peer);
        }
    }

    fn lock_open(&self) -> std::sync::MutexGuard<'_, HashMap<SocketAddr, Weak<ConnState>>> {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn count(&self, why: Closed) {
        self.closed.add(
            1,
            &[
                KeyValue::new("listener", self.listener),
                KeyValue::new("reason", why.as_str()),
            ],
        );
    }

    /// The accepted-connection stream for tonic's `serve_with_incoming*`: connections under
    /// the cap, guarded; one over it is answered with a gRPC refusal on a plaintext listener
    /// (`tls` false) or closed (`tls` true).
    pub fn incoming(
        self: Arc<Self>,
        listener: TcpListener,
        tls: bool,
    ) -> impl futures::Stream<Item = Result<Guarded<TcpStream>, std::io::Error>> + Send + 'static
    {
        futures::stream::unfold((self, listener), move |(gate, listener)| async move {
            loop {
                let tcp = match listener.accept().await {
                    Ok((tcp, _)) => tcp,
                    Err(e) => {
                        // Out of descriptors and the like: pause rather than spin.
                        tracing::warn!(error = %e, listener = gate.listener, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                match gate.admit(tcp) {
                    Ok(conn) => return Some((Ok(conn), (gate, listener))),
                    Err(refused) if !tls => {
                        let message = gate.refusal_message();
                        refused.answer(move || grpc_refusal(&message));
                    }
                    Err(_) => {}
                }
            }
        })
    }

    /// What a refused caller reads.
    pub fn refusal_message(&self) -> String {
        format!(
            "this server has {} connections open (--max-connections): retry with backoff, and \
             reuse connections instead of opening one per request",
            self.cap
        )
    }
}

/// A connection over the cap (see [`Gate::admit`]).
#[derive(Debug)]
pub struct Refused {
    /// The connection.
    pub tcp: TcpStream,
    /// A refusal slot: `None` when too many refusals are under way (close at once).
    pub answer: Option<OwnedSemaphorePermit>,
}

impl Refused {
    /// Answers every request on the connection with `respond()` for a short while, then closes
    /// it; closes at once when no refusal slot was free.
    pub fn answer<B>(self, respond: impl Fn() -> http::Response<B> + Clone + Send + Sync + 'static)
    where
        B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let Some(slot) = self.answer else { return };
        let tcp = self.tcp;
        tokio::spawn(async move {
            serve_refusal(tcp, respond).await;
            drop(slot);
        });
    }
}

#[cfg(test)]
mod tests;
