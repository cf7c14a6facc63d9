//! Failover for one text chunk (invariant 9 of docs/ARCHITECTURE.md): lease a key of the snapshot's pool, call the
//! vendor, and on a retryable outcome (RATE_LIMITED, UPSTREAM_ERROR, TIMEOUT, KEY_INVALID,
//! QUOTA_EXHAUSTED) lease another key — same pool, same snapshot, only the snapshot's
//! `upstreamIds` — excluding every key already tried (but a CONCURRENCY_LIMITED key, which is
//! full rather than failing: it may serve the retry at its lowered capacity), until audio arrives,
//! `synthesis.max_attempts` calls were made, no eligible key is left, or the deadline passes.
//! CLIENT_ERROR returns at once. Failover happens only while none of the chunk's audio has been
//! handed over: a call that breaks after that ends the chunk with
//! [`SynthesisError::StreamBroken`] (the chunk cannot be finished in another call without
//! splicing two renditions mid-sentence).
//!
//! Scheduler answers: POOL_FULL waits (the scheduler queues FIFO for up to the remaining
//! deadline; after that a jittered backoff honouring its RetryInfo) — RESOURCE_EXHAUSTED once
//! the deadline leaves no room; NO_ELIGIBLE_KEY / KEYS_UNAVAILABLE end failover with every
//! attempt listed, except that keys refused RATE_LIMITED are asked for once more when no other
//! key is left, so the request waits out the first one's cooldown within its deadline (a pool
//! of one key and a 429 waits as a full pool does); an unreachable scheduler is UNAVAILABLE
//! naming its URL.

use std::time::Duration;

use voxpool_domain::contract::Outcome;

use super::{
    Core, Job,
    attempt::{self, AttemptEnd, CallInput},
    spool::ChunkOut,
};
use crate::{
    error::SynthesisError,
    lease::{Acquire, AcquireError, LeaseGuard},
    metrics,
    record::AttemptRecord,
};

/// A chunk whose audio has all been handed over.
#[derive(Clone, Debug)]
pub struct ChunkDone {
    /// The key that produced it.
    pub key_id: String,
    /// Its sample rate (Hz), when known.
    pub sample_rate_hz: Option<u32>,
}

/// Backoff when the scheduler gives no retry hint.
const DEFAULT_BACKOFF: Duration = Duration::from_millis(100);

fn jittered(base: Duration) -> Duration {
    let factor = 0.5 + rand::random::<f64>();
    base.mul_f64(factor).max(Duration::from_millis(5))
}

/// Synthesizes chunk `index` of `job` with failover (module doc), its audio handed to `out`
/// ([`attempt`]), appending every attempt to `attempts`.
pub(super) async fn synthesize_chunk<T: Send + 'static>(
    core: &Core,
    job: &Job,
    index: usize,
    out: &ChunkOut<T>,
    attempts: &mut Vec<AttemptRecord>,
) -> Result<ChunkDone, SynthesisError> {
    let pool = &job.pool;
    let unusable = pool.unusable_keys();
    let max_attempts = usize::try_from(core.settings.max_attempts)
        .unwrap_or(usize::MAX)
        .max(1);
    let chunk = if job.chunks.len() > 1 {
        format!("chunk {} of {}: ", index + 1, job.chunks.len())
    } else {
        String::new()
    };
    // Keys excluded from further attempts, and the vendor calls made.
    let mut tried: Vec<String> = Vec::new();
    let mut calls = 0usize;
    // Of `tried`, the keys refused RATE_LIMITED. Once no other key is left they are asked for
    // again (`waiting_out`): the scheduler then holds the Acquire until the first one's
    // cooldown ends within the deadline, as it does for a full pool, so a pool whose keys are
    // only paused (one key and a 429) waits instead of failing at once.
    let mut rate_limited: Vec<String> = Vec::new();
    let mut waiting_out = false;
    let input = |key, upstream| CallInput {
        pool_id: pool.id.clone(),
        provider: pool.provider.to_string(),
        adapter: job.adapter.clone(),
        voice: job.voice.clone(),
        text: job.chunks[index].clone(),
        pool_model: pool.model.clone(),
        format: job.format,
        sample_rate_hz: job.sample_rate_hz,
        key,
        upstream,
        attempt_timeout: Duration::from_millis(core.settings.attempt_timeout_ms),
        cancel_grace: pool.cancel_grace,
        reference: job.reference.clone(),
        seed: job.seed,
    };
    let exhausted = |why: String, attempts: &[AttemptRecord], retry_after| {
        metrics::exhausted(&pool.id);
        SynthesisError::Exhausted {
            pool: pool.id.clone(),
            why: format!("{chunk}{why}"),
            attempts: attempts.to_vec(),
            retry_after,
        }
    };
    let deadline_in = |attempts: &[AttemptRecord], in_call| SynthesisError::DeadlineExceeded {
        pool: Some(pool.id.clone()),
        budget_ms: job.deadline.budget_ms(),
        attempts: attempts.to_vec(),
        in_call,
    };
    let deadline_exceeded = |attempts: &[AttemptRecord]| deadline_in(attempts, false);
    let all_failed = |tried: &[String]| {
        let mut why = format!("all {} keys failed", tried.len());
        if !unusable.is_empty() {
            why.push_str(&format!(" ({} more have no credential)", unusable.len()));
        }
        why
    };
    loop {
        if calls >= max_attempts {
            let why = format!("{calls} attempts failed (synthesis.max_attempts = {max_attempts})");
            return Err(exhausted(why, attempts, None));
        }
        let remaining = job.deadline.remaining();
        if remaining.is_zero() {
            return Err(deadline_exceeded(attempts));
        }
        let excluded = tried
            .iter()
            .filter(|k| !(waiting_out && rate_limited.contains(k)));
        let request = Acquire {
            pool: pool.id.clone(),
            exclude_keys: unusable.iter().chain(excluded).cloned().collect(),
            upstream_ids: job.voice.upstream_ids.clone(),
            lease_ttl: core.lease_ttl,
            wait: remaining,
            request_id: job.request_id.clone(),
            // Fresh per lease attempt; kept on the client's retries of this Acquire.
            idempotency_key: attempt::attempt_id(),
            priority: job.priority,
            tenant: job.tenant.clone(),
            // Reserved against the key's character quota while the call runs.
            characters: job.chunks[index].chars().count() as u64,
        };
        let lease = match core.scheduler.acquire(&request, remaining).await {
            Ok(lease) => lease,
            Err(AcquireError::PoolFull {
                message,
                retry_after,
            }) => {
                let delay = jittered(retry_after.unwrap_or(DEFAULT_BACKOFF));
                if delay >= job.deadline.remaining() {
                    return Err(SynthesisError::PoolFull {
                        pool: pool.id.clone(),
                        message,
                        retry_after,
                        attempts: attempts.clone(),
                    });
                }
                tokio::time::sleep(delay).await;
                continue;
            }
            Err(AcquireError::NoEligibleKey { .. }) if tried.is_empty() && !unusable.is_empty() => {
                return Err(SynthesisError::NoCredentials {
                    pool: pool.id.clone(),
                    problems: pool.credential_problems(),
                });
            }
            Err(AcquireError::NoEligibleKey { message }) if tried.is_empty() => {
                return Err(exhausted(
                    format!("no key is eligible ({message})"),
                    attempts,
                    None,
                ));
            }
            Err(AcquireError::NoEligibleKey { .. }) if !waiting_out && !rate_limited.is_empty() => {
                waiting_out = true;
                continue;
            }
            Err(AcquireError::NoEligibleKey { .. }) => {
                return Err(exhausted(all_failed(&tried), attempts, None));
            }
            Err(AcquireError::KeysUnavailable { retry_after, .. }) if waiting_out => {
                // The rate-limited keys return only after the deadline.
                return Err(exhausted(all_failed(&tried), attempts, retry_after));
            }
            Err(AcquireError::KeysUnavailable {
                message,
                retry_after,
            }) => {
                let why = if tried.is_empty() {
                    format!("no key is available: {message}")
                } else {
                    format!(
                        "{} keys failed and the others are cooling or disabled: {message}",
                        tried.len()
                    )
                };
                return Err(exhausted(why, attempts, retry_after));
            }
            Err(AcquireError::Deadline { .. }) => return Err(deadline_exceeded(attempts)),
            Err(AcquireError::Unreachable { message }) => {
                return Err(SynthesisError::SchedulerUnavailable {
                    url: core.scheduler.url().to_owned(),
                    message,
                });
            }
            Err(AcquireError::Mismatch { message }) => {
                return Err(SynthesisError::SchedulerMismatch {
                    url: core.scheduler.url().to_owned(),
                    message,
                });
            }
        };
        let key_id = lease.key_id.clone();
        let guard = LeaseGuard::new(core.scheduler.clone(), lease);
        let Some((Ok(key), upstream)) = pool
            .keys
            .get(&key_id)
            .map(|k| (k.credential.clone(), k.upstream.clone()))
        else {
            guard.release().await;
            return Err(SynthesisError::SchedulerMismatch {
                url: core.scheduler.url().to_owned(),
                message: format!(
                    "it leased key {key_id:?} of pool {:?}, which has no usable key by that id here",
                    pool.id
                ),
            });
        };
        tracing::debug!(pool = %pool.id, key = %key_id, chunk = index, request_id = %job.request_id, "vendor call");
        let (end, record) = attempt::run(
            guard,
            &input(key, upstream),
            out.clone(),
            job.deadline,
            core.lease_ttl,
            &core.background,
        )
        .await;
        let client_error = record
            .as_ref()
            .filter(|r| r.outcome == Outcome::ClientError)
            .cloned();
        if let Some(r) = record {
            if r.outcome != Outcome::Success {
                tracing::info!(pool = %pool.id, key = %r.key_id, outcome = r.outcome.wire_name(), status = ?r.http_status, message = %r.message, "vendor call failed");
            }
            attempts.push(r);
        }
        match end {
            AttemptEnd::Audio(end) => {
                let chars = job.chunks[index].chars().count();
                metrics::characters(&pool.id, chars);
                if let Some(success) = attempts.last() {
                    pool.load
                        .observe(chars as u64, Duration::from_millis(success.latency_ms));
                }
                return Ok(ChunkDone {
                    key_id,
                    sample_rate_hz: end.sample_rate_hz,
                });
            }
            AttemptEnd::Failed { .. } if out.tx.is_closed() => {
                // Cut off: nobody wants this chunk any more.
                return Err(deadline_exceeded(attempts));
            }
            AttemptEnd::Failed { delivered } if delivered > 0 => {
                let attempt = attempts.last().cloned();
                return Err(SynthesisError::StreamBroken {
                    pool: pool.id.clone(),
                    chunk: index + 1,
                    chunks: job.chunks.len(),
                    delivered,
                    attempt: attempt.map(Box::new),
                });
            }
            AttemptEnd::Failed { .. } => {
                if let Some(attempt) = client_error {
                    return Err(SynthesisError::VendorRejected {
                        pool: pool.id.clone(),
                        attempt: Box::new(attempt),
                    });
                }
                calls += 1;
                let last = attempts.last().map(|a| a.outcome);
                if let Some(outcome) = last {
                    metrics::failover(&pool.id, outcome.wire_name());
                }
                // A concurrency refusal says the key is full, not bad: its effective
                // capacity was just lowered, so it may take the retry once a slot frees
                // (a pool of one key still serves). Every other failure excludes the key.
                if last != Some(Outcome::ConcurrencyLimited) && !tried.contains(&key_id) {
                    if last == Some(Outcome::RateLimited) {
                        rate_limited.push(key_id.clone());
                    }
                    tried.push(key_id);
                }
            }
            AttemptEnd::Deadline => return Err(deadline_in(attempts, true)),
            AttemptEnd::Panicked => {
                return Err(SynthesisError::AdapterPanicked {
                    provider: job.adapter.provider().to_string(),
                });
            }
        }
    }
}
