//! `voxpool-scheduler`: the PoolScheduler gRPC server.
//!
//! Exits non-zero with a one-line reason on a bad config (a malformed `--store` included) or
//! a port in use. A store that does not answer yet is no reason to exit: the server starts,
//! answers health NOT_SERVING and retries the store with capped back-off until it answers
//! (`voxpool_runtime::startup`). `--help` documents every flag; each flag also reads
//! `VOXPOOL_<FLAG>`.

use std::{path::PathBuf, process::ExitCode};

use clap::Parser;
use voxpool_config::{Config, Credentials, DataPlane};
use voxpool_runtime::auth::{AdminAuth, ClientAuth};

/// Leases TTS vendor keys to callers: least utilization first, never over a key's capacity,
/// shared across replicas through Redis.
#[derive(Debug, Parser)]
#[command(name = "voxpool-scheduler", version)]
struct Args {
    /// Pools configuration file (TOML).
    #[arg(long, env = "VOXPOOL_CONFIG")]
    config: PathBuf,
    /// Address to serve gRPC on, `host:port`: an IP (`0.0.0.0:50051`, `[::]:50051`) or a
    /// name resolved at start-up (`localhost:50051`). Port 0 picks a free port.
    #[arg(long, env = "VOXPOOL_LISTEN", default_value = "127.0.0.1:50051")]
    listen: String,
    /// Lease store: `memory` (single replica) or Redis shared by any number of replicas: one
    /// server (`redis://host:port/db`, `rediss://`, `unix:///path/redis.sock`), Sentinel
    /// (`redis-sentinel://host:port[,host:port...][/db]#<master-name>`) or Cluster
    /// (`redis-cluster://host:port[,host:port...]`); TLS as `rediss-sentinel://`,
    /// `rediss-cluster://`.
    #[arg(long, env = "VOXPOOL_STORE", default_value = "memory")]
    store: String,
    /// File holding the admin bearer token (else VOXPOOL_ADMIN_TOKEN; without either, admin
    /// RPCs are refused).
    #[arg(long, env = "VOXPOOL_ADMIN_TOKEN_FILE")]
    admin_token_file: Option<PathBuf>,
    /// Validate the config, print OK or every problem, and exit.
    #[arg(long)]
    check_config: bool,
    #[command(flatten)]
    server: voxpool_runtime::limits::ServerFlags,
}

/// mimalloc instead of the system allocator: a gRPC request allocates and frees many small
/// buffers (HTTP/2 frames, headers, protobuf), and glibc malloc cost ~10% of the CPU of an
/// Acquire+Release pair in `make bench`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = Args::parse();
    let config = match voxpool_runtime::serve::load_config(
        "voxpool-scheduler",
        &args.config,
        Credentials::Ignore,
    ) {
        Ok(c) => c,
        Err(code) => return code,
    };
    // A configured lease secret that does not resolve is a configuration error too.
    if let Err(e) = voxpool_scheduler::signing::LeaseSigner::from_settings(&config.scheduler) {
        eprintln!("voxpool-scheduler: invalid configuration: {e}");
        return ExitCode::FAILURE;
    }
    if args.check_config {
        println!("OK");
        return ExitCode::SUCCESS;
    }
    voxpool_runtime::serve::block_on(
        "voxpool-scheduler",
        voxpool_runtime::serve::with_telemetry("voxpool-scheduler", serve(args, config)),
    )
}

async fn serve(args: Args, config: Config) -> Result<(), String> {
    let token_env = std::env::var("VOXPOOL_ADMIN_TOKEN").ok();
    let auth = AdminAuth::load(args.admin_token_file.as_deref(), token_env.as_deref())
        .map_err(|e| e.to_string())?;
    auth.refuse_shared_with(&config.client_tokens)?;
    // Read here too (serve_with reads them for itself) so that a bad client token stops the
    // start before the address is announced.
    ClientAuth::load(
        &config.client_tokens,
        DataPlane::Scheduler,
        args.server.tls_client_ca.is_some(),
    )?;
    let (listener, bound) = voxpool_runtime::serve::bind(&args.listen).await?;
    let shutdown = voxpool_runtime::serve::shutdown_token();
    let store =
        voxpool_scheduler::server::open_store_waiting(&args.store, &config, &shutdown).await?;
    voxpool_runtime::serve::announce("voxpool-scheduler", bound)?;
    tracing::info!(
        listen = %bound,
        store = %voxpool_scheduler::server::redact_url(&args.store),
        pools = config.pools.len(),
        admin = auth.is_enabled(),
        "voxpool-scheduler serving"
    );
    voxpool_scheduler::server::serve_with(listener, store, &config, auth, &args.server, shutdown)
        .await
}
