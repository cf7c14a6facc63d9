//! After a job ends, on whichever replica leases it first: the summary object
//! (`jobs/{job}/summary.json`: the Job and every item); then its webhook, if it has one, is
//! queued for [`crate::deliveries`] and the job leaves the workers' round for the expiry
//! queue; past its retention its blobs are deleted (its Redis keys expire by themselves).
//!
//! Invariant: finalizing never waits on a webhook receiver (deliveries run apart, see
//! [`crate::deliveries`]); the summary is recorded once written (`summary` field) and the
//! webhook is queued before the job leaves the finalize queue, so a replica that dies mid-way
//! leaves the rest to the next one and no webhook is lost.
//!
//! A job's objects live in the blob store it was created on (its record's `blob_store`): a
//! replica on another store neither writes its summary nor deletes its results, as its workers
//! leave its items alone; it hands the job back at once for the replicas on that store.

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use crate::{convert, metrics, model::JobRecord, results::Results, store::JobStore};

/// How long one replica holds a due entry before another may take it.
const LEASE: Duration = Duration::from_secs(60);
/// Most jobs leased at once.
const BATCH: usize = 8;
/// A job of another blob store is due again at once, for a replica on that store: its next
/// poll (within `every`) comes before this replica's own. (Due again one poll period later, it
/// fell due just as this replica polled again, which took it back nearly every time.)
const OTHER_STORE: Duration = Duration::ZERO;

/// What finalizing one job came to.
enum Finalized {
    /// Summarized (or gone), out of the finalize queue.
    Done,
    /// Its results are in another blob store (named): left to the replicas on it.
    OtherStore(String),
}

/// The finalizer of one replica.
pub struct Finalizer {
    store: JobStore,
    results: Results,
    /// Jobs of another blob store already warned about (once each).
    warned: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl Finalizer {
    /// A finalizer writing summaries to `results`.
    pub fn new(store: JobStore, results: Results) -> Self {
        Self {
            store,
            results,
            warned: std::sync::Mutex::default(),
        }
    }

    /// Polls the queues every `every` until `shutdown`.
    pub async fn run(self: Arc<Self>, every: Duration, shutdown: CancellationToken) {
        let mut last_expiry = tokio::time::Instant::now() - Duration::from_secs(3600);
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = shutdown.cancelled() => return,
            }
            // A full batch: more may be due (many jobs ended at once), so no sleep before the next.
            while self.finalize_due().await == BATCH && !shutdown.is_cancelled() {}
            if last_expiry.elapsed() >= Duration::from_secs(5) {
                last_expiry = tokio::time::Instant::now();
                self.expire().await;
            }
        }
    }

    /// Finalizes the due jobs of one lease; how many it leased.
    async fn finalize_due(&self) -> usize {
        let due = match self.store.due_finalize(LEASE, BATCH).await {
            Ok(due) => due,
            Err(e) => {
                tracing::debug!(error = %e, "finalize queue unavailable");
                return 0;
            }
        };
        for job in &due {
            match self.finalize(job).await {
                Ok(Finalized::Done) => {}
                Ok(Finalized::OtherStore(theirs)) => {
                    if self.warned.lock().is_ok_and(|mut w| w.insert(job.clone())) {
                        tracing::warn!(
                            job,
                            job_blob_store = %theirs,
                            blob_store = %self.results.location(),
                            "a job whose results go to another blob store ended: its summary is left to the replicas on it (give every replica the same --blob-store)"
                        );
                    }
                    let _ = self.store.retry_finalize(job, OTHER_STORE).await;
                }
                Err(e) => {
                    tracing::warn!(job, error = %e, "finalizing: will try again");
                    let _ = self.store.retry_finalize(job, Duration::from_secs(2)).await;
                }
            }
        }
        due.len()
    }

    async fn finalize(&self, job: &str) -> Result<Finalized, String> {
        let Some(record) = self.store.record(job).await.map_err(|e| e.to_string())? else {
            // Deleted or expired meanwhile: only its blobs may be left.
            let now = self.store.now_ms().await.map_err(|e| e.to_string())?;
            return self
                .store
                .finalized(job, now, "")
                .await
                .map(|()| Finalized::Done)
                .map_err(|e| e.to_string());
        };
        if !record.has_ended() {
            return Err("not ended yet".into());
        }
        if self.other_store(&record.spec.blob_store) {
            return Ok(Finalized::OtherStore(record.spec.blob_store));
        }
        if self
            .store
            .field(job, "summary")
            .await
            .map_err(|e| e.to_string())?
            != "1"
        {
            self.write_summary(&record).await?;
            self.store
                .mark(job, "summary", "1")
                .await
                .map_err(|e| e.to_string())?;
            metrics::finalized(record.state.as_str());
        }
        // Queued before the job leaves this queue: a replica dying in between loses nothing.
        if !record.spec.webhook_url.is_empty()
            && self
                .store
                .field(job, "webhook")
                .await
                .map_err(|e| e.to_string())?
                .is_empty()
        {
            self.store
                .queue_webhook(job)
                .await
                .map_err(|e| e.to_string())?;
        }
        let request_key = self
            .store
            .field(job, "request_key")
            .await
            .map_err(|e| e.to_string())?;
        self.store
            .finalized(job, record.expire_ms.unwrap_or_default(), &request_key)
            .await
            .map(|()| Finalized::Done)
            .map_err(|e| e.to_string())
    }

    /// Whether `blob_store` (a job record's) is another store than this replica's (an empty
    /// one, from a record written before jobs named their store, is anyone's).
    fn other_store(&self, blob_store: &str) -> bool {
        !blob_store.is_empty() && blob_store != self.results.location()
    }

    /// Writes `record`'s summary: the Job and every item, as the API's JSON.
    async fn write_summary(&self, record: &JobRecord) -> Result<(), String> {
        let job = record.id.as_str();
        let mut items = Vec::new();
        let mut offset = 0;
        loop {
            let (rows, next) = self
                .store
                .list_items(job, offset, 1000, None)
                .await
                .map_err(|e| e.to_string())?;
            items.extend(rows.iter().map(|r| convert::item_value(r, &self.results)));
            match next {
                Some(n) => offset = n,
                None => break,
            }
        }
        let summary = serde_json::json!({
            "job": convert::job_value(record, &self.results),
            "items": items,
        });
        let bytes = serde_json::to_vec_pretty(&summary).map_err(|e| e.to_string())?;
        self.results
            .put(&format!("{job}/summary.json"), Bytes::from(bytes))
            .await
            .map_err(|e| e.to_string())
    }

    async fn expire(&self) {
        let due = match self.store.due_expired(Duration::from_secs(300), 16).await {
            Ok(due) => due,
            Err(e) => {
                tracing::debug!(error = %e, "expiry queue unavailable");
                return;
            }
        };
        for job in due {
            // A job of another store whose record is still there: its results are not in this
            // replica's store; the lease runs out and a replica on its store takes it.
            if let Ok(Some(record)) = self.store.record(&job).await
                && self.other_store(&record.spec.blob_store)
            {
                continue;
            }
            match self.results.delete_job(&job).await {
                Ok(n) => {
                    tracing::info!(job, objects = n, "job past its retention: results deleted");
                    metrics::expired();
                    if let Err(e) = self.store.expired(&job).await {
                        tracing::warn!(job, error = %e, "expiry: will try again");
                    }
                }
                Err(e) => {
                    tracing::warn!(job, error = %e, "expiry: results not deleted; will try again");
                }
            }
        }
    }
}
