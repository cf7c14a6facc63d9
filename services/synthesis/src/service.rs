//! The `voxpool.synthesis.v1.Synthesis` gRPC service.
//!
//! `Synthesize` validates the request ([`crate::request`]), synthesizes the text chunks (up to
//! `max_parallel_chunks` at once, [`crate::job::chunks`]) with failover ([`crate::job::failover`]) and
//! joins them in text order ([`crate::audio::Joiner`]); audio
//! larger than one message may be (`--max-message-bytes`) is RESOURCE_EXHAUSTED pointing to
//! the stream. `SynthesizeStream` does the same and sends audio as it is produced (see
//! [`crate::stream`]); the concatenation of its chunks equals the `Synthesize` audio for the
//! same request. Dropping a call (the caller cancels or its deadline passes) stops waiting at
//! once; a vendor call already sent is cut off at its first audio byte (a streaming vendor
//! stops when its connection closes) or, if its vendor never streams, runs on to the answer,
//! holding its lease until then (`crate::job::attempt`); later chunks are never started.

use std::{sync::Arc, time::Duration};

use tokio::time::Instant;
use tonic::{Code, Request, Response, Status};
use voxpool_proto::synthesis::v1::{
    self as pb,
    synthesis_server::{Synthesis, SynthesisServer},
};

use crate::{
    audio::AudioError,
    deadline::Deadline,
    error::SynthesisError,
    job::chunks,
    job::prepare::audio_format_pb,
    job::{Core, Job},
    metrics,
    record::AttemptRecord,
    stream,
};

/// Default largest gRPC message (bytes) accepted or sent, as the shared `--max-message-bytes`.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 32 * 1024 * 1024;

/// The Synthesis implementation over a shared [`Core`].
#[derive(Clone, Debug)]
pub struct SynthesisService {
    core: Arc<Core>,
    max_message_bytes: usize,
}

/// The audio of a whole job.
#[derive(Debug)]
pub struct Synthesized {
    /// Joined audio.
    pub audio: Vec<u8>,
    /// Sample rate (Hz), when known.
    pub sample_rate_hz: Option<u32>,
    /// The key of the last chunk.
    pub key_id: String,
    /// Every attempt.
    pub attempts: Vec<AttemptRecord>,
}

/// Wraps a join failure with its pool.
pub fn audio_error(pool: &str, e: AudioError) -> SynthesisError {
    SynthesisError::Audio {
        pool: pool.to_owned(),
        message: e.to_string(),
    }
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
        deadline: Deadline,
    ) -> (
        Option<String>,
        Result<pb::SynthesizeResponse, SynthesisError>,
    ) {
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
        let done = match run_job(&self.core, job).await {
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
        tracing::info!(pool = %pool_id, key = %done.key_id, request_id = %request_id, chunks = chunk_count,
            attempts = done.attempts.len(), bytes = done.audio.len(), "synthesized");
        let response = pb::SynthesizeResponse {
            audio: done.audio,
            format: audio_format_pb(format) as i32,
            sample_rate_hz: done
                .sample_rate_hz
                .and_then(|r| i32::try_from(r).ok())
                .unwrap_or(0),
            key_id: done.key_id,
            attempts: done.attempts.iter().map(AttemptRecord::to_pb).collect(),
        };
        (pool, Ok(response))
    }
}

/// A unary call's output: everything collected, nothing delivered before the end.
#[derive(Debug, Default)]
struct Collect {
    audio: Vec<u8>,
}

impl chunks::Output for Collect {
    fn live(&self) -> bool {
        false
    }

    async fn send(&mut self, bytes: Vec<u8>) -> bool {
        self.audio.extend(bytes);
        true
    }

    fn delivered(&self) -> (u64, u64) {
        (0, 0)
    }
}

/// Runs every chunk of `job` ([`crate::job::chunks`]) and joins the audio.
pub async fn run_job(core: &Arc<Core>, job: Job) -> Result<Synthesized, SynthesisError> {
    let job = Arc::new(job);
    let mut out = Collect::default();
    let Some(done) = chunks::run(core, &job, &mut out).await? else {
        // Collect never refuses bytes, so the run cannot see its caller gone.
        return Err(SynthesisError::DeadlineExceeded {
            pool: Some(job.pool.id.clone()),
            budget_ms: job.deadline.budget_ms(),
            attempts: Vec::new(),
            in_call: false,
        });
    };
    let mut audio = out.audio;
    audio.extend(done.tail);
    Ok(Synthesized {
        audio,
        sample_rate_hz: done.sample_rate_hz,
        key_id: done.key_id,
        attempts: done.attempts,
    })
}

#[tonic::async_trait]
impl Synthesis for SynthesisService {
    async fn synthesize(
        &self,
        request: Request<pb::SynthesizeRequest>,
    ) -> Result<Response<pb::SynthesizeResponse>, Status> {
        let started = Instant::now();
        let deadline = self.deadline(&request);
        let (pool, result) = self.unary(request.into_inner(), deadline).await;
        let result = result.map_err(|e| {
            tracing::info!(pool = pool.as_deref().unwrap_or("-"), error = %e, "synthesis failed");
            Status::from(e)
        });
        let code = result.as_ref().map_or_else(Status::code, |_| Code::Ok);
        metrics::request(
            "unary",
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
        match self.core.prepare(request.into_inner(), deadline).await {
            Ok(job) => Ok(Response::new(stream::start(
                self.core.clone(),
                job,
                started,
            ))),
            Err(e) => {
                tracing::info!(error = %e, "synthesis stream refused");
                let status = Status::from(e);
                metrics::request("stream", "-", status.code(), started.elapsed());
                Err(status)
            }
        }
    }

    async fn list_pools(
        &self,
        _: Request<pb::ListPoolsRequest>,
    ) -> Result<Response<pb::ListPoolsResponse>, Status> {
        Ok(Response::new(readiness(&self.core)))
    }
}

/// What this replica can do with each pool (the `ListPools` answer).
pub fn readiness(core: &Core) -> pb::ListPoolsResponse {
    let mut pools: Vec<pb::PoolReadiness> = core
        .pools
        .iter()
        .map(|pool| {
            let adapter_available = core.adapters.contains_key(&pool.provider);
            pb::PoolReadiness {
                pool: pool.id.clone(),
                provider: pool.provider.as_str().to_owned(),
                adapter_available,
                serving: adapter_available && pool.has_usable_key(),
                keys: pool
                    .keys
                    .iter()
                    .map(|(id, key)| pb::KeyReadiness {
                        key_id: id.clone(),
                        usable: key.credential.is_ok(),
                        problem: key.credential.as_ref().err().cloned().unwrap_or_default(),
                    })
                    .collect(),
            }
        })
        .collect();
    pools.sort_by(|a, b| a.pool.cmp(&b.pool));
    pb::ListPoolsResponse { pools }
}
