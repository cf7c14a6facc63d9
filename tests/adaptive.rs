//! Adaptive capacity at the vendor, with real processes: one private Redis, two
//! `voxpool-scheduler` replicas on it (A, B), two `voxpool-synthesis` replicas (X on A, Y on
//! B), and two in-process fake ElevenLabs vendors (concurrency refusals are
//! `too_many_concurrent_requests`): upstream `low` whose vendor allows 4 concurrent requests
//! although its key is configured at 10, next to upstream `ok` (10 of 10). 100 callers.
//! - The low key's effective capacity settles near the vendor's 4 (3..=5), concurrency
//!   refusals become rare (under 3% of the low vendor's requests once it has learned),
//!   and both replicas report the same effective capacity (it lives in the store).
//! - The vendor then allows 10: within 30 s of traffic the effective capacity climbs back to
//!   10, never above the configured 10 on the way.
//!
//! - Every overload signal teaches it: an OpenAI-compatible server whose over-cap answer is a
//!   bare 429 (no vendor concurrency code) and a Volcengine one answering code 3003 each end
//!   with under 2% of the low server's requests refused after learning, and the low key's
//!   goodput per real slot at least 80% of the `ok` key's (see [`Learned`]).
//!
//! Phases end on counts and bounded polls of GetPoolStatus, not on fixed sleeps.

use std::{
    path::Path,
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::time::Instant;
use voxpool_e2e::Authed;
use voxpool_e2e::{Service, binary, start};
use voxpool_fake_vendors::{FakeConfig, FakeVendor, Latency, VendorKind};
use voxpool_proto::{
    scheduler::v1::{self as spb, pool_scheduler_client::PoolSchedulerClient},
    synthesis::v1::{self as pb, synthesis_client::SynthesisClient},
};
use voxpool_testkit::RedisServer;

const POOL: &str = "elevenlabs-fake";
const LOW_KEY: &str = "low/k0";
const CONFIGURED: i32 = 10;
const VENDOR_LIMIT: u32 = 4;
const CALLERS: usize = 100;

fn write_config(dir: &Path, low: &str, ok: &str) -> std::path::PathBuf {
    let mut t = format!(
        "[[pools]]\nid = \"{POOL}\"\nprovider = \"elevenlabs\"\nmodel = \"eleven_multilingual_v2\"\n"
    );
    for (upstream, base) in [("low", low), ("ok", ok)] {
        let credential = dir.join(upstream);
        std::fs::write(&credential, format!("sk-{upstream}\n")).expect("credential file");
        t.push_str(&format!(
            "[[pools.upstreams]]\nid = \"{upstream}\"\nbase_url = \"{base}\"\n\
             [[pools.upstreams.keys]]\nid = \"k0\"\ncapacity = {CONFIGURED}\n\
             credential = {{ file = \"{}\" }}\n",
            credential.display()
        ));
    }
    t.push_str("[scheduler]\nrecovery_window_ms = 0\nwait_poll_ms = 10\n");
    t.push_str(voxpool_e2e::CLIENT_TOKENS_TOML);
    let path = dir.join("config.toml");
    std::fs::write(&path, t).expect("config file");
    path
}

fn scheduler(config: &Path, redis: &str) -> Service {
    let mut c = Command::new(binary("voxpool-scheduler"));
    c.arg("--config")
        .arg(config)
        .args(["--listen", "127.0.0.1:0", "--store", redis]);
    start(c)
}

fn synthesis(config: &Path, scheduler: &Service) -> Service {
    let mut c = Command::new(binary("voxpool-synthesis"));
    c.arg("--config")
        .arg(config)
        .args(["--listen", "127.0.0.1:0"])
        .args(["--scheduler", &format!("http://{}", scheduler.addr)])
        .args(["--catalog", "http://127.0.0.1:1"]);
    start(c)
}

/// A connection to `addr` whose calls carry the test's client token.
async fn channel(addr: &str) -> Authed {
    Authed::new(
        voxpool_e2e::connect(addr).await,
        voxpool_e2e::voxctl_token(),
    )
}

async fn low_key(scheduler: &mut PoolSchedulerClient<Authed>) -> spb::KeyStatus {
    let status = scheduler
        .get_pool_status(spb::GetPoolStatusRequest { pool: POOL.into() })
        .await
        .expect("status")
        .into_inner();
    status
        .keys
        .into_iter()
        .find(|k| k.key_id == LOW_KEY)
        .expect("the low key")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_whose_vendor_allows_fewer_learns_it_and_climbs_back_when_allowed_again() {
    let redis = RedisServer::start();
    let fake = |cap| {
        FakeVendor::start(FakeConfig::new(VendorKind::ElevenLabs).cap(cap).latency(
            Latency::Uniform {
                min: Duration::from_millis(30),
                max: Duration::from_millis(60),
            },
        ))
    };
    let low = fake(VENDOR_LIMIT).await.expect("fake vendor");
    let ok = fake(10).await.expect("fake vendor");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), &low.base_url(), &ok.base_url());
    let sched_a = scheduler(&config, &redis.url());
    let sched_b = scheduler(&config, &redis.url());
    let synth_x = synthesis(&config, &sched_a);
    let synth_y = synthesis(&config, &sched_b);
    let mut status_a = PoolSchedulerClient::new(channel(&sched_a.addr).await);
    let mut status_b = PoolSchedulerClient::new(channel(&sched_b.addr).await);
    let clients = [
        SynthesisClient::new(channel(&synth_x.addr).await),
        SynthesisClient::new(channel(&synth_y.addr).await),
    ];
    let voice = voxpool_fake_vendors::snapshot("elevenlabs", "eleven_multilingual_v2", "v1");
    assert_eq!(voice.tts_model_id, POOL);
    let request = pb::SynthesizeRequest {
        voice: Some(pb::synthesize_request::Voice::Snapshot(voice.to_pb())),
        text: "Learning the vendor's real limit.".into(),
        format: pb::AudioFormat::Pcm as i32,
        ..Default::default()
    };

    // Traffic until `stop`: every request must succeed (refusals fail over to the other key).
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let mut callers = Vec::new();
    for i in 0..CALLERS {
        let mut client = clients[i % 2].clone();
        let (request, stop, done) = (request.clone(), stop.clone(), done.clone());
        callers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                client.synthesize(request.clone()).await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<(), tonic::Status>(())
        }));
    }
    let until_done = |n: usize| {
        let done = done.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            while done.load(Ordering::Relaxed) < n {
                assert!(
                    Instant::now() < deadline,
                    "traffic stalled below {n} requests"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };

    // Phase 1: learning, until the key's effective capacity is near the vendor's limit;
    // then what refusals are left after learning (the probes), over 1500 requests.
    let since = Instant::now();
    while low_key(&mut status_a).await.effective_capacity > 5 {
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "the effective capacity did not come down to the vendor's limit within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The refusals of the last step's hold (leases granted before it) still arrive: let 300
    // more requests pass before counting.
    let learned_at = done.load(Ordering::Relaxed) + 300;
    until_done(learned_at).await;
    let half = low.key_stats("sk-low");
    until_done(learned_at + 1_500).await;
    let end = low.key_stats("sk-low");
    let refused = end.rejected_over_cap - half.rejected_over_cap;
    let seen = end.total_requests - half.total_requests;
    assert!(
        (refused as f64) < 0.03 * seen as f64,
        "after learning the vendor still refused {refused} of {seen} requests"
    );
    // Both replicas read the one store. Traffic still runs and a probe may move the value
    // between two reads, so replica B's read is compared with replica A's reads on either side
    // of it once those agree (the value did not move meanwhile).
    let (a, b) = {
        let mut tries = 0;
        loop {
            let before = low_key(&mut status_a).await;
            let b = low_key(&mut status_b).await;
            let after = low_key(&mut status_a).await;
            if before.effective_capacity == after.effective_capacity {
                break (after, b);
            }
            tries += 1;
            assert!(
                tries < 50,
                "the effective capacity never held still: {after:?}"
            );
        }
    };
    assert_eq!(
        a.effective_capacity, b.effective_capacity,
        "both replicas see the store's effective capacity"
    );
    assert!(
        (3..=5).contains(&a.effective_capacity),
        "settles near the vendor's 4: {a:?}"
    );
    assert_eq!(
        a.capacity, CONFIGURED,
        "the configured capacity stays the ceiling"
    );

    // Phase 2: the vendor allows 10 again.
    low.set_cap(10);
    let since = Instant::now();
    loop {
        let k = low_key(&mut status_a).await;
        assert!(
            k.effective_capacity <= CONFIGURED,
            "above the configured capacity: {k:?}"
        );
        if k.effective_capacity == CONFIGURED {
            break;
        }
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "not back to {CONFIGURED} within 30 s: {k:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(low_key(&mut status_b).await.effective_capacity, CONFIGURED);
    stop.store(true, Ordering::Relaxed);
    for caller in callers {
        caller
            .await
            .expect("caller task")
            .expect("every request succeeded");
    }
}

/// One vendor's learning case: a key configured at 10 whose server allows 4 (`low`) next to
/// one at 10 of 10 (`ok`), two scheduler replicas on one Redis, two synthesis replicas, 100
/// callers.
struct Case {
    vendor: VendorKind,
    provider: &'static str,
    model: &'static str,
    voice_id: &'static str,
    /// What the fake counts the low key under (the bearer secret, or Volcengine's appid).
    low_key_stat: &'static str,
    /// What the fake counts the ok key under.
    ok_key_stat: &'static str,
}

/// After learning: the share of the low server's requests it refused, and its goodput as a
/// share of the real bound: audio served per slot the server really has (4), against the
/// `ok` key's per slot (10 of 10, every slot busy: 100 callers want more than 14). Both keys
/// pay the same overheads per call, so a key that runs at its real limit scores about 1
/// whatever the machine's speed; cooldowns and refused calls lower it.
struct Learned {
    refused: f64,
    of_bound: f64,
    effective: i32,
}

fn write_case_config(dir: &Path, case: &Case, low: &str, ok: &str) -> std::path::PathBuf {
    let pool = format!("{}-fake", case.provider);
    let mut t = format!(
        "[[pools]]\nid = \"{pool}\"\nprovider = \"{}\"\nmodel = \"{}\"\n",
        case.provider, case.model
    );
    for (upstream, base) in [("low", low), ("ok", ok)] {
        let credential = dir.join(upstream);
        std::fs::write(&credential, format!("sk-{upstream}\n")).expect("credential file");
        t.push_str(&format!(
            "[[pools.upstreams]]\nid = \"{upstream}\"\nbase_url = \"{base}\"\n\
             [[pools.upstreams.keys]]\nid = \"k0\"\ncapacity = {CONFIGURED}\n\
             credential = {{ file = \"{}\" }}\n",
            credential.display()
        ));
    }
    t.push_str("[scheduler]\nrecovery_window_ms = 0\nwait_poll_ms = 10\n");
    let path = dir.join("config.toml");
    std::fs::write(&path, t).expect("config file");
    path
}

/// Runs `case` until the low key has learned (its effective capacity within 5 of the
/// configured 10, then 300 more requests), then measures over 1500 requests.
async fn learn(case: &Case) -> Learned {
    let pool = format!("{}-fake", case.provider);
    let redis = RedisServer::start();
    let fake = |cap| {
        FakeVendor::start(
            FakeConfig::new(case.vendor)
                .cap(cap)
                .latency(Latency::Uniform {
                    min: Duration::from_millis(30),
                    max: Duration::from_millis(60),
                }),
        )
    };
    let low = Arc::new(fake(VENDOR_LIMIT).await.expect("fake vendor"));
    // `ok` is the yardstick: the same server with a cap it is configured at.
    let ok = fake(10).await.expect("fake vendor");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_case_config(dir.path(), case, &low.base_url(), &ok.base_url());
    let sched_a = scheduler(&config, &redis.url());
    let sched_b = scheduler(&config, &redis.url());
    let synth_x = synthesis(&config, &sched_a);
    let synth_y = synthesis(&config, &sched_b);
    let mut status = PoolSchedulerClient::new(channel(&sched_a.addr).await);
    let clients = [
        SynthesisClient::new(channel(&synth_x.addr).await),
        SynthesisClient::new(channel(&synth_y.addr).await),
    ];
    let voice = voxpool_fake_vendors::snapshot(case.provider, case.model, case.voice_id);
    assert_eq!(voice.tts_model_id, pool);
    let request = pb::SynthesizeRequest {
        voice: Some(pb::synthesize_request::Voice::Snapshot(voice.to_pb())),
        text: "Learning the server's real limit.".into(),
        format: pb::AudioFormat::Pcm as i32,
        ..Default::default()
    };
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let mut callers = Vec::new();
    for i in 0..CALLERS {
        let mut client = clients[i % 2].clone();
        let (request, stop, done) = (request.clone(), stop.clone(), done.clone());
        callers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                client.synthesize(request.clone()).await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<(), tonic::Status>(())
        }));
    }
    let until_done = |n: usize| {
        let done = done.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            while done.load(Ordering::Relaxed) < n {
                assert!(
                    Instant::now() < deadline,
                    "traffic stalled below {n} requests"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let key_of = |s: spb::PoolStatus| {
        s.keys
            .into_iter()
            .find(|k| k.key_id == LOW_KEY)
            .expect("the low key")
    };
    let low_status = |status: &mut PoolSchedulerClient<Authed>| {
        let mut status = status.clone();
        let pool = pool.clone();
        async move {
            key_of(
                status
                    .get_pool_status(spb::GetPoolStatusRequest { pool })
                    .await
                    .expect("status")
                    .into_inner(),
            )
        }
    };
    let since = Instant::now();
    while low_status(&mut status).await.effective_capacity > 5 {
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "{}: the effective capacity did not come down to the server's limit within 30 s",
            case.provider
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let learned_in = since.elapsed();
    let learned_at = done.load(Ordering::Relaxed) + 300;
    until_done(learned_at).await;
    // The low server's admitted concurrency, sampled while the window runs.
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (low, sampling, key) = (low.clone(), sampling.clone(), case.low_key_stat);
        tokio::spawn(async move {
            let (mut sum, mut n) = (0u64, 0u64);
            while sampling.load(Ordering::Relaxed) {
                sum += low.key_stats(key).admitted_in_flight;
                n += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            sum as f64 / n.max(1) as f64
        })
    };
    let half = low.key_stats(case.low_key_stat);
    let ok_half = ok.key_stats(case.ok_key_stat);
    let window_start = Instant::now();
    until_done(learned_at + 1_500).await;
    let end = low.key_stats(case.low_key_stat);
    let ok_end = ok.key_stats(case.ok_key_stat);
    sampling.store(false, Ordering::Relaxed);
    let mean_admitted = sampler.await.expect("sampler");
    let effective = low_status(&mut status).await.effective_capacity;
    stop.store(true, Ordering::Relaxed);
    for caller in callers {
        caller
            .await
            .expect("caller task")
            .expect("every request succeeded");
    }
    let refused = end.rejected_over_cap - half.rejected_over_cap;
    let seen = end.total_requests - half.total_requests;
    let per_slot = |served: u64, slots: u32| served as f64 / f64::from(slots);
    let low_served = end.successes - half.successes;
    let ok_served = ok_end.successes - ok_half.successes;
    let learned = Learned {
        refused: refused as f64 / seen.max(1) as f64,
        of_bound: per_slot(low_served, VENDOR_LIMIT) / per_slot(ok_served.max(1), 10),
        effective,
    };
    println!(
        "{}: learned in {} ms; then over {} ms: {refused} of {seen} low-server requests refused \
         ({:.2}%), served {low_served} (ok key: {ok_served} on 10 slots) = {:.0}% of the bound; \
         mean admitted concurrency {mean_admitted:.2} of {VENDOR_LIMIT}; effective capacity \
         {effective}",
        case.provider,
        learned_in.as_millis(),
        window_start.elapsed().as_millis(),
        learned.refused * 100.0,
        learned.of_bound * 100.0,
    );
    learned
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_openai_compatible_server_answering_plain_429s_teaches_its_limit() {
    // The fake's over-cap answer is a bare 429 (`rate_limit_exceeded`, no Retry-After): no
    // vendor concurrency code, as self-hosted and proxy-fronted servers answer.
    let learned = learn(&Case {
        vendor: VendorKind::OpenAi,
        provider: "openai",
        model: "tts-1",
        voice_id: "alloy",
        low_key_stat: "sk-low",
        ok_key_stat: "sk-ok",
    })
    .await;
    assert!(
        learned.refused < 0.02,
        "after learning the server still refused {:.2}% of its requests",
        learned.refused * 100.0
    );
    assert!(
        learned.of_bound >= 0.8,
        "the key ran at {:.0}% of the server's real limit",
        learned.of_bound * 100.0
    );
    assert!(
        (3..=5).contains(&learned.effective),
        "settles near the server's 4: {}",
        learned.effective
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_volcengine_key_refused_with_code_3003_still_learns_its_limit() {
    let learned = learn(&Case {
        vendor: VendorKind::Volcengine,
        provider: "volcengine",
        model: "seed-tts-1.0",
        voice_id: "BV001_streaming",
        low_key_stat: "k0",
        ok_key_stat: "k0",
    })
    .await;
    assert!(
        learned.refused < 0.02,
        "after learning the server still refused {:.2}% of its requests",
        learned.refused * 100.0
    );
    assert!(
        learned.of_bound >= 0.8,
        "the key ran at {:.0}% of the server's real limit",
        learned.of_bound * 100.0
    );
}
