//! Traffic-class benchmark (`make bench`; not a test): how traffic classes share a
//! pool under load. Two scheduler replicas (the
//! binary's `server::serve`, in this process, each with its own Redis store connection and
//! wake-up subscriber) on one private redis-server. Pool `live`: one key of capacity 10,
//! `batch_max_share = 0.8`; a lease is held for the service time (50 ms) and released.
//!
//! 1. **Classes under a batch flood.** A BATCH client keeps 5x the capacity waiting (50 loops,
//!    25 per replica); an INTERACTIVE client opens Acquires at 10 % of the capacity (20/s),
//!    alternating replicas. Measured twice, back to back: with classes, and the same load sent
//!    all STANDARD (one FIFO line, as without classes). Reported: INTERACTIVE wait
//!    p50/p99 both ways (floor with classes: p99 <= 0.5 x the service time), and BATCH
//!    grants/s against what its share allows: its 8 slots (0.8 x 10) over the mean time a
//!    BATCH client holds a lease (the 50 ms service time plus the client's own timer slack,
//!    measured from grant received to Release sent), so the ratio is the share of the time
//!    the scheduler keeps those slots held; the gap from one holder's Release to the next
//!    grant is the scheduler's (floor 0.95).
//! 2. **Cross-replica hand-over.** One slot; A holds it, B has a waiter, A releases: time from
//!    sending the Release on A to B's grant, p50/p99 over 200 hand-overs (floor p50 <= 5 ms).
//! 3. **Cost of the line in the store.** Closed-loop STANDARD Acquire+Release pairs/s on A
//!    (pool `pairs`, 1,000 slots), with the pool's line empty and with 25 BATCH waiters of
//!    replica B in it (held back by the batch share, so every Acquire and Release offers the
//!    freed slot to the line's head first); ratio (floor >= 0.9).
//!
//! Knobs (environment): `BENCH_SECONDS` per measurement (default 5).

/// The allocator the `voxpool-scheduler` binary uses (see its `main.rs`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use tokio_util::sync::CancellationToken;
use voxpool_config::Config;
use voxpool_proto::scheduler::v1::{self as pb, pool_scheduler_client::PoolSchedulerClient};
use voxpool_runtime::auth::AdminAuth;
use voxpool_scheduler::{
    model::PoolSpec,
    server,
    store::{
        LeaseStore,
        redis::{RedisOptions, RedisStore},
    },
};
use voxpool_testkit::RedisServer;

mod common;

use common::{RETRIED, closed_loop, grpc_retryable, pct, retrying, verdict};

type Client = PoolSchedulerClient<tonic::transport::Channel>;

const SERVICE: Duration = Duration::from_millis(50);
const CAPACITY: u32 = 10;
const SHARE: f64 = 0.8;

fn config() -> Config {
    let text = format!(
        "[[pools]]\nid = \"live\"\nprovider = \"espeak\"\nbatch_max_share = {SHARE}\n\
         [[pools.upstreams]]\nid = \"u\"\n[[pools.upstreams.keys]]\nid = \"k\"\ncapacity = {CAPACITY}\n\
         [[pools]]\nid = \"handoff\"\nprovider = \"espeak\"\n\
         [[pools.upstreams]]\nid = \"u\"\n[[pools.upstreams.keys]]\nid = \"k\"\ncapacity = 1\n\
         [[pools]]\nid = \"pairs\"\nprovider = \"espeak\"\nbatch_max_share = 0.001\n\
         [[pools.upstreams]]\nid = \"u\"\n[[pools.upstreams.keys]]\nid = \"k\"\ncapacity = 1000\n\
         [scheduler]\nrecovery_window_ms = 0\n"
    );
    Config::from_toml_str(&text).expect("bench config")
}

/// One replica: its own store connection, served on 127.0.0.1:0.
async fn replica(url: &str, config: &Config, stop: &CancellationToken) -> Client {
    let store: Arc<dyn LeaseStore> = Arc::new(
        RedisStore::connect(url, RedisOptions::from_settings(&config.scheduler))
            .await
            .expect("redis store"),
    );
    store
        .seed(&PoolSpec::from_config(config))
        .await
        .expect("seed");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (c, s) = (config.clone(), stop.clone());
    tokio::spawn(async move { server::serve(listener, store, &c, AdminAuth::disabled(), s).await });
    Client::connect(format!("http://{addr}"))
        .await
        .expect("connect")
}

fn acquire(pool: &str, priority: pb::Priority) -> pb::AcquireRequest {
    pb::AcquireRequest {
        pool: pool.into(),
        priority: priority as i32,
        wait_timeout_ms: 60_000,
        ..Default::default()
    }
}

async fn release(c: &mut Client, lease: pb::Lease) {
    retrying("release", grpc_retryable, || {
        let (mut c, lease_id) = (c.clone(), lease.lease_id.clone());
        async move {
            c.release(pb::ReleaseRequest {
                lease_id,
                ..Default::default()
            })
            .await
        }
    })
    .await;
}

/// Acquire, hold for the service time, release: the Acquire's latency and how long the lease
/// was held (grant received to Release sent).
async fn serve_one(c: &mut Client, priority: pb::Priority) -> (Duration, Duration) {
    let sent = Instant::now();
    let lease = retrying("acquire", grpc_retryable, || {
        let mut c = c.clone();
        async move { c.acquire(acquire("live", priority)).await }
    })
    .await
    .into_inner();
    let granted = Instant::now();
    tokio::time::sleep(SERVICE).await;
    let held = granted.elapsed();
    release(c, lease).await;
    (granted - sent, held)
}

/// The flood of section 1: (INTERACTIVE-side waits in µs, sorted; BATCH-side grants/s; the
/// BATCH side's mean hold time in seconds).
async fn flood(replicas: &[Client; 2], classes: bool, secs: u64) -> (Vec<u64>, f64, f64) {
    let (bulk, live) = if classes {
        (pb::Priority::Batch, pb::Priority::Interactive)
    } else {
        (pb::Priority::Standard, pb::Priority::Standard)
    };
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let grants = Arc::new(AtomicU64::new(0));
    let held_us = Arc::new(AtomicU64::new(0));
    let mut loops = Vec::new();
    for i in 0..(5 * CAPACITY as usize) {
        let (mut c, stop, measuring, grants, held_us) = (
            replicas[i % 2].clone(),
            stop.clone(),
            measuring.clone(),
            grants.clone(),
            held_us.clone(),
        );
        loops.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let (_, held) = serve_one(&mut c, bulk).await;
                if measuring.load(Ordering::Relaxed) {
                    grants.fetch_add(1, Ordering::Relaxed);
                    held_us.fetch_add(
                        u64::try_from(held.as_micros()).unwrap_or(u64::MAX),
                        Ordering::Relaxed,
                    );
                }
            }
        }));
    }
    // Let the line fill before measuring.
    tokio::time::sleep(Duration::from_secs(1)).await;
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    let waits = Arc::new(Mutex::new(Vec::new()));
    let rate = f64::from(CAPACITY) / SERVICE.as_secs_f64() * 0.1;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    let mut live_calls = Vec::new();
    let mut k = 0usize;
    while started.elapsed() < Duration::from_secs(secs) {
        tick.tick().await;
        let (mut c, waits) = (replicas[k % 2].clone(), waits.clone());
        k += 1;
        live_calls.push(tokio::spawn(async move {
            let (waited, _) = serve_one(&mut c, live).await;
            waits
                .lock()
                .expect("waits")
                .push(u64::try_from(waited.as_micros()).unwrap_or(u64::MAX));
        }));
    }
    let elapsed = started.elapsed().as_secs_f64();
    measuring.store(false, Ordering::Relaxed);
    let n = grants.load(Ordering::Relaxed);
    let batch_rate = n as f64 / elapsed;
    let mean_hold = held_us.load(Ordering::Relaxed) as f64 / 1e6 / n.max(1) as f64;
    for call in live_calls {
        call.await.expect("live call");
    }
    stop.store(true, Ordering::Relaxed);
    for l in loops {
        l.await.expect("bulk loop");
    }
    let mut waits = std::mem::take(&mut *waits.lock().expect("waits"));
    waits.sort_unstable();
    (waits, batch_rate, mean_hold)
}

/// Waits until `pool`'s line in the store holds `n` waiters (every class, every replica).
async fn until_line(c: &mut Client, pool: &str, n: i32) {
    loop {
        let s = c
            .get_pool_status(pb::GetPoolStatusRequest { pool: pool.into() })
            .await
            .expect("status")
            .into_inner();
        if s.class_waiters.iter().map(|w| w.waiters).sum::<i32>() == n {
            return;
        }
        tokio::task::yield_now().await;
    }
}

/// Section 2: hand-over latencies in µs, sorted.
async fn handoffs(replicas: &[Client; 2], n: usize) -> Vec<u64> {
    let (mut a, mut b) = (replicas[0].clone(), replicas[1].clone());
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let held = a
            .acquire(acquire("handoff", pb::Priority::Standard))
            .await
            .expect("hold")
            .into_inner();
        let mut waiter = b.clone();
        let granted = tokio::spawn(async move {
            let lease = waiter
                .acquire(acquire("handoff", pb::Priority::Standard))
                .await
                .expect("waiter")
                .into_inner();
            (Instant::now(), lease)
        });
        // Measured from the moment its ticket is in the store's line.
        until_line(&mut b, "handoff", 1).await;
        let sent = Instant::now();
        release(&mut a, held).await;
        let (at, lease) = granted.await.expect("waiter task");
        out.push(u64::try_from(at.duration_since(sent).as_micros()).unwrap_or(u64::MAX));
        release(&mut b, lease).await;
    }
    out.sort_unstable();
    out
}

/// One Acquire+Release pair on pool "pairs" (section 3).
async fn pair(mut c: Client) {
    let lease = c
        .acquire(acquire("pairs", pb::Priority::Standard))
        .await
        .expect("pair acquire")
        .into_inner();
    release(&mut c, lease).await;
}

/// Section 3: closed-loop pairs/s on `c` (32 workers).
async fn pairs_per_sec(c: &Client, secs: u64) -> f64 {
    let c = c.clone();
    closed_loop(32, secs, move || pair(c.clone())).await
}

fn main() {
    let secs = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let redis = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let config = config();
        let stop = CancellationToken::new();
        let replicas = [
            replica(&redis.url(), &config, &stop).await,
            replica(&redis.url(), &config, &stop).await,
        ];
        let (classed, batch_rate, mean_hold) = flood(&replicas, true, secs).await;
        let (fifo, _, _) = flood(&replicas, false, secs).await;
        let hand = handoffs(&replicas, 200).await;
        let plain = pairs_per_sec(&replicas[0], secs).await;
        // Replica B's BATCH waiters in the line of "pairs", held back by its batch share (one
        // BATCH lease, held here): every Acquire and Release then offers the slot it frees or
        // finds to the line's head first, while STANDARD callers are not held back by them.
        let mut b = replicas[1].clone();
        let batch_lease = b
            .acquire(acquire("pairs", pb::Priority::Batch))
            .await
            .expect("the batch share's one lease")
            .into_inner();
        let mut parked = Vec::new();
        for _ in 0..25 {
            let mut c = b.clone();
            parked.push(tokio::spawn(async move {
                let mut request = acquire("pairs", pb::Priority::Batch);
                request.wait_timeout_ms = 600_000;
                let _ = c.acquire(request).await;
            }));
        }
        until_line(&mut b, "pairs", 25).await;
        let with_line = pairs_per_sec(&replicas[0], secs).await;
        for p in &parked {
            p.abort();
        }
        release(&mut b, batch_lease).await;
        stop.cancel();

        let share_rate = SHARE * f64::from(CAPACITY) / mean_hold;
        let service_ms = SERVICE.as_secs_f64() * 1000.0;
        println!("## Traffic classes (two scheduler replicas on one Redis)\n");
        println!(
            "Pool of {CAPACITY} slots, batch_max_share {SHARE}, service time {service_ms:.0} ms; a BATCH client keeps {} Acquires waiting, an INTERACTIVE one sends {:.0}/s, {secs} s per side.\n",
            5 * CAPACITY,
            f64::from(CAPACITY) / SERVICE.as_secs_f64() * 0.1
        );
        println!("| measurement | value | floor | |");
        println!("|---|---|---|---|");
        let (p50, p99) = (pct(&classed, 0.5), pct(&classed, 0.99));
        println!(
            "| INTERACTIVE wait p50 / p99, with classes | {p50:.1} / {p99:.1} ms | p99 <= {:.0} ms | {} |",
            service_ms / 2.0,
            verdict(p99 <= service_ms / 2.0)
        );
        println!(
            "| the same load all STANDARD (one FIFO line): wait p50 / p99 | {:.1} / {:.1} ms | | |",
            pct(&fifo, 0.5),
            pct(&fifo, 0.99)
        );
        println!(
            "| BATCH grants/s / its share's bound ({:.0} slots / {:.1} ms mean hold = {share_rate:.0}/s) | {batch_rate:.0} / {share_rate:.0} = {:.2} | >= 0.95 | {} |",
            SHARE * f64::from(CAPACITY),
            mean_hold * 1000.0,
            batch_rate / share_rate,
            verdict(batch_rate / share_rate >= 0.95)
        );
        println!(
            "| calls retried as the contract says (withdrawn grants, UNAVAILABLE) | {} | | |",
            RETRIED.load(Ordering::Relaxed)
        );
        let (h50, h99) = (pct(&hand, 0.5), pct(&hand, 0.99));
        println!(
            "| hand-over Release on A -> grant on B, p50 / p99 | {h50:.2} / {h99:.2} ms | p50 <= 5 ms | {} |",
            verdict(h50 <= 5.0)
        );
        println!(
            "| Acquire+Release pairs/s with 25 BATCH waiters in the line / with none | {:.0} / {:.0} = {:.2} | >= 0.9 | {} |",
            with_line,
            plain,
            with_line / plain,
            verdict(with_line / plain >= 0.9)
        );
    });
}
