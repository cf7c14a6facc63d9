//! One chunk through the audio cache ([`crate::cache`]): a hit is served without a lease, a
//! vendor call or a character against a key's quota; a miss is filled by exactly one request
//! across every replica while the others wait for it (single-flight).
//!
//! `USE` (the default): read the entry; on a miss take the entry's *fill lock* from the
//! scheduler (`AcquireFill`: one holder per entry across replicas, expiring with its holder).
//! - GRANTED: this request is the leader. It reads once more (a fill may have landed between
//!   its read and its grant), else runs the chunk's failover ([`super::failover`]) with its
//!   audio going out as usual *and* kept; whole, valid audio is stored before the chunk ends
//!   (so an answered request has its entries stored), then the lock is released. A failed call stores nothing and releases the lock: the failure is the
//!   leader's alone, and a waiting follower retries as a leader.
//! - RELEASED: this request waited while another filled; it reads again (and counts a
//!   coalesced hit), or, if that fill failed, asks for the lock again.
//! - HELD until its own deadline: DEADLINE_EXCEEDED (a follower never waits past its deadline).
//! - The scheduler cannot give the lock (unreachable): the chunk is synthesized without
//!   single-flight (and stored): a fill lock saves vendor calls, it guards no invariant.
//!
//! `REFRESH` skips the read and stores what it synthesizes; `BYPASS`, a pool with
//! `cache.enabled = false` and a server with `--cache off` go straight to failover. A blob
//! store that fails a read is a miss, one that fails a write is logged: the cache never fails a
//! request the vendor could serve.

use std::time::Duration;

use super::{
    Core, Job,
    failover::{self, Chunk, ChunkDone},
    spool::{ChunkMsg, ChunkOut},
};
use crate::{
    cache::{Cache, EntryKey, Header, Policy},
    error::SynthesisError,
    lease::{FillLock, FillOutcome},
    record::AttemptRecord,
};

/// Most times one chunk asks for its fill lock again after a fill it waited for failed;
/// past it, it synthesizes without the lock.
const MAX_FILL_ROUNDS: usize = 8;

/// Serves chunk `index` of `job` through the cache (module doc), its audio handed to `out`:
/// a hit, or the vendor's audio through [`failover::call_chunk`], stored.
pub(super) async fn serve_chunk<T: Send + 'static>(
    core: &Core,
    job: &Job,
    index: usize,
    out: &ChunkOut<T>,
    attempts: &mut Vec<AttemptRecord>,
) -> Result<ChunkDone, SynthesisError> {
    let chunk = Chunk {
        index,
        utterance: job.utterance(index),
    };
    let Some((cache, ttl)) = core
        .cache
        .clone()
        .zip(job.pool.cache_ttl)
        .filter(|_| job.cache_policy != Policy::Bypass)
    else {
        return failover::call_chunk(core, job, &chunk, out, attempts).await;
    };
    let key = EntryKey::of(&chunk.utterance, job.pool.provider.as_str(), cache.version);
    if job.cache_policy == Policy::Refresh {
        return fill(core, &cache, &key, None, job, &chunk, out, attempts).await;
    }
    let pool = job.pool.id.as_str();
    let mut waited = false;
    for round in 0..MAX_FILL_ROUNDS {
        if let Some(done) = serve(&cache, &key, ttl, job, out, waited, &chunk.utterance.text).await
        {
            return Ok(done);
        }
        if round == 0 {
            cache.miss(pool);
        }
        let wait = job.deadline.remaining();
        match core
            .scheduler
            .acquire_fill(&key.lock_name(), cache.fill_ttl, wait)
            .await
        {
            Ok(FillOutcome::Granted(lock)) => {
                if let Some(done) =
                    serve(&cache, &key, ttl, job, out, waited, &chunk.utterance.text).await
                {
                    lock.release().await;
                    return Ok(done);
                }
                return fill(core, &cache, &key, Some(lock), job, &chunk, out, attempts).await;
            }
            Ok(FillOutcome::Released) => waited = true,
            Ok(FillOutcome::Held { .. }) => {
                return Err(SynthesisError::DeadlineExceeded {
                    pool: Some(job.pool.id.clone()),
                    budget_ms: job.deadline.budget_ms(),
                    attempts: std::mem::take(attempts),
                    in_call: false,
                });
            }
            Err(e) => {
                tracing::warn!(pool, entry = %key.hex, error = %e, "no fill lock from the scheduler: synthesizing without single-flight");
                break;
            }
        }
    }
    fill(core, &cache, &key, None, job, &chunk, out, attempts).await
}

/// Serves the entry at `key` if the cache holds it whole and fresh.
async fn serve<T: Send + 'static>(
    cache: &Cache,
    key: &EntryKey,
    ttl: Duration,
    job: &Job,
    out: &ChunkOut<T>,
    coalesced: bool,
    text: &str,
) -> Option<ChunkDone> {
    let entry = match cache.get(key, ttl).await {
        Ok(entry) => entry?,
        Err(e) => {
            tracing::warn!(pool = %job.pool.id, error = %e, "audio cache unreadable: treated as a miss");
            return None;
        }
    };
    cache.hit(&job.pool.id, entry.header.characters, coalesced);
    let tail = &entry.audio[entry.audio.len().saturating_sub(16 * 1024)..];
    let audio_ms = crate::usage::duration::audio_ms(
        job.format,
        entry.header.sample_rate_hz,
        entry.audio.len() as u64,
        &entry.audio,
        tail,
    );
    job.meter.cached(text, audio_ms);
    out.tx.send(ChunkMsg::Cached);
    if !entry.audio.is_empty() {
        out.tx.send(ChunkMsg::Audio(entry.audio));
    }
    Some(ChunkDone {
        key_id: entry.header.key_id,
        sample_rate_hz: entry.header.sample_rate_hz,
    })
}

/// Runs the chunk's failover with its audio handed on and kept, stores whole audio, then
/// releases `lock` (after the write, so a follower woken by the release finds the entry).
#[allow(clippy::too_many_arguments)]
async fn fill<T: Send + 'static>(
    core: &Core,
    cache: &Cache,
    key: &EntryKey,
    lock: Option<FillLock>,
    job: &Job,
    chunk: &Chunk,
    out: &ChunkOut<T>,
    attempts: &mut Vec<AttemptRecord>,
) -> Result<ChunkDone, SynthesisError> {
    let (tx, mut rx) = super::spool::pipe();
    let kept_out = ChunkOut {
        tx,
        live: out.live.clone(),
    };
    let mut audio = Vec::new();
    let mut forward = |msg: ChunkMsg<T>| {
        if let ChunkMsg::Audio(bytes) = &msg {
            audio.extend_from_slice(bytes);
        }
        out.tx.send(msg);
    };
    let result = {
        let call = failover::call_chunk(core, job, chunk, &kept_out, attempts);
        tokio::pin!(call);
        loop {
            tokio::select! {
                biased;
                Some(msg) = rx.recv() => forward(msg),
                result = &mut call => break result,
            }
        }
    };
    // Everything the call handed over is in the channel by the time it returned.
    while let Some(msg) = rx.try_recv() {
        forward(msg);
    }
    let store = result.as_ref().ok().cloned().filter(|_| !audio.is_empty());
    match (store, lock) {
        (Some(done), lock) => {
            let header = Header {
                key: String::new(),
                sha256: String::new(),
                bytes: 0,
                sample_rate_hz: done.sample_rate_hz,
                key_id: done.key_id,
                pool: job.pool.id.clone(),
                characters: chunk.utterance.text.chars().count() as u64,
            };
            // Stored before the chunk ends (its audio is already on its way to the caller),
            // then the lock released: a follower woken by the release finds the entry, and
            // a request answered has its entries stored.
            if let Err(e) = cache.put(key, header, &audio).await {
                tracing::warn!(entry = %key.hex, error = %e, "audio cache write failed; the next request fills it again");
            }
            if let Some(lock) = lock {
                lock.release().await;
            }
        }
        (None, Some(lock)) => lock.release().await,
        (None, None) => {}
    }
    result
}
