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

use std::{sync::Arc, time::Duration};

use voxpool_domain::contract::Outcome;

use super::{
    Core, Job,
    attempt::{self, AttemptEnd, CallInput},
    charge, clone_route,
    spool::ChunkOut,
};
use crate::{
    adapters::{KeyCredential, UpstreamTarget, Utterance},
    error::SynthesisError,
    lease::{Acquire, AcquireError, Lease, LeaseGuard},
    metrics,
    record::AttemptRecord,
    usage::Charge,
};

/// One chunk of a job: its place in the text and what it asks of the vendor.
#[derive(Clone, Debug)]
pub struct Chunk {
    /// 0-based position in the job's chunks.
    pub index: usize,
    /// Its text in the job's voice, format, rate, clip and seed.
    pub utterance: Utterance,
}

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

/// Synthesizes `chunk` of `job` with failover (module doc), its audio handed to `out`
/// ([`attempt`]), appending every attempt to `attempts`.
pub(super) async fn call_chunk<T: Send + 'static>(
    core: &Core,
    job: &Job,
    chunk: &Chunk,
    out: &ChunkOut<T>,
    attempts: &mut Vec<AttemptRecord>,
) -> Result<ChunkDone, SynthesisError> {
    let pool = &job.pool;
    let mut state = Failover::new(core, job, chunk);
    // The attempt's Charge: made for its first Acquire (which reserves its characters and
    // cost) and kept while the scheduler makes it wait; written to the usage stream once a
    // key is granted, before the vendor has the text.
    let mut pending: Option<Charge> = None;
    loop {
        if state.calls >= state.max_attempts {
            let why = format!(
                "{} attempts failed (synthesis.max_attempts = {})",
                state.calls, state.max_attempts
            );
            return Err(state.exhausted(why, attempts, None));
        }
        let remaining = job.deadline.remaining();
        if remaining.is_zero() {
            return Err(state.deadline_exceeded(attempts, false));
        }
        charge::store_ready(&job.meter, &job.deadline).await?;
        let charge = pending
            .take()
            .unwrap_or_else(|| job.meter.next(&chunk.utterance.text));
        let leased = state.lease(remaining, attempts, &charge).await;
        let Some(lease) = clone_route::refused(core, job, leased).await? else {
            pending = Some(charge);
            continue;
        };
        if chunk.index == 0 {
            // The budgets have judged the whole text: the other chunks may ask now.
            job.first_leased.send_replace(true);
        }
        let key_id = lease.key_id.clone();
        let guard = LeaseGuard::new(core.scheduler.clone(), lease);
        let Some((key, upstream)) = state.credential(&key_id) else {
            guard.release().await;
            return Err(SynthesisError::SchedulerMismatch {
                url: core.scheduler.url().to_owned(),
                message: format!(
                    "it leased key {key_id:?} of pool {:?}, which has no usable key by that id here",
                    pool.id
                ),
            });
        };
        let Some(utterance) = clone_route::utterance(job, &chunk.utterance, &key_id) else {
            guard.release().await;
            return Err(clone_route::outside(core, job, &key_id));
        };
        // The Charge is written before the vendor has the text (`super::charge`), tried for
        // a quarter of the attempt timeout and 2 s at most: the vendor keeps the rest to
        // answer, and a store that is down holds the key's slot only that long.
        let attempt_timeout = Duration::from_millis(core.settings.attempt_timeout_ms);
        let wait = (attempt_timeout / 4).min(charge::MAX_WAIT);
        let until = tokio::time::Instant::now() + wait.min(job.deadline.remaining());
        let (gate, charged) = charge::gated(&job.meter, &charge, &key_id, until);
        tracing::debug!(pool = %pool.id, key = %key_id, chunk = chunk.index, request_id = %job.request_id, "vendor call");
        let call = pool.load.call();
        let input = CallInput {
            pool_id: pool.id.clone(),
            provider: pool.provider.to_string(),
            adapter: job.adapter.clone(),
            utterance,
            key,
            upstream,
            attempt_timeout,
            cancel_grace: pool.cancel_grace,
            meter: job.meter.clone(),
            charge,
            gate,
        };
        let (written, (end, record)) = tokio::join!(
            charged,
            attempt::run(
                guard,
                &input,
                out.clone(),
                job.deadline,
                core.lease_ttl,
                &core.background,
            )
        );
        // Refused at the gate: the vendor was sent nothing, no key is blamed, and the key is
        // free again; asked again after a pause while the deadline allows (a failover).
        if let Err(e) = written {
            charge::pause_or(e, job.deadline.remaining()).await?;
            continue;
        }
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
                let chars = chunk.utterance.text.chars().count();
                metrics::characters(&pool.id, chars);
                call.succeeded(chars as u64);
                clone_route::used(core, job, &key_id);
                return Ok(ChunkDone {
                    key_id,
                    sample_rate_hz: end.sample_rate_hz,
                });
            }
            AttemptEnd::Failed { .. } if out.tx.is_closed() => {
                // Cut off: nobody wants this chunk any more.
                return Err(state.deadline_exceeded(attempts, false));
            }
            AttemptEnd::Failed { delivered } if delivered > 0 => {
                let attempt = attempts.last().cloned();
                return Err(SynthesisError::StreamBroken {
                    pool: pool.id.clone(),
                    chunk: chunk.index + 1,
                    chunks: job.chunks.len(),
                    delivered,
                    attempt: attempt.map(Box::new),
                });
            }
            AttemptEnd::Failed { .. } => {
                if let Some(attempt) = client_error {
                    if let Some(gone) = clone_route::gone(core, job, &attempt).await {
                        return Err(gone);
                    }
                    return Err(SynthesisError::VendorRejected {
                        pool: pool.id.clone(),
                        attempt: Box::new(attempt),
                    });
                }
                state.failed_over(key_id, attempts.last().map(|a| a.outcome));
            }
            AttemptEnd::Deadline => return Err(state.deadline_exceeded(attempts, true)),
            AttemptEnd::Panicked => {
                return Err(SynthesisError::AdapterPanicked {
                    provider: job.adapter.provider().to_string(),
                });
            }
        }
    }
}

/// One chunk's failover so far: the keys tried, the calls made, and what ends it.
struct Failover<'a> {
    core: &'a Core,
    job: &'a Job,
    /// Keys of the pool without a usable credential here: never asked for.
    unusable: Vec<String>,
    /// `synthesis.max_attempts`, at least 1.
    max_attempts: usize,
    /// `chunk 2 of 5: ` for a text of several chunks, else empty (error messages).
    label: String,
    /// Keys excluded from further attempts.
    tried: Vec<String>,
    /// Vendor calls made that failed over.
    calls: usize,
    /// Of `tried`, the keys refused RATE_LIMITED. Once no other key is left they are asked
    /// for again (`waiting_out`): the scheduler then holds the Acquire until the first one's
    /// cooldown ends within the deadline, as it does for a full pool, so a pool whose keys are
    /// only paused (one key and a 429) waits instead of failing at once.
    rate_limited: Vec<String>,
    waiting_out: bool,
    /// What the whole request needs (characters, cost micros), asked of the budgets by the
    /// first chunk's Acquires (every chunk, as counted up front: one the budgets cannot hold is
    /// refused before anything is spent); (0, 0) on the other chunks and for a single chunk.
    whole: (u64, i64),
}

impl<'a> Failover<'a> {
    fn new(core: &'a Core, job: &'a Job, chunk: &'a Chunk) -> Self {
        let label = if job.chunks.len() > 1 {
            format!("chunk {} of {}: ", chunk.index + 1, job.chunks.len())
        } else {
            String::new()
        };
        Self {
            core,
            job,
            unusable: job.pool.unusable_keys(),
            max_attempts: usize::try_from(core.settings.max_attempts)
                .unwrap_or(usize::MAX)
                .max(1),
            label,
            tried: Vec::new(),
            calls: 0,
            rate_limited: Vec::new(),
            waiting_out: false,
            whole: if chunk.index == 0 && job.chunks.len() > 1 {
                job.meter.up_front(&job.chunks)
            } else {
                (0, 0)
            },
        }
    }

    /// Asks the scheduler for a key not yet tried, waiting up to `remaining` (module doc: how
    /// each refusal ends the chunk or waits). `Ok(None)`: ask again.
    async fn lease(
        &mut self,
        remaining: Duration,
        attempts: &[AttemptRecord],
        charge: &Charge,
    ) -> Result<Option<Lease>, SynthesisError> {
        let (core, job, pool) = (self.core, self.job, &self.job.pool);
        let excluded = self
            .tried
            .iter()
            .filter(|k| !(self.waiting_out && self.rate_limited.contains(k)));
        let request = Acquire {
            pool: pool.id.clone(),
            exclude_keys: clone_route::excluded(job, self.unusable.iter().chain(excluded)),
            upstream_ids: clone_route::upstream_ids(job),
            lease_ttl: core.lease_ttl,
            wait: remaining,
            request_id: job.request_id.clone(),
            // Fresh per lease attempt; kept on the client's retries of this Acquire.
            idempotency_key: attempt::attempt_id(),
            priority: job.priority,
            tenant: job.tenant.clone(),
            // Reserved against the key's character quota and the budgets covering the
            // request while the call runs; settled by its Report.
            characters: charge.characters,
            tier: Some(job.voice.tier),
            caller: job.meter.context().caller.clone(),
            cost_micros: charge.cost_micros,
            request_characters: self.whole.0,
            request_cost_micros: self.whole.1,
        };
        let refusal = match core.scheduler.acquire(&request, remaining).await {
            Ok(lease) => return Ok(Some(lease)),
            Err(refusal) => refusal,
        };
        match refusal {
            AcquireError::PoolFull {
                message,
                retry_after,
            } => {
                let delay = jittered(retry_after.unwrap_or(DEFAULT_BACKOFF));
                if delay >= job.deadline.remaining() {
                    return Err(SynthesisError::PoolFull {
                        pool: pool.id.clone(),
                        message,
                        retry_after,
                        attempts: attempts.to_vec(),
                    });
                }
                tokio::time::sleep(delay).await;
                Ok(None)
            }
            AcquireError::NoEligibleKey { .. }
                if self.tried.is_empty() && !self.unusable.is_empty() =>
            {
                Err(SynthesisError::NoCredentials {
                    pool: pool.id.clone(),
                    problems: pool.credential_problems(),
                })
            }
            AcquireError::NoEligibleKey { message } if self.tried.is_empty() => {
                Err(self.exhausted(format!("no key is eligible ({message})"), attempts, None))
            }
            AcquireError::NoEligibleKey { .. }
                if !self.waiting_out && !self.rate_limited.is_empty() =>
            {
                self.waiting_out = true;
                Ok(None)
            }
            AcquireError::NoEligibleKey { .. } => {
                Err(self.exhausted(self.all_failed(), attempts, None))
            }
            AcquireError::KeysUnavailable { retry_after, .. } if self.waiting_out => {
                // The rate-limited keys return only after the deadline.
                Err(self.exhausted(self.all_failed(), attempts, retry_after))
            }
            AcquireError::KeysUnavailable {
                message,
                retry_after,
            } => {
                let why = if self.tried.is_empty() {
                    format!("no key is available: {message}")
                } else {
                    format!(
                        "{} keys failed and the others are cooling or disabled: {message}",
                        self.tried.len()
                    )
                };
                Err(self.exhausted(why, attempts, retry_after))
            }
            AcquireError::Deadline { .. } => Err(self.deadline_exceeded(attempts, false)),
            AcquireError::Unreachable { message } => Err(SynthesisError::SchedulerUnavailable {
                url: core.scheduler.url().to_owned(),
                message,
            }),
            AcquireError::BudgetExhausted {
                message,
                details,
                retry_after,
            } => Err(SynthesisError::BudgetExhausted {
                pool: pool.id.clone(),
                message,
                details,
                retry_after,
            }),
            AcquireError::Mismatch { message } => Err(SynthesisError::SchedulerMismatch {
                url: core.scheduler.url().to_owned(),
                message,
            }),
        }
    }

    /// The credential and upstream of the leased `key_id`, if this replica has it usable.
    fn credential(&self, key_id: &str) -> Option<(Arc<KeyCredential>, Arc<UpstreamTarget>)> {
        let key = self.job.pool.keys.get(key_id)?;
        Some((key.credential.clone().ok()?, key.upstream.clone()))
    }

    /// Counts a failed call on `key_id` (ending `outcome`) and excludes the key from the
    /// next attempts, unless it was only full.
    fn failed_over(&mut self, key_id: String, outcome: Option<Outcome>) {
        self.calls += 1;
        if let Some(outcome) = outcome {
            metrics::failover(&self.job.pool.id, outcome.wire_name());
        }
        // A concurrency refusal says the key is full, not bad: its effective capacity was
        // just lowered, so it may take the retry once a slot frees (a pool of one key still
        // serves). Every other failure excludes the key.
        if outcome != Some(Outcome::ConcurrencyLimited) && !self.tried.contains(&key_id) {
            if outcome == Some(Outcome::RateLimited) {
                self.rate_limited.push(key_id.clone());
            }
            self.tried.push(key_id);
        }
    }

    /// `all 3 keys failed`, naming the keys without a credential too.
    fn all_failed(&self) -> String {
        let mut why = format!("all {} keys failed", self.tried.len());
        if !self.unusable.is_empty() {
            why.push_str(&format!(
                " ({} more have no credential)",
                self.unusable.len()
            ));
        }
        why
    }

    fn exhausted(
        &self,
        why: String,
        attempts: &[AttemptRecord],
        retry_after: Option<Duration>,
    ) -> SynthesisError {
        let pool = &self.job.pool.id;
        metrics::exhausted(pool);
        SynthesisError::Exhausted {
            pool: pool.clone(),
            why: format!("{}{why}", self.label),
            attempts: attempts.to_vec(),
            retry_after,
        }
    }

    /// The deadline passed: during vendor calls (`in_call`) or before one could start.
    fn deadline_exceeded(&self, attempts: &[AttemptRecord], in_call: bool) -> SynthesisError {
        SynthesisError::DeadlineExceeded {
            pool: Some(self.job.pool.id.clone()),
            budget_ms: self.job.deadline.budget_ms(),
            attempts: attempts.to_vec(),
            in_call,
        }
    }
}
