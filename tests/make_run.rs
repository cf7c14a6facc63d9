//! `make run` (deploy/local/run.sh) as a newcomer meets it when another stack already runs: it
//! names the port that is taken and starts nothing, instead of printing "voxpool running" over
//! the old stack and then failing with "Address already in use".

use std::{net::TcpListener, process::Command};

use voxpool_e2e::workspace_root;

#[test]
fn a_taken_port_is_named_before_anything_starts() {
    // The catalog's port: held here, or already held by a stack someone runs (also taken).
    // 50052 lies in Linux's ephemeral range, so another process's outgoing connection can sit
    // on it for a while (no listener: nothing to find taken, yet nothing can bind it); wait,
    // bounded, until it is either ours or someone's listener.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let _held = loop {
        match TcpListener::bind("127.0.0.1:50052") {
            Ok(listener) => break Some(listener),
            Err(_) if std::net::TcpStream::connect("127.0.0.1:50052").is_ok() => break None,
            Err(e) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "127.0.0.1:50052 stayed unbindable without a listener: {e}"
                );
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    };
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
