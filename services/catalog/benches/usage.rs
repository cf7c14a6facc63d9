//! Usage consumer throughput: how many usage records per second one catalog replica's
//! consumer reads from the usage stream and applies to the ledger.
//!
//! A private redis-server (unix socket) holds a backlog of realistic records, written before
//! the consumer starts: per request a Charge, a Settle and a Done (as synthesis writes them),
//! spread over 20 tenants, 4 tiers, 50 packs, 5 pools and 3 UTC days, 20–400 characters each.
//! The consumer (`consumer::run`, the binary's defaults: 500 entries per read and per
//! transaction) then drains it into a fresh database; the clock stops when the group has read
//! and acknowledged every entry, and the ledger is checked to hold every request once. The
//! target is 5,000 records/s on the 2-core development machine (docs/BENCHMARKS.md).
//!
//! `cargo bench -p voxpool-catalog --bench usage`. Knobs (environment):
//! `VOXPOOL_BENCH_USAGE_REQUESTS` (16667, about 50,000 records), `VOXPOOL_BENCH_ROUNDS` (3,
//! the median is reported), `VOXPOOL_BENCH_BACKENDS` (`sqlite,postgres`).

use std::time::{Duration, Instant};

use redis::streams::StreamInfoGroupsReply;
use tokio_util::sync::CancellationToken;
use voxpool_catalog::{
    repo::PackRepository,
    server,
    usage::{
        Group, Ledger, UsageFilter, UsageStore,
        consumer::{self, ConsumerConfig},
    },
};
use voxpool_domain::{
    provider::Provider,
    snapshot::Tier,
    usage::{AttemptUsage, DoneUsage, USAGE_FIELD, USAGE_STREAM, UsageContext, UsageEvent},
};
use voxpool_testkit::{PostgresServer, RedisServer};

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// 2026-12-01T10:00:00Z.
const AT_MS: i64 = 1_796_119_200_000;

/// Request `i`'s three records: Charge, Settle (success), Done.
fn request(i: usize) -> [UsageEvent; 3] {
    let tiers = [Tier::Lite, Tier::Standard, Tier::Pro, Tier::Premium];
    let characters = 20 + (i * 37 % 381) as u64;
    let context = UsageContext {
        record_id: format!("0193a5b2-7c1d-7000-8000-{i:012x}"),
        request_id: format!("req-{i}"),
        tenant: format!("tenant-{:02}", i % 20),
        caller: "app".to_owned(),
        path: "grpc".to_owned(),
        pack_id: format!("vp_{:024x}", i % 50),
        snapshot_digest: format!("sha256:{:064x}", i % 50),
        tier: Some(tiers[i % 50 % 4]),
        pool: format!("pool-{}", i % 50 % 5),
        provider: Provider::OpenAi,
        currency: "USD".to_owned(),
        at_ms: AT_MS + (i % 3) as i64 * 86_400_000 + i as i64,
    };
    let attempt = |outcome: &str| AttemptUsage {
        attempt: 0,
        key_id: format!("u{}/k{}", i % 3, i % 8),
        upstream_id: format!("u{}", i % 3),
        characters,
        billed_characters: characters,
        audio_ms: characters * 60,
        gpu_ms: 0,
        cost_micros: i64::try_from(characters).unwrap_or(0) * 15,
        outcome: outcome.to_owned(),
    };
    [
        UsageEvent::Charge {
            context: context.clone(),
            attempt: attempt(""),
        },
        UsageEvent::Settle {
            context: context.clone(),
            attempt: attempt("SUCCESS"),
        },
        UsageEvent::Done {
            context,
            done: DoneUsage {
                cached_characters: 0,
                audio_ms: characters * 60,
                cached_cost_micros: 0,
                failed_attempts: 0,
                ok: true,
            },
        },
    ]
}

/// Writes `requests` requests' records to the usage stream, pipelined.
async fn fill(conn: &mut redis::aio::MultiplexedConnection, requests: usize) -> usize {
    let mut written = 0;
    for start in (0..requests).step_by(500) {
        let mut pipe = redis::pipe();
        for i in start..(start + 500).min(requests) {
            for e in request(i) {
                let json = serde_json::to_string(&e).expect("json");
                pipe.cmd("XADD")
                    .arg(USAGE_STREAM)
                    .arg("*")
                    .arg(USAGE_FIELD)
                    .arg(json)
                    .ignore();
                written += 1;
            }
        }
        let () = pipe.query_async(conn).await.expect("xadd");
    }
    written
}

/// Whether the group has read every entry and acknowledged it.
async fn drained(conn: &mut redis::aio::MultiplexedConnection) -> bool {
    let groups: StreamInfoGroupsReply = redis::Cmd::xinfo_groups(USAGE_STREAM)
        .query_async(conn)
        .await
        .expect("xinfo");
    groups
        .groups
        .iter()
        .any(|g| g.pending == 0 && g.lag == Some(0))
}

/// One round: a fresh database and Redis, the backlog written, then drained; records/s.
async fn round(backend: &str, requests: usize) -> f64 {
    let redis = RedisServer::start();
    let (url, _dir) = match backend {
        "postgres" => (PostgresServer::shared().create_database(), None),
        _ => {
            let dir = tempfile::tempdir().expect("temp dir");
            let url = format!("sqlite://{}?mode=rwc", dir.path().join("c.db").display());
            (url, Some(dir))
        }
    };
    let repo = server::open_repository(&url, 8)
        .await
        .expect("open repository");
    let store = UsageStore::new(repo.database().expect("open"));
    let mut conn = redis::Client::open(redis.url())
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let records = fill(&mut conn, requests).await;

    let stop = CancellationToken::new();
    let config = ConsumerConfig {
        name: "bench".to_owned(),
        ..ConsumerConfig::default()
    };
    let started = Instant::now();
    let task = tokio::spawn(consumer::run(
        redis.url(),
        Ledger::open(store.clone()),
        config,
        stop.clone(),
    ));
    while !drained(&mut conn).await {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed();
    stop.cancel();
    task.await.expect("consumer");

    let filter = UsageFilter {
        group_by: vec![Group::Tenant],
        ..UsageFilter::default()
    };
    let rows = store.rows(&filter, None, 1000).await.expect("rows");
    let counted: i64 = rows.iter().map(|r| r.requests).sum();
    assert_eq!(
        counted,
        i64::try_from(requests).expect("small"),
        "every request counted once"
    );
    records as f64 / elapsed.as_secs_f64()
}

fn main() {
    let requests: usize = env_or("VOXPOOL_BENCH_USAGE_REQUESTS", 16_667);
    let rounds: usize = env_or("VOXPOOL_BENCH_ROUNDS", 3).max(1);
    let backends: String = env_or("VOXPOOL_BENCH_BACKENDS", "sqlite,postgres".to_owned());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!();
    println!(
        "usage consumer: {} records ({requests} requests × Charge + Settle + Done), backlog drained into the ledger, {rounds} rounds",
        requests * 3
    );
    println!("| backend  | records/s (median) | min–max         | target  |");
    println!("|----------|--------------------|-----------------|---------|");
    for backend in backends.split(',').map(str::trim).filter(|b| !b.is_empty()) {
        let mut rates: Vec<f64> = (0..rounds)
            .map(|_| runtime.block_on(round(backend, requests)))
            .collect();
        rates.sort_by(f64::total_cmp);
        let median = rates[rates.len() / 2];
        let verdict = if median >= 5_000.0 { "met" } else { "BELOW" };
        println!(
            "| {backend:<8} | {median:>18.0} | {:>6.0}–{:<8.0} | 5000 {verdict} |",
            rates[0],
            rates[rates.len() - 1]
        );
    }
}
