//! `SynthesizeStream`'s answer: the job's [`Delivery`] (audio as the vendor produces it, the
//! stalled-reader cut-off, a failure after the queued pieces: [`crate::job::delivery`]) as
//! protobuf messages, each piece an `AudioChunk` (`seq`, `final`, `cached_chunks`,
//! `reference_digest`) and a failure its `Status`. Dropping the stream drops the delivery,
//! which cancels the work behind it.

use std::{
    pin::Pin,
    task::{Context, Poll},
};

use futures::Stream;
use tonic::Status;
use voxpool_proto::synthesis::v1::AudioChunk;

use crate::{convert, job::delivery::Delivery};

/// Largest `audio` in one streamed message (bytes): one piece of the delivery.
pub const MAX_MESSAGE_BYTES: usize = crate::job::delivery::MAX_PIECE_BYTES;

/// The response stream over a job's delivery.
#[derive(Debug)]
pub struct AudioStream(Delivery);

impl From<Delivery> for AudioStream {
    fn from(delivery: Delivery) -> Self {
        Self(delivery)
    }
}

impl Stream for AudioStream {
    type Item = Result<AudioChunk, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.0)
            .poll_next(cx)
            .map(|item| item.map(|r| r.map(convert::audio_chunk).map_err(Status::from)))
    }
}
