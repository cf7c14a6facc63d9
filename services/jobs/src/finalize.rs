//! After a job ends, on whichever replica leases it first: the summary object
//! (`jobs/{job}/summary.json`: the Job and every item), then the webhook (`webhook`), then the
//! job leaves the workers' round and waits in the expiry queue; past its retention its blobs
//! are deleted (its Redis keys expire by themselves).
//!
//! Invariant: each step is recorded in the job's record once done (`summary`, `webhook`
//! fields), so a replica that dies mid-way leaves the rest to the next one, and a done step is
//! not redone (a webhook is at least once: a replica dying between the receiver's 2xx and the
//! record sends it again, with the same `X-Voxpool-Delivery`). A replica without a webhook
//! secret finalizes the job but queues its webhook (`P:webhooks`) for the replicas that have
//! the secret: a fleet mid-way through adding the secret loses no delivery.

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use tokio_util::sync::CancellationToken;
use voxpool_domain::secret::Secret;

use crate::{convert, metrics, results::Results, store::JobStore, webhook};

/// How long one replica holds a due entry before another may take it.
const LEASE: Duration = Duration::from_secs(60);

/// The finalizer of one replica.
pub struct Finalizer {
    store: JobStore,
    results: Results,
    secret: Option<Secret>,
    http: reqwest::Client,
}

impl Finalizer {
    /// A finalizer signing webhooks with `secret`.
    pub fn new(store: JobStore, results: Results, secret: Option<Secret>) -> Result<Self, String> {
        voxpool_runtime::limits::install_crypto_provider();
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("webhook client: {e}"))?;
        Ok(Self {
            store,
            results,
            secret,
            http,
        })
    }

    /// Polls the queues every `every` until `shutdown`.
    pub async fn run(self: Arc<Self>, every: Duration, shutdown: CancellationToken) {
        let mut last_expiry = tokio::time::Instant::now() - Duration::from_secs(3600);
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = shutdown.cancelled() => return,
            }
            // Only a replica that can sign takes the webhooks others left.
            let due = match self.store.due_finalize(LEASE, 8).await {
                Ok(mut due) if self.secret.is_some() => {
                    match self.store.due_webhooks(LEASE, 8).await {
                        Ok(webhooks) => due.extend(webhooks),
                        Err(e) => tracing::debug!(error = %e, "webhook queue unavailable"),
                    }
                    Ok(due)
                }
                other => other,
            };
            match due {
                Ok(due) => {
                    for job in due {
                        if let Err(e) = self.finalize(&job).await {
                            tracing::warn!(job, error = %e, "finalizing: will try again");
                            let _ = self
                                .store
                                .retry_finalize(&job, Duration::from_secs(2))
                                .await;
                        }
                    }
                }
                Err(e) => tracing::debug!(error = %e, "finalize queue unavailable"),
            }
            if last_expiry.elapsed() >= Duration::from_secs(5) {
                last_expiry = tokio::time::Instant::now();
                self.expire().await;
            }
        }
    }

    async fn finalize(&self, job: &str) -> Result<(), String> {
        let Some(record) = self.store.record(job).await.map_err(|e| e.to_string())? else {
            // Deleted or expired meanwhile: only its blobs may be left.
            let now = self.store.now_ms().await.map_err(|e| e.to_string())?;
            return self
                .store
                .finalized(job, now, "")
                .await
                .map_err(|e| e.to_string());
        };
        if !record.has_ended() {
            return Err("not ended yet".into());
        }
        let pb = convert::job(&record, &self.results);
        if self
            .store
            .field(job, "summary")
            .await
            .map_err(|e| e.to_string())?
            != "1"
        {
            self.write_summary(job, &pb).await?;
            self.store
                .mark(job, "summary", "1")
                .await
                .map_err(|e| e.to_string())?;
            metrics::finalized(record.state.as_str());
        }
        if !record.webhook_url.is_empty() {
            let done = self
                .store
                .field(job, "webhook")
                .await
                .map_err(|e| e.to_string())?;
            if done.is_empty() {
                let Some(secret) = &self.secret else {
                    // The replica that took the job had the secret (CreateJob refuses a
                    // webhook without it): the job is finalized here, its webhook queued for
                    // the replicas that can sign it.
                    self.finalized(job, &record).await?;
                    self.store
                        .queue_webhook(job)
                        .await
                        .map_err(|e| e.to_string())?;
                    tracing::info!(
                        job,
                        "webhook left to a replica with the webhook secret (this one has none)"
                    );
                    return Ok(());
                };
                if !self.send_webhook(secret, &record, &pb).await? {
                    return Ok(());
                }
            }
        }
        self.finalized(job, &record).await
    }

    /// The job leaves the finalize queues for the expiry queue (its request id with it).
    async fn finalized(&self, job: &str, record: &crate::model::JobRecord) -> Result<(), String> {
        let request_key = self
            .store
            .field(job, "request_key")
            .await
            .map_err(|e| e.to_string())?;
        self.store
            .finalized(job, record.expire_ms.unwrap_or_default(), &request_key)
            .await
            .map_err(|e| e.to_string())
    }

    /// Delivers the webhook once, signed with `secret`; `Ok(false)` when it is to be tried
    /// again later (scheduled).
    async fn send_webhook(
        &self,
        secret: &Secret,
        record: &crate::model::JobRecord,
        pb: &voxpool_proto::jobs::v1::Job,
    ) -> Result<bool, String> {
        let job = &record.id;
        let now = self.store.now_ms().await.map_err(|e| e.to_string())?;
        let since_end =
            Duration::from_millis(u64::try_from(now - record.end_ms.unwrap_or(now)).unwrap_or(0));
        let state = convert::job_json(pb)["state"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let delivery = format!("{}/{state}", record.name());
        let body = serde_json::to_vec(&convert::job_json(pb)).map_err(|e| e.to_string())?;
        let unix = u64::try_from(now / 1000).unwrap_or(0);
        match webhook::deliver(
            &self.http,
            secret,
            &record.webhook_url,
            &delivery,
            unix,
            body,
        )
        .await
        {
            Ok(()) => {
                self.store
                    .mark(job, "webhook", "delivered")
                    .await
                    .map_err(|e| e.to_string())?;
                metrics::webhook("delivered");
                tracing::info!(job, state, "webhook delivered");
                Ok(true)
            }
            Err(e) => {
                let tries = self
                    .store
                    .field(job, "webhook_tries")
                    .await
                    .map_err(|e| e.to_string())?;
                let tries: u32 = tries.parse().unwrap_or(0) + 1;
                self.store
                    .mark(job, "webhook_tries", &tries.to_string())
                    .await
                    .map_err(|e| e.to_string())?;
                if since_end > webhook::GIVE_UP_AFTER {
                    tracing::error!(job, tries, error = %e, "webhook abandoned: no 2xx within 24 hours");
                    metrics::webhook("abandoned");
                    self.store
                        .mark(job, "webhook", "abandoned")
                        .await
                        .map_err(|e| e.to_string())?;
                    return Ok(true);
                }
                let delay = Duration::from_millis(500u64.saturating_mul(1 << tries.min(10)))
                    .min(Duration::from_secs(300));
                metrics::webhook("retry");
                tracing::warn!(job, tries, retry_in_ms = delay.as_millis() as u64, error = %e, "webhook failed; retrying");
                self.store
                    .retry_finalize(job, delay)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(false)
            }
        }
    }

    async fn write_summary(
        &self,
        job: &str,
        pb: &voxpool_proto::jobs::v1::Job,
    ) -> Result<(), String> {
        let mut items = Vec::new();
        let mut offset = 0;
        loop {
            let (rows, next) = self
                .store
                .list_items(job, offset, 1000, None)
                .await
                .map_err(|e| e.to_string())?;
            items.extend(
                rows.iter()
                    .map(|r| convert::item_json(&convert::item(r, &self.results))),
            );
            match next {
                Some(n) => offset = n,
                None => break,
            }
        }
        let summary = serde_json::json!({ "job": convert::job_json(pb), "items": items });
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
