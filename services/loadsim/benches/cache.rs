//! Audio cache benchmark (`make bench`; not a test). Side by side in one run, on a local blob
//! store (a temporary directory) and an in-process scheduler (memory store):
//!
//! 1. **Hit vs miss**, against a zero-latency fake OpenAI-compatible vendor and a 300 ms one:
//!    first audio (the first `SynthesizeStream` message) and full time (`Synthesize`) of a
//!    request whose one chunk is in the cache (a hit) and of one whose text is new (a miss,
//!    which also fills the entry). p50 / p99 each; floor: a hit's first audio ≤ 5 ms p50.
//! 2. **`voxctl batch` run twice**: 500 distinct items into a new folder, then the same
//!    manifest into another new folder: vendor calls and wall time of each run; floor: the
//!    second run makes 0 vendor calls. Then a manifest of 500 items that repeat 25 lines (a
//!    character's catch-phrases), run once: single-flight and hits inside one run. Needs the
//!    release `voxctl` next to this bench (`make bench` builds it).
//!
//! Knobs: `CACHE_BENCH_REQUESTS` per cell (default 60), `CACHE_BATCH_ITEMS` (default 500).

mod common;
#[path = "common/stack.rs"]
mod stack;

use std::{
    process::Command,
    time::{Duration, Instant},
};

use common::{env_or, pct};
use futures::StreamExt as _;
use stack::AudioCache;
use tokio_util::sync::CancellationToken;
use voxpool_fake_vendors::{FakeConfig, FakeVendor, Latency, VendorKind};
use voxpool_proto::synthesis::v1::{self as pb, synthesis_client::SynthesisClient};

const FLOOR_HIT_FIRST_AUDIO_MS: f64 = 5.0;

type Client = SynthesisClient<tonic::transport::Channel>;

fn request(text: &str) -> pb::SynthesizeRequest {
    let voice = voxpool_fake_vendors::snapshot("openai", "tts-1", "alloy");
    pb::SynthesizeRequest {
        voice: Some(pb::synthesize_request::Voice::Snapshot(voice.to_pb())),
        text: text.into(),
        format: pb::AudioFormat::Pcm as i32,
        ..Default::default()
    }
}

/// First audio of a stream of `text`, and whether it came from the cache.
async fn first_audio(client: &Client, text: &str) -> (Duration, bool) {
    let t = Instant::now();
    let mut stream = client
        .clone()
        .synthesize_stream(request(text))
        .await
        .expect("stream")
        .into_inner();
    let mut first = None;
    let mut cached = false;
    while let Some(m) = stream.next().await {
        let m = m.expect("message");
        if first.is_none() && !m.audio.is_empty() {
            first = Some(t.elapsed());
            cached = m.cached_chunks > 0;
        }
    }
    (first.expect("audio"), cached)
}

/// Full time of a unary call of `text`, and whether it came from the cache.
async fn full(client: &Client, text: &str) -> (Duration, bool) {
    let t = Instant::now();
    let r = client
        .clone()
        .synthesize(request(text))
        .await
        .expect("synthesize")
        .into_inner();
    (t.elapsed(), r.cached_chunks > 0)
}

/// p50 / p99 in ms of four cells: (hit first audio, miss first audio, hit full, miss full).
async fn measure(client: &Client, n: usize, tag: &str) -> [(f64, f64); 4] {
    let hit_text = format!("A line the character says every time ({tag}).");
    full(client, &hit_text).await;
    let mut cells: [Vec<Duration>; 4] = Default::default();
    for i in 0..n {
        // Alternating hit and miss, so both see the same machine.
        let (d, cached) = first_audio(client, &hit_text).await;
        assert!(cached, "a hit");
        cells[0].push(d);
        let (d, cached) = first_audio(client, &format!("New line {i} ({tag}, stream).")).await;
        assert!(!cached, "a miss");
        cells[1].push(d);
        cells[2].push(full(client, &hit_text).await.0);
        cells[3].push(
            full(client, &format!("New line {i} ({tag}, unary)."))
                .await
                .0,
        );
    }
    cells.map(|mut v| {
        v.sort_unstable();
        (pct(&v, 0.5), pct(&v, 0.99))
    })
}

fn vendor_calls(fake: &FakeVendor) -> u64 {
    fake.stats().values().map(|k| k.total_requests).sum()
}

fn main() {
    let n = env_or("CACHE_BENCH_REQUESTS", 60).max(1);
    let items = env_or("CACHE_BATCH_ITEMS", 500).max(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    rt.block_on(async {
        let shutdown = CancellationToken::new();
        let instant = FakeVendor::start(FakeConfig::new(VendorKind::OpenAi).cap(0))
            .await
            .expect("fake vendor");
        let slow = FakeVendor::start(
            FakeConfig::new(VendorKind::OpenAi)
                .cap(0)
                .latency(Latency::Fixed(Duration::from_millis(300))),
        )
        .await
        .expect("fake vendor");
        let instant_dir = dir.path().join("instant");
        let slow_dir = dir.path().join("slow");
        std::fs::create_dir_all(&instant_dir).expect("dir");
        std::fs::create_dir_all(&slow_dir).expect("dir");
        let a = stack::start(&instant.base_url(), &instant_dir, 64, AudioCache::On, &shutdown).await;
        let b = stack::start(&slow.base_url(), &slow_dir, 64, AudioCache::On, &shutdown).await;
        let ca = SynthesisClient::connect(format!("http://{a}")).await.expect("a");
        let cb = SynthesisClient::connect(format!("http://{b}")).await.expect("b");

        let zero = measure(&ca, n, "0 ms").await;
        let slow300 = measure(&cb, n, "300 ms").await;
        println!("## Audio cache: hit vs miss\n");
        println!(
            "One-chunk PCM requests through SynthesizeStream (first audio) and Synthesize (full \
             time), a hit and a miss alternating, {n} of each per cell; local blob store, \
             in-process memory-store scheduler.\n"
        );
        println!("| fake vendor | hit first audio p50 / p99 ms | miss first audio p50 / p99 ms | hit full p50 / p99 ms | miss full p50 / p99 ms |");
        println!("|---|---:|---:|---:|---:|");
        for (name, c) in [("0 ms", zero), ("300 ms", slow300)] {
            println!(
                "| {name} | {:.1} / {:.1} | {:.1} / {:.1} | {:.1} / {:.1} | {:.1} / {:.1} |",
                c[0].0, c[0].1, c[1].0, c[1].1, c[2].0, c[2].1, c[3].0, c[3].1
            );
        }
        let hit50 = zero[0].0.max(slow300[0].0);
        println!(
            "\n- a hit's first audio, p50: {hit50:.1} ms (floor ≤ {FLOOR_HIT_FIRST_AUDIO_MS} ms): {}",
            if hit50 <= FLOOR_HIT_FIRST_AUDIO_MS { "meets floor" } else { "BELOW FLOOR" }
        );
        println!(
            "- against the 300 ms vendor, a hit's full time is {:.0}× faster than a miss's\n",
            slow300[3].0 / slow300[2].0.max(0.001)
        );

        // 2. voxctl batch, twice, against the 300 ms vendor's stack.
        let voxctl = std::env::current_exe()
            .ok()
            .and_then(|p| p.parent()?.parent().map(|d| d.join("voxctl")))
            .filter(|p| p.exists());
        let Some(voxctl) = voxctl else {
            println!("## voxctl batch twice\n\nskipped: no voxctl binary next to the bench (make bench builds it)\n");
            return;
        };
        let voice = voxpool_fake_vendors::snapshot("openai", "tts-1", "alloy");
        let snapshot = serde_json::to_value(&voice).expect("snapshot json");
        let write_manifest = |name: &str, distinct: usize| {
            let path = dir.path().join(name);
            let lines: String = (0..items)
                .map(|i| {
                    serde_json::json!({
                        "id": format!("line-{i:04}"),
                        "text": format!("Line number {} of chapter {name}.", i % distinct),
                        "snapshot": snapshot,
                    })
                    .to_string()
                        + "\n"
                })
                .collect();
            std::fs::write(&path, lines).expect("manifest");
            path
        };
        let manifest = write_manifest("distinct.jsonl", items);
        let repeats = write_manifest("repeats.jsonl", 25);
        let run = |manifest: &std::path::Path, out: &str| {
            let t = Instant::now();
            let status = Command::new(&voxctl)
                .arg("batch")
                .arg(manifest)
                .args(["--out", out, "--concurrency", "32", "--progress", "quiet"])
                .args(["--synthesis", &format!("http://{b}")])
                .args(["--catalog", "http://127.0.0.1:1"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .expect("run voxctl");
            assert!(status.success(), "voxctl batch failed: {status}");
            t.elapsed()
        };
        let before = vendor_calls(&slow);
        let out = |n: &str| dir.path().join(n).display().to_string();
        let t1 = tokio::task::block_in_place(|| run(&manifest, &out("run-1")));
        let mid = vendor_calls(&slow);
        let t2 = tokio::task::block_in_place(|| run(&manifest, &out("run-2")));
        let after = vendor_calls(&slow);
        let t3 = tokio::task::block_in_place(|| run(&repeats, &out("run-3")));
        let repeated = vendor_calls(&slow) - after;
        println!("## voxctl batch twice\n");
        println!(
            "{items} distinct items, 32 at a time, against the 300 ms vendor; each run into a new \
             folder. Then {items} items repeating 25 new lines, run once.\n"
        );
        println!("| run | vendor calls | wall time s |");
        println!("|---|---:|---:|");
        println!("| first | {} | {:.2} |", mid - before, t1.as_secs_f64());
        println!("| second (same manifest) | {} | {:.2} |", after - mid, t2.as_secs_f64());
        println!("| {items} items, 25 distinct lines | {repeated} | {:.2} |", t3.as_secs_f64());
        println!(
            "\n- second run's vendor calls: {} (floor 0): {}\n",
            after - mid,
            if after == mid { "meets floor" } else { "BELOW FLOOR" }
        );
        shutdown.cancel();
    });
}
