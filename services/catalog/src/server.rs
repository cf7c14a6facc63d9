//! Wiring shared by the `voxpool-catalog` binary and the tests: open + migrate the database,
//! build the gRPC server with health and reflection, keep health in step with the database.

use std::{sync::Arc, time::Duration};

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;
use voxpool_shared::auth::AdminAuth;
use voxpool_shared::limits::ServerFlags;

use crate::{
    db,
    repo::{PackRepository, sea::SeaRepository},
    service::{AdminService, CatalogService},
};

/// The read service's name, reported by health (besides `""` for the whole process).
pub const SERVICE_NAME: &str = "voxpool.catalog.v1.VoiceCatalog";
/// The admin service's name, reported by health.
pub const ADMIN_SERVICE_NAME: &str = "voxpool.catalog.v1.VoiceCatalogAdmin";

/// How often the health task pings the database.
const HEALTH_INTERVAL: Duration = Duration::from_secs(1);

/// Connects to `url` (pool of `pool_size`), runs pending migrations and returns the
/// repository. Errors are one-line reasons without passwords.
pub async fn open_repository(url: &str, pool_size: u32) -> Result<SeaRepository, String> {
    let conn = db::connect(url, pool_size).await?;
    db::migrate(&conn, url).await?;
    Ok(SeaRepository::new(conn))
}

/// Serves VoiceCatalog, VoiceCatalogAdmin, health and reflection (v1 + v1alpha) on
/// `listener` until `shutdown` is cancelled, then drains in-flight RPCs. Health turns
/// NOT_SERVING while the database does not answer a ping.
pub async fn serve(
    listener: TcpListener,
    repo: Arc<dyn PackRepository>,
    auth: AdminAuth,
    shutdown: CancellationToken,
) -> Result<(), String> {
    serve_with(listener, repo, auth, &ServerFlags::default(), shutdown).await
}

/// [`serve`] with explicit server limits (request timeout, message size, load shedding, TLS).
pub async fn serve_with(
    listener: TcpListener,
    repo: Arc<dyn PackRepository>,
    auth: AdminAuth,
    flags: &ServerFlags,
    shutdown: CancellationToken,
) -> Result<(), String> {
    let (reporter, health) = tonic_health::server::health_reporter();
    let (reflection_v1, reflection_v1alpha) =
        voxpool_shared::serve::reflection_services(&[SERVICE_NAME, ADMIN_SERVICE_NAME])
            .map_err(|e| format!("reflection: {e}"))?;

    // Health is known before the first request: every name is registered now, from one ping.
    let first = if repo.ping().await.is_ok() {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    };
    for name in ["", SERVICE_NAME, ADMIN_SERVICE_NAME] {
        reporter.set_service_status(name, first).await;
    }
    let health_task = {
        let shutdown = shutdown.clone();
        let repo = repo.clone();
        tokio::spawn(async move {
            let names = ["", SERVICE_NAME, ADMIN_SERVICE_NAME];
            let mut last = Some(first);
            loop {
                let status = match repo.ping().await {
                    Ok(()) => ServingStatus::Serving,
                    Err(e) => {
                        if last != Some(ServingStatus::NotServing) {
                            tracing::error!(error = ?e, "catalog database unreachable; health is NOT_SERVING");
                        }
                        ServingStatus::NotServing
                    }
                };
                if last != Some(status) {
                    if status == ServingStatus::Serving && last.is_some() {
                        tracing::info!("catalog database reachable again; health is SERVING");
                    }
                    for name in names {
                        reporter.set_service_status(name, status).await;
                    }
                    last = Some(status);
                }
                tokio::select! {
                    _ = shutdown.cancelled() => {
                        for name in names {
                            reporter.set_service_status(name, ServingStatus::NotServing).await;
                        }
                        break;
                    }
                    _ = tokio::time::sleep(HEALTH_INTERVAL) => {}
                }
            }
        })
    };

    let max = flags.max_message_bytes;
    let result = flags
        .server()?
        .trace_fn(voxpool_shared::telemetry::server_span)
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(
            CatalogService::new(repo.clone())
                .into_server()
                .max_decoding_message_size(max)
                .max_encoding_message_size(max),
        )
        .add_service(
            AdminService::new(repo, auth)
                .into_server()
                .max_decoding_message_size(max)
                .max_encoding_message_size(max),
        )
        .serve_with_incoming_shutdown(
            voxpool_shared::serve::incoming(listener),
            shutdown.cancelled_owned(),
        )
        .await
        .map_err(|e| format!("grpc server: {e}"));
    health_task.abort();
    result
}
