//! voxpool: a request Acquires a lease from its scheduler replica (waiting, bounded, while the
//! pool is full), calls the vendor with the leased key, then Reports the outcome and releases
//! in the same call. Replicas are real `voxpool-scheduler` gRPC servers, in process, each with
//! its own connection to one shared Redis, so they share state exactly like separate
//! processes do. On a 429 (which leasing should make impossible) the request reports
//! RATE_LIMITED and fails over to another key, excluding the ones tried. An Acquire the
//! scheduler's contract calls transient and UNAVAILABLE (a grant withdrawn for want of replica
//! acknowledgements, the store briefly unreachable) is retried, as a client must, and counted
//! ([`Replica::retried`]); a full pool after the wait (RESOURCE_EXHAUSTED) is a failed
//! request, which is what the simulation measures.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use voxpool_config::Config;
use voxpool_proto::scheduler::v1::{self as pb, pool_scheduler_client::PoolSchedulerClient};
use voxpool_runtime::auth::AdminAuth;
use voxpool_scheduler::server;

use super::RequestOutcome;
use crate::{
    config::SimConfig,
    vendor::{CallOutcome, VendorClient},
};

/// Extra time the gRPC deadline of an Acquire gets over its wait.
const DEADLINE_MARGIN: Duration = Duration::from_secs(2);

/// Most contract retries of one Acquire before the request counts as failed (the store is
/// down, not failing over).
const MAX_ACQUIRE_RETRIES: u32 = 200;

/// Pause between those retries.
const ACQUIRE_RETRY_PAUSE: Duration = Duration::from_millis(5);

/// gRPC deadline of Report and Release.
const SMALL_RPC_DEADLINE: Duration = Duration::from_secs(5);

fn bounded<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(SMALL_RPC_DEADLINE);
    request
}

/// The scheduler config of the simulated pool: one upstream `u` with keys `k00..` of
/// capacity `cap` (the fake vendor's cap), provider `openai`, default scheduler settings.
pub fn pool_config(config: &SimConfig, pool: &str) -> Result<Config, String> {
    let mut t = format!(
        "[[pools]]\nid = \"{pool}\"\nprovider = \"openai\"\nmodel = \"tts-1\"\nadaptive = {}\n",
        config.adaptive
    );
    t.push_str("[[pools.upstreams]]\nid = \"u\"\n");
    for i in 0..config.keys {
        t.push_str(&format!(
            "[[pools.upstreams.keys]]\nid = \"{}\"\ncapacity = {}\n",
            config.key_name(i),
            config.configured_cap.unwrap_or(config.cap)
        ));
    }
    // A fresh pool in the store would otherwise hold grants back for the recovery window.
    t.push_str("[scheduler]\nrecovery_window_ms = 0\n");
    Config::from_toml_str(&t).map_err(|e| format!("simulation config: {e}"))
}

/// A scheduler replica (served in process until the deployment stops) and its client.
#[derive(Debug)]
pub struct Replica {
    client: PoolSchedulerClient<Channel>,
    pool: String,
    attempts: u32,
    wait: Duration,
    /// The vendor's 429 is a concurrency refusal (adaptive pool) or a rate limit.
    adaptive: bool,
    /// Acquires retried because the contract says to (see the module doc).
    retried: AtomicU64,
}

impl Replica {
    /// Opens the Redis store (seeding `pool`), serves PoolScheduler on `127.0.0.1:0` until
    /// `shutdown`, and connects a client to it.
    pub async fn start(
        config: &SimConfig,
        redis_url: &str,
        pool: &str,
        shutdown: CancellationToken,
    ) -> Result<Self, String> {
        let scheduler_config = pool_config(config, pool)?;
        let store = server::open_store(redis_url, &scheduler_config).await?;
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("bind scheduler: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("scheduler address: {e}"))?;
        tokio::spawn(async move {
            let served = server::serve(
                listener,
                store,
                &scheduler_config,
                AdminAuth::disabled(),
                shutdown,
            )
            .await;
            if let Err(e) = served {
                eprintln!("poolsim: scheduler replica stopped: {e}");
            }
        });
        let client = PoolSchedulerClient::connect(format!("http://{addr}"))
            .await
            .map_err(|e| format!("connect to scheduler replica: {e}"))?;
        Ok(Self {
            client,
            pool: pool.to_owned(),
            attempts: config.attempts,
            wait: config.wait,
            adaptive: config.adaptive,
            retried: AtomicU64::new(0),
        })
    }

    /// How many Acquires this replica's clients retried as the contract says.
    pub fn retried(&self) -> u64 {
        self.retried.load(Ordering::Relaxed)
    }

    /// One Acquire, retried while the scheduler answers a transient UNAVAILABLE.
    async fn acquire(
        &self,
        client: &mut PoolSchedulerClient<Channel>,
        exclude: &[String],
    ) -> Result<pb::Lease, tonic::Status> {
        use voxpool_domain::contract::{Retry, SchedulerReason, retry_of};
        let mut retries = 0;
        loop {
            let mut acquire = tonic::Request::new(pb::AcquireRequest {
                pool: self.pool.clone(),
                exclude_keys: exclude.to_vec(),
                wait_timeout_ms: i64::try_from(self.wait.as_millis()).unwrap_or(i64::MAX),
                ..Default::default()
            });
            acquire.set_timeout(self.wait + DEADLINE_MARGIN);
            match client.acquire(acquire).await {
                Ok(lease) => return Ok(lease.into_inner()),
                Err(status)
                    if status.code() == tonic::Code::Unavailable
                        && retry_of::<SchedulerReason>(&status) == Retry::Again
                        && retries < MAX_ACQUIRE_RETRIES =>
                {
                    retries += 1;
                    self.retried.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(ACQUIRE_RETRY_PAUSE).await;
                }
                Err(status) => return Err(status),
            }
        }
    }

    /// One request: Acquire (waiting while full), vendor call, Report + release.
    pub async fn request(&self, vendor: &VendorClient) -> RequestOutcome {
        let mut client = self.client.clone();
        let mut exclude = Vec::new();
        for attempt in 0..self.attempts {
            let lease = match self.acquire(&mut client, &exclude).await {
                Ok(lease) => lease,
                Err(status) => {
                    return RequestOutcome::Failed {
                        reason: format!("Acquire {:?}", status.code()),
                    };
                }
            };
            // The fake counts a key under its bearer credential: the key part of `u/k00`.
            let key = lease.key_id.rsplit('/').next().unwrap_or(&lease.key_id);
            let started = Instant::now();
            let outcome = vendor.speak(key).await;
            let reported = match &outcome {
                CallOutcome::Ok => pb::Outcome::Success,
                // The fake's 429 is its per-key concurrency cap.
                CallOutcome::RateLimited if self.adaptive => pb::Outcome::ConcurrencyLimited,
                CallOutcome::RateLimited => pb::Outcome::RateLimited,
                CallOutcome::Failed(_) => pb::Outcome::UpstreamError,
            };
            let report = pb::ReportRequest {
                lease_id: lease.lease_id.clone(),
                outcome: reported as i32,
                latency_ms: i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX),
                release: true,
                key_id: lease.key_id.clone(),
                ..Default::default()
            };
            if client.report(bounded(report)).await.is_err() {
                // Not expected in process; the lease expires at its TTL otherwise.
                let release = pb::ReleaseRequest {
                    lease_id: lease.lease_id,
                    ..Default::default()
                };
                let _ = client.release(bounded(release)).await;
            }
            match outcome {
                CallOutcome::Ok => {
                    return RequestOutcome::Success {
                        attempts: attempt + 1,
                    };
                }
                CallOutcome::RateLimited => exclude.push(lease.key_id),
                CallOutcome::Failed(reason) => return RequestOutcome::Failed { reason },
            }
        }
        RequestOutcome::Failed {
            reason: "every attempt answered 429".into(),
        }
    }
}
