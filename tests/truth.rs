//! The truth test: invariant 1 of docs/ARCHITECTURE.md (never oversell) checked where it
//! matters, at the vendor, with several replicas and a replica dying mid-run.
//!
//! One private Redis, two `voxpool-scheduler` processes on it (A, B), two `voxpool-synthesis`
//! processes that both know both schedulers (`--scheduler http://A,http://B`; X lists A
//! first, Y lists B first), and an in-process fake OpenAI-compatible vendor with
//! 10 keys × cap 10 that counts every request's concurrency per key (refused ones included).
//! 300 concurrent callers send 600 Synthesize requests, half through each synthesis replica;
//! when half of them have ended, scheduler A is killed with SIGKILL. Then:
//! - the vendor never saw more than 10 concurrent requests on any key and answered no 429;
//! - every request ended before its deadline (+ margin) and every one succeeded: calls that
//!   were on A when it died were retried on B, Acquires with their idempotency key (a
//!   double-granted Acquire would show as a lease still in flight below);
//! - one second after the load, the pool's in-flight count (asked of B) is back to 0.
//!
//! The kill is triggered by a count of finished requests, not by time; the only waits are
//! bounded (per-request gRPC deadlines, a bounded poll of GetPoolStatus).
//!
//! The same fleet also faces its lease store failing: the Sentinel primary SIGKILLed (a real
//! primary + replica + three sentinels), and one Redis flushed (FLUSHALL) then restarted empty,
//! under more callers than slots. `TRUTH_LOG=info` shows the services' logs.

use std::{
    path::Path,
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::time::Instant;
use tonic::{Code, transport::Channel};
use voxpool_e2e::{Authed, Service, binary, start};
use voxpool_fake_vendors::{FakeConfig, FakeVendor, Latency, VendorKind};
use voxpool_proto::{
    scheduler::v1::{self as spb, pool_scheduler_client::PoolSchedulerClient},
    synthesis::v1::{self as pb, synthesis_client::SynthesisClient},
};
use voxpool_testkit::RedisServer;

const POOL: &str = "openai-fake";
const KEYS: usize = 10;
const CAP: u32 = 10;
const CALLERS: usize = 300;
const REQUESTS_PER_CALLER: usize = 2;
const TOTAL: usize = CALLERS * REQUESTS_PER_CALLER;
/// Scheduler A dies when this many requests have ended.
const KILL_AFTER: usize = TOTAL / 2;
const LEASE_TTL_MS: u64 = 3_000;
/// Each request's gRPC deadline.
const DEADLINE: Duration = Duration::from_secs(20);
/// How late past its deadline a request may end (process scheduling on loaded machines).
const MARGIN: Duration = Duration::from_secs(3);

/// Pool `openai-fake` (the fake snapshot's tts model id): upstream `u` at the fake vendor,
/// keys `k0..k9` of capacity 10 whose credential files hold their own names (the fake counts a
/// key under its bearer token). A vendor call can never outlive its lease: the attempt
/// timeout (2.5 s) is below the lease TTL (3 s), even when renewals fail with A gone.
fn write_config(dir: &Path, base_url: &str, recovery_window_ms: u64) -> std::path::PathBuf {
    let mut t = format!(
        "[[pools]]\nid = \"{POOL}\"\nprovider = \"openai\"\nmodel = \"tts-1\"\n\
         [[pools.upstreams]]\nid = \"u\"\nbase_url = \"{base_url}\"\n"
    );
    for k in 0..KEYS {
        let credential = dir.join(format!("k{k}"));
        std::fs::write(&credential, format!("k{k}\n")).expect("credential file");
        t.push_str(&format!(
            "[[pools.upstreams.keys]]\nid = \"k{k}\"\ncapacity = {CAP}\ncredential = {{ file = \"{}\" }}\n",
            credential.display()
        ));
    }
    t.push_str(&format!(
        "[scheduler]\ndefault_lease_ttl_ms = {LEASE_TTL_MS}\nwait_poll_ms = 10\n\
         recovery_window_ms = {recovery_window_ms}\n\
         [synthesis]\nattempt_timeout_ms = 2500\ndefault_deadline_ms = 20000\n"
    ));
    // Callers authenticate, as in `make run`.
    t.push_str(voxpool_e2e::CLIENT_TOKENS_TOML);
    let path = dir.join("config.toml");
    std::fs::write(&path, t).expect("config file");
    path
}

fn quiet(command: Command) -> Command {
    voxpool_e2e::quiet(command, "TRUTH_LOG")
}

fn scheduler(config: &Path, redis: &str) -> Service {
    scheduler_on(config, redis, "127.0.0.1:0")
}

fn scheduler_on(config: &Path, redis: &str, listen: &str) -> Service {
    let mut c = Command::new(binary("voxpool-scheduler"));
    c.arg("--config")
        .arg(config)
        .args(["--listen", listen, "--store", redis])
        .args(["--drain-delay", "1s"])
        .env("VOXPOOL_ADMIN_TOKEN", "truth-test-admin-token");
    start(quiet(c))
}

fn synthesis(config: &Path, schedulers: [&Service; 2]) -> Service {
    let mut c = Command::new(binary("voxpool-synthesis"));
    let urls = schedulers.map(|s| format!("http://{}", s.addr)).join(",");
    c.arg("--config")
        .arg(config)
        .args(["--listen", "127.0.0.1:0"])
        .args(["--scheduler", &urls])
        .args(["--catalog", "http://127.0.0.1:1"])
        .args(["--lease-ttl-ms", &LEASE_TTL_MS.to_string()]);
    start(quiet(c))
}

/// A connection to `addr` whose calls carry the test's client token.
async fn channel(addr: &str) -> Authed {
    Authed::new(
        voxpool_e2e::connect(addr).await,
        voxpool_e2e::voxctl_token(),
    )
}

/// How one request ended.
#[derive(Debug)]
struct Ended {
    via_survivor: bool,
    code: Code,
    message: String,
    took: Duration,
}

/// What every scenario here starts from: a private Redis, the fake vendor (cap [`CAP`] per
/// key, a uniform latency in `min_ms..=max_ms`) and the config pointing at it.
struct Fleet {
    redis: RedisServer,
    fake: FakeVendor,
    dir: tempfile::TempDir,
    config: std::path::PathBuf,
}

impl Fleet {
    /// Without a recovery window: these scenarios never lose the store, and a fresh store
    /// would otherwise hold the first grants back.
    async fn start(min_ms: u64, max_ms: u64) -> Self {
        Self::with_recovery(min_ms, max_ms, 0).await
    }

    async fn with_recovery(min_ms: u64, max_ms: u64, recovery_window_ms: u64) -> Self {
        let redis = RedisServer::start();
        let fake = FakeVendor::start(FakeConfig::new(VendorKind::OpenAi).cap(CAP).latency(
            Latency::Uniform {
                min: Duration::from_millis(min_ms),
                max: Duration::from_millis(max_ms),
            },
        ))
        .await
        .expect("fake vendor");
        let dir = tempfile::tempdir().expect("tempdir");
        let config = write_config(dir.path(), &fake.base_url(), recovery_window_ms);
        Self {
            redis,
            fake,
            dir,
            config,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn vendor_never_sees_more_than_capacity_when_a_scheduler_replica_dies() {
    let Fleet {
        redis,
        fake,
        dir: _dir,
        config,
    } = Fleet::start(100, 300).await;
    let mut sched_a = scheduler(&config, &redis.url());
    let sched_b = scheduler(&config, &redis.url());
    let synth_x = synthesis(&config, [&sched_a, &sched_b]);
    let synth_y = synthesis(&config, [&sched_b, &sched_a]);
    let clients = [
        SynthesisClient::new(channel(&synth_x.addr).await),
        SynthesisClient::new(channel(&synth_y.addr).await),
    ];
    let voice = voxpool_fake_vendors::snapshot("openai", "tts-1", "alloy");
    assert_eq!(voice.tts_model_id, POOL);

    let ended = Arc::new(AtomicUsize::new(0));
    let (kill_tx, mut kill_rx) = tokio::sync::watch::channel(false);
    let kill_tx = Arc::new(kill_tx);
    let tasks: Vec<_> = (0..CALLERS)
        .map(|i| {
            let mut client = clients[i % 2].clone();
            let (ended, kill_tx) = (Arc::clone(&ended), Arc::clone(&kill_tx));
            let request = pb::SynthesizeRequest {
                voice: Some(pb::synthesize_request::Voice::Snapshot(voice.to_pb())),
                text: "The vendor counts every request.".into(),
                format: pb::AudioFormat::Wav as i32,
                ..Default::default()
            };
            tokio::spawn(async move {
                let mut out = Vec::with_capacity(REQUESTS_PER_CALLER);
                for n in 0..REQUESTS_PER_CALLER {
                    let mut req = tonic::Request::new(pb::SynthesizeRequest {
                        request_id: format!("truth-{i}-{n}"),
                        ..request.clone()
                    });
                    req.set_timeout(DEADLINE);
                    let began = Instant::now();
                    // The client-side bound: nothing can hang past deadline + margin.
                    let result =
                        tokio::time::timeout(DEADLINE + MARGIN, client.synthesize(req)).await;
                    let took = began.elapsed();
                    let (code, message) = match result {
                        Ok(Ok(r)) => {
                            assert!(!r.get_ref().audio.is_empty(), "success without audio");
                            (Code::Ok, String::new())
                        }
                        Ok(Err(s)) => (s.code(), s.message().to_owned()),
                        Err(_) => (Code::DeadlineExceeded, "hung past deadline + margin".into()),
                    };
                    out.push(Ended {
                        via_survivor: i % 2 == 1,
                        code,
                        message,
                        took,
                    });
                    if ended.fetch_add(1, Ordering::SeqCst) + 1 == KILL_AFTER {
                        kill_tx.send_replace(true);
                    }
                }
                out
            })
        })
        .collect();

    // Kill A (SIGKILL) once half the requests have ended.
    tokio::time::timeout(DEADLINE * 2, kill_rx.wait_for(|k| *k))
        .await
        .expect("half of the requests ended")
        .expect("kill signal");
    sched_a.child.kill().expect("kill -9 scheduler A");
    let _ = sched_a.child.wait();

    let mut results = Vec::with_capacity(TOTAL);
    for task in tasks {
        let per_caller = tokio::time::timeout(DEADLINE * 2 + MARGIN, task)
            .await
            .expect("caller finished")
            .expect("caller did not panic");
        results.extend(per_caller);
    }
    let last_end = Instant::now();

    // None lost, none hung, none failed: losing a scheduler replica costs callers nothing.
    assert_eq!(results.len(), TOTAL, "every request accounted for");
    for r in &results {
        assert!(
            r.took <= DEADLINE + MARGIN,
            "request ran past its deadline: {r:?}"
        );
        assert_eq!(r.code, Code::Ok, "a request failed ({}): {r:?}", r.message);
    }
    let ok = results.iter().filter(|r| r.code == Code::Ok).count();
    let via_dead_failed = results
        .iter()
        .filter(|r| !r.via_survivor && r.code != Code::Ok)
        .count();

    // At the vendor: never more than the cap on any key, no 429 at all, and the cap was reached
    // (the run did push every key to its limit).
    let stats = fake.stats();
    assert_eq!(stats.len(), KEYS, "every key served: {stats:?}");
    for (key, s) in &stats {
        assert!(
            s.peak_concurrency <= u64::from(CAP),
            "key {key} saw {} concurrent requests (cap {CAP})",
            s.peak_concurrency
        );
        assert_eq!(s.rejected_over_cap, 0, "key {key} answered 429s: {s:?}");
    }
    let peak = stats
        .values()
        .map(|s| s.peak_concurrency)
        .max()
        .unwrap_or(0);
    assert_eq!(peak, u64::from(CAP), "the load never reached a key's cap");
    let served: u64 = stats.values().map(|s| s.successes).sum();
    assert!(
        served >= ok as u64,
        "vendor served {served}, callers got {ok}"
    );

    // One second after the load, the survivor reports nothing in flight: every lease was
    // released through B (a double-granted Acquire would still hold a slot here until its TTL).
    let mut status = PoolSchedulerClient::new(channel(&sched_b.addr).await);
    let limit = last_end + Duration::from_secs(1);
    let mut orphaned = None;
    let in_flight = loop {
        let s = status
            .get_pool_status(spb::GetPoolStatusRequest { pool: POOL.into() })
            .await
            .expect("pool status from B")
            .into_inner();
        orphaned.get_or_insert(s.in_flight);
        if s.in_flight == 0 || Instant::now() >= limit {
            break s.in_flight;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        in_flight, 0,
        "pool still has {in_flight} leases in flight 1 s after the last request ended"
    );
    let mut codes = std::collections::BTreeMap::<String, usize>::new();
    for r in &results {
        *codes.entry(format!("{:?}", r.code)).or_default() += 1;
    }
    eprintln!(
        "truth: {ok}/{TOTAL} succeeded ({codes:?}), {via_dead_failed} failed through the replica \
         that lists the killed one first; vendor peak {peak}/{CAP} per key, {served} served; {} leases in flight when the \
         load ended, 0 after {} ms",
        orphaned.unwrap_or(0),
        last_end.elapsed().as_millis()
    );
    drop((synth_x, synth_y, sched_b));
}

/// Sends SIGTERM to `service` and waits (bounded) for it to exit by itself.
fn terminate(service: &mut Service) {
    let pid = service.child.id().to_string();
    let sent = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("run kill");
    assert!(sent.success(), "kill -TERM {pid}");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if service.child.try_wait().expect("wait").is_some() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "scheduler did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) until the scheduler at `addr` reports SERVING.
async fn until_serving(addr: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(channel) = Channel::from_shared(format!("http://{addr}"))
            .expect("url")
            .connect()
            .await
        {
            let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
            let answer = health
                .check(tonic_health::pb::HealthCheckRequest {
                    service: String::new(),
                })
                .await;
            if answer.is_ok_and(|r| {
                r.get_ref().status
                    == tonic_health::pb::health_check_response::ServingStatus::Serving as i32
            }) {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "scheduler at {addr} never served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_restart_of_both_schedulers_fails_no_call() {
    let Fleet {
        redis,
        fake,
        dir: _dir,
        config,
    } = Fleet::start(50, 150).await;
    let mut schedulers = [
        scheduler(&config, &redis.url()),
        scheduler(&config, &redis.url()),
    ];
    let addrs = [schedulers[0].addr.clone(), schedulers[1].addr.clone()];
    let synth = synthesis(&config, [&schedulers[0], &schedulers[1]]);
    let client = SynthesisClient::new(channel(&synth.addr).await);

    // Steady load: 60 callers, each sending one request after another until told to stop.
    let load = Load::start(&[client], 60);
    let within = Duration::from_secs(30);
    load.until_more(200, within, "before the restarts").await;
    for (i, addr) in addrs.iter().enumerate() {
        terminate(&mut schedulers[i]);
        // The survivor carries the load while this replica is down...
        load.until_more(100, within, "with one replica down").await;
        schedulers[i] = scheduler_on(&config, &redis.url(), addr);
        until_serving(addr).await;
        // ...and the restarted one takes traffic again: the next replica's drain delay (1 s,
        // health NOT_SERVING while still answering) is the window in which synthesis's
        // prober (every 0.5 s) puts it back and takes the draining one out.
        load.until_more(100, within, "after a restart").await;
    }
    let calls = load.stop().await;
    let failures: Vec<String> = calls
        .iter()
        .filter(|c| c.code != Code::Ok)
        .map(|c| format!("{:?}: {}", c.code, c.message))
        .collect();
    let total = calls.len();
    eprintln!(
        "rolling restart: {} of {total} calls failed",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {total} calls failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    for (key, st) in fake.stats() {
        assert!(
            st.peak_concurrency <= u64::from(CAP),
            "key {key} over its cap: {st:?}"
        );
    }
    drop((synth, schedulers));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_synthesis_replica_costs_its_callers_only_a_retry() {
    let Fleet {
        redis,
        fake,
        dir: _dir,
        config,
    } = Fleet::start(100, 300).await;
    let schedulers = [
        scheduler(&config, &redis.url()),
        scheduler(&config, &redis.url()),
    ];
    let mut x = synthesis(&config, [&schedulers[0], &schedulers[1]]);
    let y = synthesis(&config, [&schedulers[1], &schedulers[0]]);
    // A caller that knows both synthesis replicas, as a Kubernetes headless Service gives them.
    let urls = format!("http://{},http://{}", x.addr, y.addr);
    let balanced = voxpool_runtime::endpoints::Endpoints::start("--synthesis", &urls)
        .expect("endpoints")
        .channel;
    let client = SynthesisClient::with_interceptor(balanced, voxpool_e2e::voxctl_token());
    let voice = voxpool_fake_vendors::snapshot("openai", "tts-1", "alloy");
    let done = Arc::new(AtomicUsize::new(0));
    let callers: Vec<_> = (0..100)
        .map(|i| {
            let (mut client, done) = (client.clone(), done.clone());
            let request = pb::SynthesizeRequest {
                voice: Some(pb::synthesize_request::Voice::Snapshot(voice.to_pb())),
                text: "One retry at most.".into(),
                ..Default::default()
            };
            tokio::spawn(async move {
                let mut outcomes = Vec::new();
                for n in 0..3 {
                    // A caller's own policy: retry once, after a pause, on UNAVAILABLE / CANCELLED.
                    let mut tries = 0;
                    let result = loop {
                        tries += 1;
                        let mut req = tonic::Request::new(pb::SynthesizeRequest {
                            request_id: format!("x-{i}-{n}-{tries}"),
                            ..request.clone()
                        });
                        req.set_timeout(DEADLINE);
                        match client.synthesize(req).await {
                            Err(s)
                                if tries < 2
                                    && matches!(
                                        s.code(),
                                        Code::Unavailable | Code::Cancelled | Code::Unknown
                                    ) =>
                            {
                                // Its backoff outlasts one endpoint probe (0.5 s), by which the
                                // dead replica is out of rotation.
                                tokio::time::sleep(Duration::from_millis(700)).await;
                            }
                            other => break other.map(|_| ()),
                        }
                    };
                    outcomes.push((
                        tries,
                        result.map_err(|s| format!("{:?}: {}", s.code(), s.message())),
                    ));
                    done.fetch_add(1, Ordering::SeqCst);
                }
                outcomes
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while done.load(Ordering::SeqCst) < 100 {
        assert!(Instant::now() < deadline, "the load stalled");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    x.child.kill().expect("kill -9 synthesis X");
    let _ = x.child.wait();
    let mut retried = 0;
    for c in callers {
        for (tries, result) in c.await.expect("caller task") {
            assert!(
                result.is_ok(),
                "a call failed after {tries} tries: {result:?}"
            );
            retried += usize::from(tries > 1);
        }
    }
    eprintln!(
        "synthesis replica killed: 300 of 300 calls succeeded, {retried} needed their one retry"
    );
    for (key, st) in fake.stats() {
        assert!(
            st.peak_concurrency <= u64::from(CAP),
            "key {key} over its cap: {st:?}"
        );
        assert_eq!(st.rejected_over_cap, 0, "key {key} answered 429s: {st:?}");
    }
    drop((y, schedulers));
}

/// Two schedulers on `store` and two synthesis replicas that both know both (each listing a
/// different one first), with a client of each synthesis replica.
async fn two_by_two(
    config: &Path,
    store: &str,
) -> ([Service; 2], [Service; 2], [SynthesisClient<Authed>; 2]) {
    let schedulers = [scheduler(config, store), scheduler(config, store)];
    let synth = [
        synthesis(config, [&schedulers[0], &schedulers[1]]),
        synthesis(config, [&schedulers[1], &schedulers[0]]),
    ];
    let clients = [
        SynthesisClient::new(channel(&synth[0].addr).await),
        SynthesisClient::new(channel(&synth[1].addr).await),
    ];
    (schedulers, synth, clients)
}

/// How long the fault scenarios' load may take for its next batch of calls (a store failover
/// or a recovery window holds calls back meanwhile).
const STALL: Duration = Duration::from_secs(60);

/// One Synthesize call of a [`Load`] (its message is for failure reports).
#[derive(Debug)]
struct Call {
    began: Instant,
    code: Code,
    message: String,
}

/// `callers` callers sending Synthesize one after another (deadline [`DEADLINE`]; a call still
/// unanswered at deadline + [`MARGIN`] counts as failed) through `clients` in turn, until
/// [`Load::stop`].
struct Load {
    done: Arc<AtomicUsize>,
    stopping: Arc<std::sync::atomic::AtomicBool>,
    callers: Vec<tokio::task::JoinHandle<Vec<Call>>>,
}

impl Load {
    fn start(clients: &[SynthesisClient<Authed>], callers: usize) -> Self {
        let voice = voxpool_fake_vendors::snapshot("openai", "tts-1", "alloy");
        let done = Arc::new(AtomicUsize::new(0));
        let stopping = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let callers = (0..callers)
            .map(|i| {
                let mut client = clients[i % clients.len()].clone();
                let (done, stopping) = (done.clone(), stopping.clone());
                let request = pb::SynthesizeRequest {
                    voice: Some(pb::synthesize_request::Voice::Snapshot(voice.to_pb())),
                    text: "The store may forget; the vendor never sees it.".into(),
                    ..Default::default()
                };
                tokio::spawn(async move {
                    let mut calls = Vec::new();
                    let mut n = 0;
                    while !stopping.load(Ordering::SeqCst) {
                        let mut req = tonic::Request::new(pb::SynthesizeRequest {
                            request_id: format!("fault-{i}-{n}"),
                            ..request.clone()
                        });
                        req.set_timeout(DEADLINE);
                        let began = Instant::now();
                        let (code, message) =
                            match tokio::time::timeout(DEADLINE + MARGIN, client.synthesize(req))
                                .await
                            {
                                Ok(Ok(_)) => (Code::Ok, String::new()),
                                Ok(Err(s)) => (s.code(), s.message().to_owned()),
                                Err(_) => (Code::DeadlineExceeded, "hung".into()),
                            };
                        calls.push(Call {
                            began,
                            code,
                            message,
                        });
                        done.fetch_add(1, Ordering::SeqCst);
                        n += 1;
                    }
                    calls
                })
            })
            .collect();
        Self {
            done,
            stopping,
            callers,
        }
    }

    /// Waits until `n` more calls than now have ended; fails if that takes over `within`.
    async fn until_more(&self, n: usize, within: Duration, what: &str) {
        let target = self.done.load(Ordering::SeqCst) + n;
        let deadline = Instant::now() + within;
        while self.done.load(Ordering::SeqCst) < target {
            assert!(Instant::now() < deadline, "the load stalled: {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn stop(self) -> Vec<Call> {
        self.stopping.store(true, Ordering::SeqCst);
        let mut calls = Vec::new();
        for c in self.callers {
            calls.extend(c.await.expect("caller task"));
        }
        calls
    }
}

/// The vendor's side of invariant 1: no key ever above its cap, not one 429. Returns the
/// highest peak; a failure lists every key over its cap and the 429s in all.
fn assert_vendor_within_caps(fake: &FakeVendor) -> u64 {
    let stats = fake.stats();
    let over: Vec<String> = stats
        .iter()
        .filter(|(_, s)| s.peak_concurrency > u64::from(CAP) || s.rejected_over_cap > 0)
        .map(|(key, s)| format!("{key} peak {}", s.peak_concurrency))
        .collect();
    let refused: u64 = stats.values().map(|s| s.rejected_over_cap).sum();
    assert!(
        over.is_empty(),
        "{} of {} keys went over their cap of {CAP} ({}), {refused} requests answered 429",
        over.len(),
        stats.len(),
        over.join(", ")
    );
    stats
        .values()
        .map(|s| s.peak_concurrency)
        .max()
        .unwrap_or(0)
}

/// Waits (bounded by the lease TTL + 2 s) until the pool has nothing in flight.
async fn until_idle(scheduler: &Service) {
    let mut status = PoolSchedulerClient::new(channel(&scheduler.addr).await);
    let limit = Instant::now() + Duration::from_millis(LEASE_TTL_MS) + Duration::from_secs(2);
    loop {
        let s = status
            .get_pool_status(spb::GetPoolStatusRequest { pool: POOL.into() })
            .await
            .expect("pool status")
            .into_inner();
        if s.in_flight == 0 {
            return;
        }
        assert!(
            Instant::now() < limit,
            "{} leases still in flight after the lease TTL",
            s.in_flight
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sentinel_primary_killed_under_load_oversells_no_key() {
    let sentinel = Arc::new(
        tokio::task::spawn_blocking(voxpool_testkit::RedisSentinel::start)
            .await
            .expect("sentinel"),
    );
    let Fleet {
        redis: _unused,
        fake,
        dir: _dir,
        config,
    } = Fleet::with_recovery(100, 300, 2_000).await;
    let (schedulers, _synth, clients) = two_by_two(&config, &sentinel.url()).await;
    // More callers than slots (10 keys x 10): every key is pushed to its cap throughout.
    let load = Load::start(&clients, 150);
    load.until_more(300, STALL, "before the kill").await;
    let killed_at = Instant::now();
    let old = sentinel.kill_primary();
    let new = {
        let sentinel = sentinel.clone();
        tokio::task::spawn_blocking(move || sentinel.wait_failover(old))
            .await
            .expect("failover")
    };
    let promoted_at = Instant::now();
    load.until_more(600, STALL, "after the promotion").await;
    let calls = load.stop().await;
    let peak = assert_vendor_within_caps(&fake);
    // A caller whose deadline outlasts the failover does not see it; calls that start once the
    // new primary is known all succeed.
    let failed: Vec<&Call> = calls.iter().filter(|c| c.code != Code::Ok).collect();
    let settled = promoted_at + Duration::from_secs(1);
    let late_failures: Vec<&&Call> = failed.iter().filter(|c| c.began >= settled).collect();
    assert!(
        late_failures.is_empty(),
        "calls that started after the promotion failed: {:?}",
        &late_failures[..late_failures.len().min(3)]
    );
    assert!(
        failed.len() * 100 <= calls.len() * 3,
        "{} of {} calls failed across the failover (at most 3% may): {:?}",
        failed.len(),
        calls.len(),
        &failed[..failed.len().min(3)]
    );
    until_idle(&schedulers[1]).await;
    eprintln!(
        "sentinel failover: primary :{old} killed, :{new} promoted after {} ms; {} of {} calls \
         failed; vendor peak {peak}/{CAP} per key, 0 over cap, 0 429s",
        promoted_at.duration_since(killed_at).as_millis(),
        failed.len(),
        calls.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_flushed_or_restarted_empty_under_load_oversells_no_key() {
    // The production default window (5 s) against the 3 s leases of this fleet (renewed
    // every second): every live lease re-registers long before grants resume.
    let Fleet {
        mut redis,
        fake,
        dir: _dir,
        config,
    } = Fleet::with_recovery(100, 300, 5_000).await;
    let (schedulers, _synth, clients) = two_by_two(&config, &redis.url()).await;
    let load = Load::start(&clients, 150);
    load.until_more(300, STALL, "before the flush").await;
    redis.flushall();
    load.until_more(300, STALL, "after the flush").await;
    redis.restart_empty();
    load.until_more(300, STALL, "after the restart").await;
    let calls = load.stop().await;
    let peak = assert_vendor_within_caps(&fake);
    let failed: Vec<&Call> = calls.iter().filter(|c| c.code != Code::Ok).collect();
    assert!(
        failed.is_empty(),
        "{} of {} calls failed: {:?}",
        failed.len(),
        calls.len(),
        &failed[..failed.len().min(3)]
    );
    until_idle(&schedulers[0]).await;
    eprintln!(
        "store loss: FLUSHALL and an empty restart under load; {} calls, 0 failed; vendor peak \
         {peak}/{CAP} per key, 0 over cap, 0 429s",
        calls.len()
    );
}
