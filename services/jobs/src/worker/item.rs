//! Running one item: synthesize, write its object, end it in the store.
//!
//! - A redelivered item (its first worker died) whose object is already written is ended
//!   SUCCEEDED without another vendor call.
//! - Transient failures (the rule every synthesis client applies) are retried here with
//!   exponential back-off and jitter (at least the server's `RetryInfo`), at most
//!   `--max-attempts` calls; any other failure ends the item FAILED with Synthesize's status
//!   and typed reason, the job's other items unaffected.
//! - Cancellation is looked at right before every call (each attempt, each part of a split
//!   item): an item of a cancelled job ends CANCELLED instead of calling; audio that came back
//!   whole is kept.
//! - A fault of this replica rather than the item — synthesis cannot be reached or refuses
//!   its worker token, the blob store refuses its writes — fails no item: the item is handed
//!   back at once for another replica to reclaim, and the workers pause until the fault
//!   clears ([`super::Workers::fault`]).
//! - A spent budget (`BUDGET_EXHAUSTED`) fails no item either and spends none of its attempts
//!   or deliveries: the item is queued again and its tenant's items pause
//!   ([`super::budget`]).
//! - Ending it in the store is retried while the store does not answer (a failover), up to
//!   twice the visibility timeout; past that another replica reclaims the item, finds its
//!   object and ends it.

use std::time::Duration;

use backon::{BackoffBuilder as _, ExponentialBuilder};
use voxpool_domain::contract::JobsReason;

use super::Workers;
use crate::{
    metrics,
    model::{ItemError, ItemResult, ItemState},
    results::Results,
    store::{Claimed, StoreError},
    synth::{ItemSpec, JobParams, Spoken, SynthError},
};

/// Why an item goes back to the queue unended (module doc).
enum HandBack {
    /// This replica cannot run items: its workers pause.
    Fault(super::Fault),
    /// A budget covering the job's tenant is spent: the item waits, and the tenant's items
    /// pause ([`super::budget`]).
    Budget(crate::usage::BudgetWait),
    /// Only this item could not be finished here (its object refused a write the store's
    /// probe did not): another replica tries it; one that keeps failing meets the delivery
    /// limit.
    Item(String),
}

/// The result of an item that hit the delivery limit.
pub(super) fn delivery_limit(max: u32) -> ItemResult {
    ItemResult {
        error: Some(ItemError {
            code: "ABORTED".into(),
            reason: JobsReason::DeliveryLimit.as_str().into(),
            message: format!(
                "the item was taken by {max} workers that stopped before it ended (killed, or crashing on it); it is not tried again"
            ),
            metadata: Default::default(),
        }),
        ..Default::default()
    }
}

impl Workers {
    /// Runs `claimed` to its end (module doc).
    pub(super) async fn process(&self, claimed: Claimed, params: JobParams) {
        let taken = tokio::time::Instant::now();
        self.hold(&claimed.job, &claimed.entry, true);
        metrics::in_flight(1);
        match self.run_item(&claimed, &params).await {
            Ok((outcome, result, characters, all_cached)) => {
                if self
                    .end(&claimed, outcome, &result, characters, all_cached)
                    .await
                {
                    let code = result.error.as_ref().map_or("OK", |e| e.code.as_str());
                    metrics::item(outcome, code, taken.elapsed());
                    if outcome == ItemState::Succeeded {
                        metrics::characters(characters, all_cached);
                    }
                }
                self.hold(&claimed.job, &claimed.entry, false);
            }
            Err(handed_back) => {
                match handed_back {
                    HandBack::Fault(fault) => self.found_fault(fault),
                    HandBack::Budget(wait) => self.budget_refused(&claimed, &params, wait).await,
                    HandBack::Item(why) => {
                        tracing::warn!(job = %claimed.job, reason = %why, "item handed back to the queue");
                    }
                }
                // Not renewed any more, then handed back: reclaimable at once.
                self.hold(&claimed.job, &claimed.entry, false);
                let idle = self.options.visibility_timeout + Duration::from_secs(1);
                if let Err(e) = self
                    .store
                    .release(&claimed.job, &self.consumer, &claimed.entry, idle)
                    .await
                {
                    tracing::warn!(job = %claimed.job, error = %e, "could not hand an item back: another replica reclaims it after the visibility timeout");
                }
            }
        }
        metrics::in_flight(-1);
    }

    /// The item's end, or `Err` with a fault of this replica (module doc).
    async fn run_item(
        &self,
        claimed: &Claimed,
        params: &JobParams,
    ) -> Result<(ItemState, ItemResult, i64, bool), HandBack> {
        let spec = match ItemSpec::decode(&claimed.spec) {
            Ok(spec) => spec,
            Err(e) => {
                let error = ItemError {
                    code: "INTERNAL".into(),
                    message: format!("the stored item cannot be read ({e}); submit it again"),
                    ..Default::default()
                };
                return Ok(failed(error));
            }
        };
        let characters = i64::try_from(spec.text().chars().count()).unwrap_or(i64::MAX);
        let path = Results::item_path(&params.job, &claimed.id, params.format);
        if claimed.deliveries > 1
            && let Ok(Some(size)) = self.results.size(&path).await
        {
            tracing::info!(job = %params.job, "a reclaimed item's audio was written already: not synthesized again");
            metrics::already_written();
            let result = ItemResult {
                output: path,
                audio_bytes: i64::try_from(size).unwrap_or(i64::MAX),
                ..Default::default()
            };
            return Ok((ItemState::Succeeded, result, characters, false));
        }
        let mut backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(250))
            .with_max_delay(Duration::from_secs(20))
            .with_jitter()
            .with_max_times(self.options.max_attempts.saturating_sub(1) as usize)
            .build();
        loop {
            let dropped = (
                ItemState::Cancelled,
                ItemResult::default(),
                characters,
                false,
            );
            if super::parts::cancelled(&self.store, &params.job).await {
                return Ok(dropped);
            }
            self.count_attempt(&params.job, &claimed.id).await;
            let answer =
                super::parts::speak(&self.synth, &self.store, params, &claimed.id, &spec).await;
            metrics::attempt(match &answer {
                Ok(Some(_)) => tonic::Code::Ok,
                Ok(None) => tonic::Code::Cancelled,
                Err(e) => e.code(),
            });
            match answer {
                Ok(Some(spoken)) => return self.keep(path, spoken, characters).await,
                Ok(None) => return Ok(dropped),
                Err(SynthError::Replica(fault)) => {
                    return Err(HandBack::Fault(Self::synthesis_fault(&fault)));
                }
                Err(SynthError::Budget(wait)) => return Err(HandBack::Budget(wait)),
                Err(SynthError::Failed {
                    error,
                    transient,
                    retry_after,
                    ..
                }) => {
                    let again = transient.then(|| backoff.next()).flatten();
                    match again {
                        Some(delay) => {
                            let delay = retry_after.map_or(delay, |d| d.max(delay));
                            tokio::time::sleep(delay).await;
                        }
                        None => return Ok(failed(error)),
                    }
                }
            }
        }
    }

    /// Writes the audio of a spoken item at `path`; the item's end, or `Err` when the blob
    /// store refused it (module doc).
    async fn keep(
        &self,
        path: String,
        spoken: Spoken,
        characters: i64,
    ) -> Result<(ItemState, ItemResult, i64, bool), HandBack> {
        let (cached, chunks) = (spoken.cached, spoken.chunks());
        let audio_bytes = i64::try_from(spoken.audio.len()).unwrap_or(i64::MAX);
        let all_cached = cached == chunks;
        if let Err(e) = self.write(&path, bytes::Bytes::from(spoken.audio)).await {
            // The replica's store, or only this object? A store that takes the
            // probe pauses nobody: the item goes back, and a write that keeps
            // failing ends it at the delivery limit instead of flapping the fleet.
            if self.results.probe_write(&self.consumer).await.is_err() {
                return Err(HandBack::Fault(self.writes_refused(&e)));
            }
            return Err(HandBack::Item(format!(
                "the blob store {} refused this item's audio ({e}) but takes other writes",
                self.results.location()
            )));
        }
        let result = ItemResult {
            output: path,
            error: None,
            chunks: i32::try_from(chunks).unwrap_or(i32::MAX),
            cached_chunks: i32::try_from(cached).unwrap_or(i32::MAX),
            key_id: spoken.key_id,
            reference_digest: spoken.reference_digest,
            audio_bytes,
            usage: spoken.usage,
        };
        Ok((ItemState::Succeeded, result, characters, all_cached))
    }

    /// Counts a Synthesize call before it is made. While the store does not answer (a
    /// failover) the call waits for it, up to twice the visibility timeout (then it goes
    /// uncounted: by then another replica may reclaim the item anyway); one warning per 10 s.
    async fn count_attempt(&self, job: &str, item: &str) {
        let counted = self
            .while_store_away(job, "calling synthesis", || {
                self.store.count_attempt(job, item)
            })
            .await;
        if let Err(e) = counted {
            tracing::warn!(job, error = %e, "an attempt goes uncounted: the job store failed");
        }
    }

    /// `op` again while the store does not answer (a failover), with back-off from 100 ms to
    /// 2 s, up to twice the visibility timeout (past that another replica may reclaim the
    /// item anyway); one warning per 10 s naming what waits (`waiting`).
    async fn while_store_away<T, Fut>(
        &self,
        job: &str,
        waiting: &str,
        mut op: impl FnMut() -> Fut,
    ) -> crate::store::StoreResult<T>
    where
        Fut: std::future::Future<Output = crate::store::StoreResult<T>>,
    {
        let give_up = tokio::time::Instant::now() + self.options.visibility_timeout * 2;
        let mut delay = Duration::from_millis(100);
        let mut warned: Option<tokio::time::Instant> = None;
        loop {
            match op().await {
                Err(StoreError::Unavailable(e)) if tokio::time::Instant::now() < give_up => {
                    if warned.is_none_or(|at| at.elapsed() >= Duration::from_secs(10)) {
                        tracing::warn!(job, error = %e, "the job store does not answer: {waiting} waits for it");
                        warned = Some(tokio::time::Instant::now());
                    }
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(2));
                }
                other => return other,
            }
        }
    }

    /// Writes the audio, trying the blob store three times.
    async fn write(
        &self,
        path: &str,
        audio: bytes::Bytes,
    ) -> Result<(), crate::results::BlobError> {
        let mut last = None;
        for delay in [0, 200, 1000] {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            match self.results.put(path, audio.clone()).await {
                Ok(()) => return Ok(()),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(crate::results::BlobError::NotFound))
    }

    /// Ends the item in the store, retrying while the store does not answer (module doc);
    /// `false` when it could not (another replica ends it after reclaiming it).
    async fn end(
        &self,
        claimed: &Claimed,
        outcome: ItemState,
        result: &ItemResult,
        characters: i64,
        all_cached: bool,
    ) -> bool {
        let ended = self
            .while_store_away(&claimed.job, "ending an item", || {
                self.store
                    .finish(claimed, outcome, result, characters, all_cached)
            })
            .await;
        match ended {
            Ok(Some(state)) => {
                tracing::info!(job = %claimed.job, state = state.as_str(), "job ended");
                true
            }
            Ok(None) => true,
            Err(e) => {
                tracing::error!(job = %claimed.job, error = %e, "could not end an item: another replica reclaims it after the visibility timeout");
                false
            }
        }
    }
}

fn failed(error: ItemError) -> (ItemState, ItemResult, i64, bool) {
    let result = ItemResult {
        error: Some(error),
        ..Default::default()
    };
    (ItemState::Failed, result, 0, false)
}
