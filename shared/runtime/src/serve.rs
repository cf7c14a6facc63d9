//! Serving plumbing every voxpool binary shares: binding with a clear error, one server
//! assembly ([`serve_grpc`]: limits, TLS, trace spans, health kept in step with a dependency,
//! reflection, graceful shutdown), the `grpc-timeout` parser, and shutdown on SIGTERM /
//! SIGINT (a second signal, not the echo of the first, exits at once).
//!
//! Health is also a metric: `voxpool.health.serving` (gauge, a 0/1 flag without a unit, so
//! Prometheus names it `voxpool_health_serving`; attribute `dependency`) is 1 while the
//! replica reports SERVING and 0 while it reports NOT_SERVING (its dependency unreachable, or
//! draining), so alerts see what load balancers see.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use opentelemetry::{KeyValue, global, metrics::ObservableGauge};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;

use crate::limits::{LimitsLayer, ServerFlags};

/// The router a server's own services are added to by [`serve_grpc`].
pub type Router = tonic::transport::server::Router<
    tower::layer::util::Stack<
        LimitsLayer,
        tower::layer::util::Stack<crate::conn::TrackLayer, tower::layer::util::Identity>,
    >,
>;

/// What a server's health follows: one dependency, probed every `interval` (module doc).
pub struct Health<P> {
    /// The dependency, for log lines: `lease store`, `catalog database`, `scheduler`.
    pub dependency: &'static str,
    /// Time between probes.
    pub interval: Duration,
    /// Probes the dependency; gets whether the last probe succeeded (so it can redo set-up
    /// work on recovery) and answers why it is not usable, if it is not.
    pub probe: P,
}

/// Serves `services` (their fully-qualified names; `add` puts them on the router) on
/// `listener` with the shared limits and TLS of `flags`, per-RPC trace spans, reflection v1
/// and v1alpha, and `grpc.health.v1.Health` for `""` and every name in `services`: SERVING
/// while `health.probe` succeeds, NOT_SERVING while it fails and from shutdown on. Health is
/// known before the first request (one probe runs first).
///
/// Draining: when `shutdown` is cancelled, health turns NOT_SERVING at once, the server keeps
/// answering for `flags.drain_delay` (clients and balancers move away meanwhile), then stops
/// accepting and returns once in-flight RPCs have finished. Errors: invalid TLS files, reflection set-up,
/// the transport failing (one-line reasons).
pub async fn serve_grpc<P, F>(
    listener: TcpListener,
    flags: &ServerFlags,
    services: &[&'static str],
    mut health: Health<P>,
    add: impl FnOnce(Router) -> Router,
    shutdown: CancellationToken,
) -> Result<(), String>
where
    P: FnMut(bool) -> F + Send + 'static,
    F: Future<Output = Result<(), String>> + Send,
{
    let (reflection_v1, reflection_v1alpha) =
        reflection_services(services).map_err(|e| format!("reflection: {e}"))?;
    let (reporter, health_service) = tonic_health::server::health_reporter();
    let names: Vec<&'static str> = std::iter::once("")
        .chain(services.iter().copied())
        .collect();
    let dependency = health.dependency;
    let mut serving = match (health.probe)(true).await {
        Ok(()) => true,
        Err(why) => {
            tracing::warn!(%dependency, reason = %why, "not serving yet: health is NOT_SERVING until it answers");
            false
        }
    };
    let set = async |reporter: &tonic_health::server::HealthReporter, status| {
        for name in &names {
            reporter.set_service_status(*name, status).await;
        }
    };
    let status_of = |serving| {
        if serving {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        }
    };
    set(&reporter, status_of(serving)).await;
    let serving_now = Arc::new(AtomicBool::new(serving));
    // Registered with the meter provider for the process's life (the handle unregisters
    // nothing): one serve_grpc per process.
    let _serving_gauge = serving_gauge(dependency, serving_now.clone());
    let health_task = {
        let shutdown = shutdown.clone();
        let names = names.clone();
        tokio::spawn(async move {
            let set = async |status| {
                for name in &names {
                    reporter.set_service_status(*name, status).await;
                }
            };
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => {
                        serving_now.store(false, Ordering::Relaxed);
                        set(ServingStatus::NotServing).await;
                        break;
                    }
                    () = tokio::time::sleep(health.interval) => {}
                }
                let now = match (health.probe)(serving).await {
                    Ok(()) => true,
                    Err(why) => {
                        if serving {
                            tracing::error!(%dependency, reason = %why, "unreachable; health is NOT_SERVING");
                        }
                        false
                    }
                };
                if now != serving {
                    if now {
                        tracing::info!(%dependency, "reachable again; health is SERVING");
                    }
                    serving_now.store(now, Ordering::Relaxed);
                    set(status_of(now)).await;
                    serving = now;
                }
            }
        })
    };
    let gate = crate::conn::Gate::new("grpc", &flags.conn, flags.tls_cert.is_some());
    let router = flags
        .server(&gate)?
        .trace_fn(crate::telemetry::server_span)
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha);
    let drain_delay = flags.drain_delay;
    let stop = async move {
        shutdown.cancelled().await;
        tracing::info!(
            drain_delay_ms = drain_delay.as_millis(),
            "draining: health is NOT_SERVING; still answering until the drain delay ends"
        );
        tokio::time::sleep(drain_delay).await;
    };
    let (router, incoming) = (
        add(router),
        gate.incoming(listener, flags.tls_cert.is_some()),
    );
    let result = match flags.tls_acceptor()? {
        Some(tls) => {
            let handshaken = crate::tls::incoming(incoming, tls, flags.conn.head_timeout);
            router.serve_with_incoming_shutdown(handshaken, stop).await
        }
        None => router.serve_with_incoming_shutdown(incoming, stop).await,
    }
    .map_err(|e| format!("grpc server: {e}"));
    health_task.abort();
    result
}

/// `voxpool.health.serving` (module doc): 1 while `serving` holds, else 0.
fn serving_gauge(dependency: &'static str, serving: Arc<AtomicBool>) -> ObservableGauge<u64> {
    global::meter("voxpool-runtime")
        .u64_observable_gauge("voxpool.health.serving")
        .with_description("1 while this replica's gRPC health is SERVING, 0 while NOT_SERVING")
        .with_callback(move |obs| {
            obs.observe(
                u64::from(serving.load(Ordering::Relaxed)),
                &[KeyValue::new("dependency", dependency)],
            );
        })
        .build()
}

/// The caller's deadline from the `grpc-timeout` request header (`<digits><H|M|S|m|u|n>`, as
/// the gRPC HTTP/2 protocol spells it), or `None` when absent or malformed.
pub fn grpc_timeout(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    let raw = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = raw.split_at(raw.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Binds `addr` (`host:port`; a host name is resolved and the first address that binds is
/// used) and returns the listener with the address it is bound to (the real port when
/// `addr` asked for port 0). Errors: "address in use", "not an address" and friends as a
/// one-line reason naming `addr`.
pub async fn bind(addr: &str) -> Result<(TcpListener, SocketAddr), String> {
    let listener = TcpListener::bind(addr).await.map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::InvalidInput {
            " (--listen takes host:port, e.g. 127.0.0.1:50051, 0.0.0.0:50051, [::]:50051 or localhost:0)"
        } else if e.kind() == std::io::ErrorKind::AddrInUse {
            " (another process serves that port: stop it, or pick another with --listen)"
        } else {
            ""
        };
        format!("cannot listen on {addr}: {e}{hint}")
    })?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("cannot read the address bound for {addr}: {e}"))?;
    Ok((listener, bound))
}

/// Prints `<binary> listening on <address>` as the binary's first stdout line: how scripts
/// and tests learn the port a `--listen host:0` picked. Call it once, when about to serve.
/// Errors: stdout is closed or unwritable (a one-line reason, instead of `println!`'s panic).
pub fn announce(binary: &str, bound: SocketAddr) -> Result<(), String> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{binary} listening on {bound}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("cannot write the listening address to stdout: {e}"))
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

/// Signals this close after the first are the same request to stop, not a second one: a
/// terminal's Ctrl-C reaches every process of its process group, and a supervisor (a script,
/// a process manager) that forwards its own SIGTERM on Ctrl-C lands right after it.
const SAME_STOP: Duration = Duration::from_millis(500);

/// Returns a token cancelled on the first SIGTERM or SIGINT; a second signal, sent more than
/// [`SAME_STOP`] after the first, exits the process at once with status 130.
pub fn shutdown_token() -> CancellationToken {
    let token = CancellationToken::new();
    let child = token.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown signal received, draining (send again to exit at once)");
        child.cancel();
        let first = tokio::time::Instant::now();
        loop {
            wait_for_signal().await;
            if first.elapsed() >= SAME_STOP {
                break;
            }
            tracing::info!(
                within_ms = SAME_STOP.as_millis(),
                "another shutdown signal right after the first: the same stop, still draining"
            );
        }
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
    credentials: voxpool_config::Credentials,
) -> Result<voxpool_config::Config, std::process::ExitCode> {
    voxpool_config::Config::load_validated(path, credentials).map_err(|e| {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tonic::metadata::MetadataMap;

    use super::grpc_timeout;

    #[test]
    fn grpc_timeout_units_parse_and_malformed_values_are_ignored() {
        let mut md = MetadataMap::new();
        assert_eq!(grpc_timeout(&md), None);
        for (raw, want) in [
            ("5S", Duration::from_secs(5)),
            ("250m", Duration::from_millis(250)),
            ("2M", Duration::from_secs(120)),
            ("1H", Duration::from_secs(3600)),
            ("30u", Duration::from_micros(30)),
            ("7n", Duration::from_nanos(7)),
        ] {
            md.insert("grpc-timeout", raw.parse().unwrap());
            assert_eq!(grpc_timeout(&md), Some(want), "{raw}");
        }
        for raw in ["12x", "S", "123456789S", "-1S"] {
            md.insert("grpc-timeout", raw.parse().unwrap());
            assert_eq!(grpc_timeout(&md), None, "{raw}");
        }
    }
}
