//! At most [`MAX_CLIP_UPLOADS`] AddReference calls are handled at once, so the catalog's
//! memory stays bounded however many clips arrive together.
//!
//! An upload in progress holds its whole message (up to 10 MiB of audio), the copy the decoder
//! reads and the decoder's buffers: 50 uploads of 10 MiB at once took a catalog to 560 MB of
//! resident memory. The gate sits in front of the admin service and takes a permit before the
//! call's body is read, so a waiting upload holds only what HTTP/2 flow control lets its
//! client send ahead (one stream window), not its clip. An upload waits its turn for at most
//! [`WAIT`] (less when its deadline is nearer), then is refused RESOURCE_EXHAUSTED
//! `CLIP_UPLOADS_BUSY` with a one-second `RetryInfo`. Every other RPC passes untouched.

use std::{
    convert::Infallible,
    sync::Arc,
    task::{Context, Poll},
    time::{Duration, Instant},
};

use tokio::sync::Semaphore;
use tonic::{
    body::Body,
    codegen::{BoxFuture, Service, http},
    server::NamedService,
};

use crate::error::CatalogError;

/// AddReference calls handled at once.
pub const MAX_CLIP_UPLOADS: usize = 2;
/// The longest an upload waits for its turn.
pub const WAIT: Duration = Duration::from_secs(5);
/// The gated method.
const ADD_REFERENCE: &str = "/voxpool.catalog.v1.VoiceCatalogAdmin/AddReference";

/// The admin service `S` behind the gate (module doc).
#[derive(Clone, Debug)]
pub struct ClipGate<S> {
    inner: S,
    permits: Arc<Semaphore>,
}

impl<S> ClipGate<S> {
    /// `inner` with AddReference gated.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            permits: Arc::new(Semaphore::new(MAX_CLIP_UPLOADS)),
        }
    }
}

impl<S: NamedService> NamedService for ClipGate<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<http::Request<Body>> for ClipGate<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        if request.uri().path() != ADD_REFERENCE {
            return Box::pin(self.inner.call(request));
        }
        // The clone that was made ready is the one that serves (tower's rule).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let permits = self.permits.clone();
        let wait = deadline(&request).map_or(WAIT, |d| d.min(WAIT));
        Box::pin(async move {
            let started = Instant::now();
            let Ok(Ok(_permit)) = tokio::time::timeout(wait, permits.acquire_owned()).await else {
                let refusal = CatalogError::ClipUploadsBusy {
                    limit: MAX_CLIP_UPLOADS,
                    waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                };
                return Ok(tonic::Status::from(refusal).into_http());
            };
            // Held until the handler has answered: its clip is then out of memory.
            inner.call(request).await
        })
    }
}

/// The call's `grpc-timeout`, if it sent one.
fn deadline(request: &http::Request<Body>) -> Option<Duration> {
    let metadata = tonic::metadata::MetadataMap::from_headers(request.headers().clone());
    voxpool_runtime::serve::grpc_timeout(&metadata)
}
