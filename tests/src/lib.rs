//! Helpers for end-to-end tests: find the workspace's binaries, run them on `127.0.0.1:0`,
//! read their bound address, and pull the grpcurl walk-throughs out of the README and docs/.
//!
//! Client tokens are on, as in `make run`: [`start`] gives every service the variables that
//! `deploy/config/example.toml`'s `[[client_tokens]]` (and [`CLIENT_TOKENS_TOML`]) read, and
//! synthesis its own token to present to the scheduler; the tests' clients send
//! [`VOXCTL_TOKEN`] ([`synthesis_client`], [`scheduler_client`], [`BEARER`]).
//!
//! `cargo test --workspace` builds every package's binaries before any test runs, so the
//! binaries sit next to the test executable's parent directory (`target/debug`).

pub mod certs;
pub mod otlp;
pub mod speech;
pub mod voice;

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// `target/<profile>` of the running test (its executable lives in `<that>/deps`).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("target dir")
        .to_path_buf()
}

/// Path of a workspace binary; panics with a hint when it was not built.
pub fn binary(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} not built: run `cargo build --workspace --bins` (make test does)",
        path.display()
    );
    path
}

/// The token synthesis presents to the scheduler (`VOXPOOL_CLIENT_TOKEN_SYNTHESIS`), as
/// `make run` sets it.
pub const SYNTHESIS_TOKEN: &str = "dev-client-token-synthesis";
/// The token of voxctl, grpcurl and the tests' own clients (`VOXPOOL_CLIENT_TOKEN_VOXCTL`), as
/// `make run` sets it.
pub const VOXCTL_TOKEN: &str = "dev-client-token-voxctl";
/// The token the jobs service's workers present to synthesis (`VOXPOOL_CLIENT_TOKEN_JOBS`), as
/// `make run` sets it.
pub const JOBS_TOKEN: &str = "dev-client-token-jobs";
/// The `authorization` metadata value carrying [`VOXCTL_TOKEN`].
pub const BEARER: &str = "Bearer dev-client-token-voxctl";
/// The `[[client_tokens]]` of `deploy/config/example.toml`, for tests that write their own
/// config: append it and [`start`] provides the values.
pub const CLIENT_TOKENS_TOML: &str = r#"
[[client_tokens]]
name = "synthesis"
token = { env = "VOXPOOL_CLIENT_TOKEN_SYNTHESIS" }
services = ["scheduler"]

[[client_tokens]]
name = "voxctl"
token = { env = "VOXPOOL_CLIENT_TOKEN_VOXCTL" }
"#;

/// A gRPC client's transport that sends [`VOXCTL_TOKEN`] on every call.
pub type Authed = tonic::service::interceptor::InterceptedService<
    tonic::transport::Channel,
    voxpool_runtime::auth::ClientToken,
>;

/// The interceptor that sends [`VOXCTL_TOKEN`].
pub fn voxctl_token() -> voxpool_runtime::auth::ClientToken {
    voxpool_runtime::auth::ClientToken::new(&voxpool_domain::secret::Secret::new(VOXCTL_TOKEN))
        .expect("a header value")
}

/// A channel to `addr` (`host:port`), connected.
pub async fn connect(addr: &str) -> tonic::transport::Channel {
    tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .expect("url")
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"))
}

/// A Synthesis client for `addr` that authenticates as `voxctl`.
pub async fn synthesis_client(
    addr: &str,
) -> voxpool_proto::synthesis::v1::synthesis_client::SynthesisClient<Authed> {
    voxpool_proto::synthesis::v1::synthesis_client::SynthesisClient::with_interceptor(
        connect(addr).await,
        voxctl_token(),
    )
}

/// A PoolScheduler client for `addr` that authenticates as `voxctl`.
pub async fn scheduler_client(
    addr: &str,
) -> voxpool_proto::scheduler::v1::pool_scheduler_client::PoolSchedulerClient<Authed> {
    voxpool_proto::scheduler::v1::pool_scheduler_client::PoolSchedulerClient::with_interceptor(
        connect(addr).await,
        voxctl_token(),
    )
}

/// `command` with its logs at `RUST_LOG` = the value of `log_var` (default `error`) and no
/// OTLP export (a test's collector, if any, is set by the test itself afterwards).
pub fn quiet(mut command: Command, log_var: &str) -> Command {
    command.env(
        "RUST_LOG",
        std::env::var(log_var).unwrap_or_else(|_| "error".into()),
    );
    for var in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    ] {
        command.env_remove(var);
    }
    command
}

/// The blob store of the services a test process starts without naming one: a directory under
/// the system's temp dir, one per test process (so the catalog's seeded clips and synthesis
/// meet), never the user's data directory. It is removed once the test process has exited,
/// however it ends (a test binary runs no destructor of a static): a `sh` started with the
/// first call waits for this process and then removes it.
pub fn test_blob_store() -> String {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("voxpool-e2e-blobs-{}", std::process::id()));
        // No stdio: `make test` pipes its output, and a pipe held open would keep it waiting.
        let reaper = Command::new("sh")
            .arg("-c")
            .arg(r#"while kill -0 "$1" 2>/dev/null; do sleep 1; done; rm -rf "$2""#)
            .arg("reaper")
            .arg(std::process::id().to_string())
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        if let Err(e) = reaper {
            eprintln!("{} will be left behind: {e}", dir.display());
        }
        dir
    });
    format!("file://{}", dir.display())
}

/// Gives `command` the client token variables it does not set itself (module doc), a synthesis
/// without `--blob-store` `VOXPOOL_CACHE=off`, and a catalog or synthesis without a blob store
/// [`test_blob_store`].
fn with_client_tokens(command: &mut Command) {
    let set: Vec<std::ffi::OsString> = command.get_envs().map(|(k, _)| k.to_owned()).collect();
    let is_synthesis = Path::new(command.get_program())
        .file_name()
        .is_some_and(|n| n == "voxpool-synthesis");
    let mut vars = vec![
        ("VOXPOOL_CLIENT_TOKEN_SYNTHESIS", SYNTHESIS_TOKEN),
        ("VOXPOOL_CLIENT_TOKEN_VOXCTL", VOXCTL_TOKEN),
        ("VOXPOOL_CLIENT_TOKEN_JOBS", JOBS_TOKEN),
    ];
    // A synthesis test that does not name a blob store runs without the audio cache: the
    // default store is in the user's data directory, which a test must not write, and hits
    // carried over from an earlier run would hide vendor calls the test counts.
    let names_a_store = command.get_args().any(|a| a == "--blob-store");
    if is_synthesis {
        vars.push(("VOXPOOL_CLIENT_TOKEN", SYNTHESIS_TOKEN));
        if !names_a_store {
            vars.push(("VOXPOOL_CACHE", "off"));
        }
    }
    let is_catalog = Path::new(command.get_program())
        .file_name()
        .is_some_and(|n| n == "voxpool-catalog");
    let store = test_blob_store();
    if (is_synthesis || is_catalog) && !names_a_store {
        vars.push(("VOXPOOL_BLOB_STORE", store.as_str()));
    }
    for (name, value) in vars {
        if !set.iter().any(|k| k == name) {
            command.env(name, value);
        }
    }
}

/// A child process killed on drop, with the address it reported on its first stdout line.
pub struct Service {
    /// The process.
    pub child: Child,
    /// `host:port` it listens on.
    pub addr: String,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `command` (which must print `<name> listening on <addr>` as its first stdout line).
/// Its logs share the test run's terminal, so unless the command or the environment sets
/// `RUST_LOG`, only errors are shown (`VOXPOOL_TEST_LOG=info` shows everything): the services'
/// expected warnings (e.g. the example config's pools without credentials) are not news.
pub fn start(mut command: Command) -> Service {
    let chosen = command.get_envs().any(|(k, _)| k == "RUST_LOG");
    if !chosen && std::env::var_os("RUST_LOG").is_none() {
        command.env(
            "RUST_LOG",
            std::env::var("VOXPOOL_TEST_LOG").unwrap_or_else(|_| "error".into()),
        );
    }
    start_with_stderr(command, Stdio::inherit())
}

/// [`start`] with the child's stderr (its logs) sent to `stderr`, e.g. a file to inspect.
pub fn start_with_stderr(command: Command, stderr: Stdio) -> Service {
    start_reading(command, stderr, 0).0
}

/// [`start`] for a synthesis started with `--http-listen`: the service, and the base URL of
/// its OpenAI-compatible front (`http://ADDR/v1`, the second stdout line).
pub fn start_http(command: Command) -> (Service, String) {
    start_http_with_stderr(command, Stdio::inherit())
}

/// [`start_http`] with the child's stderr (its logs) sent to `stderr`, e.g. a file to inspect.
pub fn start_http_with_stderr(mut command: Command, stderr: Stdio) -> (Service, String) {
    if std::env::var_os("RUST_LOG").is_none() && !command.get_envs().any(|(k, _)| k == "RUST_LOG") {
        command.env(
            "RUST_LOG",
            std::env::var("VOXPOOL_TEST_LOG").unwrap_or_else(|_| "error".into()),
        );
    }
    let (service, lines) = start_reading(command, stderr, 1);
    let url = lines[0]
        .split(" http front on ")
        .nth(1)
        .unwrap_or_else(|| panic!("the second stdout line {:?} names no http front", lines[0]))
        .trim()
        .to_owned();
    (service, url)
}

/// Starts `command`, reads its address from the first stdout line and `extra` lines after it.
fn start_reading(mut command: Command, stderr: Stdio, extra: usize) -> (Service, Vec<String>) {
    with_client_tokens(&mut command);
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {command:?}: {e}"));
    let mut line = String::new();
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    stdout.read_line(&mut line).expect("read first line");
    let lines = (0..extra)
        .map(|_| {
            let mut more = String::new();
            stdout.read_line(&mut more).expect("read a stdout line");
            more
        })
        .collect();
    let addr = line
        .split(" listening on ")
        .nth(1)
        .unwrap_or_else(|| panic!("{command:?} printed {line:?} instead of its address"))
        .trim()
        .to_owned();
    (Service { child, addr }, lines)
}

/// The code block that follows `<!-- walkthrough:NAME … -->` in `doc` (a path from the
/// repository root: `README.md`, `docs/SCHEDULER.md`, …), as written (to run as one script when
/// its lines share shell variables). The marker must appear exactly once in that file.
pub fn walkthrough_script(doc: &str, name: &str) -> String {
    let text = std::fs::read_to_string(workspace_root().join(doc))
        .unwrap_or_else(|e| panic!("{doc}: {e}"));
    let marker = format!("<!-- walkthrough:{name}");
    let mut found = text.match_indices(&marker).map(|(at, _)| at);
    let start = found
        .next()
        .unwrap_or_else(|| panic!("{doc} has no {marker}"));
    assert!(found.next().is_none(), "{doc} has {marker} more than once");
    let rest = &text[start..];
    let block = &rest[rest
        .find("```sh\n")
        .expect("a ```sh block after the marker")
        + 6..];
    block[..block.find("```").expect("closing fence")].to_owned()
}

/// The shell commands of the code block that follows `<!-- walkthrough:NAME … -->` in `doc`,
/// with `\` line continuations joined and comments dropped.
pub fn walkthrough(doc: &str, name: &str) -> Vec<String> {
    let block = walkthrough_script(doc, name);
    let mut commands = Vec::new();
    let mut current = String::new();
    for line in block.lines() {
        let line = line.trim_end();
        if current.is_empty() && (line.trim_start().starts_with('#') || line.trim().is_empty()) {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
        } else {
            current.push_str(line);
            commands.push(std::mem::take(&mut current));
        }
    }
    commands
}

/// Whether the real grpcurl is on PATH.
pub fn grpcurl_available() -> bool {
    Command::new("grpcurl")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success())
}
