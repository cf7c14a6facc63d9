//! Answering a connection over the cap: one short-lived HTTP server (HTTP/1.1 or HTTP/2, as
//! the client speaks) that gives every request the refusal, then closes.

use std::{convert::Infallible, time::Duration};

use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::conn::auto,
    service::TowerToHyperService,
};
use tokio::io::{AsyncRead, AsyncWrite};

/// How long a refused connection is served its refusal before it is closed.
const REFUSAL_WINDOW: Duration = Duration::from_secs(2);

/// A gRPC answer UNAVAILABLE with `message` (trailers-only).
pub fn grpc_refusal(message: &str) -> http::Response<tonic::body::Body> {
    tonic::Status::unavailable(message).into_http()
}

/// Serves `respond()` to every request on `io` for a short while, then closes it.
pub async fn serve_refusal<IO, B>(
    io: IO,
    respond: impl Fn() -> http::Response<B> + Clone + Send + Sync + 'static,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let service = tower::service_fn(move |_: http::Request<hyper::body::Incoming>| {
        let answer = respond();
        async move { Ok::<_, Infallible>(answer) }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(REFUSAL_WINDOW)
        .keep_alive(false);
    let conn = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(service));
    let _ = tokio::time::timeout(REFUSAL_WINDOW, conn).await;
}
