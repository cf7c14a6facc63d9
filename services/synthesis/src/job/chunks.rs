//! The chunks of one request, synthesized side by side and emitted in text order.
//!
//! Text longer than the vendor's limit is split into chunks ([`super::prepare`]). Up to
//! `synthesis.max_parallel_chunks` of them run at once, each with its own failover and its own
//! lease ([`super::failover`]), started in text order as earlier ones finish; every lease is
//! taken in the request's traffic class, so a BATCH request's chunks count against the batch
//! share like any other BATCH leases. Output is strictly in text order: the head chunk (the
//! first not yet emitted) is *live* on a stream, its audio forwarded as the vendor sends it,
//! while chunks ahead of it keep their audio until their turn ([`super::attempt`]), in spools that
//! hold little in memory and the rest on disk ([`super::spool`]); a unary call has no live
//! chunk and emits everything at the end. Every chunk uses the same frozen
//! snapshot and params (invariant 9 of docs/ARCHITECTURE.md).
//!
//! An error ends the request. Once audio has reached the caller it is wrapped in
//! [`SynthesisError::Interrupted`], saying how many bytes, messages and whole chunks the
//! caller holds. Leaving (a dropped future: the caller cancelled) aborts every chunk; their
//! calls are cut off as [`super::attempt`] describes and no further chunk starts.

use std::sync::Arc;

use tokio::{
    sync::{OwnedSemaphorePermit, Semaphore, watch},
    task::JoinSet,
};
use tracing::Instrument;

use super::{
    Core, Job,
    admission::Ask,
    cached,
    failover::ChunkDone,
    spool::{ChunkMsg, ChunkOut, PipeRx, PipeTx, pipe},
};
use crate::{
    audio::{AudioFormat, Joiner},
    error::SynthesisError,
    record::AttemptRecord,
};

/// What a chunk's producer reports at its end: its result and every attempt it made.
pub type ChunkResult = (Result<ChunkDone, SynthesisError>, Vec<AttemptRecord>);

/// Where a request's output goes.
pub trait Output: Send {
    /// True when the head chunk's audio goes out as it arrives (a stream).
    fn live(&self) -> bool;
    /// Sends the next output bytes; false when the caller has gone.
    fn send(&mut self, bytes: Vec<u8>) -> impl Future<Output = bool> + Send;
    /// What the caller holds so far: audio bytes and messages.
    fn delivered(&self) -> (u64, u64);
    /// `chunks` of the chunks begun so far came from the audio cache (called as the count
    /// grows, before that chunk's audio is sent).
    fn cached(&mut self, chunks: u32) {
        let _ = chunks;
    }
}

/// A request that ran to its end.
#[derive(Debug)]
pub struct Finished {
    /// The last chunk's key.
    pub key_id: String,
    /// Sample rate (Hz), when known.
    pub sample_rate_hz: Option<u32>,
    /// Every attempt, chunk by chunk in text order.
    pub attempts: Vec<AttemptRecord>,
    /// What is still owed after the last chunk (an exact WAV; empty otherwise).
    pub tail: Vec<u8>,
    /// How many chunks came from the audio cache.
    pub cached_chunks: u32,
}

/// One chunk's channel and live flag.
struct Slot {
    rx: PipeRx<ChunkResult>,
    tx: Option<PipeTx<ChunkResult>>,
    live: watch::Sender<bool>,
}

/// Runs every chunk of `job` (module doc), sending output to `out` except what is owed after
/// the last chunk, which is returned in [`Finished::tail`] so the caller can mark the last
/// message. `Ok(None)`: the caller went away.
pub async fn run(
    core: &Arc<Core>,
    job: &Arc<Job>,
    out: &mut impl Output,
) -> Result<Option<Finished>, SynthesisError> {
    let mut complete = 0;
    let result = emit(core, job, out, &mut complete).await;
    if matches!(result, Ok(Some(_))) {
        job.meter.succeeded();
    }
    result.map_err(|cause| {
        let (delivered_bytes, delivered_messages) = out.delivered();
        if delivered_bytes == 0 {
            return cause;
        }
        SynthesisError::Interrupted {
            delivered_bytes,
            delivered_messages,
            complete_chunks: complete,
            chunks: job.chunks.len(),
            cause: Box::new(cause),
        }
    })
}

async fn emit(
    core: &Arc<Core>,
    job: &Arc<Job>,
    out: &mut impl Output,
    complete: &mut usize,
) -> Result<Option<Finished>, SynthesisError> {
    let pool = job.pool.id.as_str();
    let count = job.chunks.len();
    let parallel = usize::try_from(core.settings.max_parallel_chunks)
        .unwrap_or(1)
        .clamp(1, count.max(1));
    // Refused here, before any lease, when it cannot end in time (`super::admission`).
    let sizes: Vec<u64> = job
        .chunks
        .iter()
        .map(|c| c.chars().count() as u64)
        .collect();
    let mut admitted = job
        .pool
        .load
        .admit_paced(&Ask {
            pool,
            slots: job.pool.slots,
            parallel: core.settings.max_parallel_chunks,
            chunks: &sizes,
            priority: job.priority,
            deadline: &job.deadline,
        })
        .await?;
    let permits = Arc::new(Semaphore::new(parallel));
    let mut slots: Vec<Slot> = (0..count)
        .map(|_| {
            let (tx, rx) = pipe();
            Slot {
                rx,
                tx: Some(tx),
                live: watch::Sender::new(false),
            }
        })
        .collect();
    // Dropping the set (an error, the caller gone) aborts every producer.
    let mut producers = JoinSet::new();
    let mut joiner = if job.wav_streaming_header {
        Joiner::new(job.format).streaming_wav()
    } else {
        Joiner::new(job.format)
    };
    let mut attempts = Vec::new();
    let mut key_id = String::new();
    let mut cached_chunks = 0u32;
    let mut next = 0;
    let mut head = 0;
    let deadline = tokio::time::sleep_until(job.deadline.at());
    tokio::pin!(deadline);
    joiner
        .begin()
        .map_err(|e| SynthesisError::audio(pool, &e))?;
    // An exact WAV goes out after the last chunk: nothing of a chunk reaches the caller while
    // it runs, so no chunk is live and a broken call still fails over.
    let live = out.live() && (job.format != AudioFormat::Wav || job.wav_streaming_header);
    if live {
        slots[0].live.send_replace(true);
    }
    while head < count {
        tokio::select! {
            biased;
            msg = slots[head].rx.recv() => match msg {
                Some(ChunkMsg::Audio(bytes)) => {
                    let bytes = joiner.feed(&bytes).map_err(|e| SynthesisError::audio(pool, &e))?;
                    if !bytes.is_empty() && !out.send(bytes).await {
                        return Ok(None);
                    }
                }
                Some(ChunkMsg::Cached) => {
                    cached_chunks += 1;
                    out.cached(cached_chunks);
                }
                Some(ChunkMsg::Done((result, chunk_attempts))) => {
                    attempts.extend(chunk_attempts);
                    let done = result?;
                    let bytes = joiner
                        .end(done.sample_rate_hz)
                        .map_err(|e| SynthesisError::audio(pool, &e))?;
                    if !bytes.is_empty() && !out.send(bytes).await {
                        return Ok(None);
                    }
                    key_id = done.key_id;
                    admitted.done(sizes[head]);
                    *complete += 1;
                    head += 1;
                    if head < count {
                        joiner.begin().map_err(|e| SynthesisError::audio(pool, &e))?;
                        if live {
                            slots[head].live.send_replace(true);
                        }
                    }
                }
                None => {
                    return Err(SynthesisError::AdapterPanicked {
                        provider: job.adapter.provider().to_string(),
                    });
                }
            },
            permit = permits.clone().acquire_owned(), if next < count => {
                let Ok(permit) = permit else { continue };
                let slot = &mut slots[next];
                let Some(tx) = slot.tx.take() else { continue };
                let chunk_out = ChunkOut {
                    tx,
                    live: slot.live.subscribe(),
                };
                // The request's span goes along: the chunk's Acquire joins the caller's trace.
                producers.spawn(
                    Box::pin(produce(core.clone(), job.clone(), next, chunk_out, permit))
                        .instrument(tracing::Span::current()),
                );
                next += 1;
            }
            () = &mut deadline => {
                return Err(SynthesisError::DeadlineExceeded {
                    pool: Some(job.pool.id.clone()),
                    budget_ms: job.deadline.budget_ms(),
                    attempts,
                    // Chunks started and not all done: their calls were under way.
                    in_call: next > head,
                });
            }
        }
    }
    let sample_rate_hz = joiner.sample_rate_hz().or(job.sample_rate_hz);
    let tail = joiner
        .finish()
        .map_err(|e| SynthesisError::audio(pool, &e))?;
    Ok(Some(Finished {
        key_id,
        sample_rate_hz,
        attempts,
        tail,
        cached_chunks,
    }))
}

/// One chunk with failover; holds its permit (one of `max_parallel_chunks`) until its calls
/// are done.
async fn produce(
    core: Arc<Core>,
    job: Arc<Job>,
    index: usize,
    out: ChunkOut<ChunkResult>,
    _permit: OwnedSemaphorePermit,
) {
    let _opens = (index == 0).then(|| OpenOnDrop(job.first_leased.clone()));
    if index > 0 {
        // Ends when the first chunk holds a lease or is done (the sender lives in the job).
        let _ = job.first_leased.subscribe().wait_for(|open| *open).await;
    }
    let mut attempts = Vec::new();
    let result = cached::serve_chunk(&core, &job, index, &out, &mut attempts).await;
    out.tx.send(ChunkMsg::Done((result, attempts)));
}

/// Lets the other chunks of a request go once its first chunk is done, whatever its end
/// (served from the cache, failed) — [`Job::first_leased`].
struct OpenOnDrop(Arc<tokio::sync::watch::Sender<bool>>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.send_replace(true);
    }
}
