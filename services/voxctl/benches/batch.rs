//! `make bench` for voxctl: items per second of `voxctl batch` for 1,000 short items at
//! concurrency 64 against a zero-latency server.
//!
//! Two targets, each named in the output:
//! 1. an in-process fake Synthesis server (measures voxctl alone: gRPC client, checkpoint
//!    fsyncs, atomic file writes);
//! 2. the real stack (`voxpool-scheduler` + `voxpool-synthesis` + `voxpool-fake-vendor` with no
//!    latency and no faults), when those binaries exist in the same target profile directory
//!    (`cargo build --release -p voxpool-scheduler -p voxpool-synthesis --bins`); otherwise the
//!    output says it was skipped and why.
//!
//! Each target runs 3 times into a fresh directory; best and median are printed.

#[path = "../tests/common/fake_synthesis.rs"]
mod fake_synthesis;
#[path = "../tests/common/stack.rs"]
mod stack;

use std::{
    path::Path,
    time::{Duration, Instant},
};

use voxctl::{batch, progress::ProgressMode, shutdown::Shutdown};

const ITEMS: usize = 1_000;
const CONCURRENCY: usize = 64;
const RUNS: usize = 3;

fn write_manifest(dir: &Path, snapshot: Option<&serde_json::Value>) -> std::path::PathBuf {
    let lines: Vec<String> = (0..ITEMS)
        .map(|i| {
            let mut v = serde_json::json!({"id": format!("item-{i:04}"), "text": format!("Short item number {i}.")});
            match snapshot {
                Some(s) => v["snapshot"] = s.clone(),
                None => v["packId"] = "vp_bench".into(),
            }
            v.to_string()
        })
        .collect();
    let path = dir.join("bench.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").expect("write manifest");
    path
}

async fn measure(url: &str, snapshot: Option<&serde_json::Value>) -> Vec<f64> {
    let mut rates = Vec::new();
    for _ in 0..RUNS {
        let dir = tempfile::tempdir().expect("tempdir");
        let manifest = write_manifest(dir.path(), snapshot);
        let mut config = batch::BatchConfig::new(&manifest, dir.path().join("out"));
        config.synthesis = url.to_owned();
        config.concurrency = CONCURRENCY;
        config.progress = ProgressMode::Quiet;
        config.deadline = Duration::from_secs(30);
        // The real stack authenticates its callers (stack.rs); the fake server ignores it.
        config.token = voxctl::connect::client_token(Some(stack::CLIENT_TOKEN)).expect("token");
        let started = Instant::now();
        let outcome = batch::run(config, Shutdown::new())
            .await
            .expect("batch runs");
        let wall = started.elapsed();
        assert_eq!(
            outcome.summary.ok, ITEMS,
            "every item must succeed in a benchmark run"
        );
        rates.push(ITEMS as f64 / wall.as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    rates
}

fn print(target: &str, rates: &[f64]) {
    println!(
        "voxctl batch, {ITEMS} short items, concurrency {CONCURRENCY}, {target}: best {:.0} items/s, median {:.0} items/s ({RUNS} runs)",
        rates[rates.len() - 1],
        rates[rates.len() / 2]
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let fake = fake_synthesis::FakeSynthesis::healthy().await;
        print("in-process fake Synthesis (zero latency)", &measure(&fake.url(), None).await);
        drop(fake);

        let profile_dir = std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().and_then(Path::parent).map(Path::to_owned));
        match profile_dir.as_deref().and_then(stack::bin_dir) {
            Some(bins) => {
                let faults = stack::VendorFaults { p_server_error: 0.0, p_rate_limited: 0.0, latency_ms: 0, latency_max_ms: 0 };
                let stack = stack::Stack::start(&bins, &faults, 8, 100).await;
                let snapshot = stack::snapshot_json();
                print(
                    "real stack (scheduler + synthesis + fake OpenAI vendor, zero latency, 8 keys x 100)",
                    &measure(&stack.synthesis_url, Some(&snapshot)).await,
                );
            }
            None => println!(
                "voxctl batch, real stack: skipped (voxpool-scheduler / voxpool-synthesis / voxpool-fake-vendor not built in {}; run `cargo build --release -p voxpool-scheduler -p voxpool-synthesis --bins`)",
                profile_dir.map(|p| p.display().to_string()).unwrap_or_default()
            ),
        }
    });
}
