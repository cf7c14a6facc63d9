//! `voxpool-catalog`: the voice catalog gRPC server, plus `migrate` and `seed` for operators.
//!
//! The server exits non-zero with a one-line reason on an unsupported database URL or a port
//! in use; a database that does not answer yet is no reason to exit: the server starts,
//! answers health NOT_SERVING and retries it (and its migrations) with capped back-off until
//! it answers (`voxpool_runtime::startup`). `migrate` and `seed`, one-shot jobs, exit non-zero
//! on an unreachable database or a bad seed file. `--help` documents every flag; each flag also reads
//! `VOXPOOL_<FLAG>`. A DSN password is never printed.

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};
use voxpool_catalog::{db, pools::ServedPools, seed, server, usage::consumer};
use voxpool_runtime::auth::AdminAuth;

/// Voice packs (provider + model + voice + prosody params + tier, pinned to a tts model id),
/// frozen snapshots and character-card binding, over SQLite or PostgreSQL.
///
/// Without a subcommand: run pending migrations, then serve gRPC (VoiceCatalog,
/// VoiceCatalogAdmin, health, reflection). Admin RPCs need `authorization: Bearer <token>`
/// with the token from VOXPOOL_ADMIN_TOKEN or --admin-token-file.
#[derive(Debug, Parser)]
#[command(name = "voxpool-catalog", version)]
struct Args {
    /// Address to serve gRPC on, `host:port`: an IP (`0.0.0.0:50051`, `[::]:50051`) or a
    /// name resolved at start-up (`localhost:50051`). Port 0 picks a free port.
    #[arg(long, env = "VOXPOOL_LISTEN", default_value = "127.0.0.1:50052")]
    listen: String,
    /// Database: `sqlite://PATH?mode=rwc` (file, created if missing), `sqlite::memory:`, or
    /// `postgres://user:password@host:port/db`.
    #[arg(
        long,
        env = "VOXPOOL_DATABASE",
        default_value = "sqlite://voxpool.db?mode=rwc",
        hide_env_values = true,
        global = true
    )]
    database: String,
    /// Most database connections in the pool (an in-memory SQLite database always uses 1).
    #[arg(long, env = "VOXPOOL_DB_POOL_SIZE", default_value_t = 8, global = true)]
    db_pool_size: u32,
    /// File holding the admin bearer token (else VOXPOOL_ADMIN_TOKEN; without either, admin
    /// RPCs are refused).
    #[arg(long, env = "VOXPOOL_ADMIN_TOKEN_FILE")]
    admin_token_file: Option<PathBuf>,
    /// The pools config file the scheduler and synthesis read (only pool ids and providers
    /// are used). With it, creating or seeding a pack whose tts_model_id no pool serves, or
    /// whose provider differs from its pool's, is INVALID_ARGUMENT; without it any
    /// well-formed tts_model_id is accepted. (`--pools-config` / VOXPOOL_POOLS_CONFIG, the old
    /// spelling, still works and warns.)
    #[arg(long, env = "VOXPOOL_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// The old spelling of --config (and of VOXPOOL_CONFIG); still read, with a warning.
    #[arg(long, env = "VOXPOOL_POOLS_CONFIG", global = true, hide = true)]
    pools_config: Option<PathBuf>,
    /// Where reference clips are kept (under `references/`), shared with synthesis (`seed`
    /// writes its packs' clips there too).
    #[command(flatten)]
    blobs: voxpool_runtime::blob::BlobFlags,
    /// The Redis synthesis writes usage records to (the scheduler's `--store` URL forms:
    /// redis://, rediss://, redis-sentinel://…#master, redis-cluster://…). With it this
    /// replica consumes the usage stream into the ledger (in this database) and serves
    /// `voxpool.catalog.v1.Usage`; without it Usage answers UNAVAILABLE (USAGE_UNAVAILABLE).
    #[arg(long, env = "VOXPOOL_USAGE_STORE", hide_env_values = true)]
    usage_store: Option<String>,
    /// A usage Charge no Settle follows within this many ms is counted as charged (the
    /// synthesis replica died mid-call and the vendor did the work).
    #[arg(long, env = "VOXPOOL_USAGE_GRACE_MS", default_value_t = 120_000)]
    usage_grace_ms: u64,
    /// How long one read of the usage stream waits for new records, ms.
    #[arg(long, env = "VOXPOOL_USAGE_POLL_MS", default_value_t = 1_000)]
    usage_poll_ms: u64,
    /// Usage records another consumer (a dead replica) left unacknowledged this long, ms,
    /// are taken over.
    #[arg(long, env = "VOXPOOL_USAGE_CLAIM_IDLE_MS", default_value_t = 30_000)]
    usage_claim_idle_ms: u64,
    #[command(flatten)]
    server: voxpool_runtime::limits::ServerFlags,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run pending database migrations and exit.
    Migrate,
    /// Create the packs listed in FILE (TOML `[[packs]]` or JSON) that are not in the catalog
    /// yet; packs whose identity already exists are reported and skipped. Migrates first.
    Seed {
        /// Seed file, e.g. deploy/config/packs.toml.
        file: PathBuf,
    },
}

/// mimalloc instead of the system allocator, as in `voxpool-scheduler`: gRPC and HTTP
/// requests allocate and free many small buffers, which glibc malloc serves slowly.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = Args::parse();
    voxpool_runtime::serve::block_on("voxpool-catalog", run(args))
}

async fn run(args: Args) -> Result<(), String> {
    if args.command.is_some() {
        voxpool_runtime::telemetry::init_logging();
    }
    match args.command {
        Some(Command::Migrate) => {
            let conn = db::connect(&args.database, 1).await?;
            db::migrate(&conn, &args.database).await?;
            println!("migrations applied to {}", db::redact(&args.database));
            Ok(())
        }
        Some(Command::Seed { ref file }) => {
            let entries = seed::load(file, &served_pools(&args)?)?;
            let repo = server::open_repository(&args.database, args.db_pool_size).await?;
            let blobs = voxpool_runtime::blob::BlobStore::open(args.blobs.blob_store.as_deref())?;
            let clips = voxpool_catalog::reference::ClipStore::new(
                blobs.folder(voxpool_catalog::reference::FOLDER),
            );
            let outcomes = seed::apply(&repo, &clips, entries)
                .await
                .map_err(|e| format!("seeding: {e}"))?;
            for outcome in &outcomes {
                println!("{outcome}");
            }
            let created = outcomes
                .iter()
                .filter(|o| matches!(o, seed::SeedOutcome::Created { .. }))
                .count();
            println!(
                "{} packs in {}: {created} created, {} already present",
                outcomes.len(),
                file.display(),
                outcomes.len() - created
            );
            Ok(())
        }
        None => voxpool_runtime::serve::with_telemetry("voxpool-catalog", serve(args)).await,
    }
}

async fn serve(args: Args) -> Result<(), String> {
    if args.server.tls_client_ca.is_some() {
        // Its reads are open by design (voice packs hold no secret) and its admin RPCs take
        // the admin token: accepting the flag would suggest a protection it does not give.
        return Err(
            "--tls-client-ca: the catalog does not authenticate callers by certificate \
                    (its reads are open, its admin RPCs take the admin token); remove it"
                .to_owned(),
        );
    }
    let token_env = std::env::var("VOXPOOL_ADMIN_TOKEN").ok();
    let auth = AdminAuth::load(args.admin_token_file.as_deref(), token_env.as_deref())
        .map_err(|e| e.to_string())?;
    let pools = served_pools(&args)?;
    let blobs = voxpool_runtime::blob::BlobStore::open(args.blobs.blob_store.as_deref())?;
    let clips = voxpool_catalog::reference::ClipStore::new(
        blobs.folder(voxpool_catalog::reference::FOLDER),
    );
    // Bind first: a bad --listen or a port in use fails before any migration runs.
    let (listener, bound) = voxpool_runtime::serve::bind(&args.listen).await?;
    let shutdown = voxpool_runtime::serve::shutdown_token();
    let repo =
        server::open_repository_waiting(&args.database, args.db_pool_size, &shutdown).await?;
    let ledger = match &args.usage_store {
        None => voxpool_catalog::usage::Ledger::not_served(),
        Some(url) => {
            voxpool_redis::Conn::check_url(url)
                .map_err(|e| format!("--usage-store {}: {e}", voxpool_redis::redact(url)))?;
            let config = consumer_config(&args, &pools);
            server::start_ledger(&repo, url.clone(), config, &shutdown)
        }
    };
    voxpool_runtime::serve::announce("voxpool-catalog", bound)?;
    tracing::info!(
        listen = %bound,
        database = %db::redact(&args.database),
        admin = auth.is_enabled(),
        pools_known = pools.is_known(),
        blob_store = %blobs.location(),
        "voxpool-catalog serving"
    );
    let parts = server::Parts {
        repo,
        auth,
        pools,
        clips,
        ledger,
    };
    server::serve_parts(listener, parts, &args.server, shutdown).await
}

/// The usage consumer's timings from the flags and `[usage] retention_days`.
fn consumer_config(args: &Args, pools: &ServedPools) -> consumer::ConsumerConfig {
    use std::time::Duration;
    consumer::ConsumerConfig {
        poll: Duration::from_millis(args.usage_poll_ms.max(1)),
        claim_idle: Duration::from_millis(args.usage_claim_idle_ms.max(1)),
        grace: Duration::from_millis(args.usage_grace_ms),
        retention: Duration::from_secs(u64::from(pools.usage().retention_days) * 86_400),
        ..consumer::ConsumerConfig::default()
    }
}

/// The pools of `--config`, or of its deprecated spelling `--pools-config` (warned about once
/// logging is up; both given must name the same file).
fn served_pools(args: &Args) -> Result<ServedPools, String> {
    let path = match (&args.config, &args.pools_config) {
        (Some(config), Some(old)) if config != old => {
            return Err(format!(
                "--config {} and --pools-config {} (its deprecated spelling) name different \
                 files; give --config only",
                config.display(),
                old.display()
            ));
        }
        (Some(config), _) => Some(config),
        (None, Some(old)) => {
            tracing::warn!(
                "--pools-config (VOXPOOL_POOLS_CONFIG) is deprecated: use --config \
                 (VOXPOOL_CONFIG), as the other services do"
            );
            Some(old)
        }
        (None, None) => None,
    };
    path.map_or_else(|| Ok(ServedPools::unknown()), |p| ServedPools::load(p))
}
