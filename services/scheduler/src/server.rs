//! Wiring shared by the `voxpool-scheduler` binary and the tests: choose and seed the store
//! (at once, or in the background while serving NOT_SERVING), build the gRPC server with
//! health and reflection, keep health in step with the store.

use std::{sync::Arc, time::Duration};

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use voxpool_config::{Config, DataPlane};
use voxpool_runtime::{
    auth::{AdminAuth, Authenticated, ClientAuth},
    limits::ServerFlags,
    startup::{self, NotReady},
};

use crate::{
    metrics::{SchedulerMetrics, StatusCache},
    model::PoolSpec,
    service::SchedulerService,
    signing::LeaseSigner,
    store::{
        LeaseStore,
        connecting::Connecting,
        memory::MemoryStore,
        redis::{
            RedisOptions, RedisStore,
            conn::{Conn, Topology},
        },
    },
};

/// The gRPC service name health reports under (besides `""` for the whole process).
pub const SERVICE_NAME: &str = "voxpool.scheduler.v1.PoolScheduler";

/// PoolScheduler methods that take the admin token (checked by their handlers) instead of a
/// client credential.
pub const ADMIN_METHODS: &[&str] = &["SetKeyCapacity", "DisableKey", "EnableKey"];

/// How often the health task pings the store.
const HEALTH_INTERVAL: Duration = Duration::from_secs(1);

/// Opens the store named by `--store` and seeds it with the config's pools: `memory`, or a
/// Redis URL of any topology (`redis://`, `rediss://`, `unix://`, `redis-sentinel://…#name`,
/// `redis-cluster://h:p,h:p`; see [`crate::store::redis::conn`]). Errors are one-line reasons
/// for the operator, never with a password.
pub async fn open_store(spec: &str, config: &Config) -> Result<Arc<dyn LeaseStore>, String> {
    let s = &config.scheduler;
    let store: Arc<dyn LeaseStore> = if spec == "memory" {
        if s.lease_secret.is_none() {
            tracing::warn!(
                "memory store without scheduler.lease_secret: the lease secret lives in this process, so after a restart the leases callers still hold cannot re-register (they are refused and their calls end); configure scheduler.lease_secret to keep them across restarts"
            );
        }
        Arc::new(
            MemoryStore::with_recovery_window(s.recovery_window_ms)
                .with_recovery_lease_ttl(s.default_lease_ttl_ms),
        )
    } else if Topology::of(spec).is_some() {
        let store = RedisStore::connect(spec, RedisOptions::from_settings(s))
            .await
            .map_err(|e| one_line(&format!("store {}: {e}", redact_url(spec))))?;
        tracing::info!(
            topology = ?store.topology(),
            replica_acks = store.replica_acks(),
            recovery_window_ms = s.recovery_window_ms,
            "lease store connected"
        );
        Arc::new(store)
    } else {
        return Err(not_a_store(spec));
    };
    store
        .seed(&PoolSpec::from_config(config))
        .await
        .map_err(|e| {
            let e = e.to_string();
            // A single-node URL pointed at the other topologies fails here, on the first script.
            let hint = if e.contains("Moved") || e.contains("CLUSTERDOWN") {
                " (the server is a Redis Cluster node: use redis-cluster://host:port[,host:port...])"
            } else if e.contains("unknown command") {
                " (the server does not run scripts: a Redis Sentinel? use redis-sentinel://host:port[,host:port...]#<master-name>)"
            } else {
                ""
            };
            one_line(&format!("seeding pools into the store {}: {e}{hint}", redact_url(spec)))
        })?;
    Ok(store)
}

/// [`open_store`] without waiting: a `--store` no retry can fix (not `memory` nor a Redis
/// URL, a malformed URL) is an error at once; a store that answers the first try is returned
/// connected and seeded, as by [`open_store`]; otherwise the store is returned at once and
/// connected and seeded in the background, retried with capped exponential back-off
/// ([`voxpool_runtime::startup`]) until it answers or `shutdown` is cancelled. Until then every
/// call answers UNAVAILABLE naming the last reason, so health is NOT_SERVING (a refused
/// connection, a cluster still converging: the store and the schedulers restarting together
/// is no crash loop).
pub async fn open_store_waiting(
    spec: &str,
    config: &Config,
    shutdown: &CancellationToken,
) -> Result<Arc<dyn LeaseStore>, String> {
    if spec == "memory" {
        return open_store(spec, config).await;
    }
    if let Err(e) = Conn::check_url(spec) {
        return Err(match Topology::of(spec) {
            Some(_) => one_line(&format!("store {}: {e}", redact_url(spec))),
            None => not_a_store(spec),
        });
    }
    let first = match open_store(spec, config).await {
        Ok(store) => return Ok(store),
        Err(why) => why,
    };
    tracing::warn!(dependency = "lease store", reason = %first, "not reachable yet; serving with health NOT_SERVING and retrying in the background");
    let connecting = Arc::new(Connecting::new(first));
    let (spec, config, shutdown, target) = (
        spec.to_owned(),
        config.clone(),
        shutdown.clone(),
        connecting.clone(),
    );
    let store: Arc<dyn LeaseStore> = connecting;
    tokio::spawn(async move {
        let attempt = || {
            let (spec, config, target) = (&spec, &config, &target);
            async move {
                open_store(spec, config).await.map_err(|why| {
                    target.not_yet(why.clone());
                    NotReady::Unreachable(why)
                })
            }
        };
        match startup::wait_for("lease store", attempt, &shutdown).await {
            Ok(Some(store)) => target.ready(store),
            Ok(None) => {}
            Err(why) => tracing::error!(reason = %why, "the lease store cannot be used"),
        }
    });
    Ok(store)
}

fn not_a_store(spec: &str) -> String {
    format!(
        "--store must be \"memory\" or a Redis URL (redis://host:port, rediss://, unix:///path/redis.sock, redis-sentinel://host:port[,host:port...][/db]#master, redis-cluster://host:port[,host:port...]), got {:?}",
        redact_url(spec)
    )
}

/// `text` on one line (a store that is not Redis answers with multi-line parse errors).
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A store URL with any password replaced by `***`, safe to print.
pub fn redact_url(url: &str) -> String {
    crate::store::redis::conn::redact(url)
}

/// Serves PoolScheduler, health and reflection on `listener` until `shutdown` is cancelled,
/// then drains in-flight RPCs. Health turns NOT_SERVING while the store does not answer.
pub async fn serve(
    listener: TcpListener,
    store: Arc<dyn LeaseStore>,
    config: &Config,
    auth: AdminAuth,
    shutdown: CancellationToken,
) -> Result<(), String> {
    serve_with(
        listener,
        store,
        config,
        auth,
        &ServerFlags::default(),
        shutdown,
    )
    .await
}

/// [`serve`] with explicit server limits (timeout, message size, load shedding, TLS).
///
/// Data-plane RPCs (all but [`ADMIN_METHODS`]) need a client credential when the config has
/// `[[client_tokens]]` for the scheduler or `flags` has `--tls-client-ca`
/// (`voxpool_runtime::auth::ClientAuth`); their values are read here. Errors: an unreadable or
/// too short client token, a configured lease secret that is unusable (`signing`), or the
/// server failing.
pub async fn serve_with(
    listener: TcpListener,
    store: Arc<dyn LeaseStore>,
    config: &Config,
    auth: AdminAuth,
    flags: &ServerFlags,
    shutdown: CancellationToken,
) -> Result<(), String> {
    let callers = ClientAuth::load_announced(
        &config.client_tokens,
        DataPlane::Scheduler,
        flags.tls_client_ca.is_some(),
    )?;
    let metrics = Arc::new(SchedulerMetrics::new());
    let cache = metrics.cache();
    let budget_cache = metrics.budget_cache();
    let budget_rows = crate::domain::budget::rows_of(config);
    let signer = Arc::new(LeaseSigner::from_settings(&config.scheduler)?);
    if let Err(e) = signer.refresh(store.as_ref()).await {
        tracing::warn!(error = %e, "lease secret not read yet; health retries it");
    }
    signer.spawn_refresh(store.clone(), shutdown.clone());
    let service = SchedulerService::new(
        store.clone(),
        config,
        auth,
        metrics,
        signer.clone(),
        shutdown.clone(),
    )
    .into_server()
    .max_decoding_message_size(flags.max_message_bytes)
    .max_encoding_message_size(flags.max_message_bytes);
    let service = Authenticated::new(service, callers, ADMIN_METHODS);
    let specs = PoolSpec::from_config(config);
    // Health follows the store; when it answers again the pools are re-seeded (it may have
    // restarted empty) before the replica reports SERVING.
    let probe = move |was_serving: bool| {
        let (store, specs, cache) = (store.clone(), specs.clone(), cache.clone());
        let (signer, budget_rows, budget_cache) =
            (signer.clone(), budget_rows.clone(), budget_cache.clone());
        async move {
            store.ping().await.map_err(|e| e.to_string())?;
            if !signer.is_ready() {
                signer.refresh(store.as_ref()).await?;
            }
            if !was_serving {
                // Pool by pool: one unreachable shard must not keep the others unseeded (an
                // Acquire re-seeds its own pool anyway when it finds it missing).
                let mut seeded = 0;
                for spec in &specs {
                    match store.seed(std::slice::from_ref(spec)).await {
                        Ok(()) => seeded += 1,
                        Err(e) => {
                            tracing::warn!(pool = %spec.pool, error = %e, "re-seeding the pool failed; its next call retries");
                        }
                    }
                }
                tracing::info!(
                    seeded,
                    pools = specs.len(),
                    "lease store reachable again; pools re-seeded"
                );
            }
            refresh_cache(store.as_ref(), &specs, &cache).await;
            refresh_budgets(store.as_ref(), &budget_rows, &budget_cache).await;
            Ok(())
        }
    };
    let health = voxpool_runtime::serve::Health {
        dependency: "lease store",
        interval: HEALTH_INTERVAL,
        probe,
    };
    voxpool_runtime::serve::serve_grpc(
        listener,
        flags,
        &[SERVICE_NAME],
        health,
        |router| router.add_service(service),
        shutdown,
    )
    .await
}

/// Reads every pool's status into the metrics cache (best effort: a failed read keeps the
/// previous values).
async fn refresh_cache(store: &dyn LeaseStore, specs: &[PoolSpec], cache: &StatusCache) {
    let mut pools = Vec::with_capacity(specs.len());
    for spec in specs {
        match store.status(&spec.pool).await {
            Ok(Some(s)) => pools.push(s),
            Ok(None) | Err(_) => return,
        }
    }
    if let Ok(mut c) = cache.write() {
        *c = pools;
    }
}

/// Reads every budget row into the budget gauge (best effort, like [`refresh_cache`]).
async fn refresh_budgets(
    store: &dyn LeaseStore,
    rows: &[crate::model::BudgetRow],
    cache: &crate::metrics::BudgetCache,
) {
    let mut read = Vec::with_capacity(rows.len());
    for row in rows {
        match store.budget_use(row).await {
            Ok(u) => read.push((row, u)),
            Err(_) => return,
        }
    }
    crate::metrics::record_budgets(cache, read.iter().map(|(r, u)| (*r, u)));
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn store_urls_never_print_passwords() {
        assert_eq!(
            redact_url("redis://:hunter2@h:6379/0"),
            "redis://***@h:6379/0"
        );
        assert_eq!(redact_url("redis://u:p@h/0"), "redis://***@h/0");
        assert_eq!(redact_url("redis://h:6379/0"), "redis://h:6379/0");
    }
}
