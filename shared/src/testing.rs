//! Test helpers that run real servers (feature `testing`).
//!
//! [`RedisServer`] starts a private `redis-server` on a unix socket in a temporary directory
//! (no port races, no persistence) and kills it on drop. Tests that need Redis call
//! [`RedisServer::start`]; a missing `redis-server` binary is an error naming the package,
//! never a silently skipped test.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// A running `redis-server` owned by a test.
pub struct RedisServer {
    child: Child,
    dir: tempfile::TempDir,
    socket: PathBuf,
}

impl RedisServer {
    /// Starts `redis-server` listening only on a unix socket and waits until it answers PING.
    ///
    /// Panics (it is a test helper) when redis-server is not installed or does not come up
    /// within 10 s.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("create temp dir for redis");
        let socket = dir.path().join("redis.sock");
        let child = Command::new("redis-server")
            .args(["--port", "0", "--save", "", "--appendonly", "no"])
            .arg("--unixsocket")
            .arg(&socket)
            .args(["--unixsocketperm", "700", "--dir"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server (install the Debian package redis-server)");
        let server = Self { child, dir, socket };
        server.wait_ready();
        server
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let ok = Command::new("redis-cli")
                .arg("-s")
                .arg(&self.socket)
                .arg("PING")
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "PONG")
                .unwrap_or(false);
            if ok {
                return;
            }
            assert!(Instant::now() < deadline, "redis-server did not answer PING within 10 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Connection URL for the `redis` crate and for `--store`: `redis+unix:///path?db=0`
    /// style is spelled `unix:///path/redis.sock`.
    pub fn url(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// The unix socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The server's working directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Stops the server as a crash would (SIGKILL), for unreachable-store tests.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
