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
use voxpool_shared::testing::RedisServer;

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
    let (a, b) = (low_key(&mut status_a).await, low_key(&mut status_b).await);
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
