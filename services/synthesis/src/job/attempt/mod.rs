//! One vendor call under one lease: run the adapter in its own task (a panic cannot take the
//! lease with it), pass its audio on as it arrives, renew the lease while it runs, bound it by
//! the attempt timeout, then report the outcome and release.
//!
//! # A lease covers the vendor's work, not the caller's patience (invariant 1 of docs/ARCHITECTURE.md at the vendor)
//! A vendor keeps working on a request whose client went away, so once a request has been
//! sent its key stays busy at the vendor until the vendor answers. The whole attempt (call,
//! renewals, report, release) therefore runs in a task of its own, tracked by the service's
//! [`TaskTracker`]: when the caller cancels or its deadline passes, the request path stops
//! waiting and answers, while the task carries on. The call is bounded by
//! `synthesis.attempt_timeout_ms` alone (plus [`GRACE`]), never by the caller's deadline.
//! A synthesis process that dies leaves the lease to its TTL; one that shuts down gracefully
//! waits for these tasks (see [`crate::server`]).
//!
//! **Cut off once streaming.** When nobody wants the audio any more (the chunk's receiver is
//! gone: the caller cancelled, its deadline passed, or another chunk failed the request), a
//! call whose vendor has started sending audio is cut at once: the connection is closed (the
//! engine process killed), which ends a streaming vendor's work on it, and the lease is
//! released without a report — but only once the call's task is gone with its connection,
//! and the pool's `cancel_grace_ms` after that: the vendor counts the call until it notices
//! the closed connection, and a slot handed on before then would be its cap + 1. A call that has not sent its first byte yet is still being
//! worked on at the vendor, so it is cut at its first byte, or runs to its answer (a vendor
//! that does not stream sends everything at once).
//!
//! **A queueing upstream's timeout is overload.** An upstream marked `queueing` (a
//! self-hosted server that queues requests instead of refusing them) that holds a call for the
//! whole attempt timeout is reported RATE_LIMITED, not TIMEOUT: an overload signal that lowers
//! an adaptive key's effective capacity (`adapters::http::classify`). A quicker TIMEOUT there
//! (connect error, reset) stays TIMEOUT. An upstream with `latency_limit_ms` whose call
//! succeeds slower than that is reported CONCURRENCY_LIMITED (the audio still goes out): the
//! server queued it, so an adaptive key's effective capacity comes down before timeouts do.
//!
//! # Where the audio goes ([`ChunkOut`])
//! The first bytes are checked with [`crate::audio::sniff_start`] before any of them is
//! passed on (a JSON error body with HTTP 200 is UPSTREAM_ERROR and fails over, nothing
//! delivered). Checked audio is *held* in the attempt while its chunk is not live (a later
//! chunk synthesized ahead, or any chunk of a unary call) and handed over when the chunk
//! becomes live or the call succeeds; a live chunk's audio is handed over as it arrives. So a
//! call that fails before handing anything over fails over cleanly, and [`AttemptEnd::Failed`]
//! says whether audio had been handed over (then the chunk cannot be retried without a splice).
//! Each finished call is counted in the metrics here, abandoned or not, so the
//! vendor-response metrics match what the vendor served.

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use tokio::{sync::mpsc, time::Instant};
use tokio_util::task::TaskTracker;
use tracing::Instrument;
use voxpool_domain::contract::Outcome;

use crate::{
    adapters::{
        AudioSink, KeyCredential, StreamEnd, UpstreamTarget, Utterance, VendorAdapter,
        VendorFailure, gate::Gate,
    },
    audio,
    deadline::Deadline,
    lease::LeaseGuard,
    metrics,
    record::AttemptRecord,
    usage::{Charge, Meter, Settled, duration},
};

use super::spool::{ChunkOut, Spool};

mod call;
mod relay;
mod report;

pub use self::call::attempt_id;
use self::{
    call::{AbortOnDrop, spawn_call},
    relay::Relay,
    report::{failed, not_audio, succeeded},
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
    /// What to say and how (this chunk's).
    pub utterance: Utterance,
    /// Key and credential.
    pub key: Arc<KeyCredential>,
    /// The key's upstream.
    pub upstream: Arc<UpstreamTarget>,
    /// `synthesis.attempt_timeout_ms`.
    pub attempt_timeout: Duration,
    /// The pool's `cancel_grace_ms`: how long a call cut off on cancel keeps its lease after
    /// its vendor connection was closed (module doc).
    pub cancel_grace: Duration,
    /// The request's meter: the attempt is settled there as it ends (`crate::usage`).
    pub meter: Arc<Meter>,
    /// The attempt's Charge, written as the call starts: its body waits at `gate` until
    /// then.
    pub charge: Charge,
    /// Opens once the Charge is written ([`crate::adapters::gate`]).
    pub gate: Gate,
}

/// How an attempt ended.
#[derive(Debug)]
pub enum AttemptEnd {
    /// Valid audio, all of it handed over; SUCCESS reported.
    Audio(StreamEnd),
    /// A classified failure; reported (see the record's outcome). `delivered`: audio of this
    /// call had been handed over before it failed.
    Failed {
        /// Bytes handed over before the failure.
        delivered: u64,
    },
    /// The request deadline passed during the call: the caller is answered now, while the
    /// call finishes (or is cut off) in the background (module doc).
    Deadline,
    /// The adapter panicked; released without a report.
    Panicked,
}

/// Runs one call under `guard` (module doc) in a task of `tracker`, handing its audio to
/// `out`, and waits for it until `deadline`. Returns how it ended and, unless the deadline
/// came first, the call was cut off or the adapter panicked, the attempt's record. Dropping
/// the returned future leaves the task running (module doc).
pub async fn run<T: Send + 'static>(
    guard: LeaseGuard,
    input: &CallInput,
    out: ChunkOut<T>,
    deadline: Deadline,
    lease_ttl: Duration,
    tracker: &TaskTracker,
) -> (AttemptEnd, Option<AttemptRecord>) {
    let input = input.clone();
    let reports = tracker.clone();
    let attempt = tracker.spawn(
        Box::pin(async move {
            let (end, record) = call_under_lease(guard, &input, out, lease_ttl, &reports).await;
            if let Some(r) = &record {
                metrics::attempt(&input.pool_id, &input.provider, r);
            }
            (end, record)
        })
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

/// Why the call loop stopped.
enum Stop {
    /// The adapter returned (or its task failed).
    Joined(Result<Result<StreamEnd, VendorFailure>, tokio::task::JoinError>),
    /// The first bytes are not audio.
    NotAudio(audio::AudioError),
    /// The lease was lost (fenced).
    Lost(String),
    /// Attempt timeout plus grace.
    TimedOut,
    /// Nobody wants the audio any more and the vendor has started sending it.
    CutOff,
}

/// The attempt itself: the vendor call bounded by the attempt timeout, fenced by the lease's
/// renewals, its audio relayed ([`drive`]); then the report (or a release when the call said
/// nothing about the key).
async fn call_under_lease<T>(
    mut guard: LeaseGuard,
    input: &CallInput,
    out: ChunkOut<T>,
    lease_ttl: Duration,
    reports: &TaskTracker,
) -> (AttemptEnd, Option<AttemptRecord>) {
    let started = Instant::now();
    let timeout = input.attempt_timeout;
    let (sink, audio_rx) = AudioSink::new();
    let billed = sink.billed_counter();
    guard.sent();
    let mut call = spawn_call(input, timeout, attempt_id(), sink);
    let mut relay = Relay {
        out,
        format: input.utterance.format,
        probe: Vec::new(),
        checked: false,
        held: Spool::default(),
        received: 0,
        delivered: 0,
        head: Vec::new(),
        tail: Vec::new(),
    };
    let stop = drive(
        &guard,
        &mut call,
        audio_rx,
        &mut relay,
        started + timeout + GRACE,
        lease_ttl,
    )
    .await;
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
    let delivered = relay.delivered;
    // What the vendor charged for (`charged`): a call it accepted — it began answering with
    // audio, or it was sent the text and never refused it (cut off, timed out, fenced: a
    // vendor finishes and bills such work) — whatever came after. A refusal (an error status,
    // or a body that is no audio) before any audio costs nothing.
    let settled = |relay: &Relay<T>, outcome: Option<Outcome>, rate: Option<u32>, charged: bool| {
        let audio_ms = if relay.checked {
            duration::audio_ms(
                input.utterance.format,
                rate.or(input.utterance.sample_rate_hz),
                relay.received,
                &relay.head,
                &relay.tail,
            )
        } else {
            0
        };
        Settled {
            key_id: lease.key_id.clone(),
            upstream_id: lease.upstream_id.clone(),
            charged,
            billed_characters: Some(billed.load(std::sync::atomic::Ordering::Relaxed))
                .filter(|n| *n > 0),
            audio_ms,
            call_ms: latency_ms,
            outcome,
        }
    };
    let settle = |relay: &Relay<T>, outcome: Option<Outcome>, rate: Option<u32>, charged: bool| {
        input
            .meter
            .settle(&input.charge, &settled(relay, outcome, rate, charged))
    };
    // Whether a failure below was the vendor's refusal before any audio (not charged).
    let mut refused = false;
    let failure = match stop {
        Stop::Joined(Ok(Ok(end))) => match relay.close() {
            Ok(()) => {
                let charged = settle(&relay, Some(Outcome::Success), end.sample_rate_hz, true);
                // The vendor has finished and the caller has all the audio: the report (which
                // releases the key) goes on without holding the answer back.
                let input = input.clone();
                reports.spawn(
                    Box::pin(async move { succeeded(guard, &input, latency_ms, charged).await })
                        .instrument(tracing::Span::current()),
                );
                return (AttemptEnd::Audio(end), Some(record(Outcome::Success, None)));
            }
            Err(e) => {
                refused = !relay.checked;
                not_audio(&e)
            }
        },
        Stop::NotAudio(e) => {
            call.close().await;
            refused = true;
            not_audio(&e)
        }
        Stop::Joined(Ok(Err(failure))) => {
            // Refused: an error status, or no answer at all and no audio while the text was
            // never handed over (nothing could be sent). A success status whose body then
            // broke was accepted (the vendor bills what it began), and so was a text the
            // vendor had when its answer did not come in time (it finishes and bills it).
            refused = match failure.http_status {
                Some(status) => !(200..300).contains(&status),
                None => relay.received == 0 && !input.gate.body_sent(),
            };
            failure
        }
        Stop::Joined(Err(join_error)) => {
            tracing::error!(provider = input.adapter.provider().as_str(), key = %lease.key_id, panic = join_error.is_panic(), "adapter task failed");
            settle(
                &relay,
                Some(Outcome::UpstreamError),
                None,
                relay.received > 0,
            );
            guard.release().await;
            return (AttemptEnd::Panicked, None);
        }
        Stop::CutOff => {
            // The vendor counts the call until it sees the connection close: the lease is
            // kept until the connection is dropped here, and the pool's grace after that.
            call.close().await;
            tokio::time::sleep(input.cancel_grace).await;
            tracing::debug!(key = %lease.key_id, received = relay.received, "call cut off: nobody wants its audio");
            settle(&relay, None, None, true);
            guard.release().await;
            return (AttemptEnd::Failed { delivered }, None);
        }
        Stop::Lost(why) => {
            // Fenced: the slot may already belong to another caller, so the call was aborted
            // to keep the vendor within the key's capacity. Not the key's fault: no report.
            call.close().await;
            // Charged once its text went; a body still held went nowhere.
            let sent = !input.gate.holds() || input.gate.body_sent();
            settle(&relay, Some(Outcome::Timeout), None, sent);
            guard.release().await;
            let failure = VendorFailure {
                outcome: Outcome::Timeout,
                http_status: None,
                retry_after_ms: None,
                message: format!("call aborted after {latency_ms}ms: {why}"),
            };
            return (
                AttemptEnd::Failed { delivered },
                Some(record(Outcome::Timeout, Some(&failure))),
            );
        }
        Stop::TimedOut => {
            call.close().await;
            VendorFailure {
                outcome: Outcome::Timeout,
                http_status: None,
                retry_after_ms: None,
                message: format!("no complete answer within {}ms", timeout.as_millis()),
            }
        }
    };
    if input.gate.is_refused() {
        // Its Charge was never written, so the vendor was sent nothing: no key is blamed (the
        // failover answers USAGE_STORE_UNAVAILABLE), and a Charge the store took too late to
        // count is settled free.
        input
            .meter
            .settle(&input.charge, &settled(&relay, None, None, false));
        guard.release().await;
        return (AttemptEnd::Failed { delivered }, None);
    }
    if refused {
        // Written at once, before anything else: were it only queued, a replica killed now
        // would leave the attempt's Charge unsettled, and the ledger would count a refusal.
        let refusal = settled(&relay, Some(failure.outcome), None, false);
        input.meter.settle_now(&input.charge, &refusal).await;
    }
    let (outcome, failure) = failed(guard, input, failure, latency_ms, |outcome| {
        if refused {
            (0, 0)
        } else {
            settle(&relay, Some(outcome), None, true)
        }
    })
    .await;
    (
        AttemptEnd::Failed { delivered },
        Some(record(outcome, Some(&failure))),
    )
}

/// Runs the call until it stops (see [`Stop`]): its audio relayed to the chunk as it
/// arrives, the lease renewed, the chunk's liveness and its receiver watched, cut off at
/// `give_up`. On a successful return, everything the adapter wrote is taken too.
async fn drive<T>(
    guard: &LeaseGuard,
    call: &mut AbortOnDrop<Result<StreamEnd, VendorFailure>>,
    mut audio_rx: mpsc::UnboundedReceiver<Bytes>,
    relay: &mut Relay<T>,
    give_up: Instant,
    lease_ttl: Duration,
) -> Stop {
    let mut live = relay.out.live.clone();
    let mut live_open = true;
    let mut audio_open = true;
    let mut wanted = true;
    let stop = {
        let keep_alive = guard.keep_alive(lease_ttl);
        tokio::pin!(keep_alive);
        let give_up = tokio::time::sleep_until(give_up);
        tokio::pin!(give_up);
        loop {
            let out_tx = relay.out.tx.clone();
            tokio::select! {
                biased;
                piece = audio_rx.recv(), if audio_open => {
                    let Some(bytes) = piece else {
                        audio_open = false;
                        continue;
                    };
                    if let Err(e) = relay.take(bytes) {
                        break Stop::NotAudio(e);
                    }
                    if !wanted && relay.received > 0 {
                        break Stop::CutOff;
                    }
                }
                joined = &mut *call => break Stop::Joined(joined),
                why = &mut keep_alive => break Stop::Lost(why.to_string()),
                () = &mut give_up => break Stop::TimedOut,
                changed = live.changed(), if live_open => match changed {
                    Ok(()) if *live.borrow() => relay.hand_over(),
                    Ok(()) => {}
                    Err(_) => live_open = false,
                },
                () = out_tx.closed(), if wanted => {
                    wanted = false;
                    if relay.received > 0 {
                        break Stop::CutOff;
                    }
                }
            }
        }
    };
    // Everything the adapter wrote before it returned is in the channel.
    if matches!(stop, Stop::Joined(Ok(Ok(_)))) {
        while let Ok(bytes) = audio_rx.try_recv() {
            if let Err(e) = relay.take(bytes) {
                return Stop::NotAudio(e);
            }
        }
    }
    stop
}
