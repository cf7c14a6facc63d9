//! `voxctl usage` as a user runs it: a malformed `--month` is refused before any call (exit
//! 2), and an address that serves no usage ledger (here a synthesis server) is named as such.

mod common;

use std::process::Output;

use common::fake_synthesis::FakeSynthesis;
use tokio::process::Command;

async fn voxctl(args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_voxctl"));
    for var in ["VOXPOOL_CATALOG", "VOXPOOL_ADMIN_TOKEN"] {
        c.env_remove(var);
    }
    c.arg("usage").args(args).kill_on_drop(true);
    c.output().await.expect("run voxctl")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test]
async fn a_malformed_month_is_a_usage_error_before_any_call() {
    // Port 9 (discard): nothing answers there, so an exit 2 means no call was made.
    for month in ["2026-13", "", "2026-1", "december"] {
        let out = voxctl(&["--catalog", "http://127.0.0.1:9", "--month", month]).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "--month {month:?}: {err}");
        assert!(
            err.contains("--month") && err.contains("YYYY-MM"),
            "--month {month:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "nothing printed: {month:?}");
    }
}

#[tokio::test]
async fn an_address_that_serves_no_usage_ledger_is_named_as_such() {
    let synthesis = FakeSynthesis::healthy().await;
    let url = synthesis.url();
    let out = voxctl(&["--catalog", &url, "--admin-token", "t"]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("UNIMPLEMENTED")
            && err.contains(&format!("{url} does not serve voxpool.catalog.v1.Usage"))
            && err.contains("VOXPOOL_CATALOG"),
        "{err}"
    );
}
