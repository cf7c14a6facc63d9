//! Paced delivery of one admitted answer: cutting its audio into pieces, and sending the
//! vendor-framed pieces as a body stream on the [`Streaming`] timeline, or at once.
//!
//! Invariant: a streamed body owns the request's [`Slot`], so the request stays counted at its
//! key until the body stream ends, fails or is dropped by hyper (the client went away), and not
//! a moment longer. A broken answer ([`Step::BreakAfterFirstPiece`](crate::Step)) never sends
//! the whole audio.

use std::{collections::VecDeque, io, sync::Arc, time::Duration};

use axum::{
    body::{Body, Bytes},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use tokio::time::Instant;

use crate::{
    control::{Shared, Slot},
    knobs::Streaming,
};

/// How an admitted answer is delivered, as decided by [`Shared::proceed`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Delivery {
    /// The timeline of a streamed answer (`None`: everything at once).
    pub(crate) pacing: Option<Streaming>,
    /// The answer breaks after its first piece.
    pub(crate) broken: bool,
}

impl Delivery {
    /// `bytes` cut into the pieces this answer sends: `pacing.pieces` when streaming, else
    /// `unstreamed` (the vendor's usual count, 1 for most), at least 2 when broken, at most
    /// `len / 2`; cuts fall on even offsets. Never empty (an empty answer is one empty piece).
    pub(crate) fn cut<'a>(&self, bytes: &'a [u8], unstreamed: u32) -> Vec<&'a [u8]> {
        let wanted = self.pacing.map_or(unstreamed, |s| s.piece_count()).max(1);
        let wanted = if self.broken { wanted.max(2) } else { wanted };
        let n = (wanted as usize).min(bytes.len() / 2).max(1);
        let edge = |k: usize| {
            if k == n {
                bytes.len()
            } else {
                (bytes.len() * k / n) & !1
            }
        };
        (0..n).map(|k| &bytes[edge(k)..edge(k + 1)]).collect()
    }
}

/// How a broken answer ends after its first piece.
pub(crate) enum Failure {
    /// The body stream yields an error: hyper drops the connection without the final chunk.
    Abort,
    /// The vendor's error event or line, after which the body ends normally.
    Frame(Bytes),
}

/// An answer framed the vendor's way.
pub(crate) struct Framed {
    /// The pieces, in order (raw audio slices, SSE events, JSON lines, …).
    pub(crate) pieces: Vec<Bytes>,
    /// Sent after the last piece of a complete answer (may be empty).
    pub(crate) end: Bytes,
    /// How a broken answer ends.
    pub(crate) failure: Failure,
}

impl Framed {
    /// Raw audio pieces (OpenAI, Azure, ElevenLabs): no end frame; a break aborts the body.
    pub(crate) fn raw(pieces: &[&[u8]]) -> Self {
        Self {
            pieces: pieces.iter().map(|p| Bytes::copy_from_slice(p)).collect(),
            end: Bytes::new(),
            failure: Failure::Abort,
        }
    }
}

enum Item {
    Data(Bytes),
    Abort,
}

/// The state of a streamed body; dropping it uncounts the request.
struct Run {
    steps: VecDeque<(Duration, Item)>,
    start: Instant,
    shared: Arc<Shared>,
    slot: Slot,
    complete: bool,
}

/// The HTTP 200 answer carrying `framed`: one body at once when there is nothing to pace and
/// nothing breaks (the slot is released when the handler returns, as for any answer), else a
/// body stream that owns `slot`. Counts the success when the whole answer has been handed to
/// hyper (before its end can reach the client); a broken answer is no success.
pub(crate) fn respond(
    shared: Arc<Shared>,
    slot: Slot,
    delivery: Delivery,
    content_type: &'static str,
    framed: Framed,
) -> Response {
    let Framed {
        pieces,
        end,
        failure,
    } = framed;
    // The answer begins: the vendor bills its text, whether or not it breaks midway.
    shared.synthesized(&slot);
    if delivery.pacing.is_none() && !delivery.broken {
        let mut whole =
            Vec::with_capacity(pieces.iter().map(Bytes::len).sum::<usize>() + end.len());
        for p in pieces.iter().chain([&end]) {
            whole.extend_from_slice(p);
        }
        shared.served(&slot);
        return (
            StatusCode::OK,
            [(header::CONTENT_TYPE, content_type)],
            whole,
        )
            .into_response();
    }
    let rest = delivery.pacing.map_or(Duration::ZERO, |s| s.rest);
    let n = pieces.len();
    // Piece k at rest·k/(n−1): the first at once, the last at `rest`.
    let at = |k: usize| {
        if n < 2 {
            Duration::ZERO
        } else {
            rest.mul_f64(k as f64 / (n - 1) as f64)
        }
    };
    let mut steps = VecDeque::new();
    let mut pieces = pieces.into_iter();
    if delivery.broken {
        if let Some(first) = pieces.next() {
            steps.push_back((Duration::ZERO, Item::Data(first)));
        }
        let fail_at = if n < 2 { rest } else { at(1) };
        steps.push_back((
            fail_at,
            match failure {
                Failure::Abort => Item::Abort,
                Failure::Frame(frame) => Item::Data(frame),
            },
        ));
    } else {
        steps.extend(pieces.enumerate().map(|(k, p)| (at(k), Item::Data(p))));
        steps.push_back((rest, Item::Data(end)));
    }
    let run = Run {
        steps,
        start: Instant::now(),
        shared,
        slot,
        complete: !delivery.broken,
    };
    let body = futures::stream::unfold(Some(run), |state| async move {
        let mut run = state?;
        loop {
            let Some((at, item)) = run.steps.pop_front() else {
                if run.complete {
                    run.shared.served(&run.slot);
                }
                return None;
            };
            tokio::time::sleep_until(run.start + at).await;
            match item {
                // hyper must never see an empty chunk (it would read as the end of the body).
                Item::Data(data) if data.is_empty() => {}
                Item::Data(data) => {
                    if run.steps.is_empty() && run.complete {
                        run.shared.served(&run.slot);
                        run.complete = false;
                    }
                    return Some((Ok(data), Some(run)));
                }
                Item::Abort => {
                    let error = io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "fake vendor broke the stream after its first piece",
                    );
                    return Some((Err(error), None));
                }
            }
        }
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, content_type)],
        Body::from_stream(body),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(pieces: Option<u32>, broken: bool) -> Delivery {
        Delivery {
            pacing: pieces.map(|p| Streaming::new(Duration::ZERO, Duration::ZERO, p)),
            broken,
        }
    }

    #[test]
    fn cuts_are_even_cover_everything_and_respect_the_counts() {
        let bytes: Vec<u8> = (0..=100).collect();
        let pieces = delivery(Some(4), false).cut(&bytes, 1);
        assert_eq!(pieces.len(), 4);
        assert_eq!(pieces.concat(), bytes);
        assert!(pieces[..3].iter().all(|p| p.len() % 2 == 0));
        assert_eq!(delivery(None, false).cut(&bytes, 1).len(), 1);
        assert_eq!(delivery(None, false).cut(&bytes, 2).len(), 2);
        assert_eq!(delivery(None, true).cut(&bytes, 1).len(), 2);
        assert_eq!(delivery(Some(0), false).cut(&bytes, 1).len(), 1);
        assert_eq!(delivery(Some(500), false).cut(&bytes, 1).len(), 50);
        assert_eq!(delivery(Some(3), false).cut(&[], 1), vec![&[] as &[u8]]);
    }
}
