//! The jobs domain, on domain types only (no protobuf here): [`Jobs`] is the one entry every
//! RPC goes through, over one [`JobStore`] and this replica's [`Results`].
//!
//! Where each rule lives:
//! - Here: create (a webhook needs the secret; a request id names one job, or is refused when
//!   it named another request's), read and list, cancel (nothing to cancel once a job
//!   succeeded or failed), delete (only an ended, summarized job; waits briefly for a summary
//!   about to be written), and reading an item's audio (only a succeeded item's, only from
//!   the job's own blob store).
//! - Decoding and checking requests, tenant bindings and paging: the edge (`crate::service`).
//! - An item's run and its end: [`crate::worker`]; a job's summary and expiry:
//!   [`crate::finalize`].
//!
//! Guards the API side of invariant 13 of docs/ARCHITECTURE.md: nothing here keeps a job in
//! this replica's memory; every answer is read back from the store.

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use futures::stream::BoxStream;

use crate::{
    error::JobsError,
    model::{ItemResult, ItemState, JobRecord, JobSpec, Priority, new_job_id},
    results::{BlobError, Results},
    store::{Created, Cursor, ItemRow, JobStore, NotDeletable},
    worker::Workers,
};

/// How long DeleteJob waits for a job that has just ended to be summarized.
const SUMMARY_WAIT: Duration = Duration::from_secs(3);
/// How often DeleteJob looks again while it waits for the summary.
const SUMMARY_POLL: Duration = Duration::from_millis(100);

/// A job to create, as the edge decoded and checked it.
#[derive(Clone, Debug)]
pub struct NewJob {
    /// What the creator chose (its `blob_store` is set here: this replica's).
    pub spec: JobSpec,
    /// Items in submission order: id and encoded spec.
    pub items: Vec<(String, Vec<u8>)>,
}

/// Result of a domain call.
pub type JobsResult<T> = Result<T, JobsError>;

/// The domain over one store and blob store (module doc). Cheap to clone.
#[derive(Clone)]
pub struct Jobs {
    store: JobStore,
    results: Results,
    workers: Arc<Workers>,
    /// Whether this replica can sign webhooks (it has the secret).
    webhook_secret: bool,
}

impl Jobs {
    /// The domain over `store` and `results`; `workers` are woken by each new job; a job with
    /// a webhook is refused unless `webhook_secret`.
    pub fn new(
        store: JobStore,
        results: Results,
        workers: Arc<Workers>,
        webhook_secret: bool,
    ) -> Self {
        Self {
            store,
            results,
            workers,
            webhook_secret,
        }
    }

    /// This replica's blob store (for URIs and messages).
    pub fn results(&self) -> &Results {
        &self.results
    }

    /// Creates `job` (or answers the job its request id named already, created from the same
    /// request) and returns its record.
    pub async fn create(&self, mut job: NewJob) -> JobsResult<JobRecord> {
        if !job.spec.webhook_url.is_empty() && !self.webhook_secret {
            return Err(JobsError::WebhookSecretMissing);
        }
        job.spec.blob_store = self.results.location().to_owned();
        let priority: Priority = job.spec.priority;
        let id = match self
            .store
            .create(&new_job_id(), &job.spec, &job.items)
            .await?
        {
            Created::New(id) => {
                tracing::info!(job = %id, "job created");
                crate::metrics::created(priority.as_str());
                self.workers.wake();
                id
            }
            Created::Existing(id) => id,
            Created::Reused(id) => {
                return Err(JobsError::RequestIdReused {
                    request_id: job.spec.request_id,
                    job: id,
                });
            }
        };
        self.job(&id).await
    }

    /// The record of job `id`.
    pub async fn job(&self, id: &str) -> JobsResult<JobRecord> {
        self.store
            .record(id)
            .await?
            .ok_or_else(|| JobsError::JobNotFound { id: id.to_owned() })
    }

    /// At most `limit` of `tenant`'s jobs, newest first, after `after`; and the next page's
    /// cursor when more follow.
    pub async fn list(
        &self,
        tenant: &str,
        after: Option<&Cursor>,
        limit: usize,
    ) -> JobsResult<(Vec<JobRecord>, Option<Cursor>)> {
        Ok(self.store.list_jobs(tenant, after, limit).await?)
    }

    /// Items `offset..offset + limit` of `job` (`state` only, when given) and the offset to
    /// continue from.
    pub async fn items(
        &self,
        job: &JobRecord,
        offset: usize,
        limit: usize,
        state: Option<ItemState>,
    ) -> JobsResult<(Vec<ItemRow>, Option<usize>)> {
        Ok(self.store.list_items(&job.id, offset, limit, state).await?)
    }

    /// Cancels job `id`: its queued items end CANCELLED at once, its running ones before
    /// their next call. Returns the record after the cancel.
    pub async fn cancel(&self, id: &str) -> JobsResult<JobRecord> {
        match self.store.cancel(id).await? {
            None => return Err(JobsError::JobNotFound { id: id.to_owned() }),
            Some(Err(state)) => {
                return Err(JobsError::JobFinished {
                    id: id.to_owned(),
                    state,
                });
            }
            Some(Ok(_)) => tracing::info!(job = %id, "job cancelled"),
        }
        self.job(id).await
    }

    /// Deletes ended job `id` and its results. A job that has just ended is deletable once its
    /// summary is written (a moment): that is waited for, up to [`SUMMARY_WAIT`], rather than
    /// handing the caller a retry.
    pub async fn delete(&self, id: &str) -> JobsResult<()> {
        let summarized_by = tokio::time::Instant::now() + SUMMARY_WAIT;
        loop {
            match self.store.delete(id).await? {
                Ok(true) => break,
                Ok(false) => return Err(JobsError::JobNotFound { id: id.to_owned() }),
                Err(NotDeletable::Finishing) if tokio::time::Instant::now() < summarized_by => {
                    tokio::time::sleep(SUMMARY_POLL).await;
                }
                Err(NotDeletable::Finishing) => {
                    return Err(JobsError::JobFinishing { id: id.to_owned() });
                }
                Err(NotDeletable::Running(state)) => {
                    return Err(JobsError::JobRunning {
                        id: id.to_owned(),
                        state,
                    });
                }
            }
        }
        let removed = self
            .results
            .delete_job(id)
            .await
            .map_err(JobsError::blob("deleting the job's results"))?;
        tracing::info!(job = %id, objects = removed, "job deleted");
        Ok(())
    }

    /// The audio of item `item` of `job`, as it streams from the blob store: only a succeeded
    /// item's, and only on a replica of the job's blob store.
    pub async fn item_audio(
        &self,
        job: &JobRecord,
        item: &str,
    ) -> JobsResult<BoxStream<'static, Result<Bytes, BlobError>>> {
        let ours = self.results.location();
        if !job.spec.blob_store.is_empty() && job.spec.blob_store != ours {
            return Err(JobsError::OtherBlobStore {
                job: job.id.clone(),
                theirs: job.spec.blob_store.clone(),
                ours: ours.to_owned(),
            });
        }
        let (state, result) =
            self.store
                .item(&job.id, item)
                .await?
                .ok_or_else(|| JobsError::ItemNotFound {
                    job: job.id.clone(),
                    item: item.to_owned(),
                })?;
        if state != ItemState::Succeeded {
            return Err(JobsError::ItemNotSucceeded {
                job: job.id.clone(),
                item: item.to_owned(),
            });
        }
        let output = result.map(|r: ItemResult| r.output).unwrap_or_default();
        self.results.read(&output).await.map_err(|e| match e {
            BlobError::NotFound => JobsError::AudioGone {
                job: job.id.clone(),
                item: item.to_owned(),
            },
            other => JobsError::blob("reading the item's audio")(other),
        })
    }
}
