//! `voxpool-jobs`: the jobs gRPC server and its workers (one process = one replica; run as
//! many as wanted against one Redis and one blob store).
//!
//! Exits non-zero with a one-line reason on a `--store` no retry can fix, a bad token or
//! secret file, or a port in use; a Redis that does not answer yet is no reason to exit: the
//! port is bound and the server waits for it with capped back-off before it serves. `--help`
//! documents every flag; each also reads its `VOXPOOL_…` variable.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::Parser;
use voxpool_config::{Credentials, DataPlane};
use voxpool_domain::secret::Secret;
use voxpool_jobs::server::{self, Settings};
use voxpool_runtime::auth::{ClientAuth, ClientToken};

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
    /// Longest pause of a tenant's items after synthesis answered BUDGET_EXHAUSTED: they are
    /// tried again at the budget's reset or after this, whichever comes first (so a raised
    /// budget is noticed).
    #[arg(long, env = "VOXPOOL_JOBS_BUDGET_RECHECK", default_value = "60s", value_parser = humantime::parse_duration)]
    budget_recheck: Duration,
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

/// mimalloc, as the other services, told to return freed memory promptly
/// (`voxpool_runtime::allocator`): job audio streams through here.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    voxpool_runtime::allocator::return_freed_memory_promptly();
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

/// The flags as the server's settings: the files they name read, the tokens loaded.
async fn serve(args: Args) -> Result<(), String> {
    server::precheck(&args.store, args.visibility_timeout)?;
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
    let client_token = ClientToken::load(
        args.client_token_file.as_deref(),
        "VOXPOOL_CLIENT_TOKEN",
        std::env::var("VOXPOOL_CLIENT_TOKEN").ok().as_deref(),
    )?;
    let webhook_secret = webhook_secret(&args)?;
    // Boxed: the server's future is deep enough to overflow the layout query's depth limit.
    Box::pin(server::serve(Settings {
        listen: args.listen,
        store: args.store,
        key_prefix: args.key_prefix,
        replica_acks: args.replica_acks,
        synthesis: args.synthesis,
        client_token,
        callers,
        concurrency: args.concurrency as usize,
        visibility_timeout: args.visibility_timeout,
        max_attempts: args.max_attempts,
        max_deliveries: args.max_deliveries,
        budget_recheck: args.budget_recheck,
        item_timeout: args.item_timeout,
        retention: args.retention,
        webhook_secret,
        webhook_allow: args.webhook_allow,
        webhook_concurrency: args.webhook_concurrency as usize,
        webhook_host_concurrency: args.webhook_host_concurrency as usize,
        blob_store: args.blobs.blob_store,
        server: args.server,
    }))
    .await
}
