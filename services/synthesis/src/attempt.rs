//! One vendor call under one lease: run the adapter in its own task (a panic cannot take the
//! lease with it), renew the lease while it runs, bound it by the attempt timeout, validate the
//! audio, then report the outcome and release.
//!
//! # A lease covers the vendor's work, not the caller's patience (invariant 1 at the vendor)
//! A vendor keeps working on a request whose client went away, so once a request has been
//! sent its key stays busy at the vendor until the vendor answers. The whole attempt (call,
//! renewals, report, release) therefore runs in a task of its own, tracked by the service's
//! [`TaskTracker`]: when the caller cancels or its deadline passes, the request path stops
//! waiting and answers, while the task lets the call finish (the audio is discarded), reports
//! the real outcome and only then releases the lease. The call is bounded by
//! `synthesis.attempt_timeout_ms` alone (plus [`GRACE`]), never by the caller's deadline.
//! A synthesis process that dies leaves the lease to its TTL; one that shuts down gracefully
//! waits for these tasks (see [`crate::server`]).
//!
//! Audio that fails [`crate::audio::validate`] (e.g. a JSON error body with HTTP 200) is
//! reported as UPSTREAM_ERROR and fails over. Each finished call is counted in the metrics
//! here, abandoned or not, so the vendor-response metrics match what the vendor served.

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use tokio::{task::JoinHandle, time::Instant};
use tokio_util::task::TaskTracker;
use tracing::Instrument;
use voxpool_shared::contract::Outcome;
use voxpool_shared::snapshot::Snapshot;

use crate::{
    audio,
    deadline::Deadline,
    lease::LeaseGuard,
    metrics,
    record::AttemptRecord,
    vendor::{
        AudioFormat, KeyCredential, UpstreamTarget, VendorAdapter, VendorAudio, VendorFailure,
        VendorRequest,
    },
};

/// Extra time an adapter gets past its own timeout before the attempt is cut off.
const GRACE: Duration = Duration::from_secs(1);

/// Everything one call needs, owned so it can run in its own task.
#[derive(Clone)]
pub struct CallInput {
    /// The pool's id (metrics, logs).
    pub pool_id: String,
    /// The pool's provider id (metrics).
    pub provider: String,
    /// The adapter.
    pub adapter: Arc<dyn VendorAdapter>,
    /// The frozen voice.
    pub voice: Arc<Snapshot>,
    /// This chunk's text.
    pub text: String,
    /// The pool's model id.
    pub pool_model: String,
    /// Requested format.
    pub format: AudioFormat,
    /// Requested sample rate.
    pub sample_rate_hz: Option<u32>,
    /// Key and credential.
    pub key: Arc<KeyCredential>,
    /// The key's upstream.
    pub upstream: Arc<UpstreamTarget>,
    /// `synthesis.attempt_timeout_ms`.
    pub attempt_timeout: Duration,
}

/// How an attempt ended.
#[derive(Debug)]
pub enum AttemptEnd {
    /// Valid audio; SUCCESS reported.
    Audio(VendorAudio),
    /// A classified failure; reported (see the record's outcome).
    Failed,
    /// The request deadline passed during the call: the caller is answered now, while the
    /// call finishes in the background and is reported and released then (module doc).
    Deadline,
    /// The adapter panicked; released without a report.
    Panicked,
}

/// Aborts the task when dropped, so a cancelled request also cancels its vendor call (and
/// `kill_on_drop` ends an engine process).
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

fn spawn_call(
    input: &CallInput,
    timeout: Duration,
    attempt_id: String,
) -> AbortOnDrop<Result<VendorAudio, VendorFailure>> {
    let input = input.clone();
    AbortOnDrop(tokio::spawn(
        async move {
            let request = VendorRequest {
                text: &input.text,
                voice: &input.voice,
                pool_model: &input.pool_model,
                format: input.format,
                sample_rate_hz: input.sample_rate_hz,
                key: &input.key,
                upstream: &input.upstream,
                timeout,
                attempt_id: &attempt_id,
            };
            input.adapter.synthesize(request).await
        }
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

/// Runs one call under `guard` (module doc) in a task of `tracker`, and waits for it until
/// `deadline`. Returns how it ended and, unless the deadline came first or the adapter
/// panicked, the attempt's record. Dropping the returned future (the caller went away) leaves
/// the task running to the vendor's answer.
pub async fn run(
    guard: LeaseGuard,
    input: &CallInput,
    deadline: Deadline,
    lease_ttl: Duration,
    tracker: &TaskTracker,
) -> (AttemptEnd, Option<AttemptRecord>) {
    let input = input.clone();
    let attempt = tracker.spawn(
        async move {
            let (end, record) = call_under_lease(guard, &input, lease_ttl).await;
            if let Some(r) = &record {
                metrics::attempt(&input.pool_id, &input.provider, r);
            }
            (end, record)
        }
        .instrument(tracing::Span::current()),
    );
    tokio::select! {
        joined = attempt => joined.unwrap_or_else(|e| {
            // Only a panic outside the adapter (which has its own task) gets here.
            tracing::error!(panic = e.is_panic(), "attempt task failed");
            (AttemptEnd::Panicked, None)
        }),
        () = tokio::time::sleep_until(deadline.at()) => {
            tracing::debug!("deadline passed during a vendor call; it finishes in the background");
            (AttemptEnd::Deadline, None)
        }
    }
}

/// The attempt itself: the vendor call bounded by the attempt timeout, fenced by the lease's
/// renewals, then the report (or a release when the call said nothing about the key).
async fn call_under_lease(
    guard: LeaseGuard,
    input: &CallInput,
    lease_ttl: Duration,
) -> (AttemptEnd, Option<AttemptRecord>) {
    let started = Instant::now();
    let timeout = input.attempt_timeout;
    let call = spawn_call(input, timeout, attempt_id());
    let mut lost = None;
    let result = tokio::select! {
        biased;
        joined = call => Some(joined),
        why = guard.keep_alive(lease_ttl) => {
            lost = Some(why);
            None
        }
        () = tokio::time::sleep_until(started + timeout + GRACE) => None,
    };
    let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let lease = guard.lease().clone();
    let record = |outcome: Outcome, failure: Option<&VendorFailure>| AttemptRecord {
        key_id: lease.key_id.clone(),
        upstream_id: lease.upstream_id.clone(),
        outcome,
        http_status: failure.and_then(|f| f.http_status),
        latency_ms,
        message: failure.map(|f| f.message.clone()).unwrap_or_default(),
        retry_after_ms: failure.and_then(|f| f.retry_after_ms),
    };
    let failure = match result {
        Some(Ok(Ok(audio))) => match audio::validate(&audio, input.format) {
            Ok(()) => {
                guard.finish(Outcome::Success, None, latency_ms).await;
                return (
                    AttemptEnd::Audio(audio),
                    Some(record(Outcome::Success, None)),
                );
            }
            Err(e) => VendorFailure {
                outcome: Outcome::UpstreamError,
                http_status: None,
                retry_after_ms: None,
                message: format!("returned unusable audio: {e}"),
            },
        },
        Some(Ok(Err(failure))) => failure,
        Some(Err(join_error)) => {
            tracing::error!(provider = input.adapter.provider().as_str(), key = %lease.key_id, panic = join_error.is_panic(), "adapter task failed");
            guard.release().await;
            return (AttemptEnd::Panicked, None);
        }
        None if lost.is_some() => {
            // Fenced: the slot may already belong to another caller, so the call was aborted
            // to keep the vendor within the key's capacity. Not the key's fault: no report.
            let why = lost.map(|l| l.to_string()).unwrap_or_default();
            guard.release().await;
            let failure = VendorFailure {
                outcome: Outcome::Timeout,
                http_status: None,
                retry_after_ms: None,
                message: format!("call aborted after {latency_ms}ms: {why}"),
            };
            return (
                AttemptEnd::Failed,
                Some(record(Outcome::Timeout, Some(&failure))),
            );
        }
        None => VendorFailure {
            outcome: Outcome::Timeout,
            http_status: None,
            retry_after_ms: None,
            message: format!("no answer within {}ms", timeout.as_millis()),
        },
    };
    let outcome = match failure.outcome {
        Outcome::Success => Outcome::UpstreamError,
        other => other,
    };
    guard
        .finish(outcome, failure.retry_after_ms, latency_ms)
        .await;
    (AttemptEnd::Failed, Some(record(outcome, Some(&failure))))
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
