//! The `redis-cli` runner of [`super::RedisCluster`] and [`super::RedisSentinel`]: it never
//! hangs on a stopped node and treats error replies as failures.

use std::{
    process::{Command, Stdio},
    time::Duration,
};

/// How long one `redis-cli` call may take before it is killed and counted as a failure.
pub(super) const CLI_TIMEOUT: Duration = Duration::from_secs(5);

/// `redis-cli -h 127.0.0.1 -p <port> <args...>` with [`CLI_TIMEOUT`]; see [`run_cli`].
pub(super) fn cli(port: u16, args: &[&str]) -> Result<String, String> {
    let port = port.to_string();
    let mut all = vec!["-h", "127.0.0.1", "-p", &port];
    all.extend_from_slice(args);
    run_cli(&all, CLI_TIMEOUT)
}

/// Runs `redis-cli <args...>`, killing it after `timeout` (a SIGSTOPped server accepts the
/// connection and then never answers). Returns stdout when it exits successfully and its
/// first line is not an error reply (`redis-cli` exits 0 on those); else a description.
pub(super) fn run_cli(args: &[&str], timeout: Duration) -> Result<String, String> {
    let child = Command::new("redis-cli")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn redis-cli: {e}"))?;
    let pid = child.id();
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = send.send(child.wait_with_output());
    });
    let output = match receive.recv_timeout(timeout) {
        Ok(output) => output.map_err(|e| format!("wait for redis-cli: {e}"))?,
        Err(_) => {
            let _ = Command::new("kill")
                .arg("-KILL")
                .arg(pid.to_string())
                .status();
            return Err(format!(
                "redis-cli {} timed out after {timeout:?}",
                args.join(" ")
            ));
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        return Err(format!(
            "redis-cli {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr),
            stdout
        ));
    }
    let first = stdout.lines().next().unwrap_or_default();
    let error_reply = [
        "ERR ",
        "CLUSTERDOWN ",
        "LOADING ",
        "MOVED ",
        "ASK ",
        "NOAUTH ",
        "BUSY ",
    ]
    .iter()
    .any(|prefix| first.starts_with(prefix));
    if error_reply {
        return Err(format!("redis-cli {}: {first}", args.join(" ")));
    }
    Ok(stdout)
}

/// The value of `field` in `INFO`-style `field:value` lines.
pub(super) fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.trim_end()
            .strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
    })
}
