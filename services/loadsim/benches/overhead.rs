//! Synthesis overhead benchmark (`make bench`; not a test): what the full voxpool path adds to
//! one vendor call. Against a zero-latency fake OpenAI-compatible vendor, one client measures
//! sequentially, the sides taking turns request by request (each in every position in turn) so
//! background load hits them alike:
//!
//! - **direct**: the `openai` adapter calling the fake with a key (what any client pays);
//! - **through voxpool**: `Synthesize` on an in-process synthesis server, which Acquires from an
//!   in-process scheduler (Redis store, private redis-server), calls the same adapter, then
//!   Reports + releases.
//!
//! - **through voxpool, metered**: the same on a second synthesis server writing usage records
//!   (`--usage-store`, the scheduler's redis-server): a Charge written once each key is
//!   granted, the vendor request's body held until it is on the stream; a Settle and a Done
//!   queued to its background writer.
//!
//! Prints p50/p99 of each, the p50 difference against the floor (≤ 1 ms added), and what
//! recording usage adds to the p50 (goal ≤ 0.05 ms), also as the median of the differences of
//! requests measured side by side (the figure least moved by a busy machine).
//! Knobs: `OVERHEAD_REQUESTS` per side (default 2000), `OVERHEAD_ROUNDS` (default 10),
//! `OVERHEAD_MAX_SECONDS` (default 60: later rounds are skipped past it).

/// The allocator the `voxpool-synthesis` and `voxpool-scheduler` binaries use (their
/// `main.rs`): both servers run in this process.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod common;
#[path = "common/stack.rs"]
#[allow(dead_code, reason = "this bench builds its own config")]
mod stack;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use common::{env_or, pct};
use tokio_util::sync::CancellationToken;
use voxpool_config::Config;
use voxpool_domain::secret::Secret;
use voxpool_fake_vendors::{FakeConfig, FakeVendor, VendorKind};
use voxpool_proto::{
    scheduler::v1::pool_scheduler_client::PoolSchedulerClient,
    synthesis::v1::{self as pb, synthesis_client::SynthesisClient},
};
use voxpool_synthesis::adapters::{
    AudioFormat, KeyCredential, UpstreamTarget, Utterance, VendorAdapter, VendorRequest,
    http::shared_client, openai::OpenAi,
};
use voxpool_testkit::RedisServer;

const FLOOR_MS: f64 = 1.0;

fn main() {
    let per_side = env_or("OVERHEAD_REQUESTS", 2000).max(1);
    let rounds = env_or("OVERHEAD_ROUNDS", 10).clamp(1, per_side);
    let budget = Duration::from_secs(env_or("OVERHEAD_MAX_SECONDS", 60) as u64);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    rt.block_on(async {
        let mut fake_config = FakeConfig::new(VendorKind::OpenAi).cap(0);
        fake_config.tone_ms = 200;
        let fake = FakeVendor::start(fake_config).await.expect("fake vendor");
        let credential = dir.path().join("k00");
        std::fs::write(&credential, "k00\n").expect("credential file");
        let toml = format!(
            "[[pools]]\nid = \"openai-fake\"\nprovider = \"openai\"\nmodel = \"tts-1\"\n\
             [[pools.upstreams]]\nid = \"u\"\nbase_url = \"{}\"\n\
             [[pools.upstreams.keys]]\nid = \"k00\"\ncapacity = 10\ncredential = {{ file = \"{}\" }}\n",
            fake.base_url(),
            credential.display()
        );
        let config = Config::from_toml_str(&toml).expect("config");
        let shutdown = CancellationToken::new();

        // Scheduler (Redis store) and synthesis, in process on 127.0.0.1:0.
        let scheduler_addr = stack::scheduler(&config, &redis.url(), &shutdown).await;
        let synthesis_addr = stack::synthesis(&config, scheduler_addr, None, &shutdown).await;
        let metered_addr = stack::synthesis_metered(
            &config,
            scheduler_addr,
            None,
            Some(&redis.url()),
            &shutdown,
        )
        .await;
        // Both servers answer before measuring.
        let mut scheduler = PoolSchedulerClient::connect(format!("http://{scheduler_addr}"))
            .await
            .expect("scheduler");
        let _ = scheduler
            .list_pools(voxpool_proto::scheduler::v1::ListPoolsRequest::default())
            .await
            .expect("scheduler answers");
        let mut synthesis = SynthesisClient::connect(format!("http://{synthesis_addr}"))
            .await
            .expect("synthesis");
        let mut metered = SynthesisClient::connect(format!("http://{metered_addr}"))
            .await
            .expect("metered synthesis");

        let voice = voxpool_fake_vendors::snapshot("openai", "tts-1", "alloy");
        let request = pb::SynthesizeRequest {
            voice: Some(pb::synthesize_request::Voice::Snapshot(voice.to_pb())),
            text: "Hello there.".into(),
            format: pb::AudioFormat::Wav as i32,
            ..Default::default()
        };
        let adapter = OpenAi::new(shared_client().expect("http client"));
        let key = KeyCredential {
            key_id: "u/k00".into(),
            app_id: "k00".into(),
            secret: Some(Secret::new("k00")),
        };
        let upstream = UpstreamTarget {
            id: "u".into(),
            base_url: Some(fake.base_url()),
            ..Default::default()
        };
        let utterance = Utterance {
            text: "Hello there.".to_owned(),
            voice: Arc::new(voice.clone()),
            pool_model: "tts-1".to_owned(),
            format: AudioFormat::Wav,
            sample_rate_hz: None,
            reference: None,
            seed: None,
        };
        let direct_call = || VendorRequest {
            utterance: &utterance,
            key: &key,
            upstream: &upstream,
            timeout: Duration::from_secs(10),
            attempt_id: "bench",
            gate: Default::default(),
        };

        // Warm-up: connections, scripts, caches.
        for _ in 0..100 {
            adapter.synthesize(direct_call()).await.expect("direct call");
            synthesis.synthesize(request.clone()).await.expect("synthesize");
            metered.synthesize(request.clone()).await.expect("synthesize");
        }
        let per_round = per_side / rounds;
        let (mut direct, mut full, mut with_usage) = (Vec::new(), Vec::new(), Vec::new());
        let measuring = Instant::now();
        for _ in 0..rounds {
            if measuring.elapsed() > budget {
                break;
            }
            // The three sides take turns request by request, each in every position in turn,
            // so a burst of background load lands on all of them alike.
            for i in 0..per_round {
                let mut took = [Duration::ZERO; 3];
                for side in (0..3).map(|k| (k + i) % 3) {
                    let t = Instant::now();
                    match side {
                        0 => drop(adapter.synthesize(direct_call()).await.expect("direct call")),
                        1 => drop(synthesis.synthesize(request.clone()).await.expect("synthesize")),
                        _ => drop(metered.synthesize(request.clone()).await.expect("synthesize")),
                    }
                    took[side] = t.elapsed();
                }
                direct.push(took[0]);
                full.push(took[1]);
                with_usage.push(took[2]);
            }
        }
        // Differences of the requests measured side by side, before sorting splits them up.
        let paired = |a: &[Duration], b: &[Duration]| {
            let mut d: Vec<f64> = a
                .iter()
                .zip(b)
                .map(|(a, b)| (a.as_secs_f64() - b.as_secs_f64()) * 1e3)
                .collect();
            d.sort_unstable_by(f64::total_cmp);
            d.get(d.len() / 2).copied().unwrap_or(0.0)
        };
        let recording_paired = paired(&with_usage, &full);
        let voxpool_paired = paired(&full, &direct);
        shutdown.cancel();
        direct.sort_unstable();
        full.sort_unstable();
        with_usage.sort_unstable();
        let (u50, u99) = (pct(&with_usage, 0.5), pct(&with_usage, 0.99));
        let (d50, d99) = (pct(&direct, 0.5), pct(&direct, 0.99));
        let (f50, f99) = (pct(&full, 0.5), pct(&full, 0.99));
        let added = f50 - d50;
        println!("## Synthesis overhead\n");
        println!(
            "One sequential client, {} requests per side taking turns request by request, zero-latency \
             fake OpenAI-compatible vendor (200 ms WAV), scheduler on a private redis-server.\n",
            full.len()
        );
        println!("| path | p50 ms | p99 ms |");
        println!("|---|---:|---:|");
        println!("| openai adapter → fake vendor (direct) | {d50:.3} | {d99:.3} |");
        println!("| Synthesize → scheduler Acquire → adapter → Report (voxpool) | {f50:.3} | {f99:.3} |");
        println!("| the same with `--usage-store` (usage records) | {u50:.3} | {u99:.3} |");
        println!();
        println!(
            "- p50 added by recording usage: {:.3} ms (goal ≤ 0.05 ms); median of the \
             differences of requests measured side by side: {recording_paired:.3} ms",
            u50 - f50
        );
        println!(
            "- median of the differences voxpool − direct, side by side: {voxpool_paired:.3} ms"
        );
        println!(
            "- p50 added by voxpool: {added:.3} ms (floor ≤ {FLOOR_MS} ms): {}\n",
            if added <= FLOOR_MS { "meets floor" } else { "BELOW FLOOR" }
        );
    });
}
