//! A transparent Synthesis proxy for end-to-end tests: forwards every call to the real
//! synthesis service and counts, per item id (the `request_id` part before `#`), the calls made
//! and the audio answers returned. This is how a test proves that an item recorded done before
//! a kill is never synthesized again.
#![allow(dead_code)]

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::{
    Request, Response, Status, service::interceptor::InterceptedService, transport::Channel,
};
use voxpool_proto::synthesis::v1::{
    AudioChunk, SynthesizeRequest, SynthesizeResponse,
    synthesis_client::SynthesisClient,
    synthesis_server::{Synthesis, SynthesisServer},
};
use voxpool_runtime::auth::ClientToken;

#[derive(Default)]
struct Counts {
    calls: HashMap<String, u32>,
    successes: HashMap<String, u32>,
}

struct Inner {
    upstream: SynthesisClient<InterceptedService<Channel, ClientToken>>,
    counts: Mutex<Counts>,
    successes: watch::Sender<u64>,
}

/// The stack's client token: the proxy is voxpool's caller, voxctl only the proxy's.
fn stack_token() -> ClientToken {
    ClientToken::new(&voxpool_domain::secret::Secret::new(
        super::stack::CLIENT_TOKEN,
    ))
    .expect("a header value")
}

/// A running proxy; stops when dropped.
pub struct CountingProxy {
    pub addr: SocketAddr,
    inner: Arc<Inner>,
    stop: CancellationToken,
}

#[derive(Clone)]
struct Service(Arc<Inner>);

impl CountingProxy {
    /// Proxies to the synthesis service at `upstream`.
    pub async fn start(upstream: &str) -> Self {
        let channel = Channel::from_shared(upstream.to_owned())
            .expect("url")
            .connect_lazy();
        let inner = Arc::new(Inner {
            upstream: SynthesisClient::with_interceptor(channel, stack_token())
                .max_decoding_message_size(256 << 20),
            counts: Mutex::new(Counts::default()),
            successes: watch::channel(0).0,
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind proxy");
        let addr = listener.local_addr().expect("addr");
        let stop = CancellationToken::new();
        let token = stop.clone();
        let service =
            SynthesisServer::new(Service(Arc::clone(&inner))).max_encoding_message_size(256 << 20);
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    token.cancelled(),
                )
                .await
                .expect("proxy serve");
        });
        Self { addr, inner, stop }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn calls(&self) -> HashMap<String, u32> {
        self.inner.counts.lock().expect("counts").calls.clone()
    }

    pub fn successes(&self) -> HashMap<String, u32> {
        self.inner.counts.lock().expect("counts").successes.clone()
    }

    /// Waits (bounded) until `n` audio answers went back to the client.
    pub async fn wait_successes(&self, n: u64, limit: Duration) {
        let mut rx = self.inner.successes.subscribe();
        tokio::time::timeout(limit, rx.wait_for(|s| *s >= n))
            .await
            .unwrap_or_else(|_| panic!("fewer than {n} successes within {limit:?}"))
            .expect("watch open");
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[tonic::async_trait]
impl Synthesis for Service {
    async fn synthesize(
        &self,
        request: Request<SynthesizeRequest>,
    ) -> Result<Response<SynthesizeResponse>, Status> {
        let timeout = request.metadata().get("grpc-timeout").cloned();
        let message = request.into_inner();
        let item = message
            .request_id
            .split('#')
            .next()
            .unwrap_or_default()
            .to_owned();
        *self
            .0
            .counts
            .lock()
            .expect("counts")
            .calls
            .entry(item.clone())
            .or_default() += 1;
        let mut forward = Request::new(message);
        if let Some(t) = timeout {
            forward.metadata_mut().insert("grpc-timeout", t);
        }
        let response = self.0.upstream.clone().synthesize(forward).await?;
        *self
            .0
            .counts
            .lock()
            .expect("counts")
            .successes
            .entry(item)
            .or_default() += 1;
        self.0.successes.send_modify(|n| *n += 1);
        Ok(response)
    }

    type SynthesizeStreamStream = tokio_stream::Empty<Result<AudioChunk, Status>>;

    async fn synthesize_stream(
        &self,
        _: Request<SynthesizeRequest>,
    ) -> Result<Response<Self::SynthesizeStreamStream>, Status> {
        Err(Status::unimplemented("the proxy forwards Synthesize only"))
    }

    async fn list_pools(
        &self,
        _: Request<voxpool_proto::synthesis::v1::ListPoolsRequest>,
    ) -> Result<Response<voxpool_proto::synthesis::v1::ListPoolsResponse>, Status> {
        Err(Status::unimplemented("the proxy forwards Synthesize only"))
    }
}
