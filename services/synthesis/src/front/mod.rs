//! The OpenAI-compatible HTTP front (`--http-listen`): `POST /v1/audio/speech`
//! ([`speech`]), `GET /v1/audio/voices` and `GET /v1/models` ([`voices`]), on axum over
//! hyper, beside the gRPC server and over the same [`Core`].
//!
//! It owns the HTTP edge only, beside the gRPC edge (never through it): every speech request
//! becomes the domain request `Synthesize` makes and runs through the same job path
//! ([`crate::job::delivery`]), so every guarantee of the gRPC side holds (leases held to the
//! vendor's end, failover before the first byte only, parallel chunks, a caller gone = the
//! job cancelled). Errors are OpenAI's shape, mapped from the domain error's classification,
//! the one the gRPC status is built from ([`error`]); callers are known by API key ([`auth`]).
//!
//! Shared with the gRPC side (`voxpool_runtime::limits::ServerFlags`): TLS (`--tls-cert`,
//! `--tls-key`; HTTP/1.1 and HTTP/2 by ALPN), load shedding (`--max-concurrent-requests`
//! handlers at once on this listener, beyond it 503), the request timeout (504), and shutdown
//! (after `--drain-delay` the listener closes and answers under way finish). A body is at most
//! [`Front::body_limit`] bytes (413 beyond). Requests hyper cannot parse (a malformed request
//! line, headers past the head buffer) are answered by hyper itself, in OpenAI's error shape
//! too ([`canned`]).

pub mod auth;
mod body;
mod canned;
pub mod error;
pub mod speech;
mod timeout;
pub mod voices;

use std::{sync::Arc, time::Duration};

use axum::{
    Router,
    body::Body,
    extract::{Request, State},
    http::{HeaderMap, Method, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::{conn::auto, graceful::GracefulShutdown},
    service::TowerToHyperService,
};
use tokio::{net::TcpListener, sync::Semaphore};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use voxpool_runtime::{
    conn::{Gate, Tracked},
    limits::ServerFlags,
};

use self::{auth::ApiKeys, canned::JsonErrors, error::ApiError};
use crate::job::Core;

/// hyper's HTTP/1.1 buffer per connection (its default is about 400 KiB): what an answer may
/// queue in the process for a caller that stopped reading (`crate::job::delivery`), and the largest
/// request head accepted.
const HTTP1_BUFFER_BYTES: usize = 64 * 1024;

/// Longest a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The HTTP front's shared state.
#[derive(Debug)]
pub struct Front {
    /// The synthesis core every request runs on.
    pub core: Arc<Core>,
    keys: ApiKeys,
    /// Largest request body accepted, bytes: room for `max_text_chars` of 4-byte characters
    /// and the other fields, at most `--max-message-bytes`.
    pub body_limit: usize,
    shed: Arc<Semaphore>,
    request_timeout: Duration,
    body_timeout: Duration,
}

impl Front {
    /// The front over `core`, accepting `keys`, with the limits of `flags`.
    pub fn new(core: Arc<Core>, keys: ApiKeys, flags: &ServerFlags) -> Self {
        let body_limit =
            (core.settings.max_text_chars * 4 + 64 * 1024).min(flags.max_message_bytes);
        Self {
            core,
            keys,
            body_limit,
            shed: Arc::new(Semaphore::new(flags.max_concurrent_requests)),
            request_timeout: flags.request_timeout,
            body_timeout: flags.conn.body_timeout,
        }
    }

    fn caller(&self, headers: &HeaderMap) -> Result<auth::Caller, ApiError> {
        let caller = self
            .keys
            .caller(
                headers
                    .get(header::AUTHORIZATION)
                    .map(axum::http::HeaderValue::as_bytes),
            )
            .map_err(ApiError::unauthenticated)?;
        tracing::Span::current().record("tenant", caller.tenant.as_str());
        Ok(caller)
    }
}

/// The routes (module doc) over `front`.
pub fn router(front: Arc<Front>) -> Router {
    Router::new()
        .route(speech::ROUTE, post(speech_route))
        .route("/v1/audio/voices", get(voices_route))
        .route("/v1/models", get(models_route))
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(middleware::from_fn_with_state(front.clone(), limits))
        .with_state(front)
}

async fn speech_route(State(front): State<Arc<Front>>, headers: HeaderMap, body: Body) -> Response {
    let caller = match front.caller(&headers) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    let too_large = || ApiError {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        code: Some("request_too_large".to_owned()),
        ..ApiError::invalid(
            "body",
            format!(
                "over {} bytes (room for synthesis.max_text_chars characters of input): send shorter input",
                front.body_limit
            ),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > front.body_limit as u64) {
        return too_large().into_response();
    }
    let bytes = match axum::body::to_bytes(body, front.body_limit).await {
        Ok(bytes) => bytes,
        Err(e) if paused(&e) => return ApiError::body_timeout(front.body_timeout).into_response(),
        Err(_) => return too_large().into_response(),
    };
    speech::speech(&front, caller, &headers, bytes).await
}

/// Whether reading a body failed because it did not arrive within `--body-timeout`.
fn paused(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(cause) = source {
        if cause.is::<voxpool_runtime::conn::BodyTimeout>() {
            return true;
        }
        source = cause.source();
    }
    false
}

async fn voices_route(State(front): State<Arc<Front>>, headers: HeaderMap) -> Response {
    match front.caller(&headers) {
        Ok(_) => voices::voices(&front).await,
        Err(e) => e.into_response(),
    }
}

async fn models_route(State(front): State<Arc<Front>>, headers: HeaderMap) -> Response {
    match front.caller(&headers) {
        Ok(_) => voices::models(&front).await,
        Err(e) => e.into_response(),
    }
}

async fn no_route(method: Method, uri: axum::http::Uri) -> Response {
    ApiError::no_route(method.as_str(), uri.path()).into_response()
}

async fn wrong_method(method: Method, uri: axum::http::Uri) -> Response {
    let route = route_of(uri.path());
    let allowed = if route == speech::ROUTE {
        "POST"
    } else {
        "GET"
    };
    let mut response = ApiError::wrong_method(method.as_str(), route, allowed).into_response();
    response
        .headers_mut()
        .insert(header::ALLOW, header::HeaderValue::from_static(allowed));
    response
}

/// The route template of `path` (a span attribute never carries a raw path).
fn route_of(path: &str) -> &'static str {
    match path {
        speech::ROUTE => speech::ROUTE,
        "/v1/audio/voices" => "/v1/audio/voices",
        "/v1/models" => "/v1/models",
        _ => "unknown",
    }
}

/// Span, load shedding and request timeout around every request (module doc).
async fn limits(State(front): State<Arc<Front>>, request: Request, next: Next) -> Response {
    let span = voxpool_runtime::telemetry::http_server_span(
        request.method().as_str(),
        route_of(request.uri().path()),
        request.headers(),
    );
    let Ok(_slot) = front.shed.clone().try_acquire_owned() else {
        return ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            kind: "service_unavailable",
            code: Some("overloaded".to_owned()),
            retry_after_s: Some(1),
            param: None,
            message: "this server is handling --max-concurrent-requests requests already: retry with backoff".to_owned(),
        }
        .into_response();
    };
    let timeout = front.request_timeout;
    let response =
        match tokio::time::timeout(timeout, next.run(request).instrument(span.clone())).await {
            Ok(r) => r,
            Err(_) => ApiError {
                status: StatusCode::GATEWAY_TIMEOUT,
                kind: "timeout",
                code: Some("deadline_exceeded".to_owned()),
                retry_after_s: None,
                param: None,
                message: format!(
                    "no answer within the server's request timeout ({}s, --request-timeout)",
                    timeout.as_secs()
                ),
            }
            .into_response(),
        };
    span.record("http.response.status_code", response.status().as_u16());
    response
}

/// The TLS acceptor for `flags`' `--tls-cert`/`--tls-key`, or `None` without them. Errors:
/// unreadable or invalid PEM files (one line).
pub fn tls_acceptor(flags: &ServerFlags) -> Result<Option<TlsAcceptor>, String> {
    voxpool_runtime::tls::http_acceptor(
        flags.tls_cert.as_deref(),
        flags.tls_key.as_deref(),
        "the HTTP listener",
    )
}

/// Serves [`router`] on `listener` until `shutdown` is cancelled and `drain_delay` has passed,
/// then stops accepting and waits (at most `finish_within`) for the answers under way. Every
/// connection is under the listener's [`Gate`] (`voxpool_runtime::conn`: the cap, head, idle
/// and body timeouts, HTTP/2 keep-alive); one over the cap is answered 503 and closed.
pub async fn serve(
    listener: TcpListener,
    front: Arc<Front>,
    tls: Option<TlsAcceptor>,
    flags: ServerFlags,
    finish_within: Duration,
    shutdown: CancellationToken,
) {
    let app = router(front);
    let gate = Gate::new("http", &flags.conn, tls.is_some());
    let conn = flags.conn.clone();
    let graceful = GracefulShutdown::new();
    let drain_delay = flags.drain_delay;
    let stop = async {
        shutdown.cancelled().await;
        tokio::time::sleep(drain_delay).await;
    };
    tokio::pin!(stop);
    loop {
        let tcp = tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of file descriptors and the like: pause rather than spin.
                    tracing::warn!(error = %e, "http listener: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let tcp = match gate.admit(tcp) {
            Ok(tcp) => tcp,
            Err(refused) => {
                if tls.is_none() {
                    let message = gate.refusal_message();
                    refused.answer(move || ApiError::too_many_connections(&message));
                }
                continue;
            }
        };
        let service = TowerToHyperService::new(Tracked::for_connection(
            app.clone(),
            tcp.state(),
            conn.body_timeout,
        ));
        let watcher = graceful.watcher();
        let tls = tls.clone();
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            // Plaintext: the gate bounds each head from its first byte, and an idle keep-alive
            // connection lives for the idle timeout (above the load balancers' own). TLS: the
            // gate cannot see heads, so hyper bounds the wait for each one.
            .header_read_timeout(if tls.is_some() {
                conn.head_timeout
            } else {
                conn.idle_timeout
            })
            .max_buf_size(HTTP1_BUFFER_BYTES);
        builder
            .http2()
            .timer(TokioTimer::new())
            .keep_alive_interval(conn.http2_keepalive_interval)
            .keep_alive_timeout(conn.http2_keepalive_timeout);
        tokio::spawn(async move {
            match tls {
                None => {
                    let io = TokioIo::new(JsonErrors::new(tcp));
                    let conn = builder.serve_connection(io, service);
                    let _ = watcher.watch(conn.into_owned()).await;
                }
                Some(acceptor) => {
                    let Ok(Ok(stream)) =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
                    else {
                        return;
                    };
                    let io = TokioIo::new(JsonErrors::new(stream));
                    let conn = builder.serve_connection(io, service);
                    let _ = watcher.watch(conn.into_owned()).await;
                }
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(finish_within, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("http answers still under way at shutdown were cut off");
    }
}
