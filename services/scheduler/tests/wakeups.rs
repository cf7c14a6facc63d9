//! Cross-replica wake-ups and classes: a slot released through one `voxpool-scheduler`
//! process reaches a waiter on another at once (Redis pub/sub), and goes to the better class
//! whichever replica it waits on, on one Redis node, under Sentinel and on a Cluster. The
//! waiters' poll is a minute and their wait two: without the wake-up one would sit for a
//! minute, so the test's 30 s bound on the grant fails instead of only slowing down.

use std::path::{Path, PathBuf};

#[path = "common/replica.rs"]
mod replica;

use replica::{Replica, client, spawn_args};
use voxpool_proto::scheduler::v1 as pb;
use voxpool_shared::testing::{RedisCluster, RedisSentinel, RedisServer};

fn write_config(dir: &Path, prefix: &str) -> PathBuf {
    let text = format!(
        "[[pools]]\nid = \"p\"\nprovider = \"espeak\"\n[[pools.upstreams]]\nid = \"u\"\n\
         [[pools.upstreams.keys]]\nid = \"k\"\ncapacity = 1\n\
         [scheduler]\nwait_poll_ms = 60000\nrecovery_window_ms = 0\nstore_key_prefix = \"{prefix}\"\n\
         store_timeout_ms = 4000\nstore_replica_ack_timeout_ms = 2000\n"
    );
    let path = dir.join("config.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

/// Two replicas A and B on one store, with A holding the pool's only slot.
struct TwoReplicas {
    a: replica::SchedulerClient,
    b: replica::SchedulerClient,
    held: pb::Lease,
    _replicas: (Replica, Replica),
    _dir: tempfile::TempDir,
}

impl TwoReplicas {
    async fn start(store_url: &str, prefix: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = write_config(dir.path(), prefix);
        let args = ["--listen", "127.0.0.1:0", "--store", store_url];
        let replicas = (spawn_args(&config, &args), spawn_args(&config, &args));
        let (mut a, b) = (client(&replicas.0).await, client(&replicas.1).await);
        let held = a
            .acquire(pb::AcquireRequest {
                pool: "p".into(),
                ..Default::default()
            })
            .await
            .expect("the only slot")
            .into_inner();
        Self {
            a,
            b,
            held,
            _replicas: replicas,
            _dir: dir,
        }
    }

    /// A releases the slot it holds.
    async fn release_held(&mut self) {
        release(&mut self.a, self.held.lease_id.clone(), "release on A").await;
    }
}

async fn release(c: &mut replica::SchedulerClient, lease_id: String, what: &str) {
    c.release(pb::ReleaseRequest {
        lease_id,
        ..Default::default()
    })
    .await
    .expect(what);
}

/// A waiting Acquire of `priority` through `c`, spawned.
fn waiter(
    c: &replica::SchedulerClient,
    priority: pb::Priority,
) -> tokio::task::JoinHandle<Result<pb::Lease, tonic::Status>> {
    let mut c = c.clone();
    tokio::spawn(async move {
        c.acquire(pb::AcquireRequest {
            pool: "p".into(),
            priority: priority as i32,
            wait_timeout_ms: 120_000,
            ..Default::default()
        })
        .await
        .map(tonic::Response::into_inner)
    })
}

/// Waits until `c`'s replica counts `n` waiters of pool "p".
async fn until_waiters(c: &mut replica::SchedulerClient, n: i32) {
    loop {
        let s = c
            .get_pool_status(pb::GetPoolStatusRequest { pool: "p".into() })
            .await
            .expect("status")
            .into_inner();
        if s.waiters == n {
            return;
        }
        tokio::task::yield_now().await;
    }
}

/// The grant `task` gets, bounded at 30 s (`what` says whose).
async fn granted(
    task: tokio::task::JoinHandle<Result<pb::Lease, tonic::Status>>,
    what: &str,
) -> pb::Lease {
    tokio::time::timeout(std::time::Duration::from_secs(30), task)
        .await
        .expect(what)
        .expect("waiter task")
        .expect("granted")
}

async fn a_release_on_one_replica_wakes_a_waiter_on_another(store_url: &str, prefix: &str) {
    let mut r = TwoReplicas::start(store_url, prefix).await;
    let on_b = waiter(&r.b, pb::Priority::Standard);
    until_waiters(&mut r.b, 1).await;
    r.release_held().await;
    let lease = granted(
        on_b,
        "B's waiter was woken: without the wake-up it waits for its 60 s poll",
    )
    .await;
    assert_eq!(lease.key_id, "u/k");
}

async fn an_interactive_waiter_on_another_replica_goes_before_an_earlier_batch_waiter(
    store_url: &str,
    prefix: &str,
) {
    let mut r = TwoReplicas::start(store_url, prefix).await;
    let batch = waiter(&r.a, pb::Priority::Batch);
    until_waiters(&mut r.a, 1).await;
    let live = waiter(&r.b, pb::Priority::Interactive);
    until_waiters(&mut r.b, 1).await;
    // Released on A, where the BATCH waiter is the head: the slot still goes to B's
    // INTERACTIVE waiter.
    r.release_held().await;
    let lease = granted(live, "the INTERACTIVE waiter on B is served first").await;
    assert!(!batch.is_finished(), "the earlier BATCH waiter still waits");
    release(&mut r.b, lease.lease_id, "release on B").await;
    granted(batch, "then the BATCH waiter").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classes_hold_across_replicas_on_one_redis_node() {
    let redis = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("redis");
    an_interactive_waiter_on_another_replica_goes_before_an_earlier_batch_waiter(
        &redis.url(),
        "class1",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classes_hold_across_replicas_on_a_cluster() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::shared)
        .await
        .expect("cluster");
    an_interactive_waiter_on_another_replica_goes_before_an_earlier_batch_waiter(
        &cluster.url(),
        "class3",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_one_redis_node() {
    let redis = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("redis");
    a_release_on_one_replica_wakes_a_waiter_on_another(&redis.url(), "wake1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_sentinel() {
    let sentinel = tokio::task::spawn_blocking(RedisSentinel::shared)
        .await
        .expect("sentinel");
    a_release_on_one_replica_wakes_a_waiter_on_another(&sentinel.url(), "wake2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::shared)
        .await
        .expect("cluster");
    a_release_on_one_replica_wakes_a_waiter_on_another(&cluster.url(), "wake3").await;
}
