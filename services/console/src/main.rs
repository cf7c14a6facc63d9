//! `voxpool-console`: the browser console (pools live, the voice-pack market, packs admin,
//! jobs, the audio cache) over the four services' public gRPC APIs.
//!
//! Exits non-zero with a one-line reason on a port in use, unreadable TLS or token files, a
//! malformed service URL, or no token to sign in with. A service that is down is no reason
//! to exit: its pages say so. `--help` documents every flag; each also reads its
//! `VOXPOOL_…` variable.

use std::{path::PathBuf, process::ExitCode};

use clap::Parser;
use voxpool_console::{backend::Endpoints, server};
use voxpool_domain::secret::Secret;
use voxpool_runtime::auth::ClientToken;

/// The voxpool console: sign in with the admin token (VOXPOOL_ADMIN_TOKEN) to act, or with
/// the read-only console token (VOXPOOL_CONSOLE_TOKEN) to look.
#[derive(Debug, Parser)]
#[command(name = "voxpool-console", version)]
struct Args {
    /// Address to serve HTTP on, `host:port` (port 0 picks a free port).
    #[arg(long, env = "VOXPOOL_CONSOLE_LISTEN", default_value = "127.0.0.1:8090")]
    listen: String,
    /// The scheduler, `URL[,URL...]`.
    #[arg(
        long,
        env = "VOXPOOL_SCHEDULER",
        default_value = "http://127.0.0.1:50051"
    )]
    scheduler: String,
    /// The catalog, `URL[,URL...]`.
    #[arg(
        long,
        env = "VOXPOOL_CATALOG",
        default_value = "http://127.0.0.1:50052"
    )]
    catalog: String,
    /// Synthesis, `URL[,URL...]`.
    #[arg(
        long,
        env = "VOXPOOL_SYNTHESIS",
        default_value = "http://127.0.0.1:50053"
    )]
    synthesis: String,
    /// The jobs service, `URL[,URL...]`; without it the jobs page says how to add it.
    #[arg(long, env = "VOXPOOL_JOBS")]
    jobs: Option<String>,
    /// File holding the admin token (else VOXPOOL_ADMIN_TOKEN): signs admins in and is sent
    /// on the services' admin RPCs.
    #[arg(long, env = "VOXPOOL_ADMIN_TOKEN_FILE")]
    admin_token_file: Option<PathBuf>,
    /// File holding the read-only console token (else VOXPOOL_CONSOLE_TOKEN): signs viewers
    /// in, who see every page and no admin action.
    #[arg(long, env = "VOXPOOL_CONSOLE_TOKEN_FILE")]
    console_token_file: Option<PathBuf>,
    /// File holding the client token presented to the scheduler, synthesis and jobs (else
    /// VOXPOOL_CLIENT_TOKEN; without either none is sent).
    #[arg(long, env = "VOXPOOL_CLIENT_TOKEN_FILE")]
    client_token_file: Option<PathBuf>,
    /// Tenant whose jobs the jobs page lists by default (`?tenant=` picks another).
    #[arg(long, env = "VOXPOOL_CONSOLE_JOBS_TENANT", default_value = "")]
    jobs_tenant: String,
    #[command(flatten)]
    server: voxpool_runtime::limits::ServerFlags,
}

/// mimalloc, as the other services.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = Args::parse();
    voxpool_runtime::serve::block_on(
        "voxpool-console",
        voxpool_runtime::serve::with_telemetry("voxpool-console", serve(args)),
    )
}

/// A token from `file`, else the variable `env`; `None` when neither is set. Errors: an
/// unreadable file, or a token under 16 characters (named, never shown).
fn token(file: Option<&PathBuf>, env: &str) -> Result<Option<Secret>, String> {
    let (origin, raw) = match (file, std::env::var(env)) {
        (Some(path), _) => (
            path.display().to_string(),
            std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read token file {}: {e}", path.display()))?,
        ),
        (None, Ok(value)) => (env.to_owned(), value),
        (None, Err(_)) => return Ok(None),
    };
    let secret = Secret::new(raw.trim().to_owned());
    if secret.expose().chars().count() < 16 {
        return Err(format!(
            "the token from {origin} is shorter than 16 characters: use a longer random one"
        ));
    }
    Ok(Some(secret))
}

async fn serve(args: Args) -> Result<(), String> {
    let admin_token = token(args.admin_token_file.as_ref(), "VOXPOOL_ADMIN_TOKEN")?;
    let viewer_token = token(args.console_token_file.as_ref(), "VOXPOOL_CONSOLE_TOKEN")?;
    if admin_token.is_none() && viewer_token.is_none() {
        return Err("no token can sign in: set VOXPOOL_ADMIN_TOKEN (admin) or VOXPOOL_CONSOLE_TOKEN (read-only), or their --…-token-file".into());
    }
    if let (Some(a), Some(v)) = (&admin_token, &viewer_token)
        && a.expose() == v.expose()
    {
        return Err(
            "the read-only console token equals the admin token: give it its own value".into(),
        );
    }
    let client_token = ClientToken::load(
        args.client_token_file.as_deref(),
        "VOXPOOL_CLIENT_TOKEN",
        std::env::var("VOXPOOL_CLIENT_TOKEN").ok().as_deref(),
    )?;
    voxpool_runtime::limits::install_crypto_provider();
    let settings = server::Settings {
        listen: args.listen,
        endpoints: Endpoints {
            scheduler: args.scheduler,
            catalog: args.catalog,
            synthesis: args.synthesis,
            jobs: args.jobs,
            client_token,
            admin_token,
        },
        viewer_token,
        jobs_tenant: args.jobs_tenant,
        server: args.server,
    };
    server::run(settings, voxpool_runtime::serve::shutdown_token()).await
}
