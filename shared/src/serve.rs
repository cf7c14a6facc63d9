//! Serving plumbing every voxpool binary shares: binding with a clear error, the health and
//! reflection services, and shutdown on SIGTERM / SIGINT (a second signal exits at once).

use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Binds `addr` (`host:port`; a host name is resolved and the first address that binds is
/// used) and returns the listener with the address it is bound to (the real port when
/// `addr` asked for port 0). Errors: "address in use", "not an address" and friends as a
/// one-line reason naming `addr`.
pub async fn bind(addr: &str) -> Result<(TcpListener, SocketAddr), String> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("cannot read the address bound for {addr}: {e}"))?;
    Ok((listener, bound))
}

/// Prints `<binary> listening on <address>` as the binary's first stdout line: how scripts
/// and tests learn the port a `--listen host:0` picked. Call it once, when about to serve.
pub fn announce(binary: &str, bound: SocketAddr) {
    println!("{binary} listening on {bound}");
}

/// Server reflection v1 and v1alpha for a server that serves `services` (fully-qualified
/// names such as `voxpool.scheduler.v1.PoolScheduler`): `grpcurl -plaintext HOST list` shows
/// exactly those plus health and reflection, and `describe` resolves every type they use,
/// including the `google.rpc` error details, with no local proto files.
pub fn reflection_services(
    services: &[&str],
) -> Result<
    (
        tonic_reflection::server::v1::ServerReflectionServer<
            impl tonic_reflection::server::v1::ServerReflection,
        >,
        tonic_reflection::server::v1alpha::ServerReflectionServer<
            impl tonic_reflection::server::v1alpha::ServerReflection,
        >,
    ),
    tonic_reflection::server::Error,
> {
    let names = services.iter().copied().chain([
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    ]);
    let builder = || {
        let mut b = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(voxpool_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(
                tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
            );
        for name in names.clone() {
            b = b.with_service_name(name);
        }
        b
    };
    Ok((builder().build_v1()?, builder().build_v1alpha()?))
}

/// Returns a token cancelled on the first SIGTERM or SIGINT; a second signal exits the
/// process at once with status 130.
pub fn shutdown_token() -> CancellationToken {
    let token = CancellationToken::new();
    let child = token.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown signal received, draining (send again to exit at once)");
        child.cancel();
        wait_for_signal().await;
        tracing::warn!("second shutdown signal, exiting now");
        std::process::exit(130);
    });
    token
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Loads and validates a binary's config file. On failure prints
/// `<name>: bad config: <every problem>` to stderr and returns exit code 2.
pub fn load_config(
    name: &str,
    path: &std::path::Path,
    credentials: crate::config::Credentials,
) -> Result<crate::config::Config, std::process::ExitCode> {
    crate::config::Config::load_validated(path, credentials).map_err(|e| {
        eprintln!("{name}: bad config: {e}");
        std::process::ExitCode::from(2)
    })
}

/// Runs `main` on a multi-thread Tokio runtime. An error prints `<name>: <reason>` (one
/// line) to stderr and exits 1.
pub fn block_on(
    name: &str,
    main: impl std::future::Future<Output = Result<(), String>>,
) -> std::process::ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{name}: cannot start runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(main) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(reason) => {
            eprintln!("{name}: {reason}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Installs telemetry for service `name` ([`crate::telemetry::Telemetry::init`]), runs
/// `serve`, then flushes telemetry (awaited) whatever `serve` returned.
pub async fn with_telemetry(
    name: &str,
    serve: impl std::future::Future<Output = Result<(), String>>,
) -> Result<(), String> {
    let telemetry = crate::telemetry::Telemetry::init(name)?;
    let result = serve.await;
    telemetry.shutdown().await;
    result
}

/// The accepted-connection stream for `serve_with_incoming*`, with TCP_NODELAY on every
/// socket. Without it small gRPC answers wait on Nagle's algorithm (about 40 ms per
/// request-response turn on Linux); tonic's own `tcp_nodelay` setting does not apply to
/// incoming streams the caller supplies.
pub fn incoming(listener: TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}
