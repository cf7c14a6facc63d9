//! The audio cache from voxctl's side, through the binary against the in-process fake
//! synthesis: `--cache-policy` on the wire, cache hits in the reports, and the
//! `voxctl cache stats|purge` admin commands.

mod common;

use std::{path::Path, process::Stdio};

use common::{
    fake_synthesis::{FakeSynthesis, Reply},
    items, write_manifest,
};
use tokio::process::Command;
use voxpool_proto::synthesis::v1::CachePolicy;

/// `voxctl ARGS` with none of voxctl's variables inherited from the test's environment.
fn voxctl(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_voxctl"));
    for var in [
        "VOXPOOL_SYNTHESIS",
        "VOXPOOL_CATALOG",
        "VOXPOOL_SCHEDULER",
        "VOXPOOL_ADMIN_TOKEN",
        "VOXPOOL_CLIENT_TOKEN",
        "VOXPOOL_CACHE_POLICY",
    ] {
        c.env_remove(var);
    }
    c.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    c
}

/// Runs `command` to its end: exit code, stdout, stderr.
async fn run(mut command: Command) -> (i32, String, String) {
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), command.output())
        .await
        .expect("voxctl ends in time")
        .expect("voxctl runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn batch(manifest: &Path, out: &Path, url: &str, extra: &[&str]) -> Command {
    let mut args = vec![
        "batch",
        manifest.to_str().expect("utf-8 path"),
        "--out",
        out.to_str().expect("utf-8 path"),
        "--synthesis",
        url,
        "--no-pack-check",
        "--progress",
        "quiet",
    ];
    args.extend_from_slice(extra);
    voxctl(&args)
}

/// The distinct `cache_policy` values the server received, in arrival order.
fn policies(server: &FakeSynthesis) -> Vec<i32> {
    let mut seen: Vec<i32> = Vec::new();
    for call in server.log() {
        if !seen.contains(&call.cache_policy) {
            seen.push(call.cache_policy);
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_policy_flag_and_variable_reach_the_server_and_use_is_the_default() {
    let server = FakeSynthesis::healthy().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = write_manifest(dir.path(), "m.jsonl", &items(5));

    let (code, _, stderr) = run(batch(
        &manifest,
        &dir.path().join("refresh"),
        &server.url(),
        &["--cache-policy", "refresh"],
    ))
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(server.total_calls(), 5);
    assert_eq!(policies(&server), [CachePolicy::Refresh as i32]);

    let server = FakeSynthesis::healthy().await;
    let (code, _, stderr) = run(batch(
        &manifest,
        &dir.path().join("default"),
        &server.url(),
        &[],
    ))
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        policies(&server),
        [CachePolicy::Use as i32],
        "no flag sends USE, never UNSPECIFIED"
    );

    let server = FakeSynthesis::healthy().await;
    let out = dir.path().join("one.wav");
    let mut synth = voxctl(&[
        "synth",
        "Hello there.",
        "--pack",
        "vp_test",
        "-o",
        out.to_str().expect("utf-8 path"),
        "--synthesis",
        &server.url(),
    ]);
    synth.env("VOXPOOL_CACHE_POLICY", "bypass");
    let (code, _, stderr) = run(synth).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(policies(&server), [CachePolicy::Bypass as i32]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_and_synth_print_how_many_chunks_the_cache_served() {
    let server = FakeSynthesis::start(|_| Reply::ok().cached(1, 2)).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = write_manifest(dir.path(), "m.jsonl", &items(4));
    let (code, _, stderr) = run(batch(
        &manifest,
        &dir.path().join("out"),
        &server.url(),
        &[],
    ))
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l == "voxctl: cache: 4 of 8 chunks served from the cache (50%)"),
        "{stderr}"
    );

    let out = dir.path().join("one.wav");
    let (code, _, stderr) = run(voxctl(&[
        "synth",
        "First sentence here. Second sentence here.",
        "--pack",
        "vp_test",
        "-o",
        out.to_str().expect("utf-8 path"),
        "--synthesis",
        &server.url(),
        "--max-chars",
        "25",
    ]))
    .await;
    assert_eq!(code, 0, "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("voxctl: wrote ")
            && last.contains("2 part(s)")
            && last.ends_with("; cache: 2 of 4 chunks served from the cache (50%)"),
        "the final line adds up both parts: {stderr}"
    );
}
