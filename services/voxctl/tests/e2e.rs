//! End to end against the real services as separate processes: `voxpool-scheduler` (memory
//! store), `voxpool-synthesis`, and `voxpool-fake-vendor` speaking the OpenAI wire format with
//! 20% HTTP 503s, 5% 429s and 5..40ms latency. voxctl reaches synthesis through a counting
//! proxy (see `common/proxy.rs`).
//!
//! Needs the service binaries next to voxctl's: `cargo build -p voxpool-scheduler
//! -p voxpool-synthesis --bins` (`cargo test --workspace` builds them).

mod common;

use std::{collections::HashMap, path::PathBuf, process::Stdio, time::Duration};

use common::{
    audio_files, done_ids, items,
    proxy::CountingProxy,
    stack::{Stack, VendorFaults, bin_dir, write_snapshot_manifest},
    temp_files,
};
use tokio::process::Command;

fn bins() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_BIN_EXE_voxctl"));
    let dir = here.parent().expect("profile dir").to_owned();
    bin_dir(&dir).unwrap_or_else(|| {
        panic!(
            "voxpool-scheduler / voxpool-synthesis / voxpool-fake-vendor not found in {}: run `cargo build -p voxpool-scheduler -p voxpool-synthesis --bins` first",
            dir.display()
        )
    })
}

fn faulty() -> VendorFaults {
    VendorFaults {
        p_server_error: 0.2,
        p_rate_limited: 0.05,
        latency_ms: 5,
        latency_max_ms: 40,
    }
}

fn voxctl(manifest: &std::path::Path, out: &std::path::Path, url: &str, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_voxctl"));
    c.arg("batch").arg(manifest).arg("--out").arg(out);
    c.args([
        "--synthesis",
        url,
        "--no-pack-check",
        "--progress",
        "quiet",
        "--concurrency",
        "16",
    ]);
    c.args([
        "--max-attempts",
        "20",
        "--backoff-base",
        "20ms",
        "--backoff-max",
        "500ms",
        "--deadline",
        "20s",
    ]);
    c.args(extra)
        .env("VOXPOOL_CLIENT_TOKEN", common::stack::CLIENT_TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    c
}

fn assert_valid_wavs(out: &std::path::Path, ids: impl IntoIterator<Item = String>) {
    for id in ids {
        let path = out.join(format!("{id}.wav"));
        let reader = hound::WavReader::open(&path)
            .unwrap_or_else(|e| panic!("{} is not a valid WAV: {e}", path.display()));
        assert!(reader.duration() > 0, "{} is empty", path.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_items_through_a_faulty_vendor_all_finish_and_a_sigkill_resume_redoes_nothing_recorded()
 {
    let stack = Stack::start(&bins(), &faulty(), 4, 10).await;
    let proxy = CountingProxy::start(&stack.synthesis_url).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let list = items(300);
    let manifest = write_snapshot_manifest(dir.path(), "m.jsonl", &list);
    let out = dir.path().join("out");

    let mut first = voxctl(&manifest, &out, &proxy.url(), &[])
        .spawn()
        .expect("spawn voxctl");
    proxy.wait_successes(100, Duration::from_secs(180)).await;
    first.start_kill().expect("SIGKILL");
    first.wait().await.expect("reaped");
    let recorded = done_ids(&out);
    let calls_at_kill: HashMap<String, u32> = proxy.calls();
    assert!(
        !recorded.is_empty() && recorded.len() < 300,
        "{} recorded at the kill",
        recorded.len()
    );

    let report = dir.path().join("report.json");
    let resumed = voxctl(
        &manifest,
        &out,
        &proxy.url(),
        &["--report", report.to_str().expect("utf8")],
    )
    .spawn()
    .expect("spawn resume");
    let output = tokio::time::timeout(Duration::from_secs(300), resumed.wait_with_output())
        .await
        .expect("in time")
        .expect("output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");

    let calls_after = proxy.calls();
    for id in &recorded {
        assert_eq!(
            calls_after.get(id),
            calls_at_kill.get(id),
            "{id} was synthesized again after it was recorded done"
        );
    }
    assert_eq!(audio_files(&out).len(), 300);
    assert!(temp_files(&out).is_empty());
    assert_eq!(done_ids(&out).len(), 300);
    assert_valid_wavs(&out, list.iter().map(|(id, _)| id.clone()));
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("json");
    assert_eq!(doc["summary"]["ok"], 300, "{stderr}");
    assert_eq!(
        doc["summary"]["okResumed"].as_u64(),
        Some(recorded.len() as u64)
    );
    let keys: std::collections::HashSet<String> = doc["items"]
        .as_array()
        .expect("items")
        .iter()
        .flat_map(|i| i["keys"].as_array().cloned().unwrap_or_default())
        .filter_map(|k| k.as_str().map(str::to_owned))
        .collect();
    assert!(
        keys.len() >= 2,
        "the report names the vendor keys used: {keys:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_manifest_lines_are_reported_by_line_number_while_valid_items_run_on_the_real_stack() {
    let stack = Stack::start(&bins(), &faulty(), 2, 10).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let good = write_snapshot_manifest(dir.path(), "good.jsonl", &items(5));
    let mut text = std::fs::read_to_string(&good).expect("read");
    text.push_str("{\"id\":\"bad-json\"\n");
    text.push_str("{\"id\":\"no-text\",\"packId\":\"vp\"}\n");
    text.push_str("{\"id\":\"item-000\",\"text\":\"dup\",\"packId\":\"vp\"}\n");
    let manifest = dir.path().join("m.jsonl");
    std::fs::write(&manifest, text).expect("write");
    let out = dir.path().join("out");

    let output = voxctl(&manifest, &out, &stack.synthesis_url, &[])
        .output()
        .await
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("line 6: invalid JSON"), "{stderr}");
    assert!(
        stderr.contains("line 7 (id \"no-text\"): missing text"),
        "{stderr}"
    );
    assert!(
        stderr.contains("line 8 (id \"item-000\"): duplicate id (first on line 1)"),
        "{stderr}"
    );
    assert_eq!(audio_files(&out).len(), 5, "{stderr}");
    assert!(stderr.contains("8 items: 5 ok"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_reports_items_whose_pack_pins_a_pool_the_scheduler_does_not_serve() {
    let stack = Stack::start(&bins(), &faulty(), 2, 10).await;
    let catalog = common::fake_catalog::FakeCatalog::start_pinned(&[
        ("vp_served", true, common::stack::POOL),
        ("vp_orphan", true, "pool-that-was-removed"),
        ("vp_unserved", true, common::stack::UNSERVED_POOL),
    ])
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("m.jsonl");
    let ghost = {
        let json = common::stack::snapshot_json()
            .to_string()
            .replace(common::stack::POOL, "ghost");
        voxpool_domain::snapshot::Snapshot::from_json(&json)
            .expect("snapshot")
            .seal()
            .to_json_value()
    };
    let lines = [
        serde_json::json!({"id": "a", "text": "one", "packId": "vp_served"}),
        serde_json::json!({"id": "b", "text": "two", "packId": "vp_orphan"}),
        serde_json::json!({"id": "c", "text": "three", "packId": "vp_unserved"}),
        serde_json::json!({"id": "d", "text": "four", "snapshot": ghost}),
    ];
    std::fs::write(
        &manifest,
        lines
            .iter()
            .map(|l| l.to_string() + "\n")
            .collect::<String>(),
    )
    .expect("write");
    let output = Command::new(env!("CARGO_BIN_EXE_voxctl"))
        .arg("batch")
        .arg(&manifest)
        .arg("--out")
        .arg(dir.path().join("out"))
        .args(["--dry-run", "--synthesis", &stack.synthesis_url])
        .env("VOXPOOL_CLIENT_TOKEN", common::stack::CLIENT_TOKEN)
        .args([
            "--catalog",
            &catalog.url(),
            "--scheduler",
            &stack.scheduler_url,
        ])
        .output()
        .await
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("line 2 (id \"b\"): pack \"vp_orphan\" pins ttsModelId \"pool-that-was-removed\", which no scheduler pool serves (pools: fake-openai, no-credential)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("line 3 (id \"c\"): pack \"vp_unserved\" runs on pool \"no-credential\", which synthesis cannot serve: no key has a credential there (acct-x/k0: environment variable VOXCTL_E2E_NEVER_SET is not set)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("line 4 (id \"d\"): the snapshot of pack \"vp_e2e\" pins ttsModelId \"ghost\", which no scheduler pool serves"),
        "{stderr}"
    );
    assert!(
        stderr.contains("1 valid item(s), 3 invalid line(s)"),
        "{stderr}"
    );

    // Without --scheduler the pools are the ones synthesis lists (its ListPools), so a
    // scheduler at the default address is never asked.
    let output = Command::new(env!("CARGO_BIN_EXE_voxctl"))
        .arg("batch")
        .arg(&manifest)
        .arg("--out")
        .arg(dir.path().join("out"))
        .args(["--dry-run", "--synthesis", &stack.synthesis_url])
        .args(["--catalog", &catalog.url()])
        .env("VOXPOOL_CLIENT_TOKEN", common::stack::CLIENT_TOKEN)
        .env_remove("VOXPOOL_SCHEDULER")
        .output()
        .await
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("pack \"vp_orphan\" pins ttsModelId \"pool-that-was-removed\", which no synthesis pool serves (pools: fake-openai, no-credential)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("1 valid item(s), 3 invalid line(s)"),
        "{stderr}"
    );
}
