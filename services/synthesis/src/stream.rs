//! `SynthesizeStream`: audio sent as it is produced, in messages of at most
//! [`MAX_MESSAGE_BYTES`], `seq` 0, 1, 2, … and `final` on the last one.
//!
//! PCM and MP3 audio of each text chunk goes out as soon as that chunk is synthesized. A WAV
//! header must carry the final sizes (callers always get a WAV whose sizes match its bytes),
//! so WAV audio goes out once the last chunk is done. Either way the concatenated messages
//! equal the `Synthesize` audio of the same request. Errors after the first message end the
//! stream with the error status. The work runs in a task that is cancelled when the caller
//! drops the stream; its leases are released by their guards.

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
    audio::Joiner,
    core::{Core, Job},
    error::SynthesisError,
    metrics,
    service::audio_error,
};

/// Largest `audio` in one streamed message (bytes).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// The response stream; dropping it cancels the work behind it.
pub struct AudioStream {
    rx: ReceiverStream<Result<AudioChunk, Status>>,
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
        Pin::new(&mut self.rx).poll_next(cx)
    }
}

/// Starts producing `job`'s audio in a task and returns the stream of it. `started` is when
/// the request arrived (for the duration metric).
pub fn start(core: Arc<Core>, job: Job, started: Instant) -> AudioStream {
    let (tx, rx) = mpsc::channel(4);
    let token = CancellationToken::new();
    let cancelled = token.clone();
    let work = async move {
        let code = tokio::select! {
            () = cancelled.cancelled() => {
                tracing::info!(pool = %job.pool.id, request_id = %job.request_id, "stream cancelled by the caller");
                Code::Cancelled
            }
            result = produce(&core, &job, &tx) => match result {
                Ok(()) if tx.is_closed() => Code::Cancelled,
                Ok(()) => Code::Ok,
                Err(e) => {
                    tracing::info!(pool = %job.pool.id, request_id = %job.request_id, error = %e, "synthesis stream failed");
                    let status = Status::from(e);
                    let code = status.code();
                    let _ = tx.send(Err(status)).await;
                    code
                }
            },
        };
        metrics::request("stream", &job.pool.id, code, started.elapsed());
    };
    tokio::spawn(work.instrument(tracing::Span::current()));
    AudioStream {
        rx: ReceiverStream::new(rx),
        _cancel: token.drop_guard(),
    }
}

struct Sender<'a> {
    tx: &'a mpsc::Sender<Result<AudioChunk, Status>>,
    seq: i32,
}

impl Sender<'_> {
    /// Sends `bytes` in slices; the last slice carries `last`. An empty final send is one empty
    /// message with `final` set. Returns false when the caller has gone.
    async fn send(&mut self, bytes: Vec<u8>, last: bool) -> bool {
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
            };
            if self.tx.send(Ok(chunk)).await.is_err() {
                return false;
            }
            self.seq += 1;
        }
        true
    }
}

async fn produce(
    core: &Core,
    job: &Job,
    tx: &mpsc::Sender<Result<AudioChunk, Status>>,
) -> Result<(), SynthesisError> {
    let mut sender = Sender { tx, seq: 0 };
    let mut attempts = Vec::new();
    let mut joiner = Joiner::new(job.format);
    let mut tail = Vec::new();
    let count = job.chunks.len();
    for index in 0..count {
        let (piece, _) = core
            .synthesize_chunk(
                job,
                index,
                job.rate_for_later_chunks(joiner.sample_rate_hz()),
                &mut attempts,
            )
            .await?;
        let bytes = joiner
            .push(&piece)
            .map_err(|e| audio_error(&job.pool.id, e))?;
        if index + 1 < count {
            if !sender.send(bytes, false).await {
                return Ok(());
            }
        } else {
            tail = bytes;
        }
    }
    tail.extend(joiner.finish().map_err(|e| audio_error(&job.pool.id, e))?);
    sender.send(tail, true).await;
    tracing::info!(pool = %job.pool.id, request_id = %job.request_id, chunks = count, messages = sender.seq,
        attempts = attempts.len(), "synthesis stream done");
    Ok(())
}
