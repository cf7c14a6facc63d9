//! [`Guarded`]: an accepted connection that closes itself when its head deadline or idle
//! timeout passes (the parent module's rules), and [`ConnState`], what it knows of its
//! requests.

use std::{
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU32, AtomicU64, Ordering},
    },
    task::{Context, Poll},
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
    sync::OwnedSemaphorePermit,
    time::{Instant, Sleep},
};

use super::{Closed, Gate};

/// Bytes a client sends before its first HTTP/2 request: the 24-byte preface and a SETTINGS
/// frame's 9-byte header. Fewer by the head deadline is a connection that never started.
const PREFACE_BYTES: u64 = 24 + 9;

/// What one connection knows of its requests (shared with [`super::InFlight`]).
#[derive(Debug)]
pub struct ConnState {
    accepted: Instant,
    bytes_read: AtomicU64,
    requests: AtomicU64,
    in_flight: AtomicU32,
    /// When the connection last had no request in flight, in ms after `accepted`.
    idle_since_ms: AtomicU64,
    /// An HTTP/1.1 connection whose next request head has begun to arrive: when its first
    /// byte came, in ms after `accepted`, plus one (0: none pending).
    head_since_ms: AtomicU64,
}

impl ConnState {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self {
            accepted: Instant::now(),
            bytes_read: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            in_flight: AtomicU32::new(0),
            idle_since_ms: AtomicU64::new(0),
            head_since_ms: AtomicU64::new(0),
        })
    }

    pub(super) fn begin(&self) {
        self.head_since_ms.store(0, Ordering::Relaxed);
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
    }

    pub(super) fn end(&self) {
        let ms = u64::try_from(self.accepted.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.idle_since_ms.store(ms, Ordering::Relaxed);
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }

    /// Bytes arrived on an HTTP/1.1 connection: with no request in flight, a head has begun.
    fn head_started(&self) {
        if self.in_flight.load(Ordering::Acquire) == 0
            && self.head_since_ms.load(Ordering::Relaxed) == 0
        {
            let ms = u64::try_from(self.accepted.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
            self.head_since_ms.store(ms + 1, Ordering::Relaxed);
        }
    }

    /// Requests begun on this connection so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Whether the connection is to close at `now` under `gate`'s limits, else when to look
    /// again.
    fn verdict(&self, now: Instant, gate: &Gate) -> Result<Instant, Closed> {
        let flags = gate.flags();
        let never_started = self.requests.load(Ordering::Relaxed) == 0
            && self.bytes_read.load(Ordering::Relaxed) < PREFACE_BYTES;
        let head_by = self.accepted + flags.head_timeout;
        if never_started && now >= head_by {
            return Err(Closed::HeadTimeout);
        }
        // An HTTP/1.1 head that began to arrive while the connection was idle must be whole
        // within the head timeout of its first byte.
        let pending = self.head_since_ms.load(Ordering::Relaxed);
        let head_due = (pending > 0).then(|| {
            self.accepted + std::time::Duration::from_millis(pending - 1) + flags.head_timeout
        });
        if head_due.is_some_and(|due| now >= due) {
            return Err(Closed::HeadTimeout);
        }
        let next = if self.in_flight.load(Ordering::Acquire) > 0 {
            now + flags.idle_timeout
        } else {
            let idle_since = self.accepted
                + std::time::Duration::from_millis(self.idle_since_ms.load(Ordering::Relaxed));
            let idle_by = idle_since + flags.idle_timeout;
            if now >= idle_by {
                return Err(Closed::Idle);
            }
            idle_by
        };
        let next = head_due.map_or(next, |due| next.min(due));
        Ok(if never_started {
            next.min(head_by)
        } else {
            next
        })
    }
}

/// An accepted connection under a [`Gate`]: counts the bytes it reads, and fails its next read
/// (so the HTTP server closes it) once [`ConnState`]'s verdict says so. Holds its slot under
/// the cap until dropped.
pub struct Guarded<IO> {
    io: IO,
    state: Arc<ConnState>,
    gate: Arc<Gate>,
    peer: Option<SocketAddr>,
    watchdog: Pin<Box<Sleep>>,
    /// The first bytes the client sent (up to 3), until it is known whether it speaks HTTP/1.1
    /// (`Some(true)`) or HTTP/2 (`Some(false)`: the preface begins `PRI`).
    prefix: Vec<u8>,
    http1: Option<bool>,
    _slot: OwnedSemaphorePermit,
}

impl<IO> std::fmt::Debug for Guarded<IO> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guarded")
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

impl<IO> Guarded<IO> {
    pub(super) fn new(
        io: IO,
        state: Arc<ConnState>,
        gate: Arc<Gate>,
        peer: Option<SocketAddr>,
        slot: OwnedSemaphorePermit,
    ) -> Self {
        let first = state.accepted + gate.flags().head_timeout.min(gate.flags().idle_timeout);
        let http1 = gate.tls.then_some(false);
        Self {
            io,
            state,
            gate,
            peer,
            watchdog: Box::pin(tokio::time::sleep_until(first)),
            prefix: Vec::new(),
            // Encrypted bytes say nothing of the protocol: the HTTP/1.1 head rule is off.
            http1,
            _slot: slot,
        }
    }

    /// The connection's state, for [`super::Tracked`] on a listener that serves its own
    /// connections.
    pub fn state(&self) -> Arc<ConnState> {
        self.state.clone()
    }

    /// The connection wrapped.
    pub fn get_ref(&self) -> &IO {
        &self.io
    }
}

impl<IO> Drop for Guarded<IO> {
    fn drop(&mut self) {
        if let Some(peer) = self.peer {
            self.gate.forget(peer, &self.state);
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Guarded<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let read = (buf.filled().len() - before) as u64;
                this.state.bytes_read.fetch_add(read, Ordering::Relaxed);
                if this.http1.is_none() {
                    let got = &buf.filled()[before..];
                    let want = 3 - this.prefix.len();
                    this.prefix.extend_from_slice(&got[..got.len().min(want)]);
                    if this.prefix.len() == 3 {
                        this.http1 = Some(this.prefix != b"PRI");
                    }
                }
                if read > 0 && this.http1 == Some(true) {
                    this.state.head_started();
                }
                return Poll::Ready(Ok(()));
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => {}
        }
        // Nothing to read: is it time to give up on the peer?
        while this.watchdog.as_mut().poll(cx).is_ready() {
            match this.state.verdict(Instant::now(), &this.gate) {
                Ok(next) => this.watchdog.as_mut().reset(next),
                Err(closed) => {
                    this.gate.count(closed);
                    let why = match closed {
                        Closed::HeadTimeout => "no request head within --head-timeout",
                        Closed::Idle => "no request for --idle-timeout",
                        Closed::Refused => "over --max-connections",
                    };
                    tracing::debug!(peer = ?this.peer, reason = closed.as_str(), "closing connection");
                    return Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        why,
                    )));
                }
            }
        }
        Poll::Pending
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Guarded<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for Guarded<TcpStream> {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}
