//! A Redis Cluster failover under load, seen in a real `voxpool-scheduler`'s log: the Redis
//! client (the `redis` crate) logs a warning for every connection it finds lost and every slot
//! refresh it begins, one per call in flight, through the `log` crate. Those reach the log as
//! at most one line per 10 s, with a summary line counting the rest
//! (`voxpool_redis::log_limit`), not thousands of lines per replica.
//!
//! Synchronization: the load's grant counter (a `Notify` per grant), the testkit's promotion
//! wait, and the log file, read once the load has stopped and again until the summary is in.

use std::{
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::Value;
use tokio::sync::Notify;
use tonic::transport::Channel;
use voxpool_e2e::{binary, start_with_stderr};
use voxpool_proto::scheduler::v1::{self as pb, pool_scheduler_client::PoolSchedulerClient};
use voxpool_testkit::RedisCluster;

const POOL: &str = "pool-0";
/// Callers at once.
const CALLERS: usize = 60;

/// Grants seen by the load, and a wake-up per grant.
#[derive(Default)]
struct Grants {
    count: AtomicUsize,
    changed: Notify,
}

impl Grants {
    /// Waits until `n` grants more than `from` were seen (at most 60 s).
    async fn reach(&self, from: usize, n: usize, what: &str) {
        let limit = Instant::now() + Duration::from_secs(60);
        loop {
            let changed = self.changed.notified();
            if self.count.load(Ordering::SeqCst) >= from + n {
                return;
            }
            let left = limit.saturating_duration_since(Instant::now());
            assert!(
                tokio::time::timeout(left, changed).await.is_ok(),
                "no {what} within 60 s"
            );
        }
    }
}

fn load(
    c: &PoolSchedulerClient<Channel>,
    grants: &Arc<Grants>,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..CALLERS)
        .map(|_| {
            let (mut c, grants, stop) = (c.clone(), grants.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let mut req = tonic::Request::new(pb::AcquireRequest {
                        pool: POOL.into(),
                        wait_timeout_ms: 2_000,
                        lease_ttl_ms: 3_000,
                        ..Default::default()
                    });
                    req.set_timeout(Duration::from_secs(5));
                    // Refusals while the shard fails over are expected: the caller tries again.
                    let Ok(lease) = c.acquire(req).await else {
                        continue;
                    };
                    grants.count.fetch_add(1, Ordering::SeqCst);
                    grants.changed.notify_waiters();
                    let _ = c
                        .release(pb::ReleaseRequest {
                            lease_id: lease.into_inner().lease_id,
                            ..Default::default()
                        })
                        .await;
                }
            })
        })
        .collect()
}

/// The scheduler's JSON log lines.
fn log_lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("the scheduler's log")
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn is_redis_client_warning(line: &Value) -> bool {
    line["level"] == "WARN"
        && line["target"]
            .as_str()
            .is_some_and(|t| t.starts_with("redis"))
}

fn is_summary(line: &Value) -> bool {
    line["target"] == "voxpool_redis::log_limit"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_failover_under_load_logs_the_redis_clients_warnings_as_a_few_lines() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 1))
        .await
        .expect("cluster");
    let doomed = cluster.primary_port_for_key(&format!("vp:{{{POOL}}}:cap"));
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = format!(
        "[[pools]]\nid = \"{POOL}\"\nprovider = \"espeak\"\n[[pools.upstreams]]\nid = \"u\"\n"
    );
    for k in 0..4 {
        config.push_str(&format!(
            "[[pools.upstreams.keys]]\nid = \"k{k}\"\ncapacity = 2\n"
        ));
    }
    config.push_str(
        "[scheduler]\nwait_poll_ms = 5\nrecovery_window_ms = 0\nstore_replica_ack_timeout_ms = 500\n",
    );
    let config_path = dir.path().join("config.toml");
    std::fs::write(&config_path, config).expect("config");
    let log_path = dir.path().join("scheduler.log");
    let mut c = Command::new(binary("voxpool-scheduler"));
    c.arg("--config")
        .arg(&config_path)
        .args(["--listen", "127.0.0.1:0", "--store", &cluster.url()])
        .env("RUST_LOG", "info")
        .env("VOXPOOL_LOG_FORMAT", "json");
    let scheduler = start_with_stderr(
        c,
        Stdio::from(std::fs::File::create(&log_path).expect("log file")),
    );
    let channel = voxpool_e2e::connect(&scheduler.addr).await;
    let client = PoolSchedulerClient::new(channel);

    let (grants, stop) = (
        Arc::new(Grants::default()),
        Arc::new(AtomicBool::new(false)),
    );
    let tasks = load(&client, &grants, &stop);
    grants.reach(0, 200, "grants before the kill").await;
    cluster.kill_node(doomed);
    let promoted = tokio::task::spawn_blocking(move || {
        let promoted = cluster.wait_promoted(doomed);
        (cluster, promoted)
    });
    let (cluster, _) = promoted.await.expect("a replica promoted");
    let now = grants.count.load(Ordering::SeqCst);
    grants.reach(now, 200, "grants after the promotion").await;
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.expect("caller");
    }

    let lines = log_lines(&log_path);
    let raw = lines.iter().filter(|l| is_redis_client_warning(l)).count();
    let warnings = lines.iter().filter(|l| l["level"] == "WARN").count();
    eprintln!(
        "cluster failover under {CALLERS} callers: {raw} redis client warning lines, {warnings} warning lines in all"
    );
    assert!(
        raw <= 3,
        "{raw} redis client warning lines in one failover (one per 10 s at most): {:?}",
        lines
            .iter()
            .filter(|l| is_redis_client_warning(l))
            .take(5)
            .collect::<Vec<_>>()
    );
    // What was held back is counted: the summary comes at the end of its 10 s window.
    let limit = Instant::now() + Duration::from_secs(15);
    let summary = loop {
        if let Some(s) = log_lines(&log_path).into_iter().find(is_summary) {
            break s;
        }
        assert!(Instant::now() < limit, "no summary line within 15 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        summary["fields"]["suppressed"].as_u64() > Some(0),
        "{summary}"
    );
    drop(scheduler);
    drop(cluster);
}
