//! A job's audio delivered to a caller as the vendor produces it: in pieces of at most
//! [`MAX_PIECE_BYTES`], `seq` 0, 1, 2, … and `last` on the final one, or the job's
//! [`SynthesisError`] after the pieces already queued. Both fronts read it: the gRPC edge's
//! `SynthesizeStream` (`crate::stream`) and the HTTP front's speech route (`crate::front`),
//! each mapping pieces and errors to its own wire.
//!
//! PCM, MP3 and OGG_OPUS audio goes out as the vendor streams it: the first chunk's first
//! bytes as soon as they arrive, later chunks (synthesized alongside, [`super::chunks`]) in
//! text order. An exact WAV header must carry the final sizes, so exact WAV audio goes out
//! once the last chunk is done; with `wav_streaming_header` a header with unknown sizes goes
//! out first and the samples stream like PCM. Either way the concatenated pieces equal the
//! unary audio of the same request. An error after the first piece says what was delivered
//! ([`SynthesisError::Interrupted`]). The work runs in a task that is cancelled when the
//! caller drops the [`Delivery`]: calls already streaming are cut off and their leases
//! released at once ([`super::attempt`]).
//!
//! A caller that takes nothing for `synthesis.stalled_reader_timeout_ms` while a piece waits
//! for it is cut off the same way ([`SynthesisError::ReaderStalled`]); meanwhile at most
//! [`QUEUED_PIECES`] pieces wait here, and audio not yet in a piece waits in the job's
//! spools ([`super::spool`]), so a stalled reader holds little memory. A failure is never
//! queued behind audio the caller does not take: it is handed to the delivery directly and
//! follows the pieces already queued.

use std::{
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
};

use futures::Stream;
use tokio::{sync::mpsc, time::Instant};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::{CancellationToken, DropGuard};
use tonic::Code;
use tracing::Instrument;

use super::{Core, Job, Output};
use crate::{adapters::AudioFormat, error::SynthesisError, metrics};

/// Largest audio in one piece (bytes).
pub const MAX_PIECE_BYTES: usize = 64 * 1024;
/// Pieces waiting for the caller at most.
pub const QUEUED_PIECES: usize = 2;

/// One piece of a job's audio on its way to the caller.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Piece {
    /// At most [`MAX_PIECE_BYTES`] of audio; empty only in a final piece with nothing left.
    pub audio: Vec<u8>,
    /// 0, 1, 2, … in order.
    pub seq: u64,
    /// The final piece.
    pub last: bool,
    /// Chunks begun so far that came from the audio cache.
    pub cached_chunks: u32,
    /// The clip the voice speaks with; empty for none.
    pub reference_digest: String,
    /// On the final piece: what the request used.
    pub usage: Option<crate::usage::Totals>,
}

/// The pieces of one job's audio; dropping it cancels the work behind it.
pub struct Delivery {
    rx: ReceiverStream<Piece>,
    /// How the work failed, once it has: yielded after the queued pieces.
    failed: Arc<Mutex<Option<SynthesisError>>>,
    _cancel: DropGuard,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery").finish_non_exhaustive()
    }
}

impl Stream for Delivery {
    type Item = Result<Piece, SynthesisError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match Pin::new(&mut self.rx).poll_next(cx) {
            Poll::Ready(None) => Poll::Ready(
                self.failed
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take()
                    .map(Err),
            ),
            Poll::Ready(Some(piece)) => Poll::Ready(Some(Ok(piece))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Starts producing `job`'s audio in a task and returns its delivery. `started` is when the
/// request arrived and `via` how (for the request metrics).
pub fn start(core: Arc<Core>, job: Job, started: Instant, via: metrics::Via) -> Delivery {
    let (tx, rx) = mpsc::channel(QUEUED_PIECES);
    let failed = Arc::new(Mutex::new(None));
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
                    let code = e.code();
                    *failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
                    code
                }
            },
        };
        metrics::request(via, &pool, code, started.elapsed());
    };
    // Boxed: the task then moves and stores a pointer, not the whole request's state machine.
    tokio::spawn(Box::pin(work).instrument(tracing::Span::current()));
    Delivery {
        rx: ReceiverStream::new(rx),
        failed,
        _cancel: token.drop_guard(),
    }
}

/// The job's [`Output`]: pieces into the delivery's queue, bounded by the stall limit.
struct Sender<'a> {
    tx: &'a mpsc::Sender<Piece>,
    seq: u64,
    bytes: u64,
    /// Chunks begun so far that came from the audio cache.
    cached_chunks: u32,
    /// Pool, format name and request arrival, for the first-audio metric.
    first_audio: Option<(String, AudioFormat, Instant)>,
    /// The clip the voice speaks with, empty for none.
    reference_digest: String,
    /// `synthesis.stalled_reader_timeout_ms`.
    stall_limit: std::time::Duration,
    /// The caller took nothing for `stall_limit`.
    stalled: bool,
    /// The request's meter: its totals go with the final piece.
    meter: Arc<crate::usage::Meter>,
}

impl Sender<'_> {
    /// Sends `bytes` in slices; the last slice carries `last`. An empty final send is one empty
    /// piece with `last` set. Returns false when the caller has gone.
    async fn send_marked(&mut self, bytes: Vec<u8>, last: bool) -> bool {
        let slices: Vec<&[u8]> = if bytes.is_empty() && last {
            vec![&[]]
        } else {
            bytes.chunks(MAX_PIECE_BYTES).collect()
        };
        let count = slices.len();
        for (i, slice) in slices.into_iter().enumerate() {
            let piece = Piece {
                audio: slice.to_vec(),
                seq: self.seq,
                last: last && i + 1 == count,
                cached_chunks: self.cached_chunks,
                reference_digest: self.reference_digest.clone(),
                usage: (last && i + 1 == count).then(|| self.meter.totals()),
            };
            match tokio::time::timeout(self.stall_limit, self.tx.send(piece)).await {
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

    /// The error that ends a delivery whose caller stalled (module doc).
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
        (self.bytes, self.seq)
    }

    fn cached(&mut self, chunks: u32) {
        self.cached_chunks = chunks;
    }
}

async fn produce(
    core: &Arc<Core>,
    job: Job,
    tx: &mpsc::Sender<Piece>,
    started: Instant,
) -> Result<(), SynthesisError> {
    let job = Arc::new(job);
    let mut sender = Sender {
        tx,
        seq: 0,
        bytes: 0,
        cached_chunks: 0,
        first_audio: Some((job.pool.id.clone(), job.format, started)),
        reference_digest: job.reference_digest(),
        stall_limit: std::time::Duration::from_millis(core.settings.stalled_reader_timeout_ms),
        stalled: false,
        meter: job.meter.clone(),
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
