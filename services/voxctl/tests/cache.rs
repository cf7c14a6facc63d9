//! The audio cache from voxctl's side, through the binary against the in-process fake
//! synthesis: `--cache-policy` on the wire, cache hits in the reports, and the
//! `voxctl cache stats|purge` admin commands.

mod common;

use std::{path::Path, process::Stdio};

use common::{
    fake_synthesis::{ADMIN_TOKEN, Admin, FakeSynthesis, Reply},
    items, write_manifest,
};
use tokio::process::Command;
use voxpool_proto::synthesis::v1::{
    CachePolicy, CacheStats, PoolCacheStats, PurgeCacheRequest, PurgeCacheResponse,
};

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

/// `voxctl cache ARGS` against `server`, with the fake's admin token in VOXPOOL_ADMIN_TOKEN
/// when `token` is set.
fn cache(server: &FakeSynthesis, token: Option<&str>, args: &[&str]) -> Command {
    let url = server.url();
    let mut all = vec!["cache"];
    all.extend_from_slice(args);
    all.extend(["--synthesis", &url]);
    let mut c = voxctl(&all);
    if let Some(token) = token {
        c.env("VOXPOOL_ADMIN_TOKEN", token);
    }
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_purge_without_a_pack_or_a_snapshot_is_refused_before_any_call() {
    let server = FakeSynthesis::healthy().await;
    let (code, stdout, stderr) = run(cache(&server, Some(ADMIN_TOKEN), &["purge"])).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--pack") && stderr.contains("--snapshot-digest"),
        "the refusal names both flags: {stderr}"
    );
    assert!(stdout.is_empty(), "{stdout}");
    assert!(server.purges().is_empty(), "nothing reached the server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_purge_of_a_pack_sends_the_pack_id_and_prints_what_was_deleted() {
    let server = FakeSynthesis::healthy().await;
    server.set_admin(Admin {
        purged: PurgeCacheResponse {
            deleted_entries: 12,
            deleted_bytes: 3_456_789,
        },
        ..Admin::default()
    });
    let (code, _, stderr) = run(cache(
        &server,
        Some(ADMIN_TOKEN),
        &["purge", "--pack", "vp_1"],
    ))
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        server.purges(),
        [PurgeCacheRequest {
            pack_id: "vp_1".into(),
            snapshot_digest: String::new(),
        }]
    );
    assert!(
        stderr.contains("voxctl: purged 12 entries (3456789 bytes, 3.3 MiB) of pack vp_1"),
        "{stderr}"
    );

    let digest = format!("sha256:{}", "0f".repeat(32));
    let (code, _, stderr) = run(cache(
        &server,
        Some(ADMIN_TOKEN),
        &["purge", "--snapshot-digest", &digest],
    ))
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        server.purges().last(),
        Some(&PurgeCacheRequest {
            pack_id: String::new(),
            snapshot_digest: digest.clone(),
        })
    );
    assert!(
        stderr.contains(&format!("of snapshot {digest}")),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_stats_prints_the_totals_and_a_table_of_every_pool() {
    let server = FakeSynthesis::healthy().await;
    server.set_admin(Admin {
        stats: CacheStats {
            enabled: true,
            location: "file:///var/lib/voxpool/blobs/cache".into(),
            entries: 1234,
            bytes: 56_789_012,
            max_bytes: 1 << 30,
            evictions: 3,
            pools: vec![
                PoolCacheStats {
                    pool: "espeak-local".into(),
                    hits: 120,
                    misses: 30,
                    fills: 30,
                    coalesced: 2,
                    characters_saved: 4512,
                    bytes_stored: 1_234_567,
                },
                PoolCacheStats {
                    pool: "volc-standard".into(),
                    hits: 5,
                    misses: 9,
                    fills: 8,
                    coalesced: 1,
                    characters_saved: 210,
                    bytes_stored: 99_000,
                },
            ],
        },
        ..Admin::default()
    });
    let (code, stdout, stderr) = run(cache(&server, Some(ADMIN_TOKEN), &["stats"])).await;
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    for expected in [
        "enabled    yes",
        "location   file:///var/lib/voxpool/blobs/cache",
        "entries    1234",
        "bytes      56789012 bytes (54.2 MiB)",
        "max bytes  1073741824 bytes (1.0 GiB)",
        "evictions  3",
        "POOL           HITS  MISSES  FILLS  COALESCED  CHARS SAVED  BYTES STORED",
        "espeak-local   120   30      30     2          4512         1234567",
        "volc-standard  5     9       8      1          210          99000",
    ] {
        assert!(
            lines.contains(&expected),
            "no line {expected:?} in:\n{stdout}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_unconfigured_admin_token_names_the_url_the_code_and_the_variable() {
    let server = FakeSynthesis::healthy().await;
    let hint = "voxctl sends the admin token from --admin-token or VOXPOOL_ADMIN_TOKEN";
    let (code, stdout, stderr) = run(cache(&server, None, &["stats"])).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains(&format!(
            "GetCacheStats (synthesis at {}): UNAUTHENTICATED",
            server.url()
        )) && stderr.contains(hint),
        "{stderr}"
    );

    let (code, _, stderr) = run(cache(
        &server,
        Some("wrong-token-0123456789"),
        &["purge", "--pack", "vp_1"],
    ))
    .await;
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("PurgeCache (synthesis at ")
            && stderr.contains("UNAUTHENTICATED: admin token rejected")
            && stderr.contains(hint),
        "{stderr}"
    );
    assert!(server.purges().is_empty(), "a wrong token purges nothing");

    server.set_admin(Admin {
        token: None,
        ..Admin::default()
    });
    let (code, _, stderr) = run(cache(&server, Some(ADMIN_TOKEN), &["stats"])).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("FAILED_PRECONDITION: admin RPCs are disabled") && stderr.contains(hint),
        "a server without its own admin token gets the same hint: {stderr}"
    );
}
