//! Test harness: an in-process PoolScheduler over a chosen store, reached through a real
//! gRPC client on 127.0.0.1:0. `Redis` is a private `redis-server` started per test;
//! `Sentinel` and `Cluster` are one real topology per test binary (primary + replica + three
//! sentinels; three primaries with a replica each), every test under its own key prefix.
#![allow(dead_code)]

use std::{sync::Arc, time::Duration};

use tokio_util::sync::CancellationToken;
use tonic::{Request, transport::Channel};
use voxpool_config::Config;
use voxpool_domain::secret::Secret;
use voxpool_proto::scheduler::v1::{self as pb, pool_scheduler_client::PoolSchedulerClient};
use voxpool_runtime::auth::AdminAuth;
use voxpool_scheduler::{
    server,
    store::{LeaseStore, memory::MemoryStore},
};
use voxpool_testkit::{RedisCluster, RedisSentinel, RedisServer};

pub const ADMIN_TOKEN: &str = "test-admin-token";

/// Which store backs the server.
#[derive(Clone, Copy, Debug)]
pub enum Backend {
    Memory,
    Redis,
    Sentinel,
    Cluster,
}

/// A key prefix no other test of this process uses (tests share the Sentinel and Cluster
/// topologies).
pub fn unique_prefix() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    format!(
        "t{}",
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

/// A running scheduler.
pub struct Harness {
    pub client: PoolSchedulerClient<Channel>,
    pub store: Arc<dyn LeaseStore>,
    pub config: Config,
    pub redis: Option<RedisServer>,
    pub addr: std::net::SocketAddr,
    shutdown: CancellationToken,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// `n_upstreams` upstreams `u0..` with `keys_per` keys `k0..` of `capacity` each, in pool `p`.
pub fn uniform_pool(n_upstreams: usize, keys_per: usize, capacity: u32) -> String {
    let caps: Vec<Vec<u32>> = (0..n_upstreams).map(|_| vec![capacity; keys_per]).collect();
    pool_toml("p", &caps)
}

/// A pool whose upstream `u{i}` has keys `k{j}` with capacities `caps[i][j]`.
pub fn pool_toml(pool: &str, caps: &[Vec<u32>]) -> String {
    let mut t = format!("[[pools]]\nid = \"{pool}\"\nprovider = \"espeak\"\n");
    for (i, keys) in caps.iter().enumerate() {
        t.push_str(&format!("[[pools.upstreams]]\nid = \"u{i}\"\n"));
        for (j, c) in keys.iter().enumerate() {
            t.push_str(&format!(
                "[[pools.upstreams.keys]]\nid = \"k{j}\"\ncapacity = {c}\n"
            ));
        }
    }
    t
}

/// Settings used by every test unless overridden: fast poll, small backoffs, and no recovery
/// window (each test starts on a fresh store; the recovery tests set one).
pub const SETTINGS: &str = "\n[scheduler]\nrate_limit_cooldown_ms = 1000\nfailure_threshold = 3\nfailure_backoff_base_ms = 1000\nfailure_backoff_max_ms = 4000\ncredential_cooldown_ms = 3600000\nwait_poll_ms = 10\nrecovery_window_ms = 0\n";

pub async fn open_store(
    backend: Backend,
    config: &Config,
    redis: Option<&RedisServer>,
) -> Arc<dyn LeaseStore> {
    match backend {
        Backend::Memory => {
            let s: Arc<dyn LeaseStore> = Arc::new(MemoryStore::with_recovery_window(
                config.scheduler.recovery_window_ms,
            ));
            s.seed(&voxpool_scheduler::model::PoolSpec::from_config(config))
                .await
                .unwrap();
            s
        }
        Backend::Redis => server::open_store(&redis.expect("redis").url(), config)
            .await
            .unwrap(),
        Backend::Sentinel => server::open_store(&RedisSentinel::shared().url(), config)
            .await
            .unwrap(),
        Backend::Cluster => server::open_store(&RedisCluster::shared().url(), config)
            .await
            .unwrap(),
    }
}

pub async fn start(backend: Backend, toml: &str) -> Harness {
    start_with(backend, toml, "").await
}

/// Like [`start`], with `scheduler_lines` (e.g. `"max_waiters = 3\n"`) added to the
/// `[scheduler]` table.
pub async fn start_with(backend: Backend, toml: &str, scheduler_lines: &str) -> Harness {
    start_wrapped(backend, toml, scheduler_lines, |s| s).await
}

/// Like [`start_with`], serving the store `wrap` makes of the backend's (a test's probe around
/// it); the harness's `store` is the wrapped one.
pub async fn start_wrapped(
    backend: Backend,
    toml: &str,
    scheduler_lines: &str,
    wrap: impl FnOnce(Arc<dyn LeaseStore>) -> Arc<dyn LeaseStore>,
) -> Harness {
    let mut prefix = format!("store_key_prefix = \"{}\"\n", unique_prefix());
    // The shared topologies run on two cores beside every other suite: a starved replica
    // acknowledges late, which is not what these tests are about.
    if matches!(backend, Backend::Sentinel | Backend::Cluster)
        && !scheduler_lines.contains("store_timeout_ms")
    {
        prefix.push_str("store_timeout_ms = 4000\nstore_replica_ack_timeout_ms = 2000\n");
    }
    // A setting in `scheduler_lines` replaces the default one (TOML refuses duplicates).
    let overridden = |line: &str| {
        line.split_once('=').is_some_and(|(key, _)| {
            scheduler_lines.lines().any(|l| {
                l.split_once('=')
                    .is_some_and(|(k, _)| k.trim() == key.trim())
            })
        })
    };
    let settings: String = SETTINGS
        .lines()
        .filter(|l| !overridden(l))
        .map(|l| format!("{l}\n"))
        .collect();
    let config = Config::from_toml_str(&format!("{toml}{settings}{prefix}{scheduler_lines}"))
        .expect("config parses");
    config
        .validate(voxpool_config::Credentials::Ignore)
        .expect("config valid");
    let redis = matches!(backend, Backend::Redis).then(RedisServer::start);
    let store = wrap(open_store(backend, &config, redis.as_ref()).await);
    start_on(store, config, redis).await
}

pub async fn start_on(
    store: Arc<dyn LeaseStore>,
    config: Config,
    redis: Option<RedisServer>,
) -> Harness {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    {
        let (store, config, shutdown) = (store.clone(), config.clone(), shutdown.clone());
        tokio::spawn(async move {
            let auth = AdminAuth::with_token(Secret::new(ADMIN_TOKEN));
            server::serve(listener, store, &config, auth, shutdown)
                .await
                .unwrap();
        });
    }
    let client = PoolSchedulerClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    Harness {
        client,
        store,
        config,
        redis,
        addr,
        shutdown,
    }
}

impl Harness {
    pub fn client(&self) -> PoolSchedulerClient<Channel> {
        self.client.clone()
    }

    pub async fn acquire(&self, pool: &str) -> Result<pb::Lease, tonic::Status> {
        self.acquire_with(pb::AcquireRequest {
            pool: pool.into(),
            ..Default::default()
        })
        .await
    }

    pub async fn acquire_with(&self, req: pb::AcquireRequest) -> Result<pb::Lease, tonic::Status> {
        self.client()
            .acquire(req)
            .await
            .map(tonic::Response::into_inner)
    }

    pub async fn release(&self, lease_id: &str) -> bool {
        self.client()
            .release(pb::ReleaseRequest {
                lease_id: lease_id.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .released
    }

    pub async fn report(
        &self,
        lease_id: &str,
        outcome: pb::Outcome,
        retry_after_ms: i64,
        release: bool,
    ) -> pb::ReportResponse {
        self.client()
            .report(pb::ReportRequest {
                lease_id: lease_id.into(),
                outcome: outcome as i32,
                retry_after_ms,
                release,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
    }

    pub async fn status(&self, pool: &str) -> pb::PoolStatus {
        self.client()
            .get_pool_status(pb::GetPoolStatusRequest { pool: pool.into() })
            .await
            .unwrap()
            .into_inner()
    }

    pub async fn key(&self, pool: &str, key_id: &str) -> pb::KeyStatus {
        self.status(pool)
            .await
            .keys
            .into_iter()
            .find(|k| k.key_id == key_id)
            .expect("key in status")
    }

    pub async fn advance(&self, pool: &str, ms: u64) {
        self.store.advance_clock(pool, ms).await.unwrap();
    }

    /// Waits until `n` Acquires wait for `pool` in this replica's queue *and* in the store's
    /// line. The queue counts a waiter before the store has its ticket, so a test that orders
    /// waiters waits for the line: otherwise the next one could reach it first.
    pub async fn wait_in_line(&self, pool: &str, what: &str, n: i32) {
        self.wait_until(pool, what, |s| {
            s.waiters == n && s.class_waiters.iter().map(|c| c.waiters).sum::<i32>() == n
        })
        .await;
    }

    /// Polls GetPoolStatus until `pred` holds (a readiness signal, bounded to 10 s).
    pub async fn wait_until(&self, pool: &str, what: &str, pred: impl Fn(&pb::PoolStatus) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if pred(&self.status(pool).await) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for: {what}"
            );
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

pub fn admin<T>(msg: T) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut().insert(
        "authorization",
        format!("Bearer {ADMIN_TOKEN}").parse().unwrap(),
    );
    r
}
