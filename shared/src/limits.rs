//! Server-side limits shared by every binary, as command-line flags and tower layers:
//! request timeout, max message size, a global in-flight limit that sheds load with
//! UNAVAILABLE instead of queueing without bound, and optional TLS (rustls).

use std::{
    path::PathBuf,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use futures::future::BoxFuture;
use tokio::sync::Semaphore;
use tonic::{
    Status,
    transport::{Identity, Server, ServerTlsConfig},
};
use tower::{Layer, Service, layer::util::Stack};

/// Flags every server binary flattens into its CLI.
#[derive(Clone, Debug, clap::Args)]
pub struct ServerFlags {
    /// Longest a request may run before it is cancelled (e.g. `15m`, `90s`). Also bounded by
    /// the caller's gRPC deadline.
    #[arg(long, env = "VOXPOOL_REQUEST_TIMEOUT", default_value = "15m", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,
    /// Requests handled at once by this process; beyond it requests are shed with
    /// UNAVAILABLE (retry with backoff) instead of queueing.
    #[arg(long, env = "VOXPOOL_MAX_CONCURRENT_REQUESTS", default_value_t = 2048)]
    pub max_concurrent_requests: usize,
    /// Largest gRPC message accepted or sent, in bytes.
    #[arg(long, env = "VOXPOOL_MAX_MESSAGE_BYTES", default_value_t = 32 * 1024 * 1024)]
    pub max_message_bytes: usize,
    /// PEM certificate chain: serve TLS (needs --tls-key).
    #[arg(long, env = "VOXPOOL_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert.
    #[arg(long, env = "VOXPOOL_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

impl Default for ServerFlags {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(15 * 60),
            max_concurrent_requests: 2048,
            max_message_bytes: 32 * 1024 * 1024,
            tls_cert: None,
            tls_key: None,
        }
    }
}

/// A tonic server builder with the timeout, TLS and load-shedding layer applied.
pub type LimitedServer = Server<Stack<ShedLayer, tower::layer::util::Identity>>;

impl ServerFlags {
    /// Builds the server. Errors: unreadable or invalid TLS files (one-line reason).
    pub fn server(&self) -> Result<LimitedServer, String> {
        let mut builder = Server::builder().timeout(self.request_timeout);
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            install_crypto_provider();
            let read = |p: &PathBuf| {
                std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
            };
            let identity = Identity::from_pem(read(cert)?, read(key)?);
            builder = builder
                .tls_config(ServerTlsConfig::new().identity(identity))
                .map_err(|e| format!("invalid TLS certificate or key: {e}"))?;
        }
        Ok(builder.layer(ShedLayer::new(self.max_concurrent_requests)))
    }
}

/// An endpoint for one of our gRPC servers at `url` (`http://…` or `https://…`), named by
/// `flag` in errors (e.g. `--scheduler`). For `https://` the server certificate is checked
/// against the PEM bundle in `VOXPOOL_TLS_CA` when set (a private CA), else against the
/// public web PKI roots. Errors: a malformed URL, an unreadable CA file.
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
    endpoint
        .tls_config(tls)
        .map_err(|e| format!("{flag} {url:?}: TLS setup failed: {e}"))
}

/// Makes ring the process-wide rustls crypto provider (once; later calls do nothing). The
/// workspace links more than one provider (reqwest brings aws-lc-rs), and rustls refuses to
/// guess between them: without this, building a TLS config fails at start-up.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Sheds requests beyond a global in-flight limit with UNAVAILABLE.
#[derive(Clone, Debug)]
pub struct ShedLayer {
    permits: Arc<Semaphore>,
    limit: usize,
}

impl ShedLayer {
    /// At most `limit` requests in flight (at least 1).
    pub fn new(limit: usize) -> Self {
        let limit = limit.max(1);
        Self {
            permits: Arc::new(Semaphore::new(limit)),
            limit,
        }
    }
}

impl<S> Layer<S> for ShedLayer {
    type Service = Shed<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Shed {
            inner,
            permits: self.permits.clone(),
            limit: self.limit,
        }
    }
}

/// The service [`ShedLayer`] produces.
#[derive(Clone, Debug)]
pub struct Shed<S> {
    inner: S,
    permits: Arc<Semaphore>,
    limit: usize,
}

impl<S, B> Service<http::Request<B>> for Shed<S>
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

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        match self.permits.clone().try_acquire_owned() {
            Ok(permit) => {
                let fut = self.inner.call(request);
                Box::pin(async move {
                    let response = fut.await;
                    drop(permit);
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
