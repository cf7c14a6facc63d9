//! The usage ledger and budgets, end to end on real processes.
//!
//! **The ledger equals the vendor.** Five tenants, each speaking with its own voice, send
//! 1,000 concurrent Synthesize calls through two synthesis replicas and two scheduler replicas
//! to a fake vendor that refuses about 10 % of calls (a 503 before any audio: not charged) and
//! breaks a few after the first audio (charged: a real vendor bills what it began). Mid-run one
//! synthesis replica is SIGKILLed and the Redis primary holding the usage stream is killed (a
//! Sentinel failover; on Cluster, the shard holding the stream fails over). Afterwards the
//! catalog's ledger (`voxpool.catalog.v1.Usage/GetUsage`, grouped by tenant) must show, per
//! tenant, the characters the vendor counted for that tenant's voice: nothing lost, nothing
//! counted twice (entries redelivered after the failover or a consumer restart count once).
//! Exact, but for one thing no ledger can know: a call of the killed replica whose Charge was
//! written and whose vendor answer was never heard is counted as charged (the vendor did the
//! work, unless the kill came in the instant before the request reached it), and the ledger
//! says how many characters rest on such Charges (`unsettled_characters`): the vendor's figure
//! must lie in `[characters - unsettled_characters, characters]`, and be exactly `characters`
//! for a tenant with none. Texts put in the audio cache before the load are served from it
//! and recorded as cached, never as vendor characters.
//!
//! **A budget holds exactly.** A tenant with a 10,000-character daily budget sends 200
//! concurrent calls of 120 characters: the vendor synthesizes exactly 83 of them (9,960
//! characters); the other 117 are refused RESOURCE_EXHAUSTED with reason BUDGET_EXHAUSTED,
//! naming the budget and when it resets; with two schedulers sharing the budget on Sentinel,
//! through a failover of its primary, the vendor never synthesizes more than the budget and
//! exactly what the successful calls asked.
//!
//! The only waits are bounded polls of the ledger (it converges when the consumer has read
//! the stream and the unsettled Charges' grace has passed) and of the load's progress.
//! `USAGE_TEST_LOG=info` shows the services' logs.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::time::Instant;
use tonic::Code;
use voxpool_e2e::{Authed, Service, binary, start};
use voxpool_fake_vendors::{FakeConfig, FakeVendor, FaultRates, Latency, VendorKind};
use voxpool_proto::{
    catalog::v1::{self as cpb, usage_client::UsageClient},
    synthesis::v1::{self as pb, synthesis_client::SynthesisClient},
};

const POOL: &str = "usage-fake";
const ADMIN: &str = "usage-test-admin-token-0123456789";
const TENANTS: [(&str, &str); 5] = [
    ("acme", "alloy"),
    ("globex", "echo"),
    ("initech", "fable"),
    ("umbrella", "onyx"),
    ("hooli", "nova"),
];
const PER_TENANT: usize = 200;
/// The texts of each tenant put in the audio cache before the load: `j % 5 == 3`, `j` below.
const WARMED: usize = 50;
/// How long an unsettled Charge waits before the ledger counts it (short for the test).
const GRACE_MS: u64 = 2_000;
/// How long the ledger may take to converge after the load.
const CONVERGE: Duration = Duration::from_secs(60);

fn quiet(command: Command) -> Command {
    voxpool_e2e::quiet(command, "USAGE_TEST_LOG")
}

/// Pool [`POOL`] at the fake (10 keys of capacity 10, priced per character), the audio cache
/// on, and `extra` appended (budgets).
fn write_config(dir: &Path, base_url: &str, extra: &str) -> PathBuf {
    let mut t = format!(
        "[[pools]]\nid = \"{POOL}\"\nprovider = \"openai\"\nmodel = \"tts-1\"\n\
         price = {{ per_million_characters = 15.0 }}\n\
         cache = {{ enabled = true, ttl = \"1h\" }}\n\
         [[pools.upstreams]]\nid = \"u\"\nbase_url = \"{base_url}\"\n"
    );
    for k in 0..10 {
        let credential = dir.join(format!("k{k}"));
        std::fs::write(&credential, format!("k{k}\n")).expect("credential file");
        t.push_str(&format!(
            "[[pools.upstreams.keys]]\nid = \"k{k}\"\ncapacity = 10\ncredential = {{ file = \"{}\" }}\n",
            credential.display()
        ));
    }
    let secret = dir.join("cache-secret");
    std::fs::write(&secret, "usage-test-cache-secret-0123456789\n").expect("secret file");
    t.push_str(&format!(
        "[usage]\ncurrency = \"USD\"\n\
         [scheduler]\ndefault_lease_ttl_ms = 3000\nwait_poll_ms = 10\nrecovery_window_ms = 0\n\
         [synthesis]\nattempt_timeout_ms = 2500\ndefault_deadline_ms = 30000\n\
         cache_fill_ttl_ms = 1000\nmax_text_chars = 60000\ncache_secret = {{ file = \"{}\" }}\n{extra}\n",
        secret.display()
    ));
    t.push_str(voxpool_e2e::CLIENT_TOKENS_TOML);
    let path = dir.join("config.toml");
    std::fs::write(&path, t).expect("config file");
    path
}

fn scheduler(config: &Path, store: &str) -> Service {
    let mut c = Command::new(binary("voxpool-scheduler"));
    c.arg("--config")
        .arg(config)
        .args(["--listen", "127.0.0.1:0", "--store", store])
        .env("VOXPOOL_ADMIN_TOKEN", ADMIN);
    start(quiet(c))
}

fn synthesis(
    config: &Path,
    schedulers: [&Service; 2],
    blobs: &str,
    usage: Option<&str>,
) -> Service {
    let mut c = Command::new(binary("voxpool-synthesis"));
    let urls = schedulers.map(|s| format!("http://{}", s.addr)).join(",");
    c.arg("--config")
        .arg(config)
        .args(["--listen", "127.0.0.1:0", "--scheduler", &urls])
        .args(["--catalog", "http://127.0.0.1:1"])
        .args(["--lease-ttl-ms", "3000", "--blob-store", blobs])
        .env("VOXPOOL_ADMIN_TOKEN", ADMIN);
    if let Some(url) = usage {
        c.args(["--usage-store", url]);
    }
    start(quiet(c))
}

fn catalog(config: &Path, dir: &Path, usage: &str) -> Service {
    let db = format!("sqlite://{}?mode=rwc", dir.join("ledger.db").display());
    let mut c = Command::new(binary("voxpool-catalog"));
    c.arg("--config")
        .arg(config)
        .args(["--database", &db, "--listen", "127.0.0.1:0"])
        .args(["--usage-store", usage])
        .env("VOXPOOL_ADMIN_TOKEN", ADMIN)
        .env("VOXPOOL_USAGE_GRACE_MS", GRACE_MS.to_string())
        .env("VOXPOOL_USAGE_POLL_MS", "100")
        .env("VOXPOOL_USAGE_CLAIM_IDLE_MS", "2000");
    start(quiet(c))
}

async fn channel(addr: &str) -> Authed {
    Authed::new(
        voxpool_e2e::connect(addr).await,
        voxpool_e2e::voxctl_token(),
    )
}

/// Tenant `tenant`'s voice `voice` on [`POOL`], sealed.
fn voice(voice: &str) -> voxpool_proto::catalog::v1::VoicePackSnapshot {
    voxpool_e2e::voice::snapshot("openai", "tts-1", voice, POOL).to_pb()
}

/// The `j`-th text of tenant `t`: every fifth repeats the one before it (a wait on its fill,
/// or a cache hit; those of the first [`WARMED`] are in the cache before the load), a few carry
/// CJK and emoji (each a single Unicode scalar for this vendor).
fn text(t: usize, j: usize) -> String {
    let j = if j % 5 == 4 { j - 1 } else { j };
    let base = format!("Tenant {t} reads line {j} of the ledger test aloud.");
    if j % 7 == 0 {
        format!("{base} 你好，世界 🎉")
    } else {
        base
    }
}

/// How the ledger reads, per tenant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Row {
    characters: i64,
    /// Of `characters`, what rests on Charges no Settle confirmed (their replica died).
    unsettled: i64,
    cached: i64,
    requests: i64,
}

async fn ledger(catalog: &Service) -> BTreeMap<String, Row> {
    let mut client = UsageClient::new(voxpool_e2e::connect(&catalog.addr).await);
    let mut request = tonic::Request::new(cpb::UsageQuery {
        group_by: vec![cpb::UsageGroup::Tenant as i32],
        ..Default::default()
    });
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {ADMIN}").parse().expect("header"),
    );
    match client.get_usage(request).await {
        Ok(rows) => rows
            .into_inner()
            .rows
            .into_iter()
            .map(|r| {
                let row = Row {
                    characters: r.characters,
                    unsettled: r.unsettled_characters,
                    cached: r.cached_characters,
                    requests: r.requests,
                };
                (r.tenant, row)
            })
            .collect(),
        Err(s) => panic!("GetUsage: {s:?}"),
    }
}

/// Characters the fake synthesized per tenant (each tenant speaks with its own voice).
fn vendor_characters(fake: &FakeVendor) -> BTreeMap<String, i64> {
    let per_voice = fake.voice_characters();
    TENANTS
        .iter()
        .map(|(tenant, voice)| {
            let n = per_voice.get(*voice).copied().unwrap_or(0);
            ((*tenant).to_owned(), i64::try_from(n).expect("fits"))
        })
        .collect()
}

/// How one call ended: its tenant, which replica, the code, and the usage it reported.
#[derive(Debug)]
struct Ended {
    tenant: usize,
    replica: usize,
    code: Code,
    /// The refusal's message (empty on success).
    message: String,
    cached_characters: i64,
    characters: i64,
}

/// Where the usage stream and the leases live, and how to fail it over.
enum Store {
    Sentinel(Arc<voxpool_testkit::RedisSentinel>),
    Cluster(Arc<voxpool_testkit::RedisCluster>),
}

impl Store {
    fn url(&self) -> String {
        match self {
            Store::Sentinel(s) => s.url(),
            Store::Cluster(c) => c.url(),
        }
    }

    /// Kills the primary holding the usage stream and waits for its replica's promotion.
    async fn fail_over(&self) {
        match self {
            Store::Sentinel(s) => {
                let s = Arc::clone(s);
                tokio::task::spawn_blocking(move || {
                    let old = s.kill_primary();
                    s.wait_failover(old)
                })
                .await
                .expect("sentinel failover");
            }
            Store::Cluster(c) => {
                let c = Arc::clone(c);
                tokio::task::spawn_blocking(move || {
                    let port = c.primary_port_for_key(voxpool_domain::usage::USAGE_STREAM);
                    c.kill_node(port);
                    c.wait_promoted(port)
                })
                .await
                .expect("cluster failover");
            }
        }
    }
}

async fn ledger_equals_vendor(store: Store) {
    let fake = FakeVendor::start(FakeConfig {
        faults: FaultRates {
            server_error: 0.10,
            mid_stream_break: 0.02,
            ..FaultRates::default()
        },
        ..FakeConfig::new(VendorKind::OpenAi)
            .cap(10)
            .latency(Latency::Uniform {
                min: Duration::from_millis(20),
                max: Duration::from_millis(80),
            })
    })
    .await
    .expect("fake vendor");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), &fake.base_url(), "");
    let url = store.url();
    let blobs = format!("file://{}", dir.path().join("blobs").display());
    let schedulers = [scheduler(&config, &url), scheduler(&config, &url)];
    let catalog = catalog(&config, dir.path(), &url);
    let mut replicas = [
        Some(synthesis(
            &config,
            [&schedulers[0], &schedulers[1]],
            &blobs,
            Some(&url),
        )),
        Some(synthesis(
            &config,
            [&schedulers[1], &schedulers[0]],
            &blobs,
            Some(&url),
        )),
    ];
    let clients = [
        SynthesisClient::new(channel(&replicas[0].as_ref().expect("x").addr).await),
        SynthesisClient::new(channel(&replicas[1].as_ref().expect("y").addr).await),
    ];

    // Some texts are in the cache before the load: their calls in it are cache hits.
    let mut warm = Vec::new();
    for (t, (tenant, v)) in TENANTS.iter().enumerate() {
        for j in (3..WARMED).step_by(5) {
            let mut client = clients[1].clone();
            let request = pb::SynthesizeRequest {
                voice: Some(pb::synthesize_request::Voice::Snapshot(voice(v))),
                text: text(t, j),
                tenant: (*tenant).to_owned(),
                format: pb::AudioFormat::Pcm as i32,
                ..Default::default()
            };
            warm.push(tokio::spawn(async move {
                // A refused first attempt fails over; a call that still fails is retried.
                for _ in 0..5 {
                    if client.synthesize(request.clone()).await.is_ok() {
                        return;
                    }
                }
                panic!("warming the cache failed five times");
            }));
        }
    }
    for w in warm {
        w.await.expect("warm-up call");
    }
    let ended = Arc::new(AtomicUsize::new(0));
    let mut calls = Vec::new();
    for j in 0..PER_TENANT {
        for (t, (tenant, v)) in TENANTS.iter().enumerate() {
            let replica = (j + t) % 2;
            let mut client = clients[replica].clone();
            let ended = Arc::clone(&ended);
            let mut request = tonic::Request::new(pb::SynthesizeRequest {
                voice: Some(pb::synthesize_request::Voice::Snapshot(voice(v))),
                text: text(t, j),
                tenant: (*tenant).to_owned(),
                request_id: format!("usage-{t}-{j}"),
                format: pb::AudioFormat::Pcm as i32,
                ..Default::default()
            });
            request.set_timeout(Duration::from_secs(30));
            calls.push(tokio::spawn(async move {
                let (code, message, cached_characters, characters) =
                    match client.synthesize(request).await {
                        Ok(r) => {
                            let u = r.into_inner().usage.unwrap_or_default();
                            (Code::Ok, String::new(), u.cached_characters, u.characters)
                        }
                        Err(s) => (s.code(), s.message().to_owned(), 0, 0),
                    };
                ended.fetch_add(1, Ordering::SeqCst);
                Ended {
                    tenant: t,
                    replica,
                    code,
                    message,
                    cached_characters,
                    characters,
                }
            }));
        }
    }
    let total = calls.len();
    until_ended(&ended, total * 3 / 10).await;
    // One synthesis replica dies with calls in flight: their Charges are on the stream, their
    // Settles never come.
    let mut killed = replicas[0].take().expect("replica x");
    let _ = killed.child.kill();
    let _ = killed.child.wait();
    until_ended(&ended, total / 2).await;
    store.fail_over().await;
    let mut outcomes = Vec::new();
    for c in calls {
        outcomes.push(c.await.expect("call task"));
    }

    let ok = outcomes.iter().filter(|e| e.code == Code::Ok).count();
    // The load happened: most calls sent to the surviving replica succeeded (those sent to
    // the killed one after its death fail by design). Per code: how many, the first message.
    let survivor: Vec<&Ended> = outcomes.iter().filter(|e| e.replica == 1).collect();
    let survived = survivor.iter().filter(|e| e.code == Code::Ok).count();
    let mut codes: BTreeMap<String, (usize, &str)> = BTreeMap::new();
    for e in &survivor {
        codes
            .entry(format!("{:?}", e.code))
            .or_insert((0, &e.message))
            .0 += 1;
    }
    assert!(
        survived >= survivor.len() / 2,
        "only {survived} of the surviving replica's {} calls succeeded: {codes:?}",
        survivor.len()
    );
    let expected = vendor_characters(&fake);
    assert!(
        expected.values().all(|n| *n > 0),
        "every tenant reached the vendor: {expected:?}"
    );
    // The ledger converges on the vendor's figures once the stream is read and the grace of
    // the killed replica's unsettled Charges has passed.
    // Exact, except for what rests on unsettled Charges: an attempt whose replica died between
    // writing its Charge and hearing the vendor is counted as charged (the vendor did the work
    // unless the kill came before the request reached it), and the ledger says how much that
    // is (`unsettled_characters`): the vendor's figure lies in [characters - unsettled,
    // characters].
    let matches = |l: &BTreeMap<String, Row>| {
        expected.iter().all(|(t, vendor)| {
            l.get(t)
                .is_some_and(|r| r.characters - r.unsettled <= *vendor && *vendor <= r.characters)
        })
    };
    let deadline = Instant::now() + CONVERGE;
    let mut seen = ledger(&catalog).await;
    while !matches(&seen) {
        if Instant::now() >= deadline {
            let answered: BTreeMap<usize, i64> = (0..TENANTS.len())
                .map(|t| {
                    let mine = outcomes.iter().filter(|e| e.tenant == t);
                    (t, mine.map(|e| e.characters).sum())
                })
                .collect();
            panic!(
                "the ledger never matched the vendor: ledger {seen:?}, vendor {expected:?}, answers said {answered:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        seen = ledger(&catalog).await;
    }
    // It stays there: nothing arriving later counts twice (two more graces; a sweep finishing
    // or a Settle retried across the failover may still move the figures within the bound).
    tokio::time::sleep(Duration::from_millis(2 * GRACE_MS)).await;
    let seen = ledger(&catalog).await;
    assert!(
        matches(&seen),
        "the ledger left the vendor's figure: ledger {seen:?}, vendor {expected:?}"
    );
    // What rests on unsettled Charges is at most the killed replica's calls in flight: a
    // Charge is written once a key is granted, so at most one per slot of the pool (100), each
    // call of at most 64 characters.
    let unsettled: i64 = seen.values().map(|r| r.unsettled).sum();
    assert!(
        unsettled <= 100 * 64,
        "{unsettled} unsettled characters: {seen:?}"
    );
    // Cache hits are recorded as cached: at least what the survivor's answers reported, at
    // most what every answer reported (a killed replica's last Done records may be lost with
    // it; they carry no vendor characters).
    for (t, (tenant, _)) in TENANTS.iter().enumerate() {
        let reported = |replica: Option<usize>| -> i64 {
            outcomes
                .iter()
                .filter(|e| e.tenant == t && replica.is_none_or(|r| e.replica == r))
                .map(|e| e.cached_characters)
                .sum()
        };
        let cached = seen.get(*tenant).map_or(0, |r| r.cached);
        assert!(
            cached >= reported(Some(1)) && cached <= reported(None),
            "{tenant}: ledger cached {cached}, answers reported {} (survivor) .. {} (all)",
            reported(Some(1)),
            reported(None)
        );
    }
    let cached_total: i64 = seen.values().map(|r| r.cached).sum();
    assert!(cached_total > 0, "no cache hit was recorded: {seen:?}");
    eprintln!(
        "ledger vs vendor per tenant ({ok} of {total} calls ok): vendor {expected:?}, ledger {seen:?}; {unsettled} characters unsettled, {cached_total} cached"
    );
    drop(replicas);
}

async fn until_ended(ended: &AtomicUsize, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while ended.load(Ordering::SeqCst) < n {
        assert!(
            Instant::now() < deadline,
            "the load stalled before {n} calls ended"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_ledger_equals_the_vendor_through_a_killed_replica_and_a_sentinel_failover() {
    let sentinel = tokio::task::spawn_blocking(voxpool_testkit::RedisSentinel::start)
        .await
        .expect("sentinel");
    ledger_equals_vendor(Store::Sentinel(Arc::new(sentinel))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_ledger_equals_the_vendor_through_a_killed_replica_and_a_cluster_failover() {
    let cluster = tokio::task::spawn_blocking(|| voxpool_testkit::RedisCluster::start(3, 1))
        .await
        .expect("cluster");
    ledger_equals_vendor(Store::Cluster(Arc::new(cluster))).await;
}

/// 200 concurrent calls of 120 characters for tenant `acme`, whose daily budget is 10,000
/// characters, through two synthesis replicas and two schedulers on `store` (`memory`: one
/// scheduler, listed twice), `fail_over` killing the store's primary once 40 calls ended.
/// Returns the calls that succeeded, after checking the vendor synthesized exactly theirs
/// and never more than the budget, and that every refusal names the budget and its reset
/// (or, across the failover, is one a caller retries).
async fn budget_holds(store: &str, fail_over: Option<&Store>) -> usize {
    let fake = FakeVendor::start(
        FakeConfig::new(VendorKind::OpenAi)
            .cap(10)
            .latency(Latency::Fixed(Duration::from_millis(20))),
    )
    .await
    .expect("fake vendor");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        dir.path(),
        &fake.base_url(),
        "[[budgets]]\nid = \"acme-daily\"\ntenants = [\"acme\"]\ncharacters = 10000\nper = \"day\"\n",
    );
    let blobs = format!("file://{}", dir.path().join("blobs").display());
    let schedulers = if store == "memory" {
        vec![scheduler(&config, store)]
    } else {
        vec![scheduler(&config, store), scheduler(&config, store)]
    };
    let (a, b) = (&schedulers[0], schedulers.last().expect("one"));
    let replicas = [
        synthesis(&config, [a, b], &blobs, None),
        synthesis(&config, [b, a], &blobs, None),
    ];
    let clients = [
        SynthesisClient::new(channel(&replicas[0].addr).await),
        SynthesisClient::new(channel(&replicas[1].addr).await),
    ];
    let ended = Arc::new(AtomicUsize::new(0));
    let calls: Vec<_> = (0..200)
        .map(|i| {
            let mut client = clients[i % 2].clone();
            let ended = Arc::clone(&ended);
            // Exactly 120 characters, each call its own (no cache hit).
            let text =
                format!("{:<120}", format!("Call {i:03} spends a budget.")).replace(' ', ".");
            assert_eq!(text.chars().count(), 120);
            tokio::spawn(async move {
                let mut request = tonic::Request::new(pb::SynthesizeRequest {
                    voice: Some(pb::synthesize_request::Voice::Snapshot(voice("alloy"))),
                    text,
                    tenant: "acme".into(),
                    request_id: format!("budget-{i}"),
                    format: pb::AudioFormat::Pcm as i32,
                    cache_policy: pb::CachePolicy::Bypass as i32,
                    ..Default::default()
                });
                request.set_timeout(Duration::from_secs(30));
                let answer = client.synthesize(request).await;
                ended.fetch_add(1, Ordering::SeqCst);
                answer
            })
        })
        .collect();
    if let Some(store) = fail_over {
        until_ended(&ended, 40).await;
        store.fail_over().await;
    }
    let mut granted = 0;
    let mut refused = Vec::new();
    for c in calls {
        match c.await.expect("call task") {
            Ok(r) => {
                granted += 1;
                let usage = r.into_inner().usage.expect("usage on the answer");
                assert_eq!(usage.characters, 120, "{usage:?}");
            }
            Err(s) => refused.push(s),
        }
    }
    let vendor: u64 = fake.voice_characters().values().sum();
    assert_eq!(
        vendor,
        120 * granted as u64,
        "the vendor synthesized {vendor} characters for {granted} successful calls"
    );
    assert!(
        vendor <= 10_000,
        "the vendor synthesized {vendor} characters"
    );
    let mut exhausted = 0;
    for s in &refused {
        let details = tonic_types::StatusExt::get_error_details(s);
        let budget = details
            .error_info()
            .is_some_and(|info| info.reason == "BUDGET_EXHAUSTED");
        if !budget {
            assert!(
                fail_over.is_some()
                    && matches!(s.code(), Code::Unavailable | Code::ResourceExhausted),
                "{s:?}"
            );
            continue;
        }
        exhausted += 1;
        assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
        let info = details.error_info().expect("ErrorInfo");
        assert_eq!(
            info.metadata.get("budget").map(String::as_str),
            Some("acme-daily")
        );
        assert!(info.metadata.contains_key("resets_at_ms"), "{info:?}");
        assert!(
            details.retry_info().is_some(),
            "no RetryInfo until the reset: {s:?}"
        );
        assert!(
            s.message().contains("acme-daily") && s.message().contains("reset"),
            "{s:?}"
        );
    }
    assert!(
        exhausted > 0,
        "no call was refused by the budget: {refused:?}"
    );
    granted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_daily_budget_of_10000_characters_lets_exactly_83_calls_of_120_through() {
    let granted = budget_holds("memory", None).await;
    assert_eq!(granted, 83, "83 x 120 = 9,960 fit in 10,000");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_budget_shared_by_two_schedulers_holds_through_a_sentinel_failover() {
    let sentinel = tokio::task::spawn_blocking(voxpool_testkit::RedisSentinel::start)
        .await
        .expect("sentinel");
    let store = Store::Sentinel(Arc::new(sentinel));
    let granted = budget_holds(&store.url(), Some(&store)).await;
    eprintln!("budget through a Sentinel failover: {granted} calls of 120 characters granted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_text_its_budget_cannot_hold_whole_is_refused_before_any_chunk_is_spent() {
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::OpenAi).cap(10))
        .await
        .expect("fake vendor");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        dir.path(),
        &fake.base_url(),
        "[[budgets]]\nid = \"acme-daily\"\ntenants = [\"acme\"]\ncharacters = 10000\nper = \"day\"\n",
    );
    let sched = scheduler(&config, "memory");
    let blobs = format!("file://{}", dir.path().join("blobs").display());
    let synth = synthesis(&config, [&sched, &sched], &blobs, None);
    let mut client = SynthesisClient::new(channel(&synth.addr).await);
    let speak = |text: String| pb::SynthesizeRequest {
        voice: Some(pb::synthesize_request::Voice::Snapshot(voice("alloy"))),
        text,
        tenant: "acme".into(),
        format: pb::AudioFormat::Pcm as i32,
        cache_policy: pb::CachePolicy::Bypass as i32,
        ..Default::default()
    };
    // 12,000 characters: several chunks, more than the whole budget.
    let long = voxpool_e2e::speech::long_text(12_000);
    let refused = client
        .synthesize(speak(long))
        .await
        .expect_err("a text the budget cannot hold is refused");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    let details = tonic_types::StatusExt::get_error_details(&refused);
    assert_eq!(
        details.error_info().map(|i| i.reason.as_str()),
        Some("BUDGET_EXHAUSTED"),
        "{refused:?}"
    );
    assert_eq!(
        fake.voice_characters().values().sum::<u64>(),
        0,
        "no chunk of it reached the vendor"
    );
    // The budget is untouched: a text that fits is served whole.
    let fits = voxpool_e2e::speech::long_text(6_000);
    let chars = fits.chars().count() as u64;
    let answer = client.synthesize(speak(fits)).await.expect("served");
    assert_eq!(
        answer.into_inner().usage.expect("usage").characters,
        chars as i64
    );
    assert_eq!(fake.voice_characters().values().sum::<u64>(), chars);
}
