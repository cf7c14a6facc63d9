//! Cross-replica wake-ups and classes: a slot released through one `voxpool-scheduler`
//! process reaches a waiter on another at once (Redis pub/sub), and goes to the better class
//! whichever replica it waits on, on one Redis node, under Sentinel and on a Cluster. The waiter's poll is a minute and its wait two: without the wake-up it would sit
//! for a minute, so the test's 30 s bound on the grant fails instead of only slowing down.

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

async fn a_release_on_one_replica_wakes_a_waiter_on_another(store_url: &str, prefix: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), prefix);
    let args = ["--listen", "127.0.0.1:0", "--store", store_url];
    let (a, b): (Replica, Replica) = (spawn_args(&config, &args), spawn_args(&config, &args));
    let (mut ca, mut cb) = (client(&a).await, client(&b).await);
    let held = ca
        .acquire(pb::AcquireRequest {
            pool: "p".into(),
            ..Default::default()
        })
        .await
        .expect("the only slot")
        .into_inner();
    let mut waiter_client = cb.clone();
    let waiter = tokio::spawn(async move {
        waiter_client
            .acquire(pb::AcquireRequest {
                pool: "p".into(),
                wait_timeout_ms: 120_000,
                ..Default::default()
            })
            .await
    });
    loop {
        let s = cb
            .get_pool_status(pb::GetPoolStatusRequest { pool: "p".into() })
            .await
            .expect("status")
            .into_inner();
        if s.waiters == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    ca.release(pb::ReleaseRequest {
        lease_id: held.lease_id,
        ..Default::default()
    })
    .await
    .expect("release on A");
    let lease = tokio::time::timeout(std::time::Duration::from_secs(30), waiter)
        .await
        .expect("B's waiter was woken: without the wake-up it waits for its 60 s poll")
        .expect("waiter task")
        .expect("B's waiter got the slot A freed")
        .into_inner();
    assert_eq!(lease.key_id, "u/k");
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

async fn an_interactive_waiter_on_another_replica_goes_before_an_earlier_batch_waiter(
    store_url: &str,
    prefix: &str,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), prefix);
    let args = ["--listen", "127.0.0.1:0", "--store", store_url];
    let (a, b): (Replica, Replica) = (spawn_args(&config, &args), spawn_args(&config, &args));
    let (mut ca, mut cb) = (client(&a).await, client(&b).await);
    let held = ca
        .acquire(pb::AcquireRequest {
            pool: "p".into(),
            ..Default::default()
        })
        .await
        .expect("the only slot")
        .into_inner();
    let waiter = |c: &replica::SchedulerClient, priority: pb::Priority| {
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
    };
    let batch = waiter(&ca, pb::Priority::Batch);
    until_waiters(&mut ca, 1).await;
    let live = waiter(&cb, pb::Priority::Interactive);
    until_waiters(&mut cb, 1).await;
    // Released on A, where the BATCH waiter is the head: the slot still goes to B's
    // INTERACTIVE waiter.
    ca.release(pb::ReleaseRequest {
        lease_id: held.lease_id,
        ..Default::default()
    })
    .await
    .expect("release on A");
    let lease = tokio::time::timeout(std::time::Duration::from_secs(30), live)
        .await
        .expect("the INTERACTIVE waiter on B is served first")
        .expect("task")
        .expect("granted");
    assert!(!batch.is_finished(), "the earlier BATCH waiter still waits");
    cb.release(pb::ReleaseRequest {
        lease_id: lease.lease_id,
        ..Default::default()
    })
    .await
    .expect("release on B");
    tokio::time::timeout(std::time::Duration::from_secs(30), batch)
        .await
        .expect("then the BATCH waiter")
        .expect("task")
        .expect("granted");
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
