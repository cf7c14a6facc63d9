//! Webhook deliveries, apart from finalizing: a replica holding the webhook secret leases due
//! entries of the webhook queue (`P:webhooks`) and delivers them concurrently, at most
//! [`DeliveryOptions::concurrency`] at once and [`DeliveryOptions::per_destination`] to one
//! destination (scheme, host and port: what `webhook_host` shows), so a receiver that hangs
//! holds only its own deliveries, never another job's webhook nor any summary.
//!
//! Each try is one POST ([`webhook::Sender::deliver`], at most [`webhook::TIMEOUT`]); a failed one is
//! tried again after 0.5 s, doubling up to 5 minutes ([`retry_delay`]), until a 2xx or
//! [`webhook::GIVE_UP_AFTER`] after the job ended. An entry whose destination has all its
//! slots taken waits [`CROWDED_WAIT`] without spending a try.
//!
//! Invariant (at least once): the job's `webhook` field is set and its entry removed only after
//! a 2xx (or when abandoned); a replica that dies mid-delivery leaves the entry leased, and
//! another replica delivers it once the lease ends, with the same `X-Voxpool-Delivery`.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use voxpool_domain::secret::Secret;

use crate::{convert, metrics, results::Results, store::JobStore, webhook};

/// How long one replica holds a due entry before another may take it (well over a try).
const LEASE: Duration = Duration::from_secs(60);
/// How long an entry whose destination is at its bound waits before it is looked at again.
pub const CROWDED_WAIT: Duration = Duration::from_secs(1);
/// Most entries leased by one look at the queue.
const BATCH: usize = 64;

/// The bounds and pace of one replica's deliveries.
#[derive(Clone, Copy, Debug)]
pub struct DeliveryOptions {
    /// Deliveries in flight on this replica.
    pub concurrency: usize,
    /// Deliveries in flight on this replica to one destination.
    pub per_destination: usize,
    /// How often the queue is looked at.
    pub poll: Duration,
}

/// The delay before try `tries + 1` of a webhook that failed `tries` times (from 1): 0.5 s,
/// doubling, at most 5 minutes.
pub fn retry_delay(tries: u32) -> Duration {
    let doublings = tries.saturating_sub(1).min(10);
    Duration::from_millis(500u64 << doublings).min(Duration::from_secs(300))
}

/// The deliverer of one replica (module doc).
pub struct Deliveries {
    store: JobStore,
    results: Results,
    secret: Secret,
    sender: webhook::Sender,
    options: DeliveryOptions,
    slots: Arc<Semaphore>,
    /// Deliveries in flight per destination.
    destinations: Arc<Mutex<HashMap<String, usize>>>,
}

/// One delivery's hold on its destination's slot; released when dropped.
struct DestinationSlot {
    destinations: Arc<Mutex<HashMap<String, usize>>>,
    key: String,
}

impl Drop for DestinationSlot {
    fn drop(&mut self) {
        let mut held = self
            .destinations
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = held.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.key);
            }
        }
    }
}

impl Deliveries {
    /// A deliverer signing with `secret`, POSTing through `sender` (which refuses the
    /// addresses webhooks may not reach).
    pub fn new(
        store: JobStore,
        results: Results,
        secret: Secret,
        sender: webhook::Sender,
        options: DeliveryOptions,
    ) -> Self {
        Self {
            store,
            results,
            secret,
            sender,
            slots: Arc::new(Semaphore::new(options.concurrency.max(1))),
            options,
            destinations: Arc::default(),
        }
    }

    /// Looks at the queue every `poll` until `shutdown`. Deliveries in flight then are
    /// dropped: their entries stay leased and another replica delivers them.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.options.poll) => {}
                () = shutdown.cancelled() => return,
            }
            self.look().await;
        }
    }

    /// Leases as many due entries as there are free slots and starts their deliveries.
    async fn look(self: &Arc<Self>) {
        loop {
            let free = self.slots.available_permits().min(BATCH);
            if free == 0 {
                return;
            }
            let due = match self.store.due_webhooks(LEASE, free).await {
                Ok(due) => due,
                Err(e) => {
                    tracing::debug!(error = %e, "webhook queue unavailable");
                    return;
                }
            };
            let leased = due.len();
            for job in due {
                // Only this loop takes slots: as many are free as were counted.
                let Ok(slot) = self.slots.clone().try_acquire_owned() else {
                    let _ = self.store.retry_webhook(&job, Duration::ZERO).await;
                    continue;
                };
                let this = self.clone();
                tokio::spawn(async move {
                    if let Err(e) = this.deliver(&job).await {
                        tracing::warn!(job, error = %e, "webhook: will try again");
                        let _ = this.store.retry_webhook(&job, Duration::from_secs(2)).await;
                    }
                    drop(slot);
                });
            }
            if leased < free {
                return;
            }
        }
    }

    /// A slot of `destination`, unless it has [`DeliveryOptions::per_destination`] in flight.
    fn destination_slot(&self, destination: &str) -> Option<DestinationSlot> {
        let mut held = self
            .destinations
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let n = held.entry(destination.to_owned()).or_insert(0);
        if *n >= self.options.per_destination.max(1) {
            return None;
        }
        *n += 1;
        Some(DestinationSlot {
            destinations: self.destinations.clone(),
            key: destination.to_owned(),
        })
    }

    /// One try of job `job`'s webhook, and its outcome recorded. Errors: the store's.
    async fn deliver(&self, job: &str) -> Result<(), String> {
        let store_err = |e: crate::store::StoreError| e.to_string();
        let record = match self.store.record(job).await.map_err(store_err)? {
            Some(r) if !r.spec.webhook_url.is_empty() => r,
            // Deleted, expired, or no webhook: nothing to deliver.
            _ => return self.store.webhook_done(job).await.map_err(store_err),
        };
        if !self
            .store
            .field(job, "webhook")
            .await
            .map_err(store_err)?
            .is_empty()
        {
            // Delivered or abandoned by an earlier try whose entry outlived it.
            return self.store.webhook_done(job).await.map_err(store_err);
        }
        let destination = webhook::host_of(&record.spec.webhook_url);
        let Some(_held) = self.destination_slot(&destination) else {
            return self
                .store
                .retry_webhook(job, CROWDED_WAIT)
                .await
                .map_err(store_err);
        };
        let json = convert::job_value(&record, &self.results);
        let state = json["state"].as_str().unwrap_or_default().to_owned();
        let delivery = format!("{}/{state}", record.name());
        let body = serde_json::to_vec(&json).map_err(|e| e.to_string())?;
        let now = self.store.now_ms().await.map_err(store_err)?;
        let unix = u64::try_from(now / 1000).unwrap_or(0);
        let sent = self
            .sender
            .deliver(
                &self.secret,
                &record.spec.webhook_url,
                &delivery,
                unix,
                body,
            )
            .await;
        let Err(why) = sent else {
            self.store
                .mark(job, "webhook", "delivered")
                .await
                .map_err(store_err)?;
            self.store.webhook_done(job).await.map_err(store_err)?;
            metrics::webhook("delivered");
            tracing::info!(job, state, "webhook delivered");
            return Ok(());
        };
        let tries = self
            .store
            .count(job, "webhook_tries")
            .await
            .map_err(store_err)?;
        let tries = u32::try_from(tries).unwrap_or(u32::MAX);
        let now = self.store.now_ms().await.map_err(store_err)?;
        let since_end =
            Duration::from_millis(u64::try_from(now - record.end_ms.unwrap_or(now)).unwrap_or(0));
        if since_end > webhook::GIVE_UP_AFTER {
            tracing::error!(job, tries, error = %why, "webhook abandoned: no 2xx within 24 hours");
            metrics::webhook("abandoned");
            self.store
                .mark(job, "webhook", "abandoned")
                .await
                .map_err(store_err)?;
            return self.store.webhook_done(job).await.map_err(store_err);
        }
        let delay = retry_delay(tries);
        metrics::webhook("retry");
        tracing::warn!(job, tries, retry_in_ms = delay.as_millis() as u64, error = %why, "webhook failed; retrying");
        self.store
            .retry_webhook(job, delay)
            .await
            .map_err(store_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_come_after_half_a_second_doubling_to_five_minutes() {
        let delays: Vec<u64> = (1..=12)
            .map(|t| retry_delay(t).as_millis() as u64)
            .collect();
        assert_eq!(
            delays,
            [
                500, 1000, 2000, 4000, 8000, 16_000, 32_000, 64_000, 128_000, 256_000, 300_000,
                300_000
            ]
        );
        assert_eq!(retry_delay(u32::MAX), Duration::from_secs(300));
    }
}
