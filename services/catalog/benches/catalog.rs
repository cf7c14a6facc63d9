//! Catalog throughput: FreezeSnapshot and ListVoicePacks requests per second over the
//! in-process gRPC server, with 10,000 packs, on SQLite (a WAL file) and PostgreSQL (a
//! throwaway local cluster, `fsync=off`).
//!
//! `cargo bench -p voxpool-catalog --bench catalog`. Knobs (environment):
//! `VOXPOOL_BENCH_PACKS` (10000), `VOXPOOL_BENCH_SECS` per measurement (3),
//! `VOXPOOL_BENCH_CONCURRENCY` in-flight requests (16), `VOXPOOL_BENCH_BACKENDS`
//! (`sqlite,postgres`). Prints one table row per backend and request kind.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use voxpool_catalog::{
    model::PackSpec,
    repo::{PackRepository, sea::SeaRepository},
    server,
};
use voxpool_domain::snapshot::{Kind, Params, Tier};
use voxpool_proto::catalog::v1::{self as pb, voice_catalog_client::VoiceCatalogClient};
use voxpool_runtime::auth::AdminAuth;
use voxpool_testkit::PostgresServer;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn spec(i: usize) -> PackSpec {
    let tiers = [Tier::Lite, Tier::Standard, Tier::Pro, Tier::Premium];
    let locales = ["en-US", "en-GB", "de-DE", "fr-FR", "zh-CN", "ja-JP"];
    PackSpec {
        display_name: format!("Bench voice {i}"),
        description: "benchmark pack".into(),
        provider: "espeak".into(),
        model: "espeak-ng".into(),
        voice_id: format!("voice-{}", i % 100),
        tts_model_id: "espeak-local".into(),
        kind: Kind::Standard,
        upstream_ids: vec![],
        params: Params {
            pitch_pct: Some((i / 100) as f64 % 50.0),
            rate: Some(1.0 + (i / 5_000) as f64 * 0.5),
            volume_pct: None,
        },
        extra: Default::default(),
        tier: tiers[i % tiers.len()],
        locales: vec![locales[i % locales.len()].into()],
        references: vec![],
    }
}

async fn fill(repo: &SeaRepository, packs: usize) -> Vec<String> {
    let next = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (repo, next) = (repo.clone(), next.clone());
            tokio::spawn(async move {
                let mut ids = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    if i >= packs {
                        return ids;
                    }
                    ids.push(repo.create(spec(i)).await.expect("create").id);
                }
            })
        })
        .collect();
    let mut ids = Vec::new();
    for t in tasks {
        ids.extend(t.await.expect("fill task"));
    }
    ids
}

struct Row {
    requests: u64,
    per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
}

/// Runs `call` from `concurrency` tasks for `secs`, returning throughput and latency.
async fn measure<F, Fut>(concurrency: usize, secs: f64, call: F) -> Row
where
    F: Fn(u64) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let seq = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (call, seq) = (call.clone(), seq.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while Instant::now() < deadline {
                    let t = Instant::now();
                    call(seq.fetch_add(1, Ordering::Relaxed)).await;
                    latencies.push(t.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("bench task"));
    }
    let elapsed = start.elapsed().as_secs_f64();
    all.sort_unstable();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    Row {
        requests: all.len() as u64,
        per_sec: all.len() as f64 / elapsed,
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
    }
}

async fn bench_backend(name: &str, url: &str, packs: usize, secs: f64, concurrency: usize) {
    let repo = server::open_repository(url, 16)
        .await
        .expect("open repository");
    let t = Instant::now();
    let ids = Arc::new(fill(&repo, packs).await);
    eprintln!(
        "{name}: created {packs} packs in {:.1}s",
        t.elapsed().as_secs_f64()
    );

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let shutdown = CancellationToken::new();
    let serve_repo: Arc<dyn PackRepository> = Arc::new(repo);
    tokio::spawn(server::serve(
        listener,
        serve_repo,
        AdminAuth::disabled(),
        shutdown.clone(),
    ));
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let client = VoiceCatalogClient::new(channel);

    let deep_token = {
        let mut c = client.clone();
        let mut token = String::new();
        for _ in 0..50 {
            let page = c
                .list_voice_packs(pb::ListVoicePacksRequest {
                    page_size: 100,
                    page_token: token,
                    filter: String::new(),
                })
                .await
                .expect("list")
                .into_inner();
            token = page.next_page_token;
        }
        token
    };

    let freeze = {
        let (client, ids) = (client.clone(), ids.clone());
        move |n: u64| {
            let mut c = client.clone();
            let id = ids[(n.wrapping_mul(7919) % ids.len() as u64) as usize].clone();
            async move {
                c.freeze_snapshot(pb::FreezeSnapshotRequest { pack_id: id })
                    .await
                    .expect("freeze");
            }
        }
    };
    let list = |filter: &'static str, token: String| {
        let client = client.clone();
        move |_: u64| {
            let mut c = client.clone();
            let req = pb::ListVoicePacksRequest {
                page_size: 50,
                page_token: token.clone(),
                filter: filter.into(),
            };
            async move {
                let page = c.list_voice_packs(req).await.expect("list").into_inner();
                assert_eq!(page.voice_packs.len(), 50);
            }
        }
    };

    let rows = [
        (
            "FreezeSnapshot (random pack)",
            measure(concurrency, secs, freeze).await,
        ),
        (
            "ListVoicePacks (first page, 50)",
            measure(concurrency, secs, list("", String::new())).await,
        ),
        (
            "ListVoicePacks (page at 5000, 50)",
            measure(concurrency, secs, list("", deep_token)).await,
        ),
        (
            "ListVoicePacks (tier+locale filter, 50)",
            measure(
                concurrency,
                secs,
                list("tier=PRO AND locale=de-DE", String::new()),
            )
            .await,
        ),
    ];
    for (rpc, r) in rows {
        println!(
            "| {name:<10} | {rpc:<40} | {:>8} | {:>9.0} | {:>7.2} | {:>7.2} |",
            r.requests, r.per_sec, r.p50_ms, r.p99_ms
        );
    }
    shutdown.cancel();
}

fn main() {
    let packs: usize = env_or("VOXPOOL_BENCH_PACKS", 10_000);
    let secs: f64 = env_or("VOXPOOL_BENCH_SECS", 3.0);
    let concurrency: usize = env_or("VOXPOOL_BENCH_CONCURRENCY", 16);
    let backends: String = env_or("VOXPOOL_BENCH_BACKENDS", "sqlite,postgres".to_owned());
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    println!("catalog bench: {packs} packs, {concurrency} in flight, {secs}s per row");
    println!(
        "| backend    | request                                  | requests |     req/s | p50 ms  | p99 ms  |"
    );
    println!(
        "|------------|------------------------------------------|----------|-----------|---------|---------|"
    );
    for backend in backends.split(',').map(str::trim) {
        match backend {
            "sqlite" => {
                let dir = tempfile::tempdir().expect("dir");
                let url = format!(
                    "sqlite://{}?mode=rwc",
                    dir.path().join("bench.db").display()
                );
                runtime.block_on(bench_backend("sqlite", &url, packs, secs, concurrency));
            }
            "postgres" => {
                let pg = PostgresServer::start();
                let url = pg.create_database();
                runtime.block_on(bench_backend("postgres", &url, packs, secs, concurrency));
            }
            other => eprintln!("unknown backend {other:?} (use sqlite, postgres)"),
        }
    }
}
