//! `SynthesizeStream`: audio sent as the vendor produces it, in messages of at most
//! [`MAX_MESSAGE_BYTES`], `seq` 0, 1, 2, … and `final` on the last one.
//!
//! PCM, MP3 and OGG_OPUS audio goes out as the vendor streams it: the first chunk's first
//! bytes as soon as they arrive, later chunks (synthesized alongside, [`crate::job::chunks`]) in
//! text order. An exact WAV header must carry the final sizes, so exact WAV audio goes out
//! once the last chunk is done; with `wav_streaming_header` a header with unknown sizes goes
//! out first and the samples stream like PCM. Either way the concatenated messages equal the
//! `Synthesize` audio of the same request. An error after the first message ends the stream
//! with a status saying what was delivered ([`SynthesisError::Interrupted`]). The work runs in
//! a task that is cancelled when the caller drops the stream: calls already streaming are cut
//! off and their leases released at once ([`crate::job::attempt`]).
//!
//! A caller that takes nothing for `synthesis.stalled_reader_timeout_ms` while a message waits
//! for it is cut off the same way ([`SynthesisError::ReaderStalled`]); meanwhile at most
//! [`QUEUED_MESSAGES`] messages wait here, and audio not yet in a message waits in the job's
//! spools ([`crate::job::spool`]), so a stalled reader holds little memory. A failure is never
//! queued behind audio the caller does not take: it is handed to the stream directly and
//! follows the messages already queued.

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use futures::Stream;
use tokio::{sync::mpsc, time::Instant};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::{CancellationToken, DropGuard};
use tonic::{Code, Status};
use tracing::Instrument;
use voxpool_proto::synthesis::v1::AudioChunk;

use crate::{
    convert,
    error::SynthesisError,
    job::{Core, Job, Output},
    metrics,
};

/// Largest `audio` in one streamed message (bytes).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// Messages waiting for the caller at most.
pub const QUEUED_MESSAGES: usize = 2;

/// The response stream; dropping it cancels the work behind it.
pub struct AudioStream {
    rx: ReceiverStream<Result<AudioChunk, Status>>,
    /// How the work failed, once it has: yielded after the queued messages.
    failed: Arc<std::sync::Mutex<Option<Status>>>,
    _cancel: DropGuard,
}

impl std::fmt::Debug for AudioStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AudioStream").finish_non_exhaustive()
    }
}

impl Stream for AudioStream {
    type Item = Result<AudioChunk, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match Pin::new(&mut self.rx).poll_next(cx) {
            Poll::Ready(None) => Poll::Ready(
                self.failed
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take()
                    .map(Err),
            ),
            other => other,
        }
    }
}

/// Starts producing `job`'s audio in a task and returns the stream of it. `started` is when
/// the request arrived and `via` how (for the request metrics).
pub fn start(core: Arc<Core>, job: Job, started: Instant, via: metrics::Via) -> AudioStream {
    let (tx, rx) = mpsc::channel(QUEUED_MESSAGES);
    let failed = Arc::new(std::sync::Mutex::new(None));
    let failure = failed.clone();
    let token = CancellationToken::new();
    let cancelled = token.clone();
    let work = async move {
        let (pool, request_id) = (job.pool.id.clone(), job.request_id.clone());
        let code = tokio::select! {
            () = cancelled.cancelled() => {
                tracing::info!(pool = %pool, request_id = %request_id, "stream cancelled by the caller");
                Code::Cancelled
            }
            result = produce(&core, job, &tx, started) => match result {
                Ok(()) if tx.is_closed() => Code::Cancelled,
                Ok(()) => Code::Ok,
                Err(e) => {
                    tracing::info!(pool = %pool, request_id = %request_id, error = %e, "synthesis stream failed");
                    let status = Status::from(e);
                    let code = status.code();
                    *failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(status);
                    code
                }
            },
        };
        metrics::request(via, &pool, code, started.elapsed());
    };
    tokio::spawn(work.instrument(tracing::Span::current()));
    AudioStream {
        rx: ReceiverStream::new(rx),
        failed,
        _cancel: token.drop_guard(),
    }
}

struct Sender<'a> {
    tx: &'a mpsc::Sender<Result<AudioChunk, Status>>,
    seq: i32,
    bytes: u64,
    /// Chunks begun so far that came from the audio cache.
    cached_chunks: i32,
    /// Pool, format name and request arrival, for the first-audio metric.
    first_audio: Option<(String, &'static str, Instant)>,
    /// The clip the voice speaks with (`AudioChunk.reference_digest`), empty for none.
    reference_digest: String,
    /// `synthesis.stalled_reader_timeout_ms`.
    stall_limit: std::time::Duration,
    /// The caller took nothing for `stall_limit`.
    stalled: bool,
}

impl Sender<'_> {
    /// Sends `bytes` in slices; the last slice carries `last`. An empty final send is one empty
    /// message with `final` set. Returns false when the caller has gone.
    async fn send_marked(&mut self, bytes: Vec<u8>, last: bool) -> bool {
        let slices: Vec<&[u8]> = if bytes.is_empty() && last {
            vec![&[]]
        } else {
            bytes.chunks(MAX_MESSAGE_BYTES).collect()
        };
        let count = slices.len();
        for (i, slice) in slices.into_iter().enumerate() {
            let chunk = AudioChunk {
                audio: slice.to_vec(),
                seq: self.seq,
                r#final: last && i + 1 == count,
                cached_chunks: self.cached_chunks,
                reference_digest: self.reference_digest.clone(),
            };
            match tokio::time::timeout(self.stall_limit, self.tx.send(Ok(chunk))).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return false,
                Err(_) => {
                    self.stalled = true;
                    return false;
                }
            }
            if !slice.is_empty()
                && let Some((pool, format, started)) = self.first_audio.take()
            {
                metrics::first_audio(&pool, format, started.elapsed());
            }
            self.seq += 1;
            self.bytes += slice.len() as u64;
        }
        true
    }
}

impl Sender<'_> {
    /// The error that ends a stream whose caller stalled (module doc).
    fn cut_off(&self, job: &Job) -> SynthesisError {
        tracing::info!(pool = %job.pool.id, request_id = %job.request_id, delivered_bytes = self.bytes,
            "the caller read nothing for synthesis.stalled_reader_timeout_ms: stream cut off");
        SynthesisError::ReaderStalled {
            pool: job.pool.id.clone(),
            stalled_ms: u64::try_from(self.stall_limit.as_millis()).unwrap_or(u64::MAX),
            delivered_bytes: self.bytes,
        }
    }
}

impl Output for Sender<'_> {
    fn live(&self) -> bool {
        true
    }

    async fn send(&mut self, bytes: Vec<u8>) -> bool {
        self.send_marked(bytes, false).await
    }

    fn delivered(&self) -> (u64, u64) {
        (self.bytes, u64::try_from(self.seq).unwrap_or(0))
    }

    fn cached(&mut self, chunks: u32) {
        self.cached_chunks = i32::try_from(chunks).unwrap_or(i32::MAX);
    }
}

async fn produce(
    core: &Arc<Core>,
    job: Job,
    tx: &mpsc::Sender<Result<AudioChunk, Status>>,
    started: Instant,
) -> Result<(), SynthesisError> {
    let job = Arc::new(job);
    let format = convert::audio_format_pb(job.format).as_str_name();
    let mut sender = Sender {
        tx,
        seq: 0,
        bytes: 0,
        cached_chunks: 0,
        first_audio: Some((job.pool.id.clone(), format, started)),
        reference_digest: job.reference_digest(),
        stall_limit: std::time::Duration::from_millis(core.settings.stalled_reader_timeout_ms),
        stalled: false,
    };
    let finished = core.run_into(&job, &mut sender).await;
    if sender.stalled {
        return Err(sender.cut_off(&job));
    }
    let Some(done) = finished? else {
        return Ok(());
    };
    if !sender.send_marked(done.tail, true).await && sender.stalled {
        return Err(sender.cut_off(&job));
    }
    tracing::Span::current().record("cached_chunks", done.cached_chunks);
    tracing::info!(pool = %job.pool.id, request_id = %job.request_id, chunks = job.chunks.len(), messages = sender.seq,
        attempts = done.attempts.len(), cached_chunks = done.cached_chunks, "synthesis stream done");
    Ok(())
}
