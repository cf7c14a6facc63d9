//! Scheduler benchmark (`make bench`; not a test). Prints a markdown report measured side by
//! side in one run on one private redis-server:
//!
//! 1. Acquire+Release pairs/s through gRPC with the memory store and with the Redis store,
//!    and the raw ceiling: the same Lua scripts called directly on the same Redis (no gRPC).
//!    Ratio gRPC+Redis / raw (floor 0.5).
//! 2. Acquire latency p50/p99 through gRPC+Redis under an open-loop load of half the measured
//!    maximum throughput (floor p99 <= 2 ms).
//! 3. Cost of a 10,000-key pool relative to a 10-key pool, raw scripts (floor <= 1.2x).
//! 4. Cost of the replica acknowledgement (`scheduler.store_replica_acks`), on a real Sentinel
//!    setup (primary + replica + three sentinels): raw pairs/s and single-caller Acquire
//!    latency with every grant waiting for the replica (`WAIT 1`) and without, same primary.
//! 5. Cost of the recovery window: how long after a FLUSHALL the first waiting Acquire is
//!    granted, with the default window (5 s), on the Redis store.
//!
//! Each measurement runs `BENCH_ROUNDS` times, interleaved (gRPC+memory, gRPC+Redis, raw, then
//! again), and the report gives the median with the range: on a shared machine a neighbour's
//! burst then moves one round, not one side of a ratio. Ratios are taken per round, between
//! measurements made back to back.
//!
//! The server is the binary's `server::serve` in this process, with the binary's allocator
//! (mimalloc), log subscriber and release profile (fat LTO); the benchmark's gRPC client runs
//! in the same process, so client, server and Redis share the machine's cores.
//!
//! Knobs (environment): `BENCH_SECONDS` per measurement (default 2), `BENCH_ROUNDS`
//! (default 5), `BENCH_CONCURRENCY` closed-loop workers (default 32).

/// The allocator the `voxpool-scheduler` binary uses (see its `main.rs`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use tokio_util::sync::CancellationToken;
use voxpool_config::Config;
use voxpool_proto::scheduler::v1::{self as pb, pool_scheduler_client::PoolSchedulerClient};
use voxpool_runtime::auth::AdminAuth;
use voxpool_scheduler::{
    model::{AcquireParams, AcquireResult, KeySpec, LeaseToken, PoolSpec},
    server,
    store::{
        LeaseStore,
        memory::MemoryStore,
        redis::{RedisOptions, RedisStore},
    },
};
use voxpool_testkit::RedisServer;

mod common;

use common::{RETRIED, closed_loop, grpc_retryable, pct, retrying, store_retryable, verdict};

type Client = PoolSchedulerClient<tonic::transport::Channel>;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The gRPC bench pool: `keys` keys of capacity 100, so an open-loop burst (requests keep
/// arriving while the machine stalls) queues instead of finding the pool full.
fn pool_config(keys: usize) -> Config {
    let mut t = String::from(
        "[[pools]]\nid = \"bench\"\nprovider = \"espeak\"\n[[pools.upstreams]]\nid = \"u\"\n",
    );
    for k in 0..keys {
        t.push_str(&format!(
            "[[pools.upstreams.keys]]\nid = \"k{k}\"\ncapacity = 100\n"
        ));
    }
    Config::from_toml_str(&t).expect("bench config")
}

/// Serves `config` over gRPC on 127.0.0.1:0 with `store` (the same `server::serve` the binary
/// runs) and connects a client to it. Cancel the token to stop the server.
async fn serve(store: Arc<dyn LeaseStore>, config: &Config) -> (Client, CancellationToken) {
    store
        .seed(&PoolSpec::from_config(config))
        .await
        .expect("seed");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let shutdown = CancellationToken::new();
    let (c, s) = (config.clone(), shutdown.clone());
    tokio::spawn(async move { server::serve(listener, store, &c, AdminAuth::disabled(), s).await });
    let client = Client::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    (client, shutdown)
}

/// One Acquire+Release pair through gRPC; returns the Acquire latency.
async fn grpc_pair(client: Client) -> Duration {
    let sent = Instant::now();
    let lease = retrying("acquire", grpc_retryable, || {
        let mut client = client.clone();
        async move {
            client
                .acquire(pb::AcquireRequest {
                    pool: "bench".into(),
                    ..Default::default()
                })
                .await
        }
    })
    .await
    .into_inner();
    let latency = sent.elapsed();
    retrying("release", grpc_retryable, || {
        let (mut client, lease_id) = (client.clone(), lease.lease_id.clone());
        async move {
            client
                .release(pb::ReleaseRequest {
                    lease_id,
                    ..Default::default()
                })
                .await
        }
    })
    .await;
    latency
}

/// One Acquire+Release pair calling the store (the Lua scripts) directly.
async fn raw_pair(store: Arc<dyn LeaseStore>, pool: String) {
    let params = AcquireParams {
        pool,
        token: LeaseToken::random(),
        idempotent: false,
        exclude_keys: vec![],
        upstream_ids: vec![],
        ttl_ms: 30_000,
        priority: Default::default(),
        tenant: String::new(),
        join_line: false,
        ticket_ttl_ms: 0,
        characters: 0,
    };
    let acquired = retrying("acquire", store_retryable, || store.acquire(&params)).await;
    let AcquireResult::Granted(lease) = acquired else {
        panic!("bench pool must never be full");
    };
    retrying("release", store_retryable, || store.release(&lease.id)).await;
}

async fn grpc_pairs_per_sec(client: &Client, workers: u64, secs: u64) -> f64 {
    let client = client.clone();
    closed_loop(workers, secs, move || {
        let c = client.clone();
        async move {
            grpc_pair(c).await;
        }
    })
    .await
}

async fn raw_pairs_per_sec(
    store: &Arc<dyn LeaseStore>,
    pool: &str,
    workers: u64,
    secs: u64,
) -> f64 {
    let (store, pool) = (store.clone(), pool.to_owned());
    closed_loop(workers, secs, move || raw_pair(store.clone(), pool.clone())).await
}

/// Open loop at `rate` pairs/s for `secs`; returns Acquire latencies (µs), sorted.
///
/// Arrivals are evenly spaced by a pacing OS thread: tokio timers tick in whole milliseconds,
/// which would send the requests of each millisecond as one burst.
async fn acquire_latencies(client: &Client, rate: f64, secs: u64) -> Vec<u64> {
    let interval = Duration::from_secs_f64(1.0 / rate.max(1.0));
    let count = (rate * secs as f64) as u32;
    let handle = tokio::runtime::Handle::current();
    let client = client.clone();
    let pacer = std::thread::spawn(move || {
        let start = Instant::now();
        let mut tasks = Vec::with_capacity(count as usize);
        for i in 0..count {
            if let Some(wait) = (start + interval * i).checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            tasks.push(handle.spawn(grpc_pair(client.clone())));
        }
        tasks
    });
    let tasks = tokio::task::spawn_blocking(move || pacer.join().expect("pacer"))
        .await
        .expect("pacer join");
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.expect("open-loop request").as_micros() as u64);
    }
    out.sort_unstable();
    out
}

/// Median and range of one measurement's rounds.
struct Rounds(Vec<f64>);

impl Rounds {
    fn median(&self) -> f64 {
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        match v.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }

    /// `median (min–max)` with `decimals` digits.
    fn show(&self, decimals: usize) -> String {
        let min = self.0.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.0.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!(
            "{:.decimals$} ({:.decimals$}–{:.decimals$})",
            self.median(),
            min,
            max
        )
    }
}

/// Raw-script options on `url` with `replica_acks` acknowledgements per grant.
async fn store_at(url: &str, replica_acks: u32) -> Arc<dyn LeaseStore> {
    Arc::new(
        RedisStore::connect(
            url,
            RedisOptions {
                timeout: Duration::from_secs(2),
                reap_batch: 64,
                replica_acks: Some(replica_acks),
                replica_ack_timeout: Duration::from_millis(100),
                recovery_window_ms: 0,
                key_prefix: "vp".into(),
                recovery_lease_ttl_ms: 30_000,
            },
        )
        .await
        .expect("redis"),
    )
}

/// Median latency (ms) of `n` sequential raw Acquire+Release pairs: one caller, no queueing.
async fn sequential_pair_ms(store: &Arc<dyn LeaseStore>, pool: &str, n: u32) -> f64 {
    let mut took = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let sent = Instant::now();
        raw_pair(store.clone(), pool.to_owned()).await;
        took.push(sent.elapsed().as_micros() as u64);
    }
    took.sort_unstable();
    pct(&took, 0.5)
}

/// Section 4: pairs/s and one caller's pair latency with and without `WAIT 1`.
async fn replica_ack_cost(rounds: u64, workers: u64, secs: u64) -> [Rounds; 5] {
    let sentinel = tokio::task::spawn_blocking(voxpool_testkit::RedisSentinel::start)
        .await
        .expect("sentinel");
    let acked = store_at(&sentinel.url(), 1).await;
    let unacked = store_at(&sentinel.url(), 0).await;
    let spec = PoolSpec {
        pool: "bench".into(),
        keys: (0..10)
            .map(|k| KeySpec {
                key_id: format!("u/k{k}"),
                capacity: 100,
                quota: None,
            })
            .collect(),
        batch_max_share: 1.0,
        adaptive: true,
    };
    acked.seed(&[spec]).await.expect("seed");
    let (mut on, mut off, mut ratio, mut lat_on, mut lat_off) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let a = raw_pairs_per_sec(&acked, "bench", workers, secs).await;
        let u = raw_pairs_per_sec(&unacked, "bench", workers, secs).await;
        on.push(a);
        off.push(u);
        ratio.push(a / u);
        lat_on.push(sequential_pair_ms(&acked, "bench", 500).await);
        lat_off.push(sequential_pair_ms(&unacked, "bench", 500).await);
    }
    [
        Rounds(on),
        Rounds(off),
        Rounds(ratio),
        Rounds(lat_on),
        Rounds(lat_off),
    ]
}

/// Section 5: ms from a FLUSHALL to the first grant of a waiting Acquire (default window).
async fn recovery_cost(redis: &RedisServer, rounds: u64) -> Rounds {
    let mut config = pool_config(10);
    config.scheduler.recovery_window_ms =
        voxpool_config::SchedulerSettings::default().recovery_window_ms;
    let store: Arc<dyn LeaseStore> = Arc::new(
        RedisStore::connect(&redis.url(), RedisOptions::from_settings(&config.scheduler))
            .await
            .expect("redis"),
    );
    let (mut client, stop) = serve(store, &config).await;
    let mut took = Vec::new();
    for _ in 0..rounds {
        redis.flushall();
        let sent = Instant::now();
        let lease = client
            .acquire(pb::AcquireRequest {
                pool: "bench".into(),
                wait_timeout_ms: 30_000,
                ..Default::default()
            })
            .await
            .expect("granted after the window")
            .into_inner();
        took.push(sent.elapsed().as_secs_f64() * 1000.0);
        client
            .release(pb::ReleaseRequest {
                lease_id: lease.lease_id,
                ..Default::default()
            })
            .await
            .expect("release");
    }
    stop.cancel();
    Rounds(took)
}

fn main() {
    let secs = env_or("BENCH_SECONDS", 2);
    let rounds = env_or("BENCH_ROUNDS", 5).max(1);
    let workers = env_or("BENCH_CONCURRENCY", 32);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let redis = RedisServer::start();
    // The binary's log subscriber (RUST_LOG, default info): it formats every RPC's span.
    voxpool_runtime::telemetry::init_logging();
    rt.block_on(async {
        let small = pool_config(10);
        let timeout = Duration::from_secs(2);
        let redis_store: Arc<dyn LeaseStore> = Arc::new(
            RedisStore::connect(
                &redis.url(),
                RedisOptions {
                    timeout,
                    reap_batch: 64,
                    replica_acks: Some(0),
                    replica_ack_timeout: Duration::from_millis(100),
                    recovery_window_ms: 0,
                    key_prefix: "vp".into(),
                    recovery_lease_ttl_ms: 30_000,
                },
            )
            .await
            .expect("redis"),
        );
        let (mem_client, mem_stop) = serve(Arc::new(MemoryStore::new()), &small).await;
        let (redis_client, redis_stop) = serve(redis_store.clone(), &small).await;

        let (mut grpc_memory, mut grpc_redis, mut raw, mut ratio) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            grpc_memory.push(grpc_pairs_per_sec(&mem_client, workers, secs).await);
            let g = grpc_pairs_per_sec(&redis_client, workers, secs).await;
            let r = raw_pairs_per_sec(&redis_store, "bench", workers, secs).await;
            grpc_redis.push(g);
            raw.push(r);
            ratio.push(g / r);
        }
        mem_stop.cancel();
        let (grpc_memory, grpc_redis, raw, ratio) = (
            Rounds(grpc_memory),
            Rounds(grpc_redis),
            Rounds(raw),
            Rounds(ratio),
        );

        let half = grpc_redis.median() / 2.0;
        let (mut p50, mut p99) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let lat = acquire_latencies(&redis_client, half, secs).await;
            p50.push(pct(&lat, 0.50));
            p99.push(pct(&lat, 0.99));
        }
        redis_stop.cancel();
        let (p50, p99) = (Rounds(p50), Rounds(p99));

        let spec = |pool: &str, keys: usize| PoolSpec {
            pool: pool.into(),
            keys: (0..keys)
                .map(|k| KeySpec {
                    key_id: format!("u/k{k}"),
                    capacity: 10,
                    quota: None,
                })
                .collect(),
            batch_max_share: 1.0,
            adaptive: true,
        };
        redis_store
            .seed(&[spec("bench-10k", 10_000), spec("bench-10", 10)])
            .await
            .expect("seed big");
        let (mut ten, mut ten_k, mut cost) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let t = raw_pairs_per_sec(&redis_store, "bench-10", workers, secs).await;
            let tk = raw_pairs_per_sec(&redis_store, "bench-10k", workers, secs).await;
            ten.push(t);
            ten_k.push(tk);
            cost.push(t / tk);
        }
        let (ten, ten_k, cost) = (Rounds(ten), Rounds(ten_k), Rounds(cost));
        let [acks_on, acks_off, acks_ratio, lat_on, lat_off] =
            replica_ack_cost(rounds, workers, secs).await;
        let recovery = recovery_cost(&redis, rounds.min(3)).await;

        println!("## Scheduler\n");
        println!(
            "{workers} closed-loop workers; {rounds} interleaved rounds of {secs} s per \
             measurement, shown as median (min–max); one private redis-server on a unix socket.\n"
        );
        println!("| measurement | value | floor | |");
        println!("|---|---|---|---|");
        println!(
            "| Acquire+Release pairs/s, gRPC + memory store | {} | | |",
            grpc_memory.show(0)
        );
        println!(
            "| Acquire+Release pairs/s, gRPC + Redis store | {} | | |",
            grpc_redis.show(0)
        );
        println!(
            "| Acquire+Release pairs/s, raw Lua on the same Redis | {} | | |",
            raw.show(0)
        );
        println!(
            "| ratio gRPC+Redis / raw | {} | >= 0.5 | {} |",
            ratio.show(3),
            verdict(ratio.median() >= 0.5)
        );
        println!(
            "| Acquire p50 at {half:.0} pairs/s (half of max), ms | {} | | |",
            p50.show(3)
        );
        println!(
            "| Acquire p99 at {half:.0} pairs/s (half of max), ms | {} | <= 2 | {} |",
            p99.show(3),
            verdict(p99.median() <= 2.0)
        );
        println!("| raw pairs/s, 10-key pool | {} | | |", ten.show(0));
        println!("| raw pairs/s, 10,000-key pool | {} | | |", ten_k.show(0));
        println!(
            "| cost 10,000 keys / 10 keys | {} | <= 1.2 | {} |",
            cost.show(3),
            verdict(cost.median() <= 1.2)
        );
        println!(
            "| Sentinel: raw pairs/s, grants wait for 1 replica (`WAIT 1`) | {} | | |",
            acks_on.show(0)
        );
        println!(
            "| Sentinel: raw pairs/s, no replica acknowledgement | {} | | |",
            acks_off.show(0)
        );
        println!(
            "| ratio with / without replica acknowledgement | {} | | |",
            acks_ratio.show(3)
        );
        println!(
            "| Sentinel: one caller's pair latency with `WAIT 1`, ms (p50 of 500) | {} | | |",
            lat_on.show(3)
        );
        println!(
            "| Sentinel: one caller's pair latency without, ms (p50 of 500) | {} | | |",
            lat_off.show(3)
        );
        println!(
            "| first grant after a FLUSHALL (recovery window 5000 ms), ms | {} | | |",
            recovery.show(0)
        );
        println!(
            "| calls retried as the contract says (withdrawn grants, UNAVAILABLE) | {} | | |",
            RETRIED.load(std::sync::atomic::Ordering::Relaxed)
        );
    });
}
