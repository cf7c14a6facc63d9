//! `voxpool-jobs`: the jobs gRPC server and its workers (one process = one replica; run as
//! many as wanted against one Redis and one blob store).
//!
//! Exits non-zero with a one-line reason on a `--store` no retry can fix, a bad token or
//! secret file, or a port in use; a Redis that does not answer yet is no reason to exit: the
//! port is bound and the server waits for it with capped back-off before it serves. `--help`
//! documents every flag; each also reads its `VOXPOOL_…` variable.

use std::{path::PathBuf, process::ExitCode, sync::Arc, time::Duration};

use clap::Parser;
use voxpool_config::{Credentials, DataPlane};
use voxpool_domain::secret::Secret;
use voxpool_jobs::{
    deliveries::{Deliveries, DeliveryOptions},
    egress::Policy,
    finalize::Finalizer,
    results::Results,
    service::{JobsService, SERVICE_NAME},
    store::JobStore,
    synth::Synthesizer,
    webhook::Sender,
    worker::{WorkerOptions, Workers},
};
use voxpool_runtime::{
    auth::{Authenticated, ClientAuth, ClientToken},
    startup::NotReady,
};

/// Durable batch synthesis jobs: submit many items and walk away. Items wait on Redis
/// Streams; every replica serves the API (voxpool.jobs.v1.Jobs, health, reflection) and runs
/// workers that call synthesis; results go to the blob store under `jobs/`.
#[derive(Debug, Parser)]
#[command(name = "voxpool-jobs", version)]
struct Args {
    /// Address to serve gRPC on, `host:port` (port 0 picks a free port).
    #[arg(long, env = "VOXPOOL_LISTEN", default_value = "127.0.0.1:50054")]
    listen: String,
    /// The job store: `redis://host:port[/db]` (`rediss://` for TLS),
    /// `redis-sentinel://h:p[,h:p...][/db]#<master>`, or `redis-cluster://h:p[,h:p...]`.
    #[arg(
        long,
        env = "VOXPOOL_STORE",
        default_value = "redis://127.0.0.1:6379",
        hide_env_values = true
    )]
    store: String,
    /// Prefix of every Redis key of the job store.
    #[arg(long, env = "VOXPOOL_JOBS_KEY_PREFIX", default_value = "vj")]
    key_prefix: String,
    /// Replicas that must acknowledge a new job before CreateJob answers (default: 1 on
    /// Sentinel and Cluster, 0 on a single node).
    #[arg(long, env = "VOXPOOL_JOBS_REPLICA_ACKS")]
    replica_acks: Option<u32>,
    /// Synthesis endpoints the workers call, `URL[,URL...]` (balanced, health-checked).
    #[arg(
        long,
        env = "VOXPOOL_SYNTHESIS",
        default_value = "http://127.0.0.1:50053"
    )]
    synthesis: String,
    /// File holding the client token presented to synthesis (else VOXPOOL_CLIENT_TOKEN;
    /// without either none is sent).
    #[arg(long, env = "VOXPOOL_CLIENT_TOKEN_FILE")]
    client_token_file: Option<PathBuf>,
    /// The voxpool config file: its `[[client_tokens]]` for `jobs` (or for every service)
    /// authenticate this API's callers. Without it callers are not authenticated.
    #[arg(long, env = "VOXPOOL_CONFIG")]
    config: Option<PathBuf>,
    /// Items in flight on this replica.
    #[arg(long, env = "VOXPOOL_JOBS_CONCURRENCY", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
    concurrency: u32,
    /// How long a held item may go without its worker's heartbeat before another replica
    /// reclaims it (e.g. `30s`).
    #[arg(long, env = "VOXPOOL_JOBS_VISIBILITY_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    visibility_timeout: Duration,
    /// Synthesize calls per item and delivery before a transient failure ends it FAILED.
    #[arg(long, env = "VOXPOOL_JOBS_MAX_ATTEMPTS", default_value_t = 6)]
    max_attempts: u32,
    /// Workers that may take an item (and die) before it ends FAILED (DELIVERY_LIMIT).
    #[arg(long, env = "VOXPOOL_JOBS_MAX_DELIVERIES", default_value_t = 5)]
    max_deliveries: u32,
    /// Deadline of one Synthesize call.
    #[arg(long, env = "VOXPOOL_JOBS_ITEM_TIMEOUT", default_value = "120s", value_parser = humantime::parse_duration)]
    item_timeout: Duration,
    /// How long an ended job, its items and results are kept (e.g. `7d`, `12h`).
    #[arg(long, env = "VOXPOOL_JOBS_RETENTION", default_value = "7d", value_parser = humantime::parse_duration)]
    retention: Duration,
    /// File holding the secret webhooks are signed with (else VOXPOOL_JOBS_WEBHOOK_SECRET;
    /// without either, CreateJob refuses a webhook_url).
    #[arg(long, env = "VOXPOOL_JOBS_WEBHOOK_SECRET_FILE")]
    webhook_secret_file: Option<PathBuf>,
    /// Webhook targets allowed although they are loopback, private, link-local or otherwise
    /// refused: comma-separated CIDRs, addresses and host names (e.g.
    /// `127.0.0.1/32,10.0.0.0/8,hooks.internal`). Give every replica the same list.
    #[arg(long, env = "VOXPOOL_JOBS_WEBHOOK_ALLOW", default_value = "")]
    webhook_allow: String,
    /// Webhook deliveries in flight on this replica (a receiver that hangs holds one for up
    /// to 10 s).
    #[arg(long, env = "VOXPOOL_JOBS_WEBHOOK_CONCURRENCY", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=65536))]
    webhook_concurrency: u32,
    /// Webhook deliveries in flight on this replica to one destination (scheme, host, port).
    #[arg(long, env = "VOXPOOL_JOBS_WEBHOOK_HOST_CONCURRENCY", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=65536))]
    webhook_host_concurrency: u32,
    /// Where results are written (under `jobs/`) and `manifest_uri`s are read.
    #[command(flatten)]
    blobs: voxpool_runtime::blob::BlobFlags,
    #[command(flatten)]
    server: voxpool_runtime::limits::ServerFlags,
}

/// mimalloc, as the other services.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = Args::parse();
    voxpool_runtime::serve::block_on(
        "voxpool-jobs",
        voxpool_runtime::serve::with_telemetry("voxpool-jobs", serve(args)),
    )
}

fn webhook_secret(args: &Args) -> Result<Option<Secret>, String> {
    let raw = match (
        &args.webhook_secret_file,
        std::env::var("VOXPOOL_JOBS_WEBHOOK_SECRET"),
    ) {
        (Some(path), _) => std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read --webhook-secret-file {}: {e}", path.display()))?,
        (None, Ok(value)) => value,
        (None, Err(_)) => return Ok(None),
    };
    let secret = Secret::new(raw);
    if secret.expose().chars().count() < 16 {
        return Err("the webhook secret is shorter than 16 characters".into());
    }
    Ok(Some(secret))
}

async fn serve(args: Args) -> Result<(), String> {
    JobStore::check_url(&args.store).map_err(|e| format!("--store: {e}"))?;
    if args.visibility_timeout < Duration::from_millis(300) {
        return Err("--visibility-timeout: at least 300ms".into());
    }
    let tokens = match &args.config {
        Some(path) => {
            voxpool_config::Config::load_validated(path, Credentials::Ignore)
                .map_err(|e| format!("bad config: {e}"))?
                .client_tokens
        }
        None => Vec::new(),
    };
    let callers = ClientAuth::load_announced(
        &tokens,
        DataPlane::Jobs,
        args.server.tls_client_ca.is_some(),
    )?;
    let token = ClientToken::load(
        args.client_token_file.as_deref(),
        "VOXPOOL_CLIENT_TOKEN",
        std::env::var("VOXPOOL_CLIENT_TOKEN").ok().as_deref(),
    )?;
    if !token.is_set() {
        tracing::warn!(
            "no client token for synthesis (VOXPOOL_CLIENT_TOKEN or --client-token-file): a synthesis that checks tokens refuses this replica, which then pauses its workers and reports NOT_SERVING (its items go to other replicas)"
        );
    }
    let secret = webhook_secret(&args)?;
    let webhooks = Arc::new(Policy::parse(&args.webhook_allow)?);
    let results = Results::new(voxpool_runtime::blob::BlobStore::open(
        args.blobs.blob_store.as_deref(),
    )?);
    let synth = Synthesizer::new(
        &args.synthesis,
        token,
        args.item_timeout,
        args.server.max_message_bytes,
    )?;
    let (listener, bound) = voxpool_runtime::serve::bind(&args.listen).await?;
    let shutdown = voxpool_runtime::serve::shutdown_token();
    let connect = || async {
        JobStore::connect(
            &args.store,
            &args.key_prefix,
            args.replica_acks,
            args.retention,
            Duration::from_secs(2),
        )
        .await
        .map_err(NotReady::Unreachable)
    };
    let Some(store) = voxpool_runtime::startup::wait_for("job store", connect, &shutdown).await?
    else {
        return Ok(());
    };
    let consumer = format!(
        "{}-{}-{}",
        std::env::var("HOSTNAME").unwrap_or_else(|_| "replica".into()),
        std::process::id(),
        hex::encode(rand::random::<[u8; 4]>())
    );
    let options = WorkerOptions {
        concurrency: args.concurrency as usize,
        visibility_timeout: args.visibility_timeout,
        max_attempts: args.max_attempts.max(1),
        max_deliveries: args.max_deliveries.max(1),
        poll: Duration::from_millis(200),
    };
    let workers = Workers::new(
        store.clone(),
        synth,
        results.clone(),
        consumer.clone(),
        options,
    );
    let finalizer = Arc::new(Finalizer::new(store.clone(), results.clone()));
    if let Some(secret) = secret.clone() {
        let options = DeliveryOptions {
            concurrency: args.webhook_concurrency as usize,
            per_destination: args.webhook_host_concurrency as usize,
            poll: Duration::from_millis(100),
        };
        let deliveries = Deliveries::new(
            store.clone(),
            results.clone(),
            secret,
            Sender::new(webhooks.clone())?,
            options,
        );
        tokio::spawn(Arc::new(deliveries).run(shutdown.clone()));
    }
    let work = tokio::spawn(workers.clone().run(shutdown.clone(), args.item_timeout));
    let workers_health = workers.clone();
    tokio::spawn(finalizer.run(Duration::from_millis(250), shutdown.clone()));
    let service = JobsService::new(
        store.clone(),
        results.clone(),
        workers,
        secret.as_ref(),
        webhooks,
    )
    .into_server(args.server.max_message_bytes);
    let service = Authenticated::new(service, callers, &[]);
    tracing::info!(
        listen = %bound,
        store = %voxpool_redis::redact(&args.store),
        synthesis = %args.synthesis,
        blob_store = %results.location(),
        consumer = %consumer,
        concurrency = args.concurrency,
        webhooks = secret.is_some(),
        webhook_allow = %args.webhook_allow,
        "voxpool-jobs serving"
    );
    if secret.is_none() {
        tracing::warn!(
            "no webhook secret (VOXPOOL_JOBS_WEBHOOK_SECRET or --webhook-secret-file): this replica refuses CreateJob with a webhook_url and delivers no webhook (the replicas that have the secret deliver them)"
        );
    }
    voxpool_runtime::serve::announce("voxpool-jobs", bound)?;
    // NOT_SERVING also while the workers are paused by a fault of this replica.
    let probe = move |_: bool| {
        let (store, workers) = (store.clone(), workers_health.clone());
        async move {
            store.ping().await.map_err(|e| e.to_string())?;
            workers
                .fault()
                .filter(|f| f.not_serving)
                .map_or(Ok(()), |f| Err(format!("workers paused: {}", f.why)))
        }
    };
    let health = voxpool_runtime::serve::Health {
        dependency: "job store and workers",
        interval: Duration::from_secs(1),
        probe,
    };
    let served = voxpool_runtime::serve::serve_grpc(
        listener,
        &args.server,
        &[SERVICE_NAME],
        health,
        |router| router.add_service(service),
        shutdown.clone(),
    )
    .await;
    shutdown.cancel();
    let _ = work.await;
    served
}
