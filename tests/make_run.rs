//! `make run` (deploy/local/run.sh) as a newcomer meets it when another stack already runs: it
//! names the port that is taken and starts nothing, instead of printing "voxpool running" over
//! the old stack and then failing with "Address already in use".

use std::{net::TcpListener, process::Command};

use voxpool_e2e::workspace_root;

#[test]
fn a_taken_port_is_named_before_anything_starts() {
    // The catalog's port: held here, or already held by a stack someone runs (also taken).
    let _held = TcpListener::bind("127.0.0.1:50052");
    let output = Command::new(workspace_root().join("deploy/local/run.sh"))
        .env(
            "VOXPOOL_RUN_DIR",
            tempfile::tempdir().expect("tempdir").path(),
        )
        .output()
        .expect("run run.sh");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("port 50052 (the catalog's) is taken"),
        "the taken port and its service are named: {stderr}"
    );
    assert!(
        !stdout.contains("voxpool running") && !stderr.contains("migrations applied"),
        "nothing started: {stdout}{stderr}"
    );
}
