//! Tests that run the real `voxpool-scheduler` binary: two replicas on one Redis, a replica
//! killed with SIGKILL, Redis going away and coming back, a Redis not up yet at start-up
//! (waited for, NOT_SERVING meanwhile), and start-up failures (configuration only).

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::Command,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use tonic::{Code, transport::Channel};
use tonic_health::pb::health_check_response::ServingStatus;
use voxpool_proto::scheduler::v1::{self as pb, pool_scheduler_client::PoolSchedulerClient};
use voxpool_testkit::RedisServer;

#[path = "common/replica.rs"]
mod replica;

use replica::{BIN, Replica, client, spawn_args, wait_health};

fn write_config(dir: &Path, keys: usize, capacity: u32) -> PathBuf {
    write_config_with(dir, keys, capacity, "recovery_window_ms = 0\n")
}

/// Like [`write_config`], with `scheduler_lines` in the `[scheduler]` table.
fn write_config_with(dir: &Path, keys: usize, capacity: u32, scheduler_lines: &str) -> PathBuf {
    let mut t = String::from("[[pools]]\nid = \"p\"\nprovider = \"espeak\"\n");
    for u in 0..2 {
        t.push_str(&format!("[[pools.upstreams]]\nid = \"u{u}\"\n"));
        for k in 0..keys / 2 {
            t.push_str(&format!(
                "[[pools.upstreams.keys]]\nid = \"k{k}\"\ncapacity = {capacity}\n"
            ));
        }
    }
    t.push_str("[scheduler]\nwait_poll_ms = 5\n");
    t.push_str(scheduler_lines);
    let path = dir.join("config.toml");
    std::fs::write(&path, t).unwrap();
    path
}

/// Starts a replica on 127.0.0.1:0 and reads its bound address from the first stdout line.
fn spawn(config: &Path, store: &str) -> Replica {
    spawn_with(config, store, &[])
}

fn spawn_with(config: &Path, store: &str, extra: &[&str]) -> Replica {
    let mut args = vec!["--listen", "127.0.0.1:0", "--store", store];
    args.extend_from_slice(extra);
    spawn_args(config, &args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_scheduler_processes_on_one_redis_never_oversell() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), 10, 5);
    let a = spawn(&config, &redis.url());
    let b = spawn(&config, &redis.url());
    let clients = [client(&a).await, client(&b).await];
    // The test's own record of leases held per key, across both replicas. No lease is
    // released before all 50 slots were held at once (signalled, not timed), so the run is
    // guaranteed to push every key to its capacity.
    let held: Arc<Mutex<HashMap<String, i32>>> = Arc::default();
    let peak: Arc<Mutex<HashMap<String, i32>>> = Arc::default();
    let total = Arc::new(std::sync::atomic::AtomicI32::new(0));
    let (saturated_tx, saturated_rx) = tokio::sync::watch::channel(false);
    let saturated_tx = Arc::new(saturated_tx);
    let tasks: Vec<_> = (0..300)
        .map(|i| {
            let mut c = clients[i % 2].clone();
            let (held, peak, total, tx, mut rx) = (
                held.clone(),
                peak.clone(),
                total.clone(),
                saturated_tx.clone(),
                saturated_rx.clone(),
            );
            tokio::spawn(async move {
                for _ in 0..3 {
                    let lease = match c
                        .acquire(pb::AcquireRequest {
                            pool: "p".into(),
                            wait_timeout_ms: 20_000,
                            ..Default::default()
                        })
                        .await
                    {
                        Ok(l) => l.into_inner(),
                        Err(s) => {
                            assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
                            continue;
                        }
                    };
                    {
                        let mut held = held.lock().unwrap();
                        let n = held.entry(lease.key_id.clone()).or_default();
                        *n += 1;
                        let mut peak = peak.lock().unwrap();
                        let p = peak.entry(lease.key_id.clone()).or_default();
                        *p = (*p).max(*n);
                    }
                    if total.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == 50 {
                        tx.send_replace(true);
                    }
                    let _ =
                        tokio::time::timeout(Duration::from_secs(15), rx.wait_for(|s| *s)).await;
                    tokio::task::yield_now().await;
                    *held.lock().unwrap().get_mut(&lease.key_id).unwrap() -= 1;
                    total.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    c.release(pb::ReleaseRequest {
                        lease_id: lease.lease_id,
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert!(*saturated_rx.borrow(), "all 50 slots were held at once");
    let peak = peak.lock().unwrap().clone();
    assert_eq!(peak.len(), 10, "every key used: {peak:?}");
    assert!(
        peak.values().all(|p| *p <= 5),
        "a key exceeded its capacity of 5: {peak:?}"
    );
    assert!(
        peak.values().any(|p| *p == 5),
        "the pool was driven to saturation: {peak:?}"
    );
    let mut c = clients[0].clone();
    let status = c
        .get_pool_status(pb::GetPoolStatusRequest { pool: "p".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status.in_flight, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_of_a_killed_replica_return_within_the_lease_ttl() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), 2, 1);
    let mut a = spawn(&config, &redis.url());
    let b = spawn(&config, &redis.url());
    let mut ca = client(&a).await;
    for _ in 0..2 {
        ca.acquire(pb::AcquireRequest {
            pool: "p".into(),
            lease_ttl_ms: 1_000,
            ..Default::default()
        })
        .await
        .unwrap();
    }
    a.child.kill().unwrap(); // SIGKILL: no release, no goodbye
    a.child.wait().unwrap();
    let mut cb = client(&b).await;
    let err = cb
        .acquire(pb::AcquireRequest {
            pool: "p".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Code::ResourceExhausted,
        "slots still held by the dead replica's leases"
    );
    let started = Instant::now();
    let lease = cb
        .acquire(pb::AcquireRequest {
            pool: "p".into(),
            wait_timeout_ms: 10_000,
            ..Default::default()
        })
        .await
        .expect("a slot returns once the dead replica's lease expires")
        .into_inner();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "returned within the TTL, not the wait bound"
    );
    assert!(
        cb.release(pb::ReleaseRequest {
            lease_id: lease.lease_id,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .released
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_redis_is_unavailable_and_not_serving_then_recovers() {
    let mut redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config_with(dir.path(), 2, 1, "recovery_window_ms = 1500\n");
    let r = spawn(&config, &redis.url());
    let mut c = client(&r).await;
    wait_health(&r.addr, ServingStatus::Serving).await;
    redis.kill();
    let started = Instant::now();
    let err = c
        .acquire(pb::AcquireRequest {
            pool: "p".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(
        err.message().contains("lease store unreachable"),
        "{}",
        err.message()
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "bounded by the store timeout, no hang"
    );
    wait_health(&r.addr, ServingStatus::NotServing).await;
    // Redis comes back empty (no persistence): the scheduler re-seeds, holds grants back for
    // the recovery window (live leases could re-register), then serves again.
    redis.restart_empty();
    wait_health(&r.addr, ServingStatus::Serving).await;
    let recovering = c
        .acquire(pb::AcquireRequest {
            pool: "p".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(recovering.code(), Code::Unavailable, "{recovering:?}");
    assert!(
        recovering.message().contains("is recovering"),
        "{}",
        recovering.message()
    );
    let lease = c
        .acquire(pb::AcquireRequest {
            pool: "p".into(),
            wait_timeout_ms: 10_000,
            ..Default::default()
        })
        .await
        .expect("granted once the window ends")
        .into_inner();
    assert!(
        c.release(pb::ReleaseRequest {
            lease_id: lease.lease_id,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .released
    );
}

#[tokio::test]
async fn listen_accepts_a_host_name() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), 2, 1);
    let r = spawn_args(&config, &["--listen", "localhost:0"]);
    let pools = client(&r)
        .await
        .list_pools(pb::ListPoolsRequest {})
        .await
        .unwrap()
        .into_inner()
        .pools;
    assert_eq!(pools.len(), 1, "served on {}", r.addr);
}

/// A store that is not up yet is no start-up failure (Redis and the schedulers restarting
/// together must not crash-loop): the replica serves health NOT_SERVING and
/// UNAVAILABLE, retries, and serves once the store answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_not_up_yet_is_waited_for_not_serving_then_serving() {
    let mut redis = RedisServer::start();
    redis.kill();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), 2, 1);
    let mut r = spawn(&config, &redis.url());
    wait_health(&r.addr, ServingStatus::NotServing).await;
    let mut c = client(&r).await;
    let refused = c
        .acquire(pb::AcquireRequest {
            pool: "p".into(),
            ..Default::default()
        })
        .await
        .expect_err("no store yet");
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert!(
        refused.message().contains("not connected yet"),
        "{}",
        refused.message()
    );
    assert!(
        r.child.try_wait().unwrap().is_none(),
        "the replica exited instead of waiting for its store"
    );
    redis.restart_empty();
    wait_health(&r.addr, ServingStatus::Serving).await;
    let lease = c
        .acquire(pb::AcquireRequest {
            pool: "p".into(),
            ..Default::default()
        })
        .await
        .expect("granted once the store answers: the pools were seeded")
        .into_inner();
    assert!(!lease.key_id.is_empty(), "{lease:?}");
}

#[test]
fn start_up_failures_exit_non_zero_with_a_one_line_reason() {
    let dir = tempfile::tempdir().unwrap();
    let good = write_config(dir.path(), 2, 1);
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[[pools]]\nid = \"p\"\nprovider = \"espeak\"\ncapacty = 3\n",
    )
    .unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_addr = taken.local_addr().unwrap().to_string();
    // A client token whose variable is unset, and one too short to resist guessing.
    let tokens = |name: &str, var: &str| {
        let path = dir.path().join(name);
        let text = std::fs::read_to_string(&good).unwrap()
            + &format!("[[client_tokens]]\nname = \"synthesis\"\ntoken = {{ env = \"{var}\" }}\n");
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let unset_token = tokens("unset-token.toml", "VOXPOOL_TEST_TOKEN_NEVER_SET");
    let short_token = tokens("short-token.toml", "VOXPOOL_TEST_SHORT_TOKEN");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--config".into(), bad.display().to_string()],
            "bad config",
        ),
        (
            vec![
                "--config".into(),
                dir.path().join("missing.toml").display().to_string(),
            ],
            "does not exist",
        ),
        (
            vec![
                "--config".into(),
                good.display().to_string(),
                "--listen".into(),
                taken_addr.clone(),
            ],
            "cannot listen on",
        ),
        (
            vec![
                "--config".into(),
                good.display().to_string(),
                "--listen".into(),
                "no-port-here".into(),
            ],
            "cannot listen on no-port-here: invalid socket address (--listen takes host:port",
        ),
        (
            vec![
                "--config".into(),
                good.display().to_string(),
                "--store".into(),
                "redis-cluster://:s3cret@127.0.0.1".into(),
            ],
            "has no port",
        ),
        (
            vec![
                "--config".into(),
                good.display().to_string(),
                "--store".into(),
                "mysql://x".into(),
            ],
            "--store must be",
        ),
        (
            vec!["--config".into(), unset_token],
            "client_tokens[0].token: environment variable VOXPOOL_TEST_TOKEN_NEVER_SET is not set",
        ),
        (
            vec!["--config".into(), short_token],
            "client_tokens[0].token: the token of \"synthesis\" has 5 characters; use at least 16",
        ),
    ];
    for (mut args, reason) in cases {
        // Not the default port: a `make run` beside the tests holds 127.0.0.1:50051, and the
        // error under test is not the port's.
        if !args.iter().any(|a| a == "--listen") {
            args.extend(["--listen".into(), "127.0.0.1:0".into()]);
        }
        let out = Command::new(BIN)
            .args(&args)
            .env_remove("VOXPOOL_ADMIN_TOKEN")
            .env_remove("VOXPOOL_TEST_TOKEN_NEVER_SET")
            .env("VOXPOOL_TEST_SHORT_TOKEN", "short")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(
            out.stdout.is_empty(),
            "{args:?}: failed before announcing an address"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().last().unwrap_or_default();
        assert!(
            last.contains(reason),
            "{args:?}: expected {reason:?} in {stderr:?}"
        );
        assert!(!stderr.contains("s3cret"), "{stderr}");
    }
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&good)
        .arg("--check-config")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "OK");
    let out = Command::new(BIN)
        .arg("--config")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/config/example.toml"
        ))
        .arg("--check-config")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the repo's example config loads as is"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_past_the_request_timeout_is_answered_deadline_exceeded_and_leaves_no_waiter() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), 2, 1);
    let r = spawn_with(&config, "memory", &["--request-timeout", "300ms"]);
    let mut c = client(&r).await;
    for _ in 0..2 {
        c.acquire(pb::AcquireRequest {
            pool: "p".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    // The pool is full and the caller would wait 30 s: the server's 300 ms ends it first.
    let err = c
        .acquire(pb::AcquireRequest {
            pool: "p".into(),
            wait_timeout_ms: 30_000,
            ..Default::default()
        })
        .await
        .expect_err("nothing can be granted while both keys are held");
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(
        err.message().contains("300ms (--request-timeout)"),
        "{}",
        err.message()
    );
    let status = c
        .get_pool_status(pb::GetPoolStatusRequest { pool: "p".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        status.waiters, 0,
        "the stopped wait left its place in the queue"
    );
    assert_eq!(status.in_flight, 2, "the stopped wait holds no slot");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_beyond_max_concurrent_requests_is_shed_with_unavailable_but_waiters_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), 2, 1);
    let redis = RedisServer::start();
    let r = spawn_with(&config, &redis.url(), &["--max-concurrent-requests", "2"]);
    let mut c = client(&r).await;
    for _ in 0..2 {
        c.acquire(pb::AcquireRequest {
            pool: "p".into(),
            ..Default::default()
        })
        .await
        .expect("fill the pool");
    }
    // Waiting Acquires step aside from the in-flight limit (they have scheduler.max_waiters):
    // five of them wait while the limit is 2, and status is still answered. (Each arrives
    // alone: until it joins the line, an Acquire counts like any request.)
    let mut waiters = Vec::new();
    for n in 1..=5 {
        let mut w = c.clone();
        waiters.push(tokio::spawn(async move {
            w.acquire(pb::AcquireRequest {
                pool: "p".into(),
                wait_timeout_ms: 30_000,
                ..Default::default()
            })
            .await
        }));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // Until waiter n has joined the line it holds one of the 2 slots, and the previous
            // status call may still hold the other while its answer is on the way: a status
            // call shed in that window is the limit working, not a waiter counted.
            match c
                .get_pool_status(pb::GetPoolStatusRequest { pool: "p".into() })
                .await
            {
                Ok(s) if s.get_ref().waiters == n => break,
                Ok(_) => {}
                Err(e) if e.message().contains("server overloaded") => {}
                Err(e) => panic!("status while waiter {n} joins: {e:?}"),
            }
            assert!(Instant::now() < deadline, "waiter {n} never queued");
        }
    }
    // Five waiters in line take none of the 2 slots: status is answered.
    let s = c
        .get_pool_status(pb::GetPoolStatusRequest { pool: "p".into() })
        .await
        .expect("status is answered while five requests wait")
        .into_inner();
    assert_eq!(s.waiters, 5);
    // Requests that do work hold their slot: with Redis stalled each status call holds one
    // for the store timeout, so of 10 sent at once at most 2 run and the rest are shed.
    redis.pause();
    let calls: Vec<_> = (0..10)
        .map(|_| {
            let mut c = c.clone();
            tokio::spawn(async move {
                c.get_pool_status(pb::GetPoolStatusRequest { pool: "p".into() })
                    .await
            })
        })
        .collect();
    let mut shed = 0;
    for call in calls {
        let err = call
            .await
            .unwrap()
            .expect_err("nothing answers from a stalled store");
        assert_eq!(err.code(), Code::Unavailable, "{err:?}");
        if err.message().contains("server overloaded") {
            shed += 1;
        }
    }
    redis.resume();
    assert!(
        shed >= 8,
        "{shed} of 10 requests were shed beyond the limit of 2"
    );
    for w in waiters {
        w.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serving_accepts_tls_clients_and_refuses_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), 2, 1);
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).unwrap();
    let r = spawn_with(
        &config,
        "memory",
        &[
            "--tls-cert",
            cert_path.to_str().unwrap(),
            "--tls-key",
            key_path.to_str().unwrap(),
        ],
    );
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(cert.cert.pem()))
        .domain_name("localhost");
    let channel = Channel::from_shared(format!("https://{}", r.addr))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap_or_else(|e| panic!("TLS connect: {e}: {:?}", std::error::Error::source(&e)));
    let mut c = PoolSchedulerClient::new(channel);
    let status = c
        .get_pool_status(pb::GetPoolStatusRequest { pool: "p".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status.capacity, 2);
    let plain = PoolSchedulerClient::connect(format!("http://{}", r.addr)).await;
    let refused = match plain {
        Err(_) => true,
        Ok(mut p) => p
            .get_pool_status(pb::GetPoolStatusRequest { pool: "p".into() })
            .await
            .is_err(),
    };
    assert!(
        refused,
        "a plaintext client must not get an answer from a TLS server"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_waiting_acquires_and_exits_promptly() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), 2, 1);
    let mut r = spawn(&config, "memory");
    let mut c = client(&r).await;
    for _ in 0..2 {
        c.acquire(pb::AcquireRequest {
            pool: "p".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let mut w = c.clone();
    let waiter = tokio::spawn(async move {
        w.acquire(pb::AcquireRequest {
            pool: "p".into(),
            wait_timeout_ms: 600_000,
            ..Default::default()
        })
        .await
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while c
        .get_pool_status(pb::GetPoolStatusRequest { pool: "p".into() })
        .await
        .unwrap()
        .into_inner()
        .waiters
        != 1
    {
        assert!(Instant::now() < deadline, "waiter never queued");
        tokio::task::yield_now().await;
    }
    let signalled = Instant::now();
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(r.child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    let err = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter is answered, not held for its 10-minute wait")
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(err.message().contains("shutting down"), "{}", err.message());
    let exit = tokio::task::spawn_blocking(move || r.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(exit.success(), "graceful exit, got {exit:?}");
    assert!(
        signalled.elapsed() < Duration::from_secs(20),
        "drained promptly"
    );
}

/// Whether `redis` holds the fleet's store-kept lease secret (`vp:lease-secret`).
fn has_lease_secret(redis: &RedisServer) -> bool {
    let out = Command::new("redis-cli")
        .arg("-s")
        .arg(redis.socket())
        .args(["EXISTS", "vp:lease-secret"])
        .output()
        .expect("run redis-cli EXISTS");
    String::from_utf8_lossy(&out.stdout).trim() == "1"
}

async fn release(c: &mut PoolSchedulerClient<Channel>, lease_id: &str) -> Result<bool, Code> {
    c.release(pb::ReleaseRequest {
        lease_id: lease_id.to_owned(),
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner().released)
    .map_err(|s| s.code())
}

async fn acquire(c: &mut PoolSchedulerClient<Channel>) -> pb::Lease {
    c.acquire(pb::AcquireRequest {
        pool: "p".into(),
        ..Default::default()
    })
    .await
    .expect("acquire")
    .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_a_store_kept_lease_secret_and_put_it_back_after_a_flush() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), 2, 5);
    let a = spawn(&config, &redis.url());
    wait_health(&a.addr, ServingStatus::Serving).await;
    let b = spawn(&config, &redis.url());
    wait_health(&b.addr, ServingStatus::Serving).await;
    let (mut ca, mut cb) = (client(&a).await, client(&b).await);
    // No secret configured: one replica's lease verifies on the other.
    let lease = acquire(&mut ca).await;
    assert_eq!(release(&mut cb, &lease.lease_id).await, Ok(true));
    // The store loses everything, the secret with it; a live lease stays verifiable: the
    // replicas put their secret back (signalled by the key reappearing) before a replica
    // started afterwards creates another.
    let held = acquire(&mut ca).await;
    redis.flushall();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !has_lease_secret(&redis) {
        assert!(
            Instant::now() < deadline,
            "no replica put the lease secret back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let c = spawn(&config, &redis.url());
    wait_health(&c.addr, ServingStatus::Serving).await;
    let mut cc = client(&c).await;
    assert_eq!(
        release(&mut cc, &held.lease_id).await,
        Ok(false),
        "verified (the flush lost the lease itself, so nothing was freed)"
    );
    // A made-up id is refused on every replica.
    let forged = held.lease_id.replacen(".", ".9", 1);
    for cl in [&mut ca, &mut cb, &mut cc] {
        assert_eq!(release(cl, &forged).await, Err(Code::PermissionDenied));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_lease_secret_still_verifies_leases_signed_before_the_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = ("o".repeat(40), "n".repeat(40));
    let secret_lines = |current: &str, previous: Option<&str>| {
        let mut t = format!(
            "recovery_window_ms = 0\nlease_secret = {{ file = \"{}\" }}\n",
            dir.path().join(current).display()
        );
        if let Some(p) = previous {
            t.push_str(&format!(
                "lease_secret_previous = {{ file = \"{}\" }}\n",
                dir.path().join(p).display()
            ));
        }
        t
    };
    std::fs::write(dir.path().join("old"), &old).unwrap();
    std::fs::write(dir.path().join("new"), &new).unwrap();
    let redis = RedisServer::start();
    let spawn_in = |name: &str, lines: String| {
        let sub = dir.path().join(name);
        std::fs::create_dir_all(&sub).unwrap();
        let config = write_config_with(&sub, 2, 5, &lines);
        spawn(&config, &redis.url())
    };
    let before = spawn_in("before", secret_lines("old", None));
    // Step 1 of the rotation in docs/SECURITY.md: the new secret accepted, not signing yet.
    let adding = spawn_in("adding", secret_lines("old", Some("new")));
    let during = spawn_in("during", secret_lines("new", Some("old")));
    let after = spawn_in("after", secret_lines("new", None));
    let (mut cb, mut cn, mut cd, mut ca) = (
        client(&before).await,
        client(&adding).await,
        client(&during).await,
        client(&after).await,
    );
    let signed_before = acquire(&mut cb).await;
    let signed_before_2 = acquire(&mut cb).await;
    let signed_during = acquire(&mut cd).await;
    let signed_during_2 = acquire(&mut cd).await;
    let signed_adding = acquire(&mut cn).await;
    // A replica still at step 1 verifies what a replica at step 2 signs, and the reverse.
    assert_eq!(release(&mut cn, &signed_during_2.lease_id).await, Ok(true));
    assert_eq!(release(&mut cd, &signed_adding.lease_id).await, Ok(true));
    // During the rotation both secrets verify; only the new one signs.
    assert_eq!(release(&mut cd, &signed_before.lease_id).await, Ok(true));
    assert_eq!(release(&mut ca, &signed_during.lease_id).await, Ok(true));
    // Once the previous secret is dropped, what it signed is refused.
    assert_eq!(
        release(&mut ca, &signed_before_2.lease_id).await,
        Err(Code::PermissionDenied)
    );
}
