//! Wiring: the backend's clients, the sessions, the live feed and the routes, served on one
//! listener, over TLS when `--tls-cert`/`--tls-key` are given (rustls with ring, HTTP/1.1 and
//! HTTP/2 by ALPN; the session cookie is then `Secure`). Shutdown (SIGTERM, Ctrl-C) stops
//! accepting and gives answers under way, live feeds included, [`FINISH_WITHIN`] to end.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::{conn::auto, graceful::GracefulShutdown},
    service::TowerToHyperService,
};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use voxpool_domain::secret::Secret;
use voxpool_runtime::limits::ServerFlags;

use crate::{
    backend::{Backend, Endpoints},
    live::Hub,
    pages::{self, App},
    session::Sessions,
};

/// Longest the answers under way (a live feed never ends by itself) may run after shutdown.
pub const FINISH_WITHIN: Duration = Duration::from_secs(5);

/// Longest a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything the console needs to serve.
#[derive(Debug)]
pub struct Settings {
    /// `--listen`.
    pub listen: String,
    /// The services and the console's credentials for them.
    pub endpoints: Endpoints,
    /// The read-only console token, if any.
    pub viewer_token: Option<Secret>,
    /// The jobs page's default tenant.
    pub jobs_tenant: String,
    /// TLS and the other serving flags.
    pub server: ServerFlags,
}

/// The app over `settings` (no listener): for tests and benchmarks.
pub fn app(settings: &Settings) -> Result<Arc<App>, String> {
    let backend = Backend::connect(&settings.endpoints)?;
    let hub = Hub::new(backend.clone());
    tokio::spawn(hub.clone().run());
    Ok(Arc::new(App {
        backend,
        sessions: Sessions::new(
            settings.endpoints.admin_token.clone(),
            settings.viewer_token.clone(),
            settings.server.tls_cert.is_some(),
        ),
        hub,
        jobs_tenant: settings.jobs_tenant.clone(),
    }))
}

/// Binds, prints `voxpool-console listening on ADDR` (its one stdout line), and serves until
/// `shutdown`. Errors: a port in use, unreadable TLS files, a malformed service URL.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> Result<(), String> {
    let tls = tls_acceptor(&settings.server)?;
    let app = app(&settings)?;
    let (listener, bound) = voxpool_runtime::serve::bind(&settings.listen).await?;
    voxpool_runtime::serve::announce("voxpool-console", bound)?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!(url = %format!("{scheme}://{bound}/login"), "console serving: sign in there");
    serve(listener, pages::router(app), tls, shutdown).await;
    Ok(())
}

/// The TLS acceptor for `--tls-cert`/`--tls-key`, or `None` without them.
fn tls_acceptor(flags: &ServerFlags) -> Result<Option<TlsAcceptor>, String> {
    voxpool_runtime::tls::http_acceptor(
        flags.tls_cert.as_deref(),
        flags.tls_key.as_deref(),
        "the console",
    )
}

async fn serve(
    listener: TcpListener,
    router: axum::Router,
    tls: Option<TlsAcceptor>,
    shutdown: CancellationToken,
) {
    let graceful = GracefulShutdown::new();
    loop {
        let (tcp, peer): (_, SocketAddr) = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "console listener: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let service = TowerToHyperService::new(router.clone());
        let watcher = graceful.watcher();
        let tls = tls.clone();
        tokio::spawn(async move {
            let builder = auto::Builder::new(TokioExecutor::new());
            match tls {
                None => {
                    let conn = builder.serve_connection_with_upgrades(TokioIo::new(tcp), service);
                    let _ = watcher.watch(conn.into_owned()).await;
                }
                Some(acceptor) => {
                    let Ok(Ok(stream)) =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
                    else {
                        tracing::debug!(%peer, "a TLS handshake failed or timed out");
                        return;
                    };
                    let conn =
                        builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    let _ = watcher.watch(conn.into_owned()).await;
                }
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(FINISH_WITHIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::info!("answers still under way at shutdown (live feeds) were closed");
    }
}
