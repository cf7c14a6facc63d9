//! The `voxpool.synthesis.v1.Synthesis` gRPC service.
//!
//! The edge: each handler turns its message into the domain request ([`crate::convert`]),
//! hands it to the [`Core`] and converts the answer back. `Synthesize` validates the request
//! ([`crate::job::prepare`]), synthesizes the text chunks (up to `max_parallel_chunks` at once,
//! [`crate::job::chunks`]) with failover ([`crate::job::failover`]) and joins them in text order ([`crate::audio::Joiner`]); audio
//! larger than one message may be (`--max-message-bytes`) is RESOURCE_EXHAUSTED pointing to
//! the stream. `SynthesizeStream` does the same and sends audio as it is produced (see
//! [`crate::job::delivery`], its pieces sent as messages by [`crate::stream`]); the concatenation of its chunks equals the `Synthesize` audio for the
//! same request. Dropping a call (the caller cancels or its deadline passes) stops waiting at
//! once; a vendor call already sent is cut off at its first audio byte (a streaming vendor
//! stops when its connection closes) or, if its vendor never streams, runs on to the answer,
//! holding its lease until then ([`crate::job::attempt`]); later chunks are never started.

use std::{sync::Arc, time::Duration};

use tokio::time::Instant;
use tonic::{Code, Request, Response, Status};
use voxpool_proto::synthesis::v1::{
    self as pb,
    synthesis_server::{Synthesis, SynthesisServer},
};
use voxpool_runtime::auth::{caller_identity, resolve_tenant, tenant_binding};

use crate::{
    convert,
    deadline::Deadline,
    error::SynthesisError,
    job::{Core, delivery},
    metrics, stream,
    usage::Path,
};

/// Default largest gRPC message (bytes) accepted or sent, as the shared `--max-message-bytes`.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 32 * 1024 * 1024;

/// The Synthesis implementation over a shared [`Core`].
#[derive(Clone, Debug)]
pub struct SynthesisService {
    core: Arc<Core>,
    max_message_bytes: usize,
}

impl SynthesisService {
    /// The service over `core`, with messages up to `max_message_bytes` both ways (keep it far
    /// above `max_text_chars` × 4, so oversized text is INVALID_ARGUMENT naming `text`).
    pub fn new(core: Arc<Core>, max_message_bytes: usize) -> Self {
        Self {
            core,
            max_message_bytes,
        }
    }

    /// The gRPC server wrapper with the message limits applied.
    pub fn into_server(self) -> SynthesisServer<Self> {
        let limit = self.max_message_bytes;
        SynthesisServer::new(self)
            .max_decoding_message_size(limit)
            .max_encoding_message_size(limit)
    }

    fn deadline<T>(&self, request: &Request<T>) -> Deadline {
        Deadline::from_metadata(
            request.metadata(),
            Duration::from_millis(self.core.settings.default_deadline_ms),
        )
    }

    /// Prepares and runs a unary request; returns the pool once known, and the outcome.
    async fn unary(
        &self,
        request: pb::SynthesizeRequest,
        (caller, path): (String, Path),
        deadline: Deadline,
    ) -> (
        Option<String>,
        Result<pb::SynthesizeResponse, SynthesisError>,
    ) {
        let request = convert::request(request, caller, path);
        let job = match self.core.prepare(request, deadline).await {
            Ok(job) => job,
            Err(e) => return (None, Err(e)),
        };
        let pool = Some(job.pool.id.clone());
        let (pool_id, chunk_count, request_id, format) = (
            job.pool.id.clone(),
            job.chunks.len(),
            job.request_id.clone(),
            job.format,
        );
        let done = match self.core.run(job).await {
            Ok(done) => done,
            Err(e) => return (pool, Err(e)),
        };
        // Room for the other response fields and framing.
        let limit = self
            .max_message_bytes
            .saturating_sub(64 * 1024 + done.attempts.len() * 1024);
        if done.audio.len() > limit {
            return (
                pool,
                Err(SynthesisError::ResponseTooLarge {
                    bytes: done.audio.len(),
                    limit,
                }),
            );
        }
        // The request's span (`grpc.server`) carries it to the trace.
        tracing::Span::current().record("cached_chunks", done.cached_chunks);
        tracing::info!(pool = %pool_id, key = %done.key_id, request_id = %request_id, chunks = chunk_count,
            attempts = done.attempts.len(), bytes = done.audio.len(), cached_chunks = done.cached_chunks, "synthesized");
        (pool, Ok(convert::response(done, format)))
    }
}

/// Metadata a jobs worker sets on the calls it makes for job items.
pub const ORIGIN_HEADER: &str = "voxpool-origin";

/// Who made `request` (its authenticated name: a client token's name or a certificate's
/// subject, empty when callers are not authenticated) and through which path: `job` when the
/// jobs service made it for an item (`voxpool-origin: job`), else `unary`'s or the stream's.
fn origin<T>(request: &Request<T>, path: Path) -> (String, Path) {
    let caller = caller_identity(request).map_or_else(String::new, |c| {
        let name = c.as_str();
        name.strip_prefix("token:")
            .or_else(|| name.strip_prefix("mtls:"))
            .unwrap_or(name)
            .to_owned()
    });
    let job = request
        .metadata()
        .get(ORIGIN_HEADER)
        .is_some_and(|v| v.as_bytes() == b"job");
    (caller, if job { Path::Job } else { path })
}

/// `request`'s message with its `tenant` resolved through the caller's tenant binding, if it
/// has one (`voxpool_runtime::auth::TenantBinding`: an empty tenant is a caller's only one).
/// Errors: PERMISSION_DENIED `TENANT_NOT_ALLOWED` for a tenant outside the binding (counted).
fn bound(
    request: Request<pb::SynthesizeRequest>,
    via: metrics::Via,
    started: Instant,
) -> Result<pb::SynthesizeRequest, Status> {
    let binding = tenant_binding(&request).cloned();
    let mut message = request.into_inner();
    message.tenant = resolve_tenant(binding.as_ref(), std::mem::take(&mut message.tenant))
        .inspect_err(|e| metrics::request(via, "-", e.code(), started.elapsed()))?;
    Ok(message)
}

#[tonic::async_trait]
impl Synthesis for SynthesisService {
    async fn synthesize(
        &self,
        request: Request<pb::SynthesizeRequest>,
    ) -> Result<Response<pb::SynthesizeResponse>, Status> {
        let started = Instant::now();
        let deadline = self.deadline(&request);
        let origin = origin(&request, Path::Grpc);
        let message = bound(request, metrics::Via::Unary, started)?;
        let (pool, result) = self.unary(message, origin, deadline).await;
        let result = result.map_err(|e| {
            tracing::info!(pool = pool.as_deref().unwrap_or("-"), error = %e, "synthesis failed");
            Status::from(e)
        });
        let code = result.as_ref().map_or_else(Status::code, |_| Code::Ok);
        metrics::request(
            metrics::Via::Unary,
            pool.as_deref().unwrap_or("-"),
            code,
            started.elapsed(),
        );
        result.map(Response::new)
    }

    type SynthesizeStreamStream = stream::AudioStream;

    async fn synthesize_stream(
        &self,
        request: Request<pb::SynthesizeRequest>,
    ) -> Result<Response<Self::SynthesizeStreamStream>, Status> {
        let started = Instant::now();
        let deadline = self.deadline(&request);
        let (caller, path) = origin(&request, Path::GrpcStream);
        let request =
            convert::request(bound(request, metrics::Via::Stream, started)?, caller, path);
        match self.core.prepare(request, deadline).await {
            Ok(job) => Ok(Response::new(stream::AudioStream::from(delivery::start(
                self.core.clone(),
                job,
                started,
                metrics::Via::Stream,
            )))),
            Err(e) => {
                tracing::info!(error = %e, "synthesis stream refused");
                metrics::request(metrics::Via::Stream, "-", e.code(), started.elapsed());
                Err(Status::from(e))
            }
        }
    }

    async fn list_pools(
        &self,
        _: Request<pb::ListPoolsRequest>,
    ) -> Result<Response<pb::ListPoolsResponse>, Status> {
        Ok(Response::new(convert::readiness(&self.core)))
    }
}
