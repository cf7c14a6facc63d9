//! Which requests are in flight on which connection ([`InFlight`], held by the response body
//! until its last byte), and the request-body time limit, as a tower layer: [`TrackLayer`]
//! for tonic (it finds a request's connection by its peer address) and
//! [`Tracked::for_connection`] for a server that serves its own connections.

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use futures::future::BoxFuture;
use http_body::Frame;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use tower::{Layer, Service};

use super::{ConnState, Gate};

/// One request in flight on its connection, from its head to the end of its response body.
#[derive(Debug)]
pub struct InFlight(Arc<ConnState>);

impl InFlight {
    /// Counts a request on `conn` until dropped.
    pub fn begin(conn: Arc<ConnState>) -> Self {
        conn.begin();
        Self(conn)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// Tracks every request of a tonic server whose incoming stream is [`Gate::incoming`].
#[derive(Clone, Debug)]
pub struct TrackLayer {
    gate: Arc<Gate>,
}

impl TrackLayer {
    /// The layer over `gate`'s connections.
    pub fn new(gate: Arc<Gate>) -> Self {
        Self { gate }
    }
}

impl<S> Layer<S> for TrackLayer {
    type Service = Tracked<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Tracked {
            inner,
            body_timeout: self.gate.flags().body_timeout,
            source: Source::Gate(self.gate.clone()),
        }
    }
}

#[derive(Clone, Debug)]
enum Source {
    /// Found by the request's peer address.
    Gate(Arc<Gate>),
    /// The one connection this service serves.
    Conn(Arc<ConnState>),
}

/// The service of [`TrackLayer`]: counts the request on its connection until the response body
/// ends, and fails a request body that has not arrived whole within `--body-timeout`.
#[derive(Clone, Debug)]
pub struct Tracked<S> {
    inner: S,
    body_timeout: Duration,
    source: Source,
}

impl<S> Tracked<S> {
    /// `inner` serving the one connection `conn`.
    pub fn for_connection(inner: S, conn: Arc<ConnState>, body_timeout: Duration) -> Self {
        Self {
            inner,
            body_timeout,
            source: Source::Conn(conn),
        }
    }

    fn connection<B>(&self, request: &http::Request<B>) -> Option<Arc<ConnState>> {
        match &self.source {
            Source::Conn(conn) => Some(conn.clone()),
            Source::Gate(gate) => {
                let ext = request.extensions();
                let tcp = ext.get::<TcpConnectInfo>().or_else(|| {
                    ext.get::<TlsConnectInfo<TcpConnectInfo>>()
                        .map(TlsConnectInfo::get_ref)
                })?;
                gate.connection(tcp.remote_addr()?)
            }
        }
    }
}

impl<S, B, R> Service<http::Request<B>> for Tracked<S>
where
    S: Service<http::Request<tonic::body::Body>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = http::Response<Held<R>>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let in_flight = self.connection(&request).map(InFlight::begin);
        let limit = self.body_timeout;
        let request = request.map(|body| {
            tonic::body::Body::new(DeadlineBody {
                body: Box::pin(body),
                deadline: Box::pin(tokio::time::sleep(limit)),
                limit,
            })
        });
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| Held { body, in_flight }))
        })
    }
}

/// A request body that did not arrive whole within `--body-timeout` (the error its reader
/// gets; find it in an error's sources to answer it as such).
#[derive(Debug)]
pub struct BodyTimeout(pub Duration);

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request body did not arrive whole within {} (--body-timeout)",
            humantime::format_duration(self.0)
        )
    }
}

impl std::error::Error for BodyTimeout {}

/// A request body that must arrive whole within its limit, counted from the request's head:
/// a client that trickles it (a byte every few seconds) is cut off at the limit.
struct DeadlineBody<B> {
    body: Pin<Box<B>>,
    deadline: Pin<Box<tokio::time::Sleep>>,
    limit: Duration,
}

impl<B> http_body::Body for DeadlineBody<B>
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = bytes::Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        match this.body.as_mut().poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|f| f.map_err(Into::into))),
            Poll::Pending if this.deadline.as_mut().poll(cx).is_ready() => {
                Poll::Ready(Some(Err(Box::new(BodyTimeout(this.limit)))))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A response body that keeps its request counted in flight until its end.
#[derive(Debug)]
pub struct Held<B> {
    body: B,
    in_flight: Option<InFlight>,
}

impl<B: http_body::Body + Unpin> http_body::Body for Held<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let frame = Pin::new(&mut this.body).poll_frame(cx);
        if matches!(frame, Poll::Ready(None | Some(Err(_)))) {
            this.in_flight = None;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
