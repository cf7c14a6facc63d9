//! Webhooks on real processes: signed, retried and delivered once; left by a replica without
//! the secret to one with it; delivered concurrently, so receivers that hang delay no other
//! job's webhook nor any job's summary; and never sent to an address the replica refuses
//! (loopback, private, link-local, metadata: see `docs/SECURITY.md#webhooks`) unless allowed.
//!
//! The receivers here listen on 127.0.0.1, which the replicas refuse unless allowed: they run
//! with `VOXPOOL_JOBS_WEBHOOK_ALLOW=127.0.0.1/32` ([`ALLOW_LOOPBACK`]).

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant, SystemTime},
};

use voxpool_testkit::RedisServer;

use super::stack::*;

pub const SECRET: &str = "jobs-test-webhook-secret-0123456789";
/// What lets a replica deliver to the test's receivers on 127.0.0.1.
pub const ALLOW_LOOPBACK: (&str, &str) = ("VOXPOOL_JOBS_WEBHOOK_ALLOW", "127.0.0.1/32");
/// A replica that signs webhooks and may deliver them to 127.0.0.1.
pub const HOOKS: [(&str, &str); 2] = [("VOXPOOL_JOBS_WEBHOOK_SECRET", SECRET), ALLOW_LOOPBACK];

/// What the webhook receiver saw: (status answered, signature header, delivery header, body).
type Seen = Arc<Mutex<Vec<(u16, String, String, Vec<u8>)>>>;

async fn receiver(seen: Seen) -> String {
    use axum::{body::Bytes, http::HeaderMap, http::StatusCode, routing::post};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = axum::Router::new().route(
        "/hook",
        post(move |headers: HeaderMap, body: Bytes| {
            let seen = seen.clone();
            async move {
                let mut seen = seen.lock().expect("lock");
                let status = if seen.is_empty() { 500 } else { 200 };
                let h = |n: &str| {
                    headers
                        .get(n)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned()
                };
                seen.push((
                    status,
                    h("x-voxpool-signature"),
                    h("x-voxpool-delivery"),
                    body.to_vec(),
                ));
                StatusCode::from_u16(status).expect("status")
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/hook")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_is_signed_retried_and_delivered_once() {
    let stack = Stack::start(20).await;
    let redis = RedisServer::start();
    let a = stack.jobs(&redis.url(), 4, &HOOKS, None);
    let mut c = client(&a).await;
    let seen: Seen = Arc::default();
    let url = receiver(seen.clone()).await;
    let mut req = request("hooks", 5);
    req.webhook_url = url;
    let job = create(&mut c, req).await;
    until_delivered(&seen).await;
    // No duplicate after the 2xx: deliveries look at their queue every 100 ms and retry a
    // failed delivery after 0.5 s; 3 s is many of both.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(
        seen.iter().map(|s| s.0).collect::<Vec<_>>(),
        vec![500, 200],
        "one failure, one delivery"
    );
    assert_signed(&seen, SECRET, &job.name);
}

/// Every delivery in `seen` is signed with `secret`, names `job`'s SUCCEEDED delivery and
/// carries the job as JSON.
fn assert_signed(seen: &[(u16, String, String, Vec<u8>)], secret: &str, job: &str) {
    use hmac::{Hmac, KeyInit as _, Mac as _};
    for (_, signature, delivery, body) in seen {
        let (t, v1) = signature
            .strip_prefix("t=")
            .and_then(|s| s.split_once(",v1="))
            .unwrap_or_else(|| panic!("signature {signature:?}"));
        let mut mac = <Hmac<sha2::Sha256>>::new_from_slice(secret.as_bytes()).expect("key");
        mac.update(format!("{t}.").as_bytes());
        mac.update(body);
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            v1,
            "signature verifies"
        );
        assert_eq!(delivery, &format!("{job}/SUCCEEDED"));
        let json: serde_json::Value = serde_json::from_slice(body).expect("JSON body");
        assert_eq!(json["name"], job, "{json}");
        assert_eq!(json["state"], "SUCCEEDED", "{json}");
        // The Job as GetJob shows it, the webhook's host but never its path.
        assert_eq!(json["priority"], "BATCH", "{json}");
        assert_eq!(json["format"], "WAV", "{json}");
        let host = json["webhookHost"].as_str().unwrap_or_default();
        assert!(
            host.starts_with("http://127.0.0.1:") && !host.contains("/hook"),
            "{json}"
        );
    }
}

/// Polls (bounded) until `seen` holds a delivery the receiver answered 200.
async fn until_delivered(seen: &Seen) {
    let until = Instant::now() + DEADLINE;
    while !seen.lock().expect("lock").iter().any(|s| s.0 == 200) {
        assert!(
            Instant::now() < until,
            "no successful delivery: {:?}",
            seen.lock().expect("lock").len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_without_the_webhook_secret_leaves_the_webhook_to_one_with_it() {
    let stack = Stack::start(20).await;
    let redis = RedisServer::start();
    let mut a = stack.jobs(&redis.url(), 4, &HOOKS, None);
    let b = stack.jobs(&redis.url(), 4, &[ALLOW_LOOPBACK], None);
    let seen: Seen = Arc::default();
    let mut req = request("hooks-mixed", 5);
    req.webhook_url = receiver(seen.clone()).await;
    // Created on the replica with the secret, which then dies: the one without finishes it.
    let job = create(&mut client(&a).await, req).await;
    a.child.kill().expect("SIGKILL");
    a.child.wait().expect("reaped");
    let mut c = client(&b).await;
    assert_all_succeeded(&mut c, &stack, &job.name, 5).await;
    let summary = stack
        .blob_dir()
        .join("jobs")
        .join(job.name.trim_start_matches("jobs/"))
        .join("summary.json");
    let until = Instant::now() + DEADLINE;
    while !summary.exists() {
        assert!(
            Instant::now() < until,
            "the replica left never wrote the summary"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The replica without the secret has finalized all it can; one with it delivers.
    let _c = stack.jobs(&redis.url(), 4, &HOOKS, None);
    until_delivered(&seen).await;
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(
        seen.last().map(|s| s.0),
        Some(200),
        "delivered by the replica with the secret: {:?}",
        seen.iter().map(|s| s.0).collect::<Vec<_>>()
    );
    assert_signed(&seen, SECRET, &job.name);
}

/// What a receiver that accepts connections and never answers saw.
#[derive(Default)]
struct Hanging {
    accepted: AtomicUsize,
    open: AtomicUsize,
    peak_open: AtomicUsize,
}

/// A receiver that reads requests and never answers (a delivery to it ends at the replica's
/// timeout); its URL.
async fn hanging() -> (String, Arc<Hanging>) {
    use tokio::io::AsyncReadExt as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(Hanging::default());
    let counts = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counts.accepted.fetch_add(1, Ordering::SeqCst);
            let open = counts.open.fetch_add(1, Ordering::SeqCst) + 1;
            counts.peak_open.fetch_max(open, Ordering::SeqCst);
            let counts = counts.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while socket.read(&mut buf).await.is_ok_and(|n| n > 0) {}
                counts.open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (format!("http://{addr}/hook"), seen)
}

/// A receiver answering 500 to its first `failures` POSTs and 200 after; when each came.
async fn flaky(failures: usize) -> (String, Arc<Mutex<Vec<(Instant, SystemTime)>>>) {
    use axum::{http::StatusCode, routing::post};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let arrivals: Arc<Mutex<Vec<(Instant, SystemTime)>>> = Arc::default();
    let seen = arrivals.clone();
    let app = axum::Router::new().route(
        "/hook",
        post(move || {
            let seen = seen.clone();
            async move {
                let mut seen = seen.lock().expect("lock");
                seen.push((Instant::now(), SystemTime::now()));
                if seen.len() <= failures {
                    StatusCode::INTERNAL_SERVER_ERROR
                } else {
                    StatusCode::OK
                }
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/hook"), arrivals)
}

/// Polls (bounded by [`DEADLINE`]) until `done` holds.
async fn until(what: &str, done: impl Fn() -> bool) {
    let until = Instant::now() + DEADLINE;
    while !done() {
        assert!(Instant::now() < until, "not {what} within {DEADLINE:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A job's end time as the system clock (the store's clock, on this machine).
fn end_time(j: &voxpool_proto::jobs::v1::Job) -> SystemTime {
    let t = j.end_time.expect("ended");
    SystemTime::UNIX_EPOCH
        + Duration::new(
            u64::try_from(t.seconds).expect("after 1970"),
            u32::try_from(t.nanos).expect("nanos"),
        )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_receivers_delay_no_other_jobs_webhook_nor_summary() {
    let stack = Stack::start(20).await;
    let redis = RedisServer::start();
    let mut env = HOOKS.to_vec();
    env.push(("VOXPOOL_JOBS_WEBHOOK_HOST_CONCURRENCY", "2"));
    let a = stack.jobs(&redis.url(), 8, &env, None);
    let mut c = client(&a).await;
    // 30 jobs whose receivers never answer, and 6 more sharing one such receiver.
    let (mut names, mut receivers) = (Vec::new(), Vec::new());
    for _ in 0..30 {
        let (url, seen) = hanging().await;
        let mut req = request("hanging", 1);
        req.webhook_url = url;
        names.push(create(&mut c, req).await.name);
        receivers.push(seen);
    }
    let (crowded_url, crowded) = hanging().await;
    for _ in 0..6 {
        let mut req = request("crowded", 1);
        req.webhook_url = crowded_url.clone();
        names.push(create(&mut c, req).await.name);
    }
    for name in &names {
        ended(&mut c, name).await;
    }
    // Every hanging receiver is being tried: 36 deliveries hang, in flight or waiting.
    until("every hanging receiver reached", || {
        receivers
            .iter()
            .chain([&crowded])
            .all(|r| r.accepted.load(Ordering::SeqCst) > 0)
    })
    .await;

    // Then a job whose receiver fails three times, and a job without a webhook.
    let (url, arrivals) = flaky(3).await;
    let mut req = request("punctual", 1);
    req.webhook_url = url;
    let hooked = create(&mut c, req).await;
    let plain = create(&mut c, request("plain", 1)).await;
    let hooked = ended(&mut c, &hooked.name).await;
    let plain = ended(&mut c, &plain.name).await;

    // The plain job's summary is written as soon as it ended.
    let summary = stack
        .blob_dir()
        .join("jobs")
        .join(plain.name.trim_start_matches("jobs/"))
        .join("summary.json");
    until("the plain job's summary written", || summary.exists()).await;
    let written = std::fs::metadata(&summary)
        .and_then(|m| m.modified())
        .expect("summary mtime");
    let lag = written.duration_since(end_time(&plain)).unwrap_or_default();
    eprintln!(
        "JOBS-FIGURE: summary of a job without a webhook, beside 36 hanging webhooks: {lag:?} after its end"
    );
    assert!(
        lag < Duration::from_secs(3),
        "summary {lag:?} after the end"
    );

    // The hooked job's webhook: tried at once, then retried 0.5 s, 1 s and 2 s later.
    until("the flaky receiver's 4th POST", || {
        arrivals.lock().expect("lock").len() >= 4
    })
    .await;
    let arrivals = arrivals.lock().expect("lock").clone();
    let first = arrivals[0]
        .1
        .duration_since(end_time(&hooked))
        .unwrap_or_default();
    let gaps: Vec<Duration> = arrivals.windows(2).map(|w| w[1].0 - w[0].0).collect();
    eprintln!(
        "JOBS-FIGURE: webhook beside 36 hanging ones: first try {first:?} after the end, retries after {gaps:?}"
    );
    assert!(
        first < Duration::from_secs(3),
        "first try {first:?} after the end"
    );
    for (gap, want) in gaps.iter().zip([500u64, 1000, 2000]) {
        let want = Duration::from_millis(want);
        assert!(
            *gap + Duration::from_millis(50) >= want && *gap <= want + Duration::from_secs(1),
            "retry after {gap:?}, documented {want:?}: {gaps:?}"
        );
    }
    assert_eq!(arrivals.len(), 4, "delivered once on the 4th try");

    // The receiver 6 jobs share never had more than 2 of their deliveries at once.
    let peak = crowded.peak_open.load(Ordering::SeqCst);
    assert!(
        (1..=2).contains(&peak),
        "deliveries to one destination at once: {peak}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_to_this_servers_own_network_is_refused_unless_allowed() {
    let stack = Stack::start(300).await;
    let redis = RedisServer::start();
    let strict = [("VOXPOOL_JOBS_WEBHOOK_SECRET", SECRET)];
    let log = stack.dir.path().join("strict.log");
    let b = stack.jobs(&redis.url(), 4, &strict, Some(&log));
    let (url, seen) = hanging().await;
    let port = url
        .trim_start_matches("http://127.0.0.1:")
        .trim_end_matches("/hook")
        .to_owned();

    // At CreateJob: a literal loopback address (a Redis port, say) or localhost.
    let mut c = client(&b).await;
    for target in [
        "http://127.0.0.1:6379/".to_owned(),
        url.clone(),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        format!("http://localhost:{port}/hook"),
    ] {
        let mut req = request("own-network", 1);
        req.webhook_url = target.clone();
        let e = c.create_job(req).await.expect_err(&target);
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{target}: {e:?}");
        assert!(
            e.message().contains("webhook_url") && e.message().contains("--webhook-allow"),
            "{target}: names the field and the flag: {}",
            e.message()
        );
    }

    // At delivery: a replica that allows `localhost` creates the job and dies; the strict one
    // finishes it and finds that localhost resolves to loopback: refused, nothing sent.
    let mut lenient_env = HOOKS.to_vec();
    lenient_env[1] = ("VOXPOOL_JOBS_WEBHOOK_ALLOW", "localhost");
    let mut a = stack.jobs(&redis.url(), 4, &lenient_env, None);
    let mut req = request("own-network", 1);
    req.webhook_url = format!("http://localhost:{port}/hook");
    let job = create(&mut client(&a).await, req).await;
    a.child.kill().expect("SIGKILL");
    a.child.wait().expect("reaped");
    let end = ended(&mut c, &job.name).await;
    assert!(end.end_time.is_some());
    until_logged(&log, "resolves to").await;
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(
        text.contains("refused") && text.contains("a loopback address"),
        "the refusal says why: {text}"
    );
    assert_eq!(
        seen.accepted.load(Ordering::SeqCst),
        0,
        "no connection reached the receiver"
    );
}
