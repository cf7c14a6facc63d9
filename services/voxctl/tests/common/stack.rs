//! The real voxpool stack as separate processes, for end-to-end tests and the benchmark:
//! `voxpool-fake-vendor` (OpenAI wire format, faults and latency as asked), `voxpool-scheduler`
//! and `voxpool-synthesis`, each on 127.0.0.1:0.
//!
//! Binaries are taken from the directory of the running voxctl build (`target/<profile>/`);
//! build them first with `cargo build -p voxpool-scheduler -p voxpool-synthesis --bins`.
//! Bound addresses: the fake vendor prints its URL on stdout's first line, the scheduler prints
//! `... listening on ADDR`; synthesis only logs its bound address, so it runs with
//! `VOXPOOL_LOG_FORMAT=json` and the `listen` field of its "serving" log line is read.
#![allow(dead_code)]

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use tokio::{
    io::{AsyncBufReadExt as _, BufReader},
    process::{Child, Command},
};

/// The client token voxctl presents to the stack's synthesis and scheduler (the stack runs
/// with `[[client_tokens]]` on, as `make run` does).
pub const CLIENT_TOKEN: &str = "voxctl-e2e-client-token";
/// The token the stack's synthesis presents to its scheduler.
const SYNTHESIS_TOKEN: &str = "voxctl-e2e-synthesis-token";
/// The stack's `[[client_tokens]]`.
const CLIENT_TOKENS: &str = "[[client_tokens]]\nname = \"synthesis\"\ntoken = { env = \"VOXCTL_E2E_TOKEN_SYNTHESIS\" }\nservices = [\"scheduler\"]\n[[client_tokens]]\nname = \"voxctl\"\ntoken = { env = \"VOXCTL_E2E_TOKEN_VOXCTL\" }\n";

/// Pool id used by the stack.
pub const POOL: &str = "fake-openai";
/// A second pool of the stack whose only key has no credential (synthesis cannot serve it).
pub const UNSERVED_POOL: &str = "no-credential";

/// Fault and latency settings of the fake vendor.
#[derive(Clone, Debug)]
pub struct VendorFaults {
    pub p_server_error: f64,
    pub p_rate_limited: f64,
    pub latency_ms: u64,
    pub latency_max_ms: u64,
}

/// Running processes; killed on drop.
pub struct Stack {
    pub synthesis_url: String,
    pub scheduler_url: String,
    pub vendor_url: String,
    _children: Vec<Child>,
    _dir: tempfile::TempDir,
}

/// The directory holding the binaries of this build, or `None` when one is missing.
pub fn bin_dir(profile_dir: &Path) -> Option<PathBuf> {
    let all = [
        "voxpool-scheduler",
        "voxpool-synthesis",
        "voxpool-fake-vendor",
    ];
    all.iter()
        .all(|b| profile_dir.join(b).is_file())
        .then(|| profile_dir.to_owned())
}

async fn stderr_line_with(
    child: &mut Child,
    what: &str,
    pick: impl Fn(&str) -> Option<String>,
) -> String {
    let mut lines = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
    let found = tokio::time::timeout(Duration::from_secs(60), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(v) = pick(&line) {
                return Some(v);
            }
        }
        None
    })
    .await
    .ok()
    .flatten()
    .unwrap_or_else(|| panic!("{what} did not report its address"));
    // Keep draining so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    found
}

async fn stdout_first_line(child: &mut Child, what: &str) -> String {
    let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("{what} printed nothing within 60s"))
        .expect("read stdout")
        .unwrap_or_else(|| panic!("{what} exited before printing its address"));
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    line
}

fn json_listen(line: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let fields = v.get("fields")?;
    if !fields.get("message")?.as_str()?.contains("serving") {
        return None;
    }
    fields.get("listen")?.as_str().map(str::to_owned)
}

impl Stack {
    /// Starts vendor, scheduler and synthesis from `bins`; `keys` keys of `capacity` each over
    /// two upstreams.
    pub async fn start(bins: &Path, faults: &VendorFaults, keys: usize, capacity: u32) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut vendor = Command::new(bins.join("voxpool-fake-vendor"))
            .args([
                "--vendor",
                "openai",
                "--listen",
                "127.0.0.1:0",
                "--cap",
                &capacity.to_string(),
            ])
            .args([
                "--latency-ms",
                &faults.latency_ms.to_string(),
                "--latency-max-ms",
                &faults.latency_max_ms.to_string(),
            ])
            .args([
                "--p-server-error",
                &faults.p_server_error.to_string(),
                "--p-rate-limited",
                &faults.p_rate_limited.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn voxpool-fake-vendor");
        let vendor_url = stdout_first_line(&mut vendor, "voxpool-fake-vendor")
            .await
            .trim()
            .to_owned();
        assert!(
            vendor_url.starts_with("http://"),
            "unexpected fake vendor line {vendor_url:?}"
        );

        let mut toml =
            format!("[[pools]]\nid = \"{POOL}\"\nprovider = \"openai\"\nmodel = \"tts-1\"\n");
        for u in 0..2 {
            toml.push_str(&format!(
                "[[pools.upstreams]]\nid = \"acct-{u}\"\nbase_url = \"{vendor_url}\"\n"
            ));
            for k in (0..keys).filter(|k| k % 2 == u) {
                toml.push_str(&format!(
                    "[[pools.upstreams.keys]]\nid = \"k{k}\"\ncapacity = {capacity}\ncredential = {{ env = \"VOXCTL_E2E_KEY\" }}\n"
                ));
            }
        }
        // A pool whose key has no credential: synthesis cannot serve it.
        toml.push_str(&format!(
            "[[pools]]\nid = \"{UNSERVED_POOL}\"\nprovider = \"openai\"\n[[pools.upstreams]]\nid = \"acct-x\"\nbase_url = \"{vendor_url}\"\n[[pools.upstreams.keys]]\nid = \"k0\"\ncapacity = 1\ncredential = {{ env = \"VOXCTL_E2E_NEVER_SET\" }}\n"
        ));
        toml.push_str(CLIENT_TOKENS);
        toml.push_str("\n[scheduler]\nrate_limit_cooldown_ms = 200\nfailure_threshold = 5\nfailure_backoff_base_ms = 100\nfailure_backoff_max_ms = 500\nwait_poll_ms = 10\nrecovery_window_ms = 0\n");
        let config = dir.path().join("pools.toml");
        std::fs::write(&config, toml).expect("write config");

        let mut scheduler = Command::new(bins.join("voxpool-scheduler"))
            .arg("--config")
            .arg(&config)
            .args(["--listen", "127.0.0.1:0", "--store", "memory"])
            .env_remove("VOXPOOL_ADMIN_TOKEN")
            .env("VOXCTL_E2E_TOKEN_SYNTHESIS", SYNTHESIS_TOKEN)
            .env("VOXCTL_E2E_TOKEN_VOXCTL", CLIENT_TOKEN)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn voxpool-scheduler");
        let line = stdout_first_line(&mut scheduler, "voxpool-scheduler").await;
        let addr = line.rsplit(' ').next().expect("address").trim().to_owned();
        let scheduler_url = format!("http://{addr}");

        let mut synthesis = Command::new(bins.join("voxpool-synthesis"))
            .arg("--config")
            .arg(&config)
            .args([
                "--listen",
                "127.0.0.1:0",
                "--scheduler",
                &scheduler_url,
                "--catalog",
                "http://127.0.0.1:1",
            ])
            .env("VOXPOOL_LOG_FORMAT", "json")
            .env("RUST_LOG", "info")
            .env("VOXCTL_E2E_KEY", "sk-fake-e2e")
            .env("VOXCTL_E2E_TOKEN_VOXCTL", CLIENT_TOKEN)
            .env("VOXPOOL_CLIENT_TOKEN", SYNTHESIS_TOKEN)
            // Every call reaches the fake vendor (the cache would answer a rerun itself).
            .env("VOXPOOL_CACHE", "off")
            .env_remove("VOXCTL_E2E_NEVER_SET")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn voxpool-synthesis");
        let listen = stderr_line_with(&mut synthesis, "voxpool-synthesis", json_listen).await;
        Self {
            synthesis_url: format!("http://{listen}"),
            scheduler_url,
            vendor_url,
            _children: vec![vendor, scheduler, synthesis],
            _dir: dir,
        }
    }
}

/// A sealed snapshot of the stack's pool, as JSON (what a card stores).
pub fn snapshot_json() -> serde_json::Value {
    let json = format!(
        r#"{{"packId":"vp_e2e","packVersion":"1","provider":"openai","model":"tts-1","voiceId":"alloy",
            "ttsModelId":"{POOL}","tier":"STANDARD","frozenAt":"2026-01-01T00:00:00Z","digest":""}}"#
    );
    let snapshot = voxpool_domain::snapshot::Snapshot::from_json(&json)
        .expect("snapshot")
        .seal();
    snapshot.to_json_value()
}

/// Writes a manifest of `(id, text)` items with the stack's snapshot inline.
pub fn write_snapshot_manifest(dir: &Path, name: &str, items: &[(String, String)]) -> PathBuf {
    let snapshot = snapshot_json();
    let lines: Vec<String> = items
        .iter()
        .map(|(id, text)| {
            serde_json::json!({"id": id, "text": text, "snapshot": snapshot}).to_string()
        })
        .collect();
    let path = dir.join(name);
    std::fs::write(&path, lines.join("\n") + "\n").expect("write manifest");
    path
}
