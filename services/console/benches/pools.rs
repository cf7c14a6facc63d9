//! `make bench` for the console's pools page, against an in-process fake scheduler serving
//! 100 pools × 100 keys that counts the status calls it answers:
//!
//! 1. server time of `GET /pools` (the router driven in-process, from the request to the last
//!    byte of the page): the first render (which waits for the scheduler's answer) and warm
//!    renders; the goal is at most 200 ms;
//! 2. what live updates cost the scheduler: `WATCHERS` browsers subscribed to `/pools/events`
//!    for `WINDOW`; the goal is at most one status call per pool per second in total (one
//!    ListPools answers all 100 pools), while each watcher gets at least one update per second.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    body::Body,
    http::{Request, header},
};
use futures::StreamExt;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Response, Status};
use tower::ServiceExt;
use voxpool_console::{
    backend::Endpoints,
    pages,
    server::{self, Settings},
};
use voxpool_domain::secret::Secret;
use voxpool_proto::scheduler::v1::{
    self as spb,
    pool_scheduler_server::{PoolScheduler, PoolSchedulerServer},
};

const POOLS: usize = 100;
const KEYS: usize = 100;
const RENDERS: usize = 30;
const WATCHERS: usize = 50;
const WINDOW: Duration = Duration::from_secs(10);
const ADMIN: &str = "bench-admin-token-0123456789";

/// Answers status calls for `POOLS` × `KEYS` and counts them (pools answered).
#[derive(Default)]
struct FakeScheduler {
    pool_answers: Arc<AtomicU64>,
    /// When each ListPools call arrived.
    calls: Arc<std::sync::Mutex<Vec<Instant>>>,
}

fn pool(i: usize, tick: u64) -> spb::PoolStatus {
    let keys = (0..KEYS)
        .map(|k| spb::KeyStatus {
            key_id: format!("upstream-{}/key-{k:03}", k % 4),
            upstream_id: format!("upstream-{}", k % 4),
            capacity: 10,
            effective_capacity: 10,
            in_flight: ((k as u64 + tick) % 11) as i32,
            state: spb::KeyState::Available as i32,
            pool: format!("pool-{i:03}"),
            ..Default::default()
        })
        .collect();
    spb::PoolStatus {
        pool: format!("pool-{i:03}"),
        capacity: (KEYS * 10) as i32,
        keys,
        now_ms: 1,
        ..Default::default()
    }
}

type R<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl PoolScheduler for FakeScheduler {
    async fn acquire(&self, _: tonic::Request<spb::AcquireRequest>) -> R<spb::Lease> {
        Err(Status::unimplemented("bench"))
    }
    async fn release(&self, _: tonic::Request<spb::ReleaseRequest>) -> R<spb::ReleaseResponse> {
        Err(Status::unimplemented("bench"))
    }
    async fn report(&self, _: tonic::Request<spb::ReportRequest>) -> R<spb::ReportResponse> {
        Err(Status::unimplemented("bench"))
    }
    async fn renew(&self, _: tonic::Request<spb::RenewRequest>) -> R<spb::Lease> {
        Err(Status::unimplemented("bench"))
    }
    async fn get_pool_status(
        &self,
        _: tonic::Request<spb::GetPoolStatusRequest>,
    ) -> R<spb::PoolStatus> {
        let tick = self.pool_answers.fetch_add(1, Ordering::Relaxed);
        Ok(Response::new(pool(0, tick)))
    }
    async fn list_pools(
        &self,
        _: tonic::Request<spb::ListPoolsRequest>,
    ) -> R<spb::ListPoolsResponse> {
        self.calls.lock().expect("lock").push(Instant::now());
        let tick = self.pool_answers.fetch_add(POOLS as u64, Ordering::Relaxed);
        Ok(Response::new(spb::ListPoolsResponse {
            pools: (0..POOLS).map(|i| pool(i, tick)).collect(),
            budgets: Vec::new(),
        }))
    }
    async fn set_key_capacity(
        &self,
        _: tonic::Request<spb::SetKeyCapacityRequest>,
    ) -> R<spb::KeyStatus> {
        Err(Status::unimplemented("bench"))
    }
    async fn disable_key(&self, _: tonic::Request<spb::DisableKeyRequest>) -> R<spb::KeyStatus> {
        Err(Status::unimplemented("bench"))
    }
    async fn enable_key(&self, _: tonic::Request<spb::EnableKeyRequest>) -> R<spb::KeyStatus> {
        Err(Status::unimplemented("bench"))
    }
    async fn acquire_fill(
        &self,
        _: tonic::Request<spb::AcquireFillRequest>,
    ) -> R<spb::AcquireFillResponse> {
        Err(Status::unimplemented("bench"))
    }
    async fn renew_fill(
        &self,
        _: tonic::Request<spb::RenewFillRequest>,
    ) -> R<spb::RenewFillResponse> {
        Err(Status::unimplemented("bench"))
    }
    async fn release_fill(
        &self,
        _: tonic::Request<spb::ReleaseFillRequest>,
    ) -> R<spb::ReleaseFillResponse> {
        Err(Status::unimplemented("bench"))
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[allow(clippy::too_many_lines)]
async fn run() {
    let answers = Arc::new(AtomicU64::new(0));
    let calls = Arc::new(std::sync::Mutex::new(Vec::new()));
    let fake = FakeScheduler {
        pool_answers: answers.clone(),
        calls: calls.clone(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(PoolSchedulerServer::new(fake).max_encoding_message_size(64 << 20))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    let settings = Settings {
        listen: "127.0.0.1:0".into(),
        endpoints: Endpoints {
            scheduler: format!("http://{addr}"),
            // Nothing listens there: the pools page needs the scheduler only.
            catalog: "http://127.0.0.1:1".into(),
            synthesis: "http://127.0.0.1:1".into(),
            jobs: None,
            client_token: voxpool_runtime::auth::ClientToken::none(),
            admin_token: Some(Secret::new(ADMIN)),
        },
        viewer_token: None,
        jobs_tenant: String::new(),
        server: voxpool_runtime::limits::ServerFlags::default(),
    };
    let router = pages::router(server::app(&settings).expect("app"));
    let login = router
        .clone()
        .oneshot(
            Request::post("/login")
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from(format!("token={ADMIN}")))
                .expect("request"),
        )
        .await
        .expect("login");
    let cookie = login
        .headers()
        .get(header::SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .expect("a session cookie")
        .to_owned();
    let page = |router: axum::Router, cookie: String| async move {
        let started = Instant::now();
        let response = router
            .oneshot(
                Request::get("/pools")
                    .header(header::COOKIE, cookie)
                    .body(Body::empty())
                    .expect("request"),
            )
            .await
            .expect("pools");
        assert!(response.status().is_success(), "{}", response.status());
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        (started.elapsed().as_secs_f64() * 1000.0, body.len())
    };
    let (cold, bytes) = page(router.clone(), cookie.clone()).await;
    let mut warm = Vec::new();
    for _ in 0..RENDERS {
        warm.push(page(router.clone(), cookie.clone()).await.0);
    }
    warm.sort_by(f64::total_cmp);
    println!(
        "console pools page, {POOLS} pools x {KEYS} keys ({} KiB of HTML):",
        bytes / 1024
    );
    println!("  first render (waits for the scheduler's answer): {cold:.1} ms");
    println!(
        "  warm renders ({RENDERS}): median {:.1} ms, p95 {:.1} ms, max {:.1} ms (goal: <= 200 ms) {}",
        percentile(&warm, 0.5),
        percentile(&warm, 0.95),
        percentile(&warm, 1.0),
        if percentile(&warm, 1.0).max(cold) <= 200.0 {
            "MET"
        } else {
            "MISSED"
        }
    );

    // Live updates: WATCHERS subscribers for WINDOW.
    let events = Arc::new(AtomicU64::new(0));
    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        let response = router
            .clone()
            .oneshot(
                Request::get("/pools/events")
                    .header(header::COOKIE, cookie.clone())
                    .body(Body::empty())
                    .expect("request"),
            )
            .await
            .expect("events");
        let events = events.clone();
        watchers.push(tokio::spawn(async move {
            let mut stream = response.into_body().into_data_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.expect("event bytes");
                let n = chunk
                    .windows(6)
                    .filter(|w| w == b"data: " || w == b"\ndata:")
                    .count();
                events.fetch_add(n.max(1) as u64, Ordering::Relaxed);
            }
        }));
    }
    let window_start = Instant::now();
    let before = answers.load(Ordering::Relaxed);
    let seen_before = events.load(Ordering::Relaxed);
    tokio::time::sleep(WINDOW).await;
    let pool_answers = answers.load(Ordering::Relaxed) - before;
    let seen = events.load(Ordering::Relaxed) - seen_before;
    for w in watchers {
        w.abort();
    }
    let per_pool_per_s = pool_answers as f64 / POOLS as f64 / WINDOW.as_secs_f64();
    let times: Vec<Instant> = calls
        .lock()
        .expect("lock")
        .iter()
        .copied()
        .filter(|t| *t >= window_start)
        .collect();
    let min_gap = times
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).as_secs_f64() * 1000.0)
        .fold(f64::INFINITY, f64::min);
    println!(
        "  live: closest two status calls {min_gap:.0} ms apart (goal: >= 1000 ms: at most one per second) {}",
        if min_gap >= 999.0 { "MET" } else { "MISSED" }
    );
    let per_watcher_per_s = seen as f64 / WATCHERS as f64 / WINDOW.as_secs_f64();
    println!(
        "  live: {WATCHERS} watchers for {} s: {:.2} status answers per pool per second at the scheduler (goal: <= 1) {}; {:.2} updates per watcher per second (goal: >= 1) {}",
        WINDOW.as_secs(),
        per_pool_per_s,
        if per_pool_per_s <= 1.0 {
            "MET"
        } else {
            "MISSED"
        },
        per_watcher_per_s,
        if per_watcher_per_s >= 0.95 {
            "MET"
        } else {
            "MISSED"
        },
    );
}

fn main() {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(run());
}
