//! Wiring shared by the `voxpool-synthesis` binary and the tests: build the [`Core`] from the
//! config and an adapter registry, serve Synthesis with health and reflection, keep health in
//! step with the scheduler (NOT_SERVING while it does not answer: no lease, no synthesis).
//!
//! Start-up never waits on, nor exits for, the scheduler or the catalog: both are connected
//! lazily, health is NOT_SERVING until the scheduler answers, and [`watch_start_up`] logs
//! (once per back-off step, [`voxpool_runtime::startup`]) which of them does not answer yet,
//! until both do. The catalog is not part of health: only requests naming a pack id need it,
//! and those answer UNAVAILABLE naming it while it is down.

use std::{sync::Arc, time::Duration};

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use voxpool_config::{Config, DataPlane};
use voxpool_runtime::{
    auth::{AdminAuth, Authenticated, ClientAuth, ClientToken},
    limits::ServerFlags,
    startup::{self, NotReady},
};

use crate::{
    adapters::registry::Registry, admin::SynthesisAdminService, cache::Cache, catalog::Catalog,
    front::auth::ApiKeys, job::Core, lease::Scheduler, pools::Pools, service::SynthesisService,
};

/// The gRPC service name health reports under (besides `""` for the whole process).
pub const SERVICE_NAME: &str = "voxpool.synthesis.v1.Synthesis";

/// The admin service's name (cache purge and stats).
pub const ADMIN_SERVICE_NAME: &str = "voxpool.synthesis.v1.SynthesisAdmin";

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
    /// What this replica presents to the scheduler (`VOXPOOL_CLIENT_TOKEN`,
    /// `--client-token-file`).
    pub client_token: ClientToken,
    /// The audio cache (`--blob-store`, `--cache`); `None` = off.
    pub cache: Option<Arc<Cache>>,
    /// Reference clips (`--blob-store`'s `references/`); `None` = voices with clips are
    /// refused.
    pub references: Option<Arc<crate::references::ReferenceClips>>,
    /// The token `SynthesisAdmin` RPCs need (`VOXPOOL_ADMIN_TOKEN`, `--admin-token-file`).
    pub admin: AdminAuth,
    /// The usage stream (`--usage-store`); `None` = no records written.
    pub usage_store: Option<crate::usage::Writer>,
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
        scheduler: Scheduler::connect_lazy(
            &options.scheduler_url,
            options.client_token.clone(),
            Duration::from_millis(config.synthesis.scheduler_unavailable_grace_ms),
            Duration::from_millis(config.synthesis.scheduler_probe_interval_ms),
        )?,
        catalog: Catalog::connect_lazy(&options.catalog_url)?,
        settings: config.synthesis.clone(),
        cache: options.cache.clone(),
        references: options.references.clone(),
        admin: options.admin.clone(),
        client_tokens: config.client_tokens.clone(),
        lease_ttl: options.lease_ttl,
        background: tokio_util::task::TaskTracker::new(),
        usage: crate::usage::Usage {
            currency: config.usage.currency.clone(),
            cache_hit_factor: config.usage.cache_hit_factor,
            writer: options.usage_store.clone(),
        },
    }))
}

/// Retries the scheduler's and the catalog's health with capped back-off until both answer
/// SERVING, logging each step that one does not (module doc); ends at `shutdown`.
pub async fn watch_start_up(core: Arc<Core>, shutdown: CancellationToken) {
    let attempt = || {
        let core = core.clone();
        async move {
            let scheduler = core.scheduler.is_serving().await;
            let catalog = core.catalog.is_serving(Duration::from_secs(2)).await;
            let mut missing = Vec::new();
            if !scheduler {
                missing.push(format!(
                    "the scheduler at {} is not serving (health NOT_SERVING meanwhile)",
                    core.scheduler.url()
                ));
            }
            if !catalog {
                missing.push(format!(
                    "the catalog at {} is not serving (requests naming a pack id answer UNAVAILABLE meanwhile)",
                    core.catalog.url()
                ));
            }
            if missing.is_empty() {
                Ok(())
            } else {
                Err(NotReady::Unreachable(missing.join("; ")))
            }
        }
    };
    let _ = startup::wait_for("scheduler and catalog", attempt, &shutdown).await;
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
///
/// Every Synthesis RPC needs a client credential when `core`'s config has `[[client_tokens]]`
/// for synthesis or `flags` has `--tls-client-ca` (`voxpool_runtime::auth::ClientAuth`).
/// Errors: an unreadable or too short client token.
pub async fn serve_with(
    listener: TcpListener,
    core: Arc<Core>,
    flags: &ServerFlags,
    shutdown: CancellationToken,
) -> Result<(), String> {
    serve_with_http(listener, None, core, flags, shutdown).await
}

/// The HTTP front's listener and the API keys it accepts (`--http-listen`).
#[derive(Debug)]
pub struct HttpListener {
    /// Bound listener.
    pub listener: TcpListener,
    /// Accepted keys.
    pub keys: ApiKeys,
}

/// [`serve_with`], plus the OpenAI-compatible HTTP front on `http` when given
/// ([`crate::front`]), with the same TLS, limits and shutdown. Errors: as [`serve_with`], and
/// invalid TLS files.
pub async fn serve_with_http(
    listener: TcpListener,
    http: Option<HttpListener>,
    core: Arc<Core>,
    flags: &ServerFlags,
    shutdown: CancellationToken,
) -> Result<(), String> {
    // No lease, no synthesis: health follows the scheduler.
    let scheduler = core.scheduler.clone();
    let probe = move |_: bool| {
        let scheduler = scheduler.clone();
        async move {
            if scheduler.is_serving().await {
                Ok(())
            } else {
                Err(format!(
                    "the scheduler at {} is not serving",
                    scheduler.url()
                ))
            }
        }
    };
    let health = voxpool_runtime::serve::Health {
        dependency: "scheduler",
        interval: HEALTH_INTERVAL,
        probe,
    };
    // The binary announced how callers authenticate before its address (main.rs).
    let callers = ClientAuth::load(
        &core.client_tokens,
        DataPlane::Synthesis,
        flags.tls_client_ca.is_some(),
    )?;
    let service = SynthesisService::new(core.clone(), flags.max_message_bytes).into_server();
    let service = Authenticated::new(service, callers, &[]);
    // Its own bearer token (the admin's), checked by each RPC.
    let admin = SynthesisAdminService::new(core.clone(), core.admin.clone()).into_server();
    tokio::spawn(watch_start_up(core.clone(), shutdown.clone()));
    let http_task = match http {
        None => None,
        Some(HttpListener { listener, keys }) => {
            let tls = crate::front::tls_acceptor(flags)?;
            let front = Arc::new(crate::front::Front::new(core.clone(), keys, flags));
            let finish_within =
                Duration::from_millis(core.settings.attempt_timeout_ms) + Duration::from_secs(1);
            Some(tokio::spawn(crate::front::serve(
                listener,
                front,
                tls,
                flags.clone(),
                finish_within,
                shutdown.clone(),
            )))
        }
    };
    let result = voxpool_runtime::serve::serve_grpc(
        listener,
        flags,
        &[SERVICE_NAME, ADMIN_SERVICE_NAME],
        health,
        |router| router.add_service(service).add_service(admin),
        shutdown.clone(),
    )
    .await;
    if let Some(task) = http_task {
        // The gRPC server has stopped: make sure the HTTP front stops too (a transport error
        // ends the gRPC side without a shutdown signal).
        shutdown.cancel();
        let _ = task.await;
    }
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
    if let Some(writer) = &core.usage.writer {
        writer.drain(Duration::from_secs(5)).await;
    }
    result
}
