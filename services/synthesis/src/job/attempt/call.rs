//! The vendor call of one attempt in a task of its own ([`spawn_call`]), cut off by dropping
//! or [`AbortOnDrop::close`]-ing it, and the per-call id ([`attempt_id`]).

use std::{
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use tokio::task::JoinHandle;
use tracing::Instrument;

use super::CallInput;
use crate::adapters::{AudioSink, StreamEnd, VendorFailure, VendorRequest};

/// Aborts the task when dropped, so cutting a call off also ends its vendor request (and
/// `kill_on_drop` ends an engine process).
pub(super) struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> AbortOnDrop<T> {
    /// Aborts the call and waits until its task is gone with everything it held: the vendor
    /// response and its connection (closed, not pooled, since its body was not read to the
    /// end), an engine process (killed).
    pub(super) async fn close(mut self) {
        self.0.abort();
        let _ = (&mut self.0).await;
    }
}

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

pub(super) fn spawn_call(
    input: &CallInput,
    timeout: Duration,
    attempt_id: String,
    sink: AudioSink,
) -> AbortOnDrop<Result<StreamEnd, VendorFailure>> {
    let input = input.clone();
    AbortOnDrop(tokio::spawn(
        Box::pin(async move {
            let request = VendorRequest {
                utterance: &input.utterance,
                key: &input.key,
                upstream: &input.upstream,
                timeout,
                attempt_id: &attempt_id,
                gate: input.gate.clone(),
            };
            input.adapter.stream(request, &sink).await
        })
        .instrument(tracing::Span::current()),
    ))
}

/// A fresh random UUID v4 string: the vendor's per-call id (Volcengine wants a unique `reqid`)
/// and the idempotency key of each lease attempt.
pub fn attempt_id() -> String {
    let b = rand::random::<u128>().to_be_bytes();
    let mut b = b;
    b[6] = (b[6] & 0x0F) | 0x40;
    b[8] = (b[8] & 0x3F) | 0x80;
    let h = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::attempt_id;

    #[test]
    fn attempt_ids_are_unique_uuid_v4_strings() {
        let a = attempt_id();
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert_ne!(a, attempt_id());
    }
}
