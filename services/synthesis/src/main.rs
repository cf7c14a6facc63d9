//! `voxpool-synthesis`: the Synthesis gRPC server.
//!
//! Exits non-zero with a one-line reason on a bad config, a missing credential under
//! `--require-credentials`, or a port in use; never for a scheduler or catalog that does not
//! answer yet (health is NOT_SERVING until the scheduler does, see `server`). `--help` documents every flag; each flag also
//! reads `VOXPOOL_<FLAG>`.

use std::{path::PathBuf, process::ExitCode, sync::Arc, time::Duration};

use clap::Parser;
use voxpool_config::{Config, Credentials, DataPlane};
use voxpool_domain::provider::Provider;
use voxpool_runtime::{
    auth::{AdminAuth, ClientAuth, ClientToken},
    blob::BlobStore,
};
use voxpool_synthesis::{
    adapters::registry::{self, AdapterOptions},
    cache::{Cache, Seal, seal::Origin},
    front::auth::ApiKeys,
    pools::Pools,
    server::{self, Options},
};

/// Synthesizes speech from a frozen voice snapshot through leased vendor keys, failing over to
/// other keys of the same pool with the same voice.
#[derive(Debug, Parser)]
#[command(name = "voxpool-synthesis", version)]
struct Args {
    /// Pools configuration file (TOML), the same file the scheduler loads.
    #[arg(long, env = "VOXPOOL_CONFIG")]
    config: PathBuf,
    /// Address to serve gRPC on, `host:port`: an IP (`0.0.0.0:50051`, `[::]:50051`) or a
    /// name resolved at start-up (`localhost:50051`). Port 0 picks a free port.
    #[arg(long, env = "VOXPOOL_LISTEN", default_value = "127.0.0.1:50053")]
    listen: String,
    /// PoolScheduler URL, a list `URL,URL,...` of replicas, or an `http://` URL whose host
    /// name resolves to every replica (re-resolved); calls are balanced over the healthy ones
    /// and retried on another when one fails.
    #[arg(
        long,
        env = "VOXPOOL_SCHEDULER",
        default_value = "http://127.0.0.1:50051"
    )]
    scheduler: String,
    /// VoiceCatalog URL (used for requests that name a pack id).
    #[arg(
        long,
        env = "VOXPOOL_CATALOG",
        default_value = "http://127.0.0.1:50052"
    )]
    catalog: String,
    /// Lease time to live in milliseconds; renewed every third of it during a vendor call.
    /// At most the config's scheduler.max_lease_ttl_ms.
    #[arg(long, env = "VOXPOOL_LEASE_TTL_MS", default_value_t = 15_000)]
    lease_ttl_ms: u64,
    /// The espeak-ng executable used by pools of provider `espeak`.
    #[arg(long, env = "VOXPOOL_ESPEAK_BIN", default_value = "espeak-ng")]
    espeak_bin: PathBuf,
    /// Refuse to start when any key's credential cannot be read. Without it such keys are
    /// left out of rotation and a pool with no usable key answers FAILED_PRECONDITION.
    #[arg(long, env = "VOXPOOL_REQUIRE_CREDENTIALS")]
    require_credentials: bool,
    /// File holding the client token presented to the scheduler (else VOXPOOL_CLIENT_TOKEN;
    /// without either none is sent): one of the scheduler's `[[client_tokens]]`.
    #[arg(long, env = "VOXPOOL_CLIENT_TOKEN_FILE")]
    client_token_file: Option<PathBuf>,
    /// Validate the config (and credentials with --require-credentials), print OK, and exit.
    #[arg(long)]
    check_config: bool,
    /// The audio cache (under `cache/` in the blob store): `on` serves repeated chunks from
    /// it and stores new ones (per pool `cache = { enabled, ttl }`, per request
    /// `cache_policy`); `off` turns it off as a whole.
    #[arg(long, env = "VOXPOOL_CACHE", value_enum, default_value_t = CacheSwitch::On)]
    cache: CacheSwitch,
    #[command(flatten)]
    blobs: voxpool_runtime::blob::BlobFlags,
    /// File holding the admin bearer token the `SynthesisAdmin` RPCs (cache purge, stats)
    /// need (else VOXPOOL_ADMIN_TOKEN; without either, they are refused).
    #[arg(long, env = "VOXPOOL_ADMIN_TOKEN_FILE")]
    admin_token_file: Option<PathBuf>,
    /// Serve the OpenAI-compatible HTTP front (`POST /v1/audio/speech`, `GET /v1/audio/voices`,
    /// `GET /v1/models`) on this `host:port` too; off unless set. Callers present an
    /// `[[http.api_keys]]` key of the config as `Authorization: Bearer <key>`.
    #[arg(long, env = "VOXPOOL_HTTP_LISTEN")]
    http_listen: Option<String>,
    /// With --http-listen and no `[[http.api_keys]]`: serve every call, whatever key it sends
    /// or none, as tenant `anonymous`, class STANDARD (without it the listener refuses to
    /// start keyless).
    #[arg(long, env = "VOXPOOL_HTTP_ALLOW_ANONYMOUS", requires = "http_listen")]
    http_allow_anonymous: bool,
    /// Write a usage record of every request to this Redis (the scheduler's `--store` URL
    /// forms: redis://, rediss://, redis-sentinel://…#master, redis-cluster://…), for the
    /// catalog's ledger; off unless set. While it does not answer, calls wait for it (holding
    /// no key) and fail UNAVAILABLE USAGE_STORE_UNAVAILABLE when their deadline runs out,
    /// the vendor sent nothing; with `[usage] on_store_down = "serve"` calls are served and
    /// their records sent later.
    #[arg(long, env = "VOXPOOL_USAGE_STORE")]
    usage_store: Option<String>,
    /// Run the clone worker: claim the vendor steps of managed voice clones from the
    /// catalog's CloneWork (admin token) for the clone scopes of --config this replica holds
    /// a key for. `false` leaves them to other replicas.
    #[arg(long, env = "VOXPOOL_CLONE_WORKER", default_value_t = true, action = clap::ArgAction::Set)]
    clone_worker: bool,
    /// How long the clone worker leases a claimed step, ms (1000..=600000); a replica that
    /// dies mid-step leaves it to another after this.
    #[arg(long, env = "VOXPOOL_CLONE_LEASE_MS", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1_000..=600_000))]
    clone_lease_ms: u64,
    /// How long a clone in training waits before the worker asks the vendor again, ms.
    #[arg(long, env = "VOXPOOL_CLONE_POLL_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(500..=600_000))]
    clone_poll_ms: u64,
    #[command(flatten)]
    server: voxpool_runtime::limits::ServerFlags,
}

/// `--cache`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum CacheSwitch {
    On,
    Off,
}

/// mimalloc instead of the system allocator, as in `voxpool-scheduler`: gRPC and HTTP
/// requests allocate and free many small buffers, which glibc malloc serves slowly. Told to
/// return freed memory promptly (`voxpool_runtime::allocator`): audio streams through here.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    voxpool_runtime::allocator::return_freed_memory_promptly();
    let args = Args::parse();
    let policy = if args.require_credentials {
        Credentials::Require
    } else {
        Credentials::Ignore
    };
    let config =
        match voxpool_runtime::serve::load_config("voxpool-synthesis", &args.config, policy) {
            Ok(c) => c,
            Err(code) => return code,
        };
    // The cache secret resolves (and is long enough) before anything starts, as the pools'
    // credentials do.
    let seal = match Seal::from_config(&config) {
        Ok(seal) => seal,
        Err(e) => {
            eprintln!("voxpool-synthesis: bad config: {e}");
            return ExitCode::from(2);
        }
    };
    if args.check_config {
        println!("OK");
        return ExitCode::SUCCESS;
    }
    voxpool_runtime::serve::block_on(
        "voxpool-synthesis",
        voxpool_runtime::serve::with_telemetry("voxpool-synthesis", serve(args, config, seal)),
    )
}

/// One line per pool with keys missing their credential (not one per key: the example
/// config's cloud pools would bury the start-up lines under a dozen warnings).
fn warn_about_credentials(pools: &Pools) {
    for pool in pools.iter() {
        let problems = pool.credential_problems();
        if !pool.has_usable_key() {
            tracing::warn!(pool = %pool.id, keys = %problems.join("; "), "pool has no usable key (no credential); its requests answer FAILED_PRECONDITION");
        } else if !problems.is_empty() {
            tracing::warn!(pool = %pool.id, keys = %problems.join("; "), "{} key(s) left out of rotation: no credential", problems.len());
        }
    }
}

async fn serve(args: Args, config: Config, seal: Seal) -> Result<(), String> {
    // Bind first: a bad --listen or a port in use is the one line the operator sees, not the
    // last line after the pool warnings below.
    let (listener, bound) = voxpool_runtime::serve::bind(&args.listen).await?;
    let http = match &args.http_listen {
        None => None,
        Some(addr) => {
            let keys = ApiKeys::load(&config.http.api_keys, args.http_allow_anonymous)?;
            voxpool_synthesis::front::tls_acceptor(&args.server)?;
            let (listener, bound) = voxpool_runtime::serve::bind(addr)
                .await
                .map_err(|e| format!("--http-listen: {e}"))?;
            Some((server::HttpListener { listener, keys }, bound))
        }
    };
    let adapters = registry::builtin(&AdapterOptions {
        espeak_program: args.espeak_bin.clone(),
    });
    for pool in &config.pools {
        if !pool
            .provider_id()
            .is_some_and(|p| adapters.contains_key(&p))
        {
            tracing::warn!(pool = %pool.id, provider = %pool.provider, "no adapter for this provider in this build; its requests answer FAILED_PRECONDITION");
        }
    }
    let local: Vec<&str> = config
        .pools
        .iter()
        .filter(|p| p.provider_id().is_some_and(Provider::is_local))
        .map(|p| p.id.as_str())
        .collect();
    if !local.is_empty()
        && let Err(e) = tokio::process::Command::new(&args.espeak_bin)
            .arg("--version")
            .output()
            .await
    {
        tracing::warn!(espeak_bin = %args.espeak_bin.display(), pools = %local.join(", "), error = %e,
            "espeak-ng cannot be run: every call of these pools will fail; install it (Debian: apt-get install espeak-ng, or make setup) or point --espeak-bin (VOXPOOL_ESPEAK_BIN) at it");
    }
    let admin = AdminAuth::load(
        args.admin_token_file.as_deref(),
        std::env::var("VOXPOOL_ADMIN_TOKEN").ok().as_deref(),
    )
    .map_err(|e| e.to_string())?;
    admin.refuse_shared_with(&config.client_tokens)?;
    // One blob store for clips and the cache; opened even with --cache off (clips are needed).
    let blobs = BlobStore::open(args.blobs.blob_store.as_deref())?;
    let references = Some(Arc::new(
        voxpool_synthesis::references::ReferenceClips::new(
            blobs.folder("references"),
            blobs.location(),
            voxpool_synthesis::references::DEFAULT_CACHE_BYTES,
        ),
    ));
    let cache = match args.cache {
        CacheSwitch::Off => {
            tracing::info!("audio cache off (--cache off): every chunk goes to a vendor");
            None
        }
        CacheSwitch::On => {
            if seal.origin() == Origin::Process {
                tracing::warn!(
                    "audio cache: neither synthesis.cache_secret nor scheduler.lease_secret is configured, so entries are sealed with a key of this process: other replicas and this one after a restart miss them; configure synthesis.cache_secret (docs/SECURITY.md)"
                );
            }
            let cache = Arc::new(
                Cache::new(
                    &blobs,
                    config.synthesis.cache_version,
                    config.synthesis.cache_max_bytes,
                    Duration::from_millis(config.synthesis.cache_fill_ttl_ms),
                )
                .with_seal(seal),
            );
            let measured = cache.clone();
            tokio::spawn(async move {
                let checked = match measured.max_bytes() {
                    Some(_) => measured.measure().await,
                    None => measured.probe().await,
                };
                if let Err(e) = checked {
                    tracing::error!(error = %e, "audio cache: the blob store does not answer; requests are served without the cache (each logs a warning) until it does: check --blob-store and the store's credentials");
                }
            });
            tracing::info!(location = %cache.location(), version = cache.version, sealed_with = ?cache.seal().origin(), "audio cache on");
            Some(cache)
        }
    };
    let usage_store = args
        .usage_store
        .as_deref()
        .map(|url| {
            voxpool_synthesis::usage::Writer::start(
                url,
                voxpool_synthesis::usage::writer::DEFAULT_CAPACITY,
                config.usage.on_store_down,
            )
        })
        .transpose()?;
    if let Some(writer) = &usage_store {
        tracing::info!(store = %writer.shown(), "usage records go to the usage store");
    }
    let options = Options {
        usage_store,
        cache,
        references,
        admin,
        scheduler_url: args.scheduler.clone(),
        catalog_url: args.catalog.clone(),
        lease_ttl: Duration::from_millis(args.lease_ttl_ms),
        client_token: ClientToken::load(
            args.client_token_file.as_deref(),
            "VOXPOOL_CLIENT_TOKEN",
            std::env::var("VOXPOOL_CLIENT_TOKEN").ok().as_deref(),
        )?,
    };
    // Read here too so that a bad token stops the start before the address is announced (and
    // so that the line saying how callers authenticate comes before that address).
    ClientAuth::load_announced(
        &config.client_tokens,
        DataPlane::Synthesis,
        args.server.tls_client_ca.is_some(),
    )?;
    let core = server::build(&config, adapters, &options)?;
    warn_about_credentials(&core.pools);
    let shutdown = voxpool_runtime::serve::shutdown_token();
    // Every start-up log line comes before the addresses, so `make run`'s ready line (printed
    // once the last address is out) is the last line a user sees. The gRPC address is the
    // first stdout line (what scripts and tests wait for); the HTTP front's URL is the second.
    let http_url = http.as_ref().map(|(listener, http_bound)| {
        let scheme = if args.server.tls_cert.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{http_bound}/v1");
        tracing::info!(%url, api_keys = listener.keys.len(), "OpenAI-compatible HTTP front serving");
        url
    });
    tracing::info!(
        listen = %bound,
        scheduler = %args.scheduler,
        catalog = %args.catalog,
        pools = config.pools.len(),
        "voxpool-synthesis serving"
    );
    voxpool_runtime::serve::announce("voxpool-synthesis", bound)?;
    if let Some(url) = &http_url {
        use std::io::Write as _;
        // A reader that took only the first line may have closed stdout: that is not an error.
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "voxpool-synthesis http front on {url}").and_then(|()| out.flush());
    }
    let http = http.map(|(listener, _)| listener);
    let clones = if args.clone_worker {
        let token = ClientToken::load(
            args.admin_token_file.as_deref(),
            "VOXPOOL_ADMIN_TOKEN",
            std::env::var("VOXPOOL_ADMIN_TOKEN").ok().as_deref(),
        )?;
        let timing = voxpool_synthesis::clones::Timing {
            lease: Duration::from_millis(args.clone_lease_ms),
            poll_after: Duration::from_millis(args.clone_poll_ms),
        };
        voxpool_synthesis::clones::spawn(
            &config,
            &core,
            &args.catalog,
            token,
            timing,
            shutdown.clone(),
        )?
    } else {
        None
    };
    let served =
        server::serve_with_http(listener, http, core, &args.server, shutdown.clone()).await;
    if let Some(worker) = clones {
        // Steps under way finish within their lease; one cut off here runs again elsewhere.
        shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), worker).await;
    }
    served
}
