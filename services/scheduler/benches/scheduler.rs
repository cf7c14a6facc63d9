//! Scheduler benchmark (`make bench`; not a test). Prints a markdown report measured side by
//! side in one run on one private redis-server:
//!
//! 1. Acquire+Release pairs/s through gRPC with the memory store and with the Redis store,
//!    and the raw ceiling: the same Lua scripts called directly on the same Redis (no gRPC).
//!    Ratio gRPC+Redis / raw (floor 0.5).
//! 2. Acquire latency p50/p99 through gRPC+Redis under an open-loop load of half the measured
//!    maximum throughput (floor p99 <= 2 ms).
//! 3. Cost of a 10,000-key pool relative to a 10-key pool, raw scripts (floor <= 1.2x).
//!
//! Knobs (environment): `BENCH_SECONDS` per measurement (default 3), `BENCH_CONCURRENCY`
//! closed-loop workers (default 32).

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use tokio_util::sync::CancellationToken;
use voxpool_proto::scheduler::v1::{self as pb, pool_scheduler_client::PoolSchedulerClient};
use voxpool_scheduler::{
    model::{AcquireParams, AcquireResult, KeySpec, LeaseToken, PoolSpec},
    server,
    store::{LeaseStore, memory::MemoryStore, redis::RedisStore},
};
use voxpool_shared::{auth::AdminAuth, config::Config, testing::RedisServer};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pool_config(keys: usize) -> Config {
    let mut t = String::from(
        "[[pools]]\nid = \"bench\"\nprovider = \"espeak\"\n[[pools.upstreams]]\nid = \"u\"\n",
    );
    for k in 0..keys {
        t.push_str(&format!(
            "[[pools.upstreams.keys]]\nid = \"k{k}\"\ncapacity = 10\n"
        ));
    }
    Config::from_toml_str(&t).expect("bench config")
}

async fn serve(
    store: Arc<dyn LeaseStore>,
    config: &Config,
) -> (
    PoolSchedulerClient<tonic::transport::Channel>,
    CancellationToken,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let shutdown = CancellationToken::new();
    let (c, s) = (config.clone(), shutdown.clone());
    tokio::spawn(async move { server::serve(listener, store, &c, AdminAuth::disabled(), s).await });
    let client = PoolSchedulerClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    (client, shutdown)
}

/// Closed loop: `workers` tasks each doing Acquire+Release back to back for `secs`.
async fn pairs_per_sec_grpc(
    client: &PoolSchedulerClient<tonic::transport::Channel>,
    workers: u64,
    secs: u64,
) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (mut c, done, stop) = (client.clone(), done.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let lease = c
                        .acquire(pb::AcquireRequest {
                            pool: "bench".into(),
                            ..Default::default()
                        })
                        .await
                        .expect("acquire")
                        .into_inner();
                    c.release(pb::ReleaseRequest {
                        lease_id: lease.lease_id,
                    })
                    .await
                    .expect("release");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let n = done.load(Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    for t in tasks {
        let _ = t.await;
    }
    n as f64 / elapsed
}

/// Same loop calling the store (Lua scripts) directly.
async fn pairs_per_sec_raw(
    store: &Arc<dyn LeaseStore>,
    pool: &str,
    workers: u64,
    secs: u64,
) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (store, done, stop, pool) =
                (store.clone(), done.clone(), stop.clone(), pool.to_owned());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let params = AcquireParams {
                        pool: pool.clone(),
                        token: LeaseToken::random(),
                        exclude_keys: vec![],
                        upstream_ids: vec![],
                        ttl_ms: 30_000,
                    };
                    let AcquireResult::Granted(lease) =
                        store.acquire(&params).await.expect("acquire")
                    else {
                        panic!("bench pool must never be full");
                    };
                    store.release(&lease.id).await.expect("release");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let n = done.load(Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    for t in tasks {
        let _ = t.await;
    }
    n as f64 / elapsed
}

/// Open loop at `rate` pairs/s for `secs`; returns Acquire latencies (µs), sorted.
async fn acquire_latencies(
    client: &PoolSchedulerClient<tonic::transport::Channel>,
    rate: f64,
    secs: u64,
) -> Vec<u64> {
    let interval = Duration::from_secs_f64(1.0 / rate.max(1.0));
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let end = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    while Instant::now() < end {
        ticker.tick().await;
        let mut c = client.clone();
        tasks.push(tokio::spawn(async move {
            let t0 = Instant::now();
            let lease = c
                .acquire(pb::AcquireRequest {
                    pool: "bench".into(),
                    ..Default::default()
                })
                .await
                .expect("acquire")
                .into_inner();
            let us = t0.elapsed().as_micros() as u64;
            c.release(pb::ReleaseRequest {
                lease_id: lease.lease_id,
            })
            .await
            .expect("release");
            us
        }));
    }
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.expect("task"));
    }
    out.sort_unstable();
    out
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

fn verdict(ok: bool) -> &'static str {
    if ok { "meets floor" } else { "BELOW FLOOR" }
}

fn main() {
    let secs = env_or("BENCH_SECONDS", 3);
    let workers = env_or("BENCH_CONCURRENCY", 32);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let redis = RedisServer::start();
    rt.block_on(async {
        let small = pool_config(10);
        let timeout = Duration::from_secs(2);

        let memory: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
        memory.seed(&PoolSpec::from_config(&small)).await.expect("seed");
        let (mem_client, mem_stop) = serve(memory, &small).await;
        let grpc_memory = pairs_per_sec_grpc(&mem_client, workers, secs).await;
        mem_stop.cancel();

        let redis_store: Arc<dyn LeaseStore> = Arc::new(RedisStore::connect(&redis.url(), timeout, 64).await.expect("redis"));
        redis_store.seed(&PoolSpec::from_config(&small)).await.expect("seed");
        let (redis_client, redis_stop) = serve(redis_store.clone(), &small).await;
        let grpc_redis = pairs_per_sec_grpc(&redis_client, workers, secs).await;
        let raw_redis = pairs_per_sec_raw(&redis_store, "bench", workers, secs).await;

        let lat = acquire_latencies(&redis_client, grpc_redis / 2.0, secs).await;
        redis_stop.cancel();

        let big = PoolSpec {
            pool: "bench-10k".into(),
            keys: (0..10_000).map(|k| KeySpec { key_id: format!("u/k{k}"), capacity: 10 }).collect(),
        };
        let small_raw = PoolSpec {
            pool: "bench-10".into(),
            keys: (0..10).map(|k| KeySpec { key_id: format!("u/k{k}"), capacity: 10 }).collect(),
        };
        redis_store.seed(&[big, small_raw]).await.expect("seed big");
        let ten = pairs_per_sec_raw(&redis_store, "bench-10", workers, secs).await;
        let ten_k = pairs_per_sec_raw(&redis_store, "bench-10k", workers, secs).await;

        let ratio = grpc_redis / raw_redis;
        let (p50, p99) = (pct(&lat, 0.50), pct(&lat, 0.99));
        let cost = ten / ten_k;
        println!("## Scheduler\n");
        println!("{workers} closed-loop workers, {secs} s per measurement, one private redis-server on a unix socket.\n");
        println!("| measurement | value | floor | |");
        println!("|---|---|---|---|");
        println!("| Acquire+Release pairs/s, gRPC + memory store | {grpc_memory:.0} | | |");
        println!("| Acquire+Release pairs/s, gRPC + Redis store | {grpc_redis:.0} | | |");
        println!("| Acquire+Release pairs/s, raw Lua on the same Redis | {raw_redis:.0} | | |");
        println!("| ratio gRPC+Redis / raw | {ratio:.2} | >= 0.5 | {} |", verdict(ratio >= 0.5));
        println!(
            "| Acquire p50 / p99 at {:.0} pairs/s (half of max), ms | {p50:.3} / {p99:.3} | p99 <= 2 | {} |",
            grpc_redis / 2.0,
            verdict(p99 <= 2.0)
        );
        println!("| raw pairs/s, 10-key pool | {ten:.0} | | |");
        println!("| raw pairs/s, 10,000-key pool | {ten_k:.0} | | |");
        println!("| cost 10,000 keys / 10 keys | {cost:.2} | <= 1.2 | {} |", verdict(cost <= 1.2));
    });
}
