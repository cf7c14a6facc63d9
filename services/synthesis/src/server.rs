//! Wiring shared by the `voxpool-synthesis` binary and the tests: build the [`Core`] from the
//! config and an adapter registry, serve Synthesis with health and reflection, keep health in
//! step with the scheduler (NOT_SERVING while it does not answer: no lease, no synthesis).

use std::{sync::Arc, time::Duration};

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;
use voxpool_shared::{config::Config, limits::ServerFlags};

use crate::{
    catalog::Catalog, core::Core, lease::Scheduler, pools::Pools, service::SynthesisService,
    vendor::registry::Registry,
};

/// The gRPC service name health reports under (besides `""` for the whole process).
pub const SERVICE_NAME: &str = "voxpool.synthesis.v1.Synthesis";

/// Default lease TTL (`--lease-ttl-ms`).
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(15);

/// How often the health task checks the scheduler.
const HEALTH_INTERVAL: Duration = Duration::from_secs(2);

/// Where the other services are and how long leases last.
#[derive(Clone, Debug)]
pub struct Options {
    /// Scheduler URL (`--scheduler`).
    pub scheduler_url: String,
    /// Catalog URL (`--catalog`).
    pub catalog_url: String,
    /// TTL of each lease (`--lease-ttl-ms`); at most the config's `scheduler.max_lease_ttl_ms`.
    pub lease_ttl: Duration,
}

/// Builds the shared state from a validated config and `adapters`. Errors are one-line reasons
/// (bad URL, lease TTL over the scheduler's maximum).
pub fn build(config: &Config, adapters: Registry, options: &Options) -> Result<Arc<Core>, String> {
    let max_ttl = Duration::from_millis(config.scheduler.max_lease_ttl_ms);
    if options.lease_ttl.is_zero() || options.lease_ttl > max_ttl {
        return Err(format!(
            "--lease-ttl-ms must be 1..={} (scheduler.max_lease_ttl_ms), got {}",
            max_ttl.as_millis(),
            options.lease_ttl.as_millis()
        ));
    }
    Ok(Arc::new(Core {
        pools: Pools::from_config(config),
        adapters,
        scheduler: Scheduler::connect_lazy(&options.scheduler_url)?,
        catalog: Catalog::connect_lazy(&options.catalog_url)?,
        settings: config.synthesis.clone(),
        lease_ttl: options.lease_ttl,
        background: tokio_util::task::TaskTracker::new(),
    }))
}

/// [`serve_with`] with the default server limits.
pub async fn serve(
    listener: TcpListener,
    core: Arc<Core>,
    shutdown: CancellationToken,
) -> Result<(), String> {
    serve_with(listener, core, &ServerFlags::default(), shutdown).await
}

/// Serves Synthesis, health and reflection on `listener` with the shared server limits
/// (request timeout, message size, load shedding, TLS) and per-RPC trace spans, until
/// `shutdown` is cancelled, then drains in-flight RPCs and waits for every vendor call still
/// under way (those whose caller went away too) to be reported and released, at most
/// `synthesis.attempt_timeout_ms` plus a second; a lease still held then expires at its TTL.
pub async fn serve_with(
    listener: TcpListener,
    core: Arc<Core>,
    flags: &ServerFlags,
    shutdown: CancellationToken,
) -> Result<(), String> {
    let (reporter, health) = tonic_health::server::health_reporter();
    let (reflection_v1, reflection_v1alpha) =
        voxpool_shared::serve::reflection_services(&[SERVICE_NAME])
            .map_err(|e| format!("reflection: {e}"))?;
    // Health is known before the first request: check the scheduler once, then keep checking.
    let scheduler = core.scheduler.clone();
    let first = if scheduler.is_serving().await {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    };
    if first == ServingStatus::NotServing {
        tracing::warn!(scheduler = %scheduler.url(), "scheduler not serving yet; health is NOT_SERVING until it answers");
    }
    reporter.set_service_status("", first).await;
    reporter.set_service_status(SERVICE_NAME, first).await;
    let health_task = {
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let mut last = Some(first);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => {
                        reporter.set_service_status("", ServingStatus::NotServing).await;
                        reporter.set_service_status(SERVICE_NAME, ServingStatus::NotServing).await;
                        break;
                    }
                    () = tokio::time::sleep(HEALTH_INTERVAL) => {}
                }
                let status = if scheduler.is_serving().await {
                    ServingStatus::Serving
                } else {
                    ServingStatus::NotServing
                };
                if last != Some(status) {
                    if status == ServingStatus::NotServing {
                        tracing::warn!(scheduler = %scheduler.url(), "scheduler not serving; health is NOT_SERVING");
                    } else {
                        tracing::info!(scheduler = %scheduler.url(), "scheduler serving; health is SERVING");
                    }
                    reporter.set_service_status("", status).await;
                    reporter.set_service_status(SERVICE_NAME, status).await;
                    last = Some(status);
                }
            }
        })
    };
    let result = flags
        .server()?
        .trace_fn(voxpool_shared::telemetry::server_span)
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(SynthesisService::new(core.clone(), flags.max_message_bytes).into_server())
        .serve_with_incoming_shutdown(
            voxpool_shared::serve::incoming(listener),
            shutdown.cancelled_owned(),
        )
        .await
        .map_err(|e| format!("grpc server: {e}"));
    health_task.abort();
    core.background.close();
    let bound = Duration::from_millis(core.settings.attempt_timeout_ms) + Duration::from_secs(1);
    if tokio::time::timeout(bound, core.background.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            calls = core.background.len(),
            "vendor calls still running at shutdown; their leases expire at their TTL"
        );
    }
    result
}
