//! The `voxctl` binary as a user runs it, against an in-process fake Synthesis server: killed
//! with SIGKILL and resumed, interrupted with Ctrl-C once (drain) and twice (abort), and bad
//! manifests on the command line.

mod common;

use std::{collections::HashMap, path::Path, process::Stdio, time::Duration};

use common::{
    audio_files, done_ids,
    fake_synthesis::{FakeSynthesis, Reply, text_of_wav},
    items, temp_files, write_manifest,
};
use tokio::{
    io::{AsyncBufReadExt as _, BufReader},
    process::{Child, Command},
};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt as _};

fn voxctl(manifest: &Path, out: &Path, url: &str, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_voxctl"));
    for var in [
        "VOXPOOL_SYNTHESIS",
        "VOXPOOL_CATALOG",
        "VOXPOOL_SCHEDULER",
        "VOXPOOL_ADMIN_TOKEN",
    ] {
        c.env_remove(var);
    }
    c.arg("batch").arg(manifest).arg("--out").arg(out);
    c.args([
        "--synthesis",
        url,
        "--no-pack-check",
        "--backoff-base",
        "5ms",
        "--backoff-max",
        "100ms",
    ]);
    if !extra.contains(&"--progress") {
        c.args(["--progress", "quiet"]);
    }
    c.args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    c
}

fn interrupt(child: &Child) {
    let pid = child.id().expect("child running").to_string();
    let status = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("run kill");
    assert!(status.success());
}

async fn wait_exit(child: &mut Child, limit: Duration) -> i32 {
    let status = tokio::time::timeout(limit, child.wait())
        .await
        .expect("voxctl exits in time")
        .expect("wait");
    status.code().expect("exit code (not killed by a signal)")
}

async fn stderr_of(child: Child) -> (i32, String) {
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("in time")
        .expect("output");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A fake synthesis answering with `script`, a manifest of `n` items and the run's output
/// directory (inside the returned temporary directory).
async fn scene(
    script: impl Fn(&common::fake_synthesis::Call) -> Reply + Send + Sync + 'static,
    n: usize,
) -> (
    FakeSynthesis,
    tempfile::TempDir,
    std::path::PathBuf,
    std::path::PathBuf,
) {
    let server = FakeSynthesis::start(script).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = write_manifest(dir.path(), "m.jsonl", &items(n));
    let out = dir.path().join("out");
    (server, dir, manifest, out)
}

/// The checkpoint in `out` reads back whole: no torn record, no unreadable line.
fn assert_checkpoint_consistent(out: &Path) {
    let journal = voxctl::checkpoint::read(&out.join(voxctl::checkpoint::JOURNAL_NAME))
        .expect("readable checkpoint");
    assert!(!journal.torn_tail && journal.corrupt_lines.is_empty());
}

/// 15% UNAVAILABLE, 5% RESOURCE_EXHAUSTED with a 30ms RetryInfo, 5..25ms latency.
fn flaky(_: &common::fake_synthesis::Call) -> Reply {
    let latency = Duration::from_millis(rand::random_range(5..=25));
    let r: f64 = rand::random();
    let reply = if r < 0.15 {
        Reply::err(Status::unavailable("every key failed: 503"))
    } else if r < 0.20 {
        Reply::err(Status::with_error_details(
            Code::ResourceExhausted,
            "pool full",
            ErrorDetails::with_retry_info(Some(Duration::from_millis(30))),
        ))
    } else {
        Reply::ok()
    };
    reply.after(latency)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_with_sigkill_and_resumed_writes_every_file_once_and_never_redoes_a_recorded_item()
 {
    let server = FakeSynthesis::start(flaky).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let list = items(300);
    let manifest = write_manifest(dir.path(), "m.jsonl", &list);
    let out = dir.path().join("out");

    let mut first = voxctl(
        &manifest,
        &out,
        &server.url(),
        &["--concurrency", "16", "--max-attempts", "50"],
    )
    .spawn()
    .expect("spawn");
    server.wait_successes(100, Duration::from_secs(120)).await;
    first.start_kill().expect("SIGKILL");
    first.wait().await.expect("reaped");

    let recorded = done_ids(&out);
    let calls_at_kill: HashMap<String, u32> = server.calls();
    assert!(
        !recorded.is_empty() && recorded.len() < 300,
        "{} recorded at the kill",
        recorded.len()
    );
    for id in &recorded {
        assert!(
            out.join(format!("{id}.wav")).is_file(),
            "{id} recorded done without its file"
        );
    }

    let report = dir.path().join("report.json");
    let resumed = voxctl(
        &manifest,
        &out,
        &server.url(),
        &[
            "--concurrency",
            "16",
            "--max-attempts",
            "50",
            "--report",
            report.to_str().expect("utf8"),
        ],
    )
    .spawn()
    .expect("spawn resume");
    let (code, stderr) = stderr_of(resumed).await;
    assert_eq!(code, 0, "{stderr}");

    let calls_after = server.calls();
    for id in &recorded {
        assert_eq!(
            calls_after.get(id),
            calls_at_kill.get(id),
            "{id} was synthesized again after it was recorded done"
        );
    }
    assert_eq!(audio_files(&out).len(), 300);
    assert!(temp_files(&out).is_empty(), "{:?}", temp_files(&out));
    for (id, text) in &list {
        let bytes = std::fs::read(out.join(format!("{id}.wav"))).expect("file");
        assert_eq!(&text_of_wav(&bytes), text, "{id} is corrupt");
    }
    assert_eq!(done_ids(&out).len(), 300);
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("json");
    assert_eq!(doc["summary"]["ok"], 300);
    assert_eq!(
        doc["summary"]["okResumed"].as_u64(),
        Some(recorded.len() as u64)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_stops_dispatching_lets_in_flight_items_finish_and_flushes_the_checkpoint() {
    let (server, _dir, manifest, out) =
        scene(|_| Reply::ok().after(Duration::from_millis(400)), 60).await;
    let mut child = voxctl(&manifest, &out, &server.url(), &["--concurrency", "6"])
        .spawn()
        .expect("spawn");
    server.wait_calls(6, Duration::from_secs(30)).await;
    interrupt(&child);
    let code = wait_exit(&mut child, Duration::from_secs(30)).await;

    assert_eq!(code, 130);
    let called: std::collections::HashSet<String> = server.calls().into_keys().collect();
    let files: std::collections::HashSet<String> = audio_files(&out)
        .into_iter()
        .map(|f| f.trim_end_matches(".wav").to_owned())
        .collect();
    assert!(
        called.len() >= 6 && called.len() < 60,
        "{} items started",
        called.len()
    );
    assert_eq!(files, called, "every item in flight at Ctrl-C finished");
    assert_eq!(done_ids(&out), called, "and was recorded in the checkpoint");
    assert!(temp_files(&out).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_ctrl_c_aborts_in_flight_items_without_leaving_partial_files() {
    let (server, _dir, manifest, out) =
        scene(|_| Reply::ok().after(Duration::from_secs(60)), 10).await;
    let mut child = voxctl(&manifest, &out, &server.url(), &["--concurrency", "4"])
        .spawn()
        .expect("spawn");
    server.wait_calls(4, Duration::from_secs(30)).await;
    interrupt(&child);
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let saw_stopping = tokio::time::timeout(Duration::from_secs(10), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("stopping:") {
                return true;
            }
        }
        false
    })
    .await
    .expect("the first Ctrl-C is acknowledged");
    assert!(saw_stopping);
    interrupt(&child);
    let code = wait_exit(&mut child, Duration::from_secs(15)).await;

    assert_eq!(code, 130);
    assert!(audio_files(&out).is_empty());
    assert!(temp_files(&out).is_empty());
    assert!(done_ids(&out).is_empty());
    assert_checkpoint_consistent(&out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_manifest_lines_are_printed_with_their_line_numbers_and_the_run_exits_1() {
    let server = FakeSynthesis::healthy().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("m.jsonl");
    std::fs::write(&manifest, "{\"id\":\"a\",\"text\":\"t\",\"packId\":\"p\"}\n{broken\n{\"id\":\"b\",\"packId\":\"p\"}\n").expect("write");
    let out = dir.path().join("out");

    let (code, stderr) = stderr_of(
        voxctl(&manifest, &out, &server.url(), &[])
            .spawn()
            .expect("spawn"),
    )
    .await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("m.jsonl: line 2: invalid JSON"), "{stderr}");
    assert!(
        stderr.contains("m.jsonl: line 3 (id \"b\"): missing text"),
        "{stderr}"
    );
    assert!(stderr.contains("3 items: 1 ok"), "{stderr}");
    assert_eq!(audio_files(&out), ["a.wav"]);

    let (code, stderr) = stderr_of(
        voxctl(&manifest, &out, &server.url(), &["--strict"])
            .spawn()
            .expect("spawn"),
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--strict"), "{stderr}");

    let (code, stderr) = stderr_of(
        voxctl(&manifest, &out, &server.url(), &["--dry-run"])
            .spawn()
            .expect("spawn"),
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("1 valid item(s), 2 invalid line(s)"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_tty_progress_is_plain_periodic_lines_with_counts() {
    let (server, _dir, manifest, out) =
        scene(|_| Reply::ok().after(Duration::from_millis(100)), 20).await;
    let mut cmd = voxctl(
        &manifest,
        &out,
        &server.url(),
        &[
            "--concurrency",
            "2",
            "--progress",
            "lines",
            "--progress-interval",
            "200ms",
        ],
    );
    let (code, stderr) = stderr_of(cmd.spawn().expect("spawn")).await;
    assert_eq!(code, 0, "{stderr}");
    let progress: Vec<&str> = stderr.lines().filter(|l| l.contains("in flight")).collect();
    assert!(progress.len() >= 2, "{stderr}");
    assert!(
        progress[0].starts_with("voxctl: ")
            && progress[0].contains("/20 ok ")
            && progress[0].contains("breaker closed"),
        "{}",
        progress[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_stays_down_ends_the_run_after_give_up_after_and_the_rest_resumes() {
    let (server, dir, manifest, out) =
        scene(|_| Reply::err(Status::unavailable("catalog down")), 10).await;
    let report = dir.path().join("report.json");
    let (code, stderr) = stderr_of(
        voxctl(
            &manifest,
            &out,
            &server.url(),
            &[
                // Longer than the 5 attempts the first item's probes take (100 + 200 + 400 +
                // 800 ms of pauses): a call that fails while the service is down must not
                // use them up, so every item is still not started when the run gives up.
                "--give-up-after",
                "3s",
                "--breaker-pause",
                "100ms",
                "--report",
                report.to_str().expect("utf-8 path"),
            ],
        )
        .spawn()
        .expect("spawn"),
    )
    .await;

    assert_eq!(
        code, 1,
        "gave up is a failed run, not an interrupt: {stderr}"
    );
    let giving_up = stderr
        .lines()
        .find(|l| l.contains("giving up"))
        .unwrap_or_else(|| panic!("no give-up line: {stderr}"));
    assert!(
        giving_up.contains("--give-up-after")
            && giving_up.contains(&format!("synthesis at {}", server.url()))
            && giving_up.contains("catalog down"),
        "the line names the flag, the service, its URL and the failure: {giving_up}"
    );
    let pause = stderr
        .lines()
        .find(|l| l.contains("circuit breaker open"))
        .unwrap_or_else(|| panic!("no pause line: {stderr}"));
    assert!(
        pause.contains(&format!("synthesis at {}", server.url())),
        "the pause line names the URL that fails: {pause}"
    );
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("json");
    assert_eq!(doc["summary"]["gaveUp"], true);
    assert_eq!(doc["summary"]["notStarted"].as_u64(), Some(10), "{doc}");
    let trips = doc["summary"]["breakerTrips"].as_u64().expect("trips");
    let logged = stderr
        .lines()
        .filter(|l| l.contains("circuit breaker open (trip"))
        .count() as u64;
    assert!(
        logged <= trips && stderr.contains(&format!("(trip {trips})")),
        "the log's trip numbers end at the summary's count ({trips}): {stderr}"
    );
    assert!(temp_files(&out).is_empty());

    server.set_script(|_| Reply::ok());
    let (code, stderr) = stderr_of(
        voxctl(&manifest, &out, &server.url(), &[])
            .spawn()
            .expect("spawn"),
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        audio_files(&out).len(),
        10,
        "the same command resumes every item"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_ctrl_c_ends_a_run_of_slow_items_within_two_seconds_with_a_consistent_checkpoint()
{
    let (server, _dir, manifest, out) =
        scene(|_| Reply::ok().after(Duration::from_secs(60)), 10).await;
    let mut child = voxctl(&manifest, &out, &server.url(), &["--concurrency", "4"])
        .spawn()
        .expect("spawn");
    server.wait_calls(4, Duration::from_secs(30)).await;
    let interrupted = std::time::Instant::now();
    interrupt(&child);
    let code = wait_exit(&mut child, Duration::from_secs(30)).await;
    let took = interrupted.elapsed();

    assert_eq!(code, 130);
    assert!(
        took < Duration::from_secs(2),
        "one Ctrl-C ended the run in {took:?}, not after the 60 s items"
    );
    assert!(audio_files(&out).is_empty() && temp_files(&out).is_empty());
    assert_checkpoint_consistent(&out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stderr_and_stdout_never_make_voxctl_deaf_to_signals() {
    let (server, _dir, manifest, out) =
        scene(|_| Reply::ok().after(Duration::from_secs(60)), 10).await;
    let mut cmd = voxctl(
        &manifest,
        &out,
        &server.url(),
        &[
            "--concurrency",
            "2",
            "--progress",
            "lines",
            "--progress-interval",
            "20ms",
        ],
    );
    cmd.stdout(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    // The reader goes away, as `2>&1 | head -5` does once head has its lines.
    drop(child.stderr.take());
    drop(child.stdout.take());
    server.wait_calls(2, Duration::from_secs(30)).await;
    // The handler's own "stopping" line goes into the closed pipe: a print that panics there
    // kills the handler before it acts, and the 60 s items would keep the run alive.
    interrupt(&child);
    let code = wait_exit(&mut child, Duration::from_secs(10)).await;
    assert_eq!(code, 130);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synth_of_a_long_text_shows_progress_while_its_parts_come_back() {
    let server = FakeSynthesis::start(|_| Reply::ok().after(Duration::from_millis(150))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let text = "One sentence of the long text. ".repeat(8);
    let out = dir.path().join("long.wav");
    let output = Command::new(env!("CARGO_BIN_EXE_voxctl"))
        .env_remove("VOXPOOL_SYNTHESIS")
        .arg("synth")
        .arg(&text)
        .args(["--pack", "vp_test"])
        .arg("-o")
        .arg(&out)
        .args(["--synthesis", &server.url(), "--max-chars", "40"])
        .args(["--progress", "lines", "--progress-interval", "100ms"])
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let progress: Vec<&str> = stderr.lines().filter(|l| l.contains("chars/s")).collect();
    assert!(
        progress.len() >= 2
            && progress
                .iter()
                .any(|l| l.contains("eta ") && !l.contains("eta unknown")),
        "progress lines with a known ETA while the parts come back: {stderr}"
    );
    assert!(stderr.contains("8 part(s)"), "{stderr}");
    let spoken = text_of_wav(&std::fs::read(&out).expect("audio"));
    let words = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
    assert_eq!(words(&spoken), words(&text), "every part, in order");
}
