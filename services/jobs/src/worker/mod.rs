//! The workers of one replica: a dispatcher that takes items from the active jobs' streams,
//! at most `--concurrency` in flight, and runs each ([`item`]) against synthesis.
//!
//! Fairness: the dispatcher goes round the tenants with active jobs one item at a time, and
//! inside a tenant round its jobs, so two tenants' jobs get the same share of this replica's
//! slots whatever their sizes; synthesis's tenant rounds then share the pool's batch capacity
//! the same way across replicas.
//!
//! Durability: an item is held through the stream's pending list. A held item's idle time is
//! reset every third of `--visibility-timeout` ([`Workers::heartbeat`]); an item whose worker
//! went silent longer (the replica died or hangs) is reclaimed by any replica's dispatcher
//! (`XAUTOCLAIM`, [`crate::store::JobStore::claim`]), which looks at each active job every half
//! visibility timeout. A replica that stops drains: it takes no new item and finishes the ones
//! it holds (what it cannot finish is reclaimed by the others).
//!
//! A replica that cannot run items fails none: when synthesis refuses its worker token, the
//! blob store its writes, or synthesis cannot be reached at all (checked at start and on every
//! such answer), it takes and reclaims nothing, hands back what it held ([`Workers::fault`])
//! and checks again every [`FAULT_RECHECK`] until the fault clears. A refused token or store
//! is this replica's own misconfiguration and turns its health NOT_SERVING; an unreachable
//! synthesis does not (in an outage every replica pauses, and jobs can still be submitted).

mod budget;
mod fault;
mod item;
mod parts;

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use tokio::{sync::Semaphore, time::Instant};
use tokio_util::sync::CancellationToken;

pub use fault::{FAULT_RECHECK, Fault};

use crate::{
    results::Results,
    store::{JobStore, Taken},
    synth::{JobParams, Synthesizer},
};

/// How the workers behave (`voxpool-jobs` flags).
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// Items in flight on this replica.
    pub concurrency: usize,
    /// Silence after which another replica reclaims a held item.
    pub visibility_timeout: Duration,
    /// Synthesize calls per item and delivery before it fails (transient errors only).
    pub max_attempts: u32,
    /// Deliveries (workers taking the item) before it fails.
    pub max_deliveries: u32,
    /// Longest pause of a tenant's items on a spent budget (they are tried again at the
    /// budget's reset or after this, whichever comes first).
    pub budget_recheck: Duration,
    /// Time between looks at a job with nothing new.
    pub poll: Duration,
}

/// One replica's workers (module doc).
pub struct Workers {
    store: JobStore,
    synth: Synthesizer,
    results: Results,
    consumer: String,
    options: WorkerOptions,
    /// Stream entries this replica holds, per job (what the heartbeat renews).
    held: Mutex<HashMap<String, HashSet<String>>>,
    wake: tokio::sync::Notify,
    /// Set by [`Workers::wake`]: the dispatcher refreshes its round at its next turn even
    /// while busy (the `Notify` only reaches it when it sleeps).
    woken: std::sync::atomic::AtomicBool,
    /// Why this replica cannot run items now (module doc); `None` while it can.
    fault: Mutex<Option<Fault>>,
    /// Tenants whose items wait for a spent budget, until when ([`budget`]).
    paused: Mutex<HashMap<String, Instant>>,
}

/// A job in the dispatcher's round.
struct Slot {
    params: JobParams,
    /// Nothing new before then.
    idle_until: Instant,
    /// Next look for silent holders' items.
    next_claim: Instant,
}

/// The round: tenants in turn, each with its jobs in turn.
#[derive(Default)]
struct Round {
    tenants: Vec<(String, VecDeque<String>)>,
    slots: HashMap<String, Slot>,
    cursor: usize,
    /// Active jobs whose results go to another blob store: left to the replicas on it.
    foreign: HashSet<String>,
}

impl Round {
    fn remove(&mut self, job: &str) {
        self.slots.remove(job);
        for (_, jobs) in &mut self.tenants {
            jobs.retain(|j| j != job);
        }
        self.tenants.retain(|(_, jobs)| !jobs.is_empty());
    }

    fn add(&mut self, job: String, params: JobParams) {
        match self.tenants.iter_mut().find(|(t, _)| *t == params.tenant) {
            Some((_, jobs)) => jobs.push_back(job.clone()),
            None => self
                .tenants
                .push((params.tenant.clone(), VecDeque::from([job.clone()]))),
        }
        let now = Instant::now();
        self.slots.insert(
            job,
            Slot {
                params,
                idle_until: now,
                next_claim: now,
            },
        );
    }

    /// The next job in turn: the next tenant's next job.
    fn next(&mut self) -> Option<String> {
        if self.tenants.is_empty() {
            return None;
        }
        self.cursor = (self.cursor + 1) % self.tenants.len();
        let jobs = &mut self.tenants[self.cursor].1;
        jobs.rotate_left(1);
        jobs.back().cloned()
    }
}

impl Workers {
    /// Workers that take items as `consumer` (unique per process).
    pub fn new(
        store: JobStore,
        synth: Synthesizer,
        results: Results,
        consumer: String,
        options: WorkerOptions,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            synth,
            results,
            consumer,
            options,
            held: Mutex::new(HashMap::new()),
            wake: tokio::sync::Notify::new(),
            woken: std::sync::atomic::AtomicBool::new(false),
            fault: Mutex::new(None),
            paused: Mutex::new(HashMap::new()),
        })
    }

    /// A job was created here: look at the queue now instead of at the next refresh.
    pub fn wake(&self) {
        self.woken.store(true, std::sync::atomic::Ordering::Release);
        self.wake.notify_one();
    }

    /// Runs until `shutdown`, then waits (at most `drain`) for the items in flight.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken, drain: Duration) {
        let heartbeat = tokio::spawn(self.clone().heartbeat());
        let permits = Arc::new(Semaphore::new(self.options.concurrency));
        let mut round = Round::default();
        let mut refreshed: Option<Instant> = None;
        // When the store's failure was last logged (at most one line per 10 s while it fails).
        let mut failing: Option<Instant> = None;
        self.check().await;
        if self.fault().is_none() {
            tracing::info!(
                "workers ready: synthesis answers and accepts the worker token, the blob store takes writes"
            );
        }
        loop {
            // Paused: nothing is taken until a re-check finds the fault cleared.
            if self.fault().is_some() {
                tokio::select! {
                    () = tokio::time::sleep(FAULT_RECHECK) => {}
                    () = shutdown.cancelled() => break,
                }
                self.check().await;
                continue;
            }
            if self.woken.swap(false, std::sync::atomic::Ordering::AcqRel) {
                refreshed = None;
            }
            if refreshed.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
                match self.refresh(&mut round).await {
                    Ok(()) => refreshed = Some(Instant::now()),
                    Err(e) => self.store_trouble(&mut failing, &e),
                }
            }
            let permit = tokio::select! {
                p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
                () = shutdown.cancelled() => break,
            };
            match self.next_item(&mut round).await {
                Ok(Some((claimed, params))) => {
                    failing = None;
                    let me = self.clone();
                    tokio::spawn(async move {
                        me.process(claimed, params).await;
                        drop(permit);
                    });
                    continue;
                }
                Ok(None) => {}
                Err(e) => self.store_trouble(&mut failing, &e),
            }
            drop(permit);
            tokio::select! {
                () = tokio::time::sleep(self.options.poll) => {}
                () = self.wake.notified() => refreshed = None,
                () = shutdown.cancelled() => break,
            }
        }
        let all = u32::try_from(self.options.concurrency).unwrap_or(u32::MAX);
        if tokio::time::timeout(drain, permits.acquire_many(all))
            .await
            .is_err()
        {
            tracing::warn!(
                "items still in flight at shutdown: other replicas reclaim them after the visibility timeout"
            );
        }
        heartbeat.abort();
    }

    fn store_trouble(&self, failing: &mut Option<Instant>, e: &crate::store::StoreError) {
        if failing.is_none_or(|at| at.elapsed() >= Duration::from_secs(10)) {
            tracing::error!(error = %e, "workers: the job store fails; retrying");
            *failing = Some(Instant::now());
        }
    }

    /// Brings the round in line with the fleet's active jobs.
    async fn refresh(&self, round: &mut Round) -> crate::store::StoreResult<()> {
        let active: HashSet<String> = self.store.active().await?.into_iter().collect();
        let gone: Vec<String> = round
            .slots
            .keys()
            .filter(|j| !active.contains(*j))
            .cloned()
            .collect();
        for job in gone {
            round.remove(&job);
        }
        round.foreign.retain(|j| active.contains(j));
        self.refresh_pauses(round.tenants.iter().map(|(t, _)| t.as_str()))
            .await?;
        for job in active {
            if round.slots.contains_key(&job) || round.foreign.contains(&job) {
                continue;
            }
            match self.store.record(&job).await? {
                Some(r)
                    if !r.spec.blob_store.is_empty()
                        && r.spec.blob_store != self.results.location() =>
                {
                    tracing::warn!(
                        job,
                        job_blob_store = %r.spec.blob_store,
                        blob_store = %self.results.location(),
                        "a job whose results go to another blob store: left to the replicas on it (give every replica the same --blob-store)"
                    );
                    round.foreign.insert(job);
                }
                Some(r) => round.add(
                    job.clone(),
                    JobParams {
                        job,
                        format: r.spec.format,
                        sample_rate_hz: r.spec.sample_rate_hz,
                        priority: r.spec.priority,
                        tenant: r.spec.tenant,
                    },
                ),
                None => self.store.deactivate(&job).await?,
            }
        }
        Ok(())
    }

    /// The next item to run: each job in turn, reclaiming silent holders' items first.
    async fn next_item(
        &self,
        round: &mut Round,
    ) -> crate::store::StoreResult<Option<(crate::store::Claimed, JobParams)>> {
        let tries = round.slots.len();
        for _ in 0..tries {
            let Some(job) = round.next() else {
                return Ok(None);
            };
            let now = Instant::now();
            let Some(slot) = round.slots.get_mut(&job) else {
                continue;
            };
            if self.tenant_paused(&slot.params.tenant) {
                // Its items wait for a budget; once the pause is over, its items sent back
                // to wait are reclaimed at the first look.
                slot.next_claim = now;
                continue;
            }
            if slot.next_claim <= now {
                slot.next_claim = now + self.options.visibility_timeout / 2;
                let failed = item::delivery_limit(self.options.max_deliveries);
                if let Some(c) = self
                    .store
                    .claim(
                        &job,
                        &self.consumer,
                        self.options.visibility_timeout,
                        self.options.max_deliveries,
                        &failed,
                    )
                    .await?
                {
                    // A dead replica leaves up to its concurrency of items: look again on this
                    // job's next turn instead of half a visibility timeout later.
                    slot.next_claim = now;
                    crate::metrics::reclaimed();
                    tracing::info!(
                        job,
                        deliveries = c.deliveries,
                        "reclaimed an item whose worker went silent"
                    );
                    return Ok(Some((c, slot.params.clone())));
                }
            }
            if slot.idle_until > now {
                continue;
            }
            match self.store.take(&job, &self.consumer).await? {
                Taken::Item(c) => return Ok(Some((c, slot.params.clone()))),
                Taken::Empty => slot.idle_until = now + self.options.poll,
                Taken::Closed { running } => {
                    slot.idle_until = now + self.options.poll;
                    if running == 0 {
                        // Ended (its finalizing may not be queued if the replica that ended
                        // it died at that moment): queue it; finalizing takes it out.
                        self.store.ended(&job).await?;
                    }
                }
                Taken::Gone => {
                    self.store.deactivate(&job).await?;
                    round.remove(&job);
                }
            }
        }
        Ok(None)
    }

    /// Renews the idle time of every held entry, every third of the visibility timeout.
    /// Runs until aborted (also while draining: the items still in flight stay held).
    async fn heartbeat(self: Arc<Self>) {
        let every = self.options.visibility_timeout / 3;
        loop {
            tokio::time::sleep(every).await;
            let held: Vec<(String, Vec<String>)> = self
                .held
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .map(|(job, entries)| (job.clone(), entries.iter().cloned().collect()))
                .collect();
            for (job, entries) in held {
                if let Err(e) = self.store.heartbeat(&job, &self.consumer, &entries).await {
                    tracing::warn!(job, error = %e, "heartbeat failed: held items may be reclaimed by another replica");
                }
            }
        }
    }

    fn hold(&self, job: &str, entry: &str, held: bool) {
        let mut map = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held {
            map.entry(job.to_owned())
                .or_default()
                .insert(entry.to_owned());
        } else if let Some(entries) = map.get_mut(job) {
            entries.remove(entry);
            if entries.is_empty() {
                map.remove(job);
            }
        }
    }
}
