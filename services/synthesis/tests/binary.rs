//! The `voxpool-synthesis` binary's contract: one-line reasons and non-zero exits on a bad
//! config, a missing credential under `--require-credentials`, or a port in use; the example
//! config is accepted as is.

use std::{
    path::PathBuf,
    process::{Command, Output},
};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_voxpool-synthesis"));
    // No audio cache: nothing lands in the user's data directory.
    c.env("VOXPOOL_CACHE", "off");
    for var in [
        "VOXPOOL_CONFIG",
        "VOXPOOL_LISTEN",
        "VOXPOOL_REQUIRE_CREDENTIALS",
        "VOLC_TOKEN_APP1",
        "VOLC_TOKEN_APP2",
        "VOLC_TOKEN_APP3",
    ] {
        c.env_remove(var);
    }
    c
}

fn example_config() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/config/example.toml")
}

fn one_line_stderr(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("voxpool-synthesis:"))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "one reason line expected, stderr was:\n{stderr}"
    );
    lines[0].to_owned()
}

#[test]
fn example_config_is_accepted_as_is() {
    let out = bin()
        .arg("--config")
        .arg(example_config())
        .arg("--check-config")
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "OK");
}

#[test]
fn require_credentials_names_the_missing_variable() {
    let out = bin()
        .arg("--config")
        .arg(example_config())
        .args(["--require-credentials", "--check-config"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let line = one_line_stderr(&out);
    assert!(line.contains("VOLC_TOKEN_APP1 is not set"), "{line}");
}

#[test]
fn a_bad_config_exits_non_zero_with_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[[pools]]\nid = \"p\"\nprovider = \"nope\"\n").expect("write");
    let out = bin().arg("--config").arg(&path).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    let line = one_line_stderr(&out);
    assert!(
        line.starts_with("voxpool-synthesis: bad config:") && line.contains("pools[0].provider"),
        "{line}"
    );
}

#[test]
fn a_port_in_use_exits_non_zero_with_one_line() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let out = bin()
        .arg("--config")
        .arg(example_config())
        .args(["--listen", &addr])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let line = one_line_stderr(&out);
    assert!(line.contains(&format!("cannot listen on {addr}")), "{line}");
    // The example config has no credentials set, which is warned about at start-up; the port
    // problem is found first, so the reason is all the operator reads.
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).lines().count(),
        1,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn help_documents_every_flag_and_its_environment_variable() {
    let out = bin().arg("--help").output().expect("run");
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--config",
        "--listen",
        "--scheduler",
        "--catalog",
        "--lease-ttl-ms",
        "--espeak-bin",
        "--require-credentials",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help");
    }
    for var in [
        "VOXPOOL_CONFIG",
        "VOXPOOL_LISTEN",
        "VOXPOOL_SCHEDULER",
        "VOXPOOL_CATALOG",
    ] {
        assert!(help.contains(var), "{var} missing from --help");
    }
    assert!(
        help.contains("127.0.0.1:50053")
            && help.contains("http://127.0.0.1:50051")
            && help.contains("http://127.0.0.1:50052")
    );
}
