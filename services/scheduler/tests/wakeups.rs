//! One line per pool across replicas, with real `voxpool-scheduler` processes on one Redis
//! node, under Sentinel and on a Cluster: a slot released through one process is handed to a
//! waiter on another at once (Redis pub/sub), goes to the better class whichever replica it
//! waits on, and same-class waiters on two replicas are served in arrival order and tenant
//! round-robin; a killed replica's waiters stop holding the line. The waiters' poll is a
//! minute and their tickets live five: without the hand-over announcement a waiter would sit
//! for a minute, so the test's 30 s bound on the grant fails instead of only slowing down.

use std::path::{Path, PathBuf};

#[path = "common/replica.rs"]
mod replica;

use replica::{Replica, client, spawn_args};
use voxpool_proto::scheduler::v1 as pb;
use voxpool_testkit::{RedisCluster, RedisSentinel, RedisServer};

fn write_config(dir: &Path, prefix: &str, ticket_ttl_ms: u64) -> PathBuf {
    let text = format!(
        "[[pools]]\nid = \"p\"\nprovider = \"espeak\"\n[[pools.upstreams]]\nid = \"u\"\n\
         [[pools.upstreams.keys]]\nid = \"k\"\ncapacity = 1\n\
         [scheduler]\nwait_poll_ms = 60000\nrecovery_window_ms = 0\nstore_key_prefix = \"{prefix}\"\n\
         store_timeout_ms = 4000\nstore_replica_ack_timeout_ms = 2000\nline_ticket_ttl_ms = {ticket_ttl_ms}\n"
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
        Self::start_with(store_url, prefix, 300_000).await
    }

    async fn start_with(store_url: &str, prefix: &str, ticket_ttl_ms: u64) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = write_config(dir.path(), prefix, ticket_ttl_ms);
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
    tenant_waiter(c, priority, "")
}

/// A waiting Acquire of `priority` for `tenant` through `c`, spawned.
fn tenant_waiter(
    c: &replica::SchedulerClient,
    priority: pb::Priority,
    tenant: &str,
) -> tokio::task::JoinHandle<Result<pb::Lease, tonic::Status>> {
    let mut c = c.clone();
    let tenant = tenant.to_owned();
    tokio::spawn(async move {
        c.acquire(pb::AcquireRequest {
            pool: "p".into(),
            priority: priority as i32,
            tenant,
            wait_timeout_ms: 120_000,
            ..Default::default()
        })
        .await
        .map(tonic::Response::into_inner)
    })
}

/// Waits until the pool's line in the store (every replica) holds `n` waiters of `class`.
async fn until_line(c: &mut replica::SchedulerClient, class: pb::Priority, n: i32) {
    loop {
        let s = c
            .get_pool_status(pb::GetPoolStatusRequest { pool: "p".into() })
            .await
            .expect("status")
            .into_inner();
        let waiting = s
            .class_waiters
            .iter()
            .find(|w| w.priority == class as i32)
            .map_or(0, |w| w.waiters);
        if waiting == n {
            return;
        }
        tokio::task::yield_now().await;
    }
}

/// Serves the waiters `order` names one at a time, through the pool's only slot, which `r.a`
/// holds: each release must grant exactly the next one (and nobody else can hold the slot).
async fn served_in_order(
    r: &mut TwoReplicas,
    mut order: Vec<(
        &str,
        tokio::task::JoinHandle<Result<pb::Lease, tonic::Status>>,
    )>,
) {
    r.release_held().await;
    let mut served = Vec::new();
    while !order.is_empty() {
        let (name, task) = order.remove(0);
        let lease = granted(task, &format!("{name} is served next, after {served:?}")).await;
        served.push(name.to_owned());
        // Released through the other replica each time: the order must not depend on where.
        let via = if served.len() % 2 == 0 {
            &mut r.a
        } else {
            &mut r.b
        };
        release(via, lease.lease_id, "release the served waiter's slot").await;
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
    until_line(&mut r.b, pb::Priority::Standard, 1).await;
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
    until_line(&mut r.a, pb::Priority::Batch, 1).await;
    let live = waiter(&r.b, pb::Priority::Interactive);
    until_line(&mut r.a, pb::Priority::Interactive, 1).await;
    // Released on A, where the BATCH waiter is the head: the slot still goes to B's
    // INTERACTIVE waiter.
    r.release_held().await;
    let lease = granted(live, "the INTERACTIVE waiter on B is served first").await;
    assert!(!batch.is_finished(), "the earlier BATCH waiter still waits");
    release(&mut r.b, lease.lease_id, "release on B").await;
    granted(batch, "then the BATCH waiter").await;
}

async fn batch_waiters_split_over_two_replicas_are_granted_in_arrival_order(
    store_url: &str,
    prefix: &str,
) {
    let mut r = TwoReplicas::start(store_url, prefix).await;
    let mut order = Vec::new();
    for (i, name) in [
        "b1 on A", "b2 on B", "b3 on A", "b4 on B", "b5 on B", "b6 on A",
    ]
    .into_iter()
    .enumerate()
    {
        let via = if name.ends_with('A') { &r.a } else { &r.b };
        order.push((name, waiter(via, pb::Priority::Batch)));
        until_line(
            &mut r.a,
            pb::Priority::Batch,
            i32::try_from(i).expect("small") + 1,
        )
        .await;
    }
    served_in_order(&mut r, order).await;
}

async fn tenants_take_turns_across_replicas(store_url: &str, prefix: &str) {
    let mut r = TwoReplicas::start(store_url, prefix).await;
    let mut waiting = Vec::new();
    for (name, tenant, on_a) in [
        ("heavy1 on A", "heavy", true),
        ("heavy2 on A", "heavy", true),
        ("heavy3 on B", "heavy", false),
        ("light on B", "light", false),
    ] {
        let via = if on_a { &r.a } else { &r.b };
        waiting.push((name, tenant_waiter(via, pb::Priority::Standard, tenant)));
        let n = i32::try_from(waiting.len()).expect("small");
        until_line(&mut r.b, pb::Priority::Standard, n).await;
    }
    let light = waiting.pop().expect("light");
    let heavy3 = waiting.pop().expect("heavy3");
    let heavy2 = waiting.pop().expect("heavy2");
    let heavy1 = waiting.pop().expect("heavy1");
    // The light tenant's one request goes second, before the heavy tenant's backlog.
    served_in_order(&mut r, vec![heavy1, light, heavy2, heavy3]).await;
}

async fn a_killed_replicas_waiters_stop_holding_the_line(store_url: &str, prefix: &str) {
    // Tickets live the default 3 s here; the poll (and renewals) run every second.
    let mut r = TwoReplicas::start_with(store_url, prefix, 3_000).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), prefix, 3_000);
    let doomed = spawn_args(&config, &["--listen", "127.0.0.1:0", "--store", store_url]);
    let mut c = client(&doomed).await;
    // Its waiter is first in line and would hold a handed slot for its 10 min lease TTL.
    let first = tokio::spawn(async move {
        c.acquire(pb::AcquireRequest {
            pool: "p".into(),
            wait_timeout_ms: 120_000,
            lease_ttl_ms: 600_000,
            ..Default::default()
        })
        .await
    });
    until_line(&mut r.a, pb::Priority::Standard, 1).await;
    let on_b = waiter(&r.b, pb::Priority::Standard);
    until_line(&mut r.a, pb::Priority::Standard, 2).await;
    drop(doomed); // SIGKILL: no Leave, no renewals.
    let _ = first.await;
    r.release_held().await;
    let lease = granted(
        on_b,
        "B's waiter is served once the dead replica's ticket ends",
    )
    .await;
    assert_eq!(lease.key_id, "u/k");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arrival_order_tenants_and_dead_replicas_across_replicas_on_one_redis_node() {
    let redis = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("redis");
    batch_waiters_split_over_two_replicas_are_granted_in_arrival_order(&redis.url(), "order1")
        .await;
    tenants_take_turns_across_replicas(&redis.url(), "tenant1").await;
    a_killed_replicas_waiters_stop_holding_the_line(&redis.url(), "dead1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arrival_order_tenants_and_dead_replicas_across_replicas_on_a_cluster() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::shared)
        .await
        .expect("cluster");
    batch_waiters_split_over_two_replicas_are_granted_in_arrival_order(&cluster.url(), "order3")
        .await;
    tenants_take_turns_across_replicas(&cluster.url(), "tenant3").await;
    a_killed_replicas_waiters_stop_holding_the_line(&cluster.url(), "dead3").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arrival_order_across_replicas_under_sentinel() {
    let sentinel = tokio::task::spawn_blocking(RedisSentinel::shared)
        .await
        .expect("sentinel");
    batch_waiters_split_over_two_replicas_are_granted_in_arrival_order(&sentinel.url(), "order2")
        .await;
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
