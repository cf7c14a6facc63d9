//! Wiring shared by the `voxpool-catalog` binary and the tests: open + migrate the database
//! (at once, or in the background while serving NOT_SERVING), build the gRPC server with
//! health and reflection, keep health in step with the database.

use std::{sync::Arc, time::Duration};

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use voxpool_runtime::auth::AdminAuth;
use voxpool_runtime::limits::ServerFlags;
use voxpool_runtime::startup::{self, NotReady};

use crate::{
    clip_gate::ClipGate,
    clones::Clones,
    db,
    pools::ServedPools,
    reference::ClipStore,
    repo::{PackRepository, connecting::Connecting, sea::SeaRepository},
    service::{AdminService, CatalogService, CloneWorkService, UsageService},
    usage::{Ledger, UsageStore, consumer},
};

/// The read service's name, reported by health (besides `""` for the whole process).
pub const SERVICE_NAME: &str = "voxpool.catalog.v1.VoiceCatalog";
/// The admin service's name, reported by health.
pub const ADMIN_SERVICE_NAME: &str = "voxpool.catalog.v1.VoiceCatalogAdmin";

/// The usage ledger's service name, reported by health.
pub const USAGE_SERVICE_NAME: &str = "voxpool.catalog.v1.Usage";

/// The clone work service's name (synthesis replicas lease clone steps), reported by health.
pub const CLONE_WORK_SERVICE_NAME: &str = "voxpool.catalog.v1.CloneWork";

/// How often the health task pings the database.
const HEALTH_INTERVAL: Duration = Duration::from_secs(1);

/// Connects to `url` (pool of `pool_size`), runs pending migrations and returns the
/// repository. Errors are one-line reasons without passwords.
pub async fn open_repository(url: &str, pool_size: u32) -> Result<SeaRepository, String> {
    let conn = db::connect(url, pool_size).await?;
    db::migrate(&conn, url).await?;
    Ok(SeaRepository::new(conn))
}

/// [`open_repository`] without waiting: an unsupported `--database` is an error at once; a
/// database that answers the first try is returned open and migrated, as by
/// [`open_repository`]; otherwise the repository is returned at once and the database opened
/// and migrated in the background, retried with capped exponential back-off ([`voxpool_runtime::startup`]) until
/// it answers or `shutdown` is cancelled. Until then every call answers UNAVAILABLE, so
/// health is NOT_SERVING (a database restarting with the catalog is no crash loop).
pub async fn open_repository_waiting(
    url: &str,
    pool_size: u32,
    shutdown: &CancellationToken,
) -> Result<Arc<dyn PackRepository>, String> {
    db::check_url(url)?;
    let first = match open_repository(url, pool_size).await {
        Ok(repo) => return Ok(Arc::new(repo)),
        Err(why) => why,
    };
    tracing::warn!(dependency = "catalog database", reason = %first, "not reachable yet; serving with health NOT_SERVING and retrying in the background");
    let connecting = Arc::new(Connecting::new(first));
    let (url, shutdown, target) = (url.to_owned(), shutdown.clone(), connecting.clone());
    tokio::spawn(async move {
        let attempt = || {
            let (url, target) = (&url, &target);
            async move {
                open_repository(url, pool_size).await.map_err(|why| {
                    target.not_yet(why.clone());
                    NotReady::Unreachable(why)
                })
            }
        };
        match startup::wait_for("catalog database", attempt, &shutdown).await {
            Ok(Some(repo)) => target.ready(Arc::new(repo)),
            Ok(None) => {}
            Err(why) => tracing::error!(reason = %why, "the catalog database cannot be used"),
        }
    });
    Ok(connecting)
}

/// A ledger over `repo`'s database once it is open, and its stream consumer on the Redis of
/// `usage_store` (until `shutdown`).
pub fn start_ledger(
    repo: &Arc<dyn PackRepository>,
    usage_store: String,
    config: consumer::ConsumerConfig,
    shutdown: &CancellationToken,
) -> Ledger {
    let ledger = Ledger::pending();
    let (target, repo, stop) = (ledger.clone(), repo.clone(), shutdown.clone());
    tokio::spawn(async move {
        loop {
            if let Some(db) = repo.database() {
                target.ready(UsageStore::new(db));
                return;
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
    });
    tokio::spawn(consumer::run(
        usage_store,
        ledger.clone(),
        config,
        shutdown.clone(),
    ));
    ledger
}

/// Serves VoiceCatalog, VoiceCatalogAdmin, CloneWork, health and reflection (v1 + v1alpha) on
/// `listener` until `shutdown` is cancelled, then drains in-flight RPCs. Health turns
/// NOT_SERVING while the database does not answer a ping. Reference clips go to an in-memory
/// blob store (use [`serve_with`] for a real one).
pub async fn serve(
    listener: TcpListener,
    repo: Arc<dyn PackRepository>,
    auth: AdminAuth,
    shutdown: CancellationToken,
) -> Result<(), String> {
    serve_with(
        listener,
        repo,
        auth,
        ServedPools::unknown(),
        ClipStore::in_memory(),
        &ServerFlags::default(),
        shutdown,
    )
    .await
}

/// [`serve`] with the configured pools (packs no pool serves are refused, see
/// [`crate::pools`]), the blob store's clip folder, and explicit server limits (request
/// timeout, message size, load shedding, TLS).
pub async fn serve_with(
    listener: TcpListener,
    repo: Arc<dyn PackRepository>,
    auth: AdminAuth,
    pools: ServedPools,
    clips: ClipStore,
    flags: &ServerFlags,
    shutdown: CancellationToken,
) -> Result<(), String> {
    let parts = Parts {
        repo,
        auth,
        pools,
        clips,
        ledger: Ledger::not_served(),
    };
    serve_parts(listener, parts, flags, shutdown).await
}

/// What [`serve_parts`] serves.
pub struct Parts {
    /// The packs.
    pub repo: Arc<dyn PackRepository>,
    /// The admin token (VoiceCatalogAdmin and Usage).
    pub auth: AdminAuth,
    /// The configured pools.
    pub pools: ServedPools,
    /// The reference clips' folder.
    pub clips: ClipStore,
    /// The usage ledger ([`Ledger::not_served`] without `--usage-store`).
    pub ledger: Ledger,
}

/// [`serve_with`] plus the usage ledger's `Usage` service over `parts.ledger`.
pub async fn serve_parts(
    listener: TcpListener,
    parts: Parts,
    flags: &ServerFlags,
    shutdown: CancellationToken,
) -> Result<(), String> {
    let Parts {
        repo,
        auth,
        pools,
        clips,
        ledger,
    } = parts;
    let max = flags.max_message_bytes;
    let usage = UsageService::new(ledger, auth.clone())
        .into_server()
        .max_decoding_message_size(max)
        .max_encoding_message_size(max);
    let clone_work = CloneWorkService::new(
        Clones::new(repo.clone(), Arc::new(pools.clone())),
        auth.clone(),
    )
    .into_server()
    .max_decoding_message_size(max)
    .max_encoding_message_size(max);
    let catalog = CatalogService::new(repo.clone())
        .into_server()
        .max_decoding_message_size(max)
        .max_encoding_message_size(max);
    let admin = ClipGate::new(
        AdminService::new(repo.clone(), auth, pools, clips)
            .into_server()
            .max_decoding_message_size(max)
            .max_encoding_message_size(max),
    );
    let probe = move |_: bool| {
        let repo = repo.clone();
        async move { repo.ping().await.map_err(|e| format!("{e:?}")) }
    };
    let health = voxpool_runtime::serve::Health {
        dependency: "catalog database",
        interval: HEALTH_INTERVAL,
        probe,
    };
    voxpool_runtime::serve::serve_grpc(
        listener,
        flags,
        &[
            SERVICE_NAME,
            ADMIN_SERVICE_NAME,
            USAGE_SERVICE_NAME,
            CLONE_WORK_SERVICE_NAME,
        ],
        health,
        |router| {
            router
                .add_service(catalog)
                .add_service(admin)
                .add_service(usage)
                .add_service(clone_work)
        },
        shutdown,
    )
    .await
}
