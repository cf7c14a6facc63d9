//! A data-plane client token that is also the server's admin token would let every caller
//! holding it call admin RPCs: the scheduler and synthesis refuse to start with one, naming
//! the `[[client_tokens]]` entry, never the token.

use std::{
    io::Read as _,
    process::{Command, Stdio},
};

use voxpool_e2e::binary;

const SHARED: &str = "one-token-for-everything-0123";

/// Runs `name` with a config whose `[[client_tokens]]` entry "ops" holds [`SHARED`], and
/// [`SHARED`] as its admin token: its stdout (an address if it started) and its stderr once it
/// ended.
fn run(name: &str, extra: &[&str]) -> (std::process::ExitStatus, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        "[[pools]]\nid = \"p\"\nprovider = \"espeak\"\nmodel = \"espeak-ng\"\n\
         [[pools.upstreams]]\nid = \"u\"\n[[pools.upstreams.keys]]\nid = \"k\"\ncapacity = 1\n\
         [[client_tokens]]\nname = \"apps\"\ntoken = { env = \"VOXPOOL_TEST_APPS_TOKEN\" }\n\
         [[client_tokens]]\nname = \"ops\"\ntoken = { env = \"VOXPOOL_TEST_OPS_TOKEN\" }\n",
    )
    .unwrap();
    let mut child = Command::new(binary(name))
        .arg("--config")
        .arg(&config)
        .args(["--listen", "127.0.0.1:0"])
        .args(extra)
        .env("VOXPOOL_TEST_APPS_TOKEN", "apps-token-0123456789")
        .env("VOXPOOL_TEST_OPS_TOKEN", SHARED)
        .env("VOXPOOL_ADMIN_TOKEN", SHARED)
        .env("VOXPOOL_CLIENT_TOKEN", "apps-token-0123456789")
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A process that started prints its address and keeps running: stop it, the test failed.
    let mut out = String::new();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 1];
    if stdout.read(&mut first).unwrap_or(0) > 0 {
        let _ = child.kill();
        out.push(char::from(first[0]));
    }
    let _ = stdout.read_to_string(&mut out);
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status, out, err)
}

#[test]
fn a_client_token_that_is_also_the_admin_token_stops_the_start_naming_its_entry() {
    for (name, extra) in [
        ("voxpool-scheduler", &[][..]),
        (
            "voxpool-synthesis",
            &["--scheduler", "http://127.0.0.1:1", "--cache", "off"][..],
        ),
    ] {
        let (status, out, err) = run(name, extra);
        assert!(out.is_empty(), "{name} started: {out}");
        assert!(!status.success(), "{name}: {err}");
        assert!(
            err.contains("client_tokens[1] (\"ops\")") && err.contains("admin token"),
            "{name}: {err}"
        );
        assert!(!err.contains(SHARED), "{name} printed the token: {err}");
    }
}
