//! Server-side limits shared by every binary, as command-line flags and tower layers:
//! request timeout (answered DEADLINE_EXCEEDED), max message size, a global in-flight limit
//! that sheds load with UNAVAILABLE instead of queueing without bound, and optional TLS
//! (rustls).
//!
//! The in-flight limit protects the short calls that keep the service alive (Release, Report,
//! Renew, health, status, reflection): a request that is about to wait for a long time on
//! something with its own bound (an Acquire waiting in a pool's line, bounded by
//! `scheduler.max_waiters`) gives its slot back with [`step_aside`], so no number of waiters
//! can shed those calls (invariant 10 of docs/ARCHITECTURE.md).

use std::{
    path::PathBuf,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use futures::future::BoxFuture;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::{
    Status,
    transport::{Identity, Server},
};
use tower::{Layer, Service, layer::util::Stack};

use crate::duration::positive_duration;

/// Flags every server binary flattens into its CLI.
#[derive(Clone, Debug, clap::Args)]
pub struct ServerFlags {
    /// Longest a request may run before the server stops it and answers DEADLINE_EXCEEDED
    /// (e.g. `15m`, `90s`). A shorter gRPC deadline set by the caller still applies.
    #[arg(long, env = "VOXPOOL_REQUEST_TIMEOUT", default_value = "15m", value_parser = positive_duration)]
    pub request_timeout: Duration,
    /// Requests handled at once by this process; beyond it requests are shed with
    /// UNAVAILABLE (retry with backoff) instead of queueing.
    #[arg(long, env = "VOXPOOL_MAX_CONCURRENT_REQUESTS", default_value_t = 2048)]
    pub max_concurrent_requests: usize,
    /// Largest gRPC message accepted or sent, in bytes.
    #[arg(long, env = "VOXPOOL_MAX_MESSAGE_BYTES", default_value_t = 32 * 1024 * 1024)]
    pub max_message_bytes: usize,
    /// After SIGTERM, how long to keep serving while health answers NOT_SERVING, so load
    /// balancers and clients move away before the port closes (e.g. `1s`, `5s`; `0s` stops at
    /// once). In-flight calls are finished after it either way.
    #[arg(long, env = "VOXPOOL_DRAIN_DELAY", default_value = "1s", value_parser = humantime::parse_duration)]
    pub drain_delay: Duration,
    /// PEM certificate chain: serve TLS (needs --tls-key).
    #[arg(long, env = "VOXPOOL_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert.
    #[arg(long, env = "VOXPOOL_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA bundle: accept data-plane callers presenting a client certificate it signed
    /// (mTLS; the caller is named by the certificate's CN). A certificate it did not sign is
    /// answered UNAUTHENTICATED on every request, health included; a client without one may
    /// still connect (health, reflection, a client token). Needs --tls-cert.
    #[arg(long, env = "VOXPOOL_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// Connection limits: head, idle and body timeouts, the connection cap, HTTP/2 keep-alive.
    #[command(flatten)]
    pub conn: crate::conn::ConnFlags,
}

impl Default for ServerFlags {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(15 * 60),
            max_concurrent_requests: 2048,
            max_message_bytes: 32 * 1024 * 1024,
            drain_delay: Duration::from_secs(1),
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            conn: crate::conn::ConnFlags::default(),
        }
    }
}

/// A tonic server builder with TLS, HTTP/2 keep-alive, the connection tracking of `gate`
/// ([`crate::conn`]) and the [`LimitsLayer`] (request timeout, load shedding) applied.
pub type LimitedServer =
    Server<Stack<LimitsLayer, Stack<crate::conn::TrackLayer, tower::layer::util::Identity>>>;

impl ServerFlags {
    /// The TLS acceptor of `--tls-cert`, `--tls-key` and `--tls-client-ca`, `None` without
    /// TLS ([`crate::tls`]: the gRPC listener's connections are handshaken with it before
    /// tonic sees them). Errors: unreadable or invalid PEM files (one line naming the flag).
    pub fn tls_acceptor(&self) -> Result<Option<crate::tls::Tls>, String> {
        install_crypto_provider();
        crate::tls::acceptor(
            self.tls_cert.as_deref(),
            self.tls_key.as_deref(),
            self.tls_client_ca.as_deref(),
        )
    }

    /// Builds the server for the connections of `gate` (TLS, if any, comes from
    /// [`Self::tls_acceptor`]). Errors: unreadable or invalid TLS files (one-line reason).
    pub fn server(&self, gate: &Arc<crate::conn::Gate>) -> Result<LimitedServer, String> {
        // The request timeout lives in LimitsLayer, not `Server::timeout`: tonic answers its
        // own timeout with CANCELLED, and a caller must be able to tell a server that ran out
        // of time (DEADLINE_EXCEEDED) from one that gave up on it.
        // TLS is not tonic's: the connections come handshaken ([`Self::tls_acceptor`],
        // `crate::tls`), so that a refused client certificate reaches its client.
        self.tls_acceptor()?;
        let builder = Server::builder()
            .http2_keepalive_interval(Some(self.conn.http2_keepalive_interval))
            .http2_keepalive_timeout(Some(self.conn.http2_keepalive_timeout));
        Ok(builder
            .layer(crate::conn::TrackLayer::new(gate.clone()))
            .layer(LimitsLayer::new(
                self.max_concurrent_requests,
                self.request_timeout,
            )))
    }
}

/// An endpoint for one of our gRPC servers at `url` (`http://…` or `https://…`), named by
/// `flag` in errors (e.g. `--scheduler`). For `https://` the server certificate is checked
/// against the PEM bundle in `VOXPOOL_TLS_CA` when set (a private CA), else against the
/// public web PKI roots, and the client certificate in `VOXPOOL_TLS_CLIENT_CERT` (PEM, with
/// its key in `VOXPOOL_TLS_CLIENT_KEY`) is presented when set, for servers started with
/// `--tls-client-ca`. Errors: a malformed URL, an unreadable CA or client certificate file,
/// one of the two client variables without the other.
pub fn client_endpoint(flag: &str, url: &str) -> Result<tonic::transport::Endpoint, String> {
    let endpoint = tonic::transport::Endpoint::from_shared(url.to_owned())
        .map_err(|e| format!("{flag} {url:?} is not a URL: {e}"))?;
    if !url.starts_with("https://") {
        return Ok(endpoint);
    }
    install_crypto_provider();
    let tls = match std::env::var_os("VOXPOOL_TLS_CA") {
        Some(path) => {
            let pem = std::fs::read(&path).map_err(|e| {
                format!(
                    "cannot read VOXPOOL_TLS_CA {}: {e}",
                    std::path::Path::new(&path).display()
                )
            })?;
            tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(pem))
        }
        None => tonic::transport::ClientTlsConfig::new().with_webpki_roots(),
    };
    let tls = match client_identity()? {
        Some(identity) => tls.identity(identity),
        None => tls,
    };
    endpoint
        .tls_config(tls)
        .map_err(|e| format!("{flag} {url:?}: TLS setup failed: {e}"))
}

/// The client certificate and key named by `VOXPOOL_TLS_CLIENT_CERT` and
/// `VOXPOOL_TLS_CLIENT_KEY`, if set.
fn client_identity() -> Result<Option<Identity>, String> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let read = |name: &str, path: &std::ffi::OsStr| {
        std::fs::read(path).map_err(|e| {
            format!(
                "cannot read {name} {}: {e}",
                std::path::Path::new(path).display()
            )
        })
    };
    match (
        var("VOXPOOL_TLS_CLIENT_CERT"),
        var("VOXPOOL_TLS_CLIENT_KEY"),
    ) {
        (None, None) => Ok(None),
        (Some(cert), Some(key)) => Ok(Some(Identity::from_pem(
            read("VOXPOOL_TLS_CLIENT_CERT", &cert)?,
            read("VOXPOOL_TLS_CLIENT_KEY", &key)?,
        ))),
        _ => Err(
            "VOXPOOL_TLS_CLIENT_CERT and VOXPOOL_TLS_CLIENT_KEY go together: set both or neither"
                .to_owned(),
        ),
    }
}

/// Makes ring the process-wide rustls crypto provider (once; later calls do nothing). The
/// workspace compiles one crypto stack (ring: reqwest is built with `rustls-no-provider`), and
/// reqwest and rustls configs built without an explicit provider take this default, so call
/// it before building any TLS client or server.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A request's slot under `--max-concurrent-requests`, put in the request's extensions by
/// [`Limits`]. Cloning shares the one slot.
#[derive(Clone, Debug)]
pub struct InFlightSlot(Arc<std::sync::Mutex<Option<OwnedSemaphorePermit>>>);

impl InFlightSlot {
    fn new(permit: OwnedSemaphorePermit) -> Self {
        Self(Arc::new(std::sync::Mutex::new(Some(permit))))
    }

    /// Gives the slot back now (later calls do nothing).
    fn give_back(&self) {
        let permit = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        drop(permit);
    }
}

/// Lets `request` stop counting against `--max-concurrent-requests`: for a handler that is
/// about to wait on something bounded by its own limit (module doc). Does nothing for a
/// request that did not pass through [`LimitsLayer`].
pub fn step_aside(request_extensions: &tonic::Extensions) {
    if let Some(slot) = request_extensions.get::<InFlightSlot>() {
        slot.give_back();
    }
}

/// Server limits as one layer: sheds requests beyond a global in-flight limit with
/// UNAVAILABLE, and answers a request still unanswered after the request timeout with
/// DEADLINE_EXCEEDED (its handler is dropped, so its own clean-up runs).
#[derive(Clone, Debug)]
pub struct LimitsLayer {
    permits: Arc<Semaphore>,
    limit: usize,
    timeout: Duration,
}

impl LimitsLayer {
    /// At most `limit` requests in flight (at least 1), each answered within `timeout`.
    pub fn new(limit: usize, timeout: Duration) -> Self {
        let limit = limit.max(1);
        Self {
            permits: Arc::new(Semaphore::new(limit)),
            limit,
            timeout,
        }
    }
}

impl<S> Layer<S> for LimitsLayer {
    type Service = Limits<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Limits {
            inner,
            permits: self.permits.clone(),
            limit: self.limit,
            timeout: self.timeout,
        }
    }
}

/// The service [`LimitsLayer`] produces.
#[derive(Clone, Debug)]
pub struct Limits<S> {
    inner: S,
    permits: Arc<Semaphore>,
    limit: usize,
    timeout: Duration,
}

impl<S, B> Service<http::Request<B>> for Limits<S>
where
    S: Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        match self.permits.clone().try_acquire_owned() {
            Ok(permit) => {
                let permit = InFlightSlot::new(permit);
                request.extensions_mut().insert(permit.clone());
                let (fut, timeout) = (self.inner.call(request), self.timeout);
                Box::pin(async move {
                    let response = match tokio::time::timeout(timeout, fut).await {
                        Ok(response) => response,
                        Err(_) => Ok(Status::deadline_exceeded(format!(
                            "the server stopped this request after {} (--request-timeout); \
                             retry with less work per request or ask the operator to raise it",
                            humantime::format_duration(timeout)
                        ))
                        .into_http()),
                    };
                    permit.give_back();
                    response
                })
            }
            Err(_) => {
                let status = Status::unavailable(format!(
                    "server overloaded: {} requests in flight (--max-concurrent-requests); retry with backoff",
                    self.limit
                ));
                Box::pin(async move { Ok(status.into_http()) })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use tower::ServiceExt;

    use super::*;

    type Handler = tower::util::BoxCloneSyncService<
        http::Request<()>,
        http::Response<tonic::body::Body>,
        Infallible,
    >;

    /// A handler that never answers.
    fn stuck() -> Handler {
        Handler::new(tower::service_fn(|_: http::Request<()>| {
            std::future::pending::<Result<http::Response<tonic::body::Body>, Infallible>>()
        }))
    }

    /// A handler that answers OK at once.
    fn prompt() -> Handler {
        Handler::new(tower::service_fn(|_: http::Request<()>| async {
            Ok::<_, Infallible>(Status::ok("").into_http())
        }))
    }

    /// Calls `handler` behind `layer`; fails the test (instead of hanging) after 5 s.
    async fn call(layer: &LimitsLayer, handler: Handler) -> http::Response<tonic::body::Body> {
        tokio::time::timeout(
            Duration::from_secs(5),
            layer.layer(handler).oneshot(http::Request::new(())),
        )
        .await
        .expect("the layer answered within 5 s")
        .unwrap()
    }

    fn code_of(response: &http::Response<tonic::body::Body>) -> Status {
        Status::from_header_map(response.headers()).expect("a grpc-status header")
    }

    #[tokio::test]
    async fn a_request_past_the_request_timeout_is_answered_deadline_exceeded() {
        let layer = LimitsLayer::new(8, Duration::from_millis(20));
        let response = call(&layer, stuck()).await;
        let status = code_of(&response);
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
        assert!(
            status.message().contains("20ms (--request-timeout)"),
            "{}",
            status.message()
        );
    }

    #[tokio::test]
    async fn a_timed_out_request_gives_its_in_flight_slot_back() {
        let layer = LimitsLayer::new(1, Duration::from_millis(20));
        let first = call(&layer, stuck()).await;
        assert_eq!(code_of(&first).code(), tonic::Code::DeadlineExceeded);
        // The only slot is free again: the next request is served, not shed.
        let second = call(&layer, prompt()).await;
        assert_eq!(code_of(&second).code(), tonic::Code::Ok);
    }

    #[tokio::test]
    async fn a_request_beyond_the_in_flight_limit_is_shed_with_unavailable() {
        let layer = LimitsLayer::new(1, Duration::from_secs(600));
        let held = tokio::spawn(layer.layer(stuck()).oneshot(http::Request::new(())));
        // The held request owns the only slot once its service was called; wait for that.
        while layer.permits.available_permits() > 0 {
            tokio::task::yield_now().await;
        }
        let shed = call(&layer, prompt()).await;
        let status = code_of(&shed);
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        assert!(status.message().contains("--max-concurrent-requests"));
        held.abort();
    }

    #[tokio::test]
    async fn a_request_that_steps_aside_no_longer_counts_against_the_limit() {
        let layer = LimitsLayer::new(1, Duration::from_secs(600));
        let (stepped, stepped_rx) = tokio::sync::oneshot::channel::<()>();
        let stepped = Arc::new(std::sync::Mutex::new(Some(stepped)));
        // A waiter: steps aside (as a waiting Acquire does), then never answers.
        let waiter = Handler::new(tower::service_fn(move |r: http::Request<()>| {
            step_aside(tonic::Request::from_http(r).extensions());
            if let Some(tx) = stepped.lock().unwrap().take() {
                let _ = tx.send(());
            }
            std::future::pending::<Result<http::Response<tonic::body::Body>, Infallible>>()
        }));
        let held = tokio::spawn(layer.layer(waiter).oneshot(http::Request::new(())));
        stepped_rx.await.expect("the waiter stepped aside");
        let served = call(&layer, prompt()).await;
        assert_eq!(code_of(&served).code(), tonic::Code::Ok, "not shed");
        held.abort();
    }
}
