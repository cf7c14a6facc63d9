//! One suite for the job store, run against every Redis topology it claims: `redis::*` (a
//! private real redis-server per test), `sentinel::*` (a real Sentinel setup: primary, replica,
//! three sentinels; a new job waits for the replica's acknowledgement) and `cluster::*` (a
//! real 3-primary Redis Cluster with a replica per primary). Each test names the behaviour it
//! checks; together they try to break the store's side of invariant 13 of
//! docs/ARCHITECTURE.md: an item's state and its job's counts move together, an ended item is
//! never handed out again, a request id names one job, a job is acknowledged or said not to
//! be.
//!
//! One file per area (`create`, `items`, `ending`); each lists its tests in [`suite!`], which
//! runs every one on every topology (`<area>::<topology>::<test>`). Jobs are built with
//! [`job`] and [`items`] instead of literals.

mod create;
mod ending;
mod items;

use std::time::Duration;

use voxpool_jobs::{
    model::{Format, JobSpec, Priority},
    store::JobStore,
};
use voxpool_testkit::{RedisCluster, RedisSentinel, RedisServer};

/// Which topology backs the store.
#[derive(Clone, Copy, Debug)]
pub enum Topology {
    /// One private redis-server.
    Redis,
    /// The binary's Sentinel setup.
    Sentinel,
    /// The binary's Redis Cluster.
    Cluster,
}

macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() { super::$name(crate::Topology::Redis).await }
            )*
        }
        mod sentinel {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() { super::$name(crate::Topology::Sentinel).await }
            )*
        }
        mod cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() { super::$name(crate::Topology::Cluster).await }
            )*
        }
    };
}
pub(crate) use suite;

/// How long an ended job is kept in these tests.
pub const RETENTION: Duration = Duration::from_secs(3600);

/// A store on one topology, under a key prefix no other test of this process uses (the
/// Sentinel and Cluster topologies are shared by the tests of this binary).
pub struct Harness {
    /// The store under test.
    pub store: JobStore,
    /// The private server of a `Redis` test (stopped on drop).
    _redis: Option<RedisServer>,
}

impl Harness {
    /// A store on `topology` with the topology's default replica acknowledgements.
    pub async fn start(topology: Topology) -> Self {
        Self::with_acks(topology, None).await
    }

    /// A store on `topology` that waits for `acks` replicas (`None`: the default).
    pub async fn with_acks(topology: Topology, acks: Option<u32>) -> Self {
        let redis = matches!(topology, Topology::Redis).then(RedisServer::start);
        let url = match topology {
            Topology::Redis => redis.as_ref().map(RedisServer::url).unwrap_or_default(),
            Topology::Sentinel => RedisSentinel::shared().url(),
            Topology::Cluster => RedisCluster::shared().url(),
        };
        let store = JobStore::connect(
            &url,
            &unique_prefix(),
            acks,
            RETENTION,
            Duration::from_secs(4),
        )
        .await
        .expect("the job store connects");
        Self {
            store,
            _redis: redis,
        }
    }
}

fn unique_prefix() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    format!(
        "vjt{}-{}",
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        std::process::id()
    )
}

/// A job of `tenant` with request id `request_id` (empty: none), WAV at the vendor's rate.
pub fn job(tenant: &str, request_id: &str) -> JobSpec {
    JobSpec {
        tenant: tenant.to_owned(),
        priority: Priority::Batch,
        format: Format::Wav,
        sample_rate_hz: 0,
        request_id: request_id.to_owned(),
        webhook_url: String::new(),
        blob_store: "file:///tmp/blobs".to_owned(),
        characters: 0,
    }
}

/// Items `a0..a{n}` with made-up encoded specs (the store keeps them as bytes).
pub fn items(n: usize) -> Vec<(String, Vec<u8>)> {
    (0..n)
        .map(|i| (format!("a{i}"), format!("spec of a{i}").into_bytes()))
        .collect()
}

/// A fresh job id.
pub fn new_id() -> String {
    voxpool_jobs::model::new_job_id()
}
