//! How an attempt's end is told to the scheduler: SUCCESS (or a queueing upstream's slow
//! answer as CONCURRENCY_LIMITED), a failure with its outcome, each with what the vendor
//! charged for, which settles the lease's budget reservations.

use std::time::Duration;

use voxpool_domain::contract::Outcome;

use super::CallInput;
use crate::{adapters::VendorFailure, audio, lease::LeaseGuard};

/// Reports a call whose audio all went out: SUCCESS with its characters, or, slower than
/// the upstream's latency limit, CONCURRENCY_LIMITED (the server queued it: module doc).
/// `charged`: the characters and cost the vendor charged, which settle the lease's budget
/// reservations.
pub(super) async fn succeeded(
    guard: LeaseGuard,
    input: &CallInput,
    latency_ms: u64,
    charged: (u64, i64),
) {
    let (characters, cost_micros) = charged;
    let queued = input
        .upstream
        .latency_limit
        .is_some_and(|limit| Duration::from_millis(latency_ms) > limit);
    if queued {
        tracing::debug!(key = %guard.lease().key_id, latency_ms, "slower than the upstream's latency_limit_ms: reported as a concurrency signal");
        guard
            .finish(
                Outcome::ConcurrencyLimited,
                None,
                latency_ms,
                characters,
                cost_micros,
            )
            .await;
    } else {
        guard
            .finish(Outcome::Success, None, latency_ms, characters, cost_micros)
            .await;
    }
}

/// Reports a failed call and returns the outcome reported with the failure as recorded: a
/// queueing upstream that held the call for the whole attempt timeout is overloaded, not
/// broken (module doc), an overload signal like a 429.
/// `settle` meters the attempt as ended with the outcome and gives what the vendor charged
/// (reported, so the budget reservations settle at that).
pub(super) async fn failed(
    guard: LeaseGuard,
    input: &CallInput,
    mut failure: VendorFailure,
    latency_ms: u64,
    settle: impl FnOnce(Outcome) -> (u64, i64),
) -> (Outcome, VendorFailure) {
    let outcome = match failure.outcome {
        Outcome::Success => Outcome::UpstreamError,
        Outcome::Timeout
            if input.upstream.queueing
                && Duration::from_millis(latency_ms) >= input.attempt_timeout =>
        {
            failure
                .message
                .push_str(" (a queueing upstream: reported as overload)");
            Outcome::RateLimited
        }
        other => other,
    };
    let (characters, cost_micros) = settle(outcome);
    guard
        .finish(
            outcome,
            failure.retry_after_ms,
            latency_ms,
            characters,
            cost_micros,
        )
        .await;
    (outcome, failure)
}

pub(super) fn not_audio(e: &audio::AudioError) -> VendorFailure {
    VendorFailure {
        outcome: Outcome::UpstreamError,
        http_status: None,
        retry_after_ms: None,
        message: format!("returned unusable audio: {e}"),
    }
}
