//! Rule: real processes (redis-server, Sentinel, Cluster, PostgreSQL) and helpers for tests only.
//!
//! Only ever a dev-dependency, and without features, so a package's tests build the same
//! shared crates as its binaries. Modules: `cluster` ([`RedisCluster`]), `sentinel`
//! ([`RedisSentinel`]), `redis_nodes` (their process supervisor) and `redis_cli` (their
//! `redis-cli` runner, and [`free_ports`]); [`RedisServer`] and [`PostgresServer`] live in this
//! file.
//!
//! [`RedisServer`] starts a private `redis-server` on a unix socket in a temporary directory
//! (no port races, no persistence) and kills it on drop. Tests that need Redis call
//! [`RedisServer::start`]; a missing `redis-server` binary is an error naming the package,
//! never a silently skipped test.
//!
//! [`PostgresServer`] does the same for PostgreSQL: a throwaway cluster (`initdb`) in a
//! temporary directory, listening only on a unix socket there. [`PostgresServer::shared`]
//! starts one per test binary and [`PostgresServer::create_database`] gives each test its own
//! database on it.
//!
//! [`RedisCluster`] and [`RedisSentinel`] start real multi-process Redis topologies on
//! 127.0.0.1 TCP ports (a Redis Cluster of masters and replicas; a primary, a replica and
//! three sentinels) for client failover tests. Like [`PostgresServer`] they run under an `sh`
//! supervisor that kills every process when the test process goes away, so their `shared()`
//! instances leave nothing behind either. Single processes can be SIGKILLed (`kill_node`,
//! `kill_primary`) or frozen (`pause_port`/`resume_port`), and the bounded waits
//! (`wait_promoted`, `wait_failover`) return once the topology has recovered.

mod cluster;
mod redis_cli;
mod redis_nodes;
mod sentinel;

pub use cluster::RedisCluster;
pub use redis_nodes::free_ports;
pub use sentinel::RedisSentinel;

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
        let child = spawn_redis(dir.path(), &socket);
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
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "PONG");
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not answer PING within 10 s"
            );
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

    /// Freezes the server (SIGSTOP): connections stay open and nothing answers, as in a
    /// stalled or partitioned Redis. [`RedisServer::resume`] undoes it.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a [`RedisServer::pause`]d server run again (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, which: &str) {
        let status = Command::new("kill")
            .arg(which)
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {which} redis-server failed");
    }

    /// Drops every key (`FLUSHALL`), as an operator's mistake or a flushing script would.
    ///
    /// Panics when redis-cli fails.
    pub fn flushall(&self) {
        let out = Command::new("redis-cli")
            .arg("-s")
            .arg(&self.socket)
            .arg("FLUSHALL")
            .output()
            .expect("run redis-cli FLUSHALL");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "OK",
            "FLUSHALL failed"
        );
    }

    /// Kills the server (SIGKILL) and starts a new, empty one on the same socket: a Redis
    /// without persistence that crashed and was restarted by its supervisor.
    pub fn restart_empty(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(&self.socket);
        self.child = spawn_redis(self.dir.path(), &self.socket);
        self.wait_ready();
    }

    /// Stops the server as a crash would (SIGKILL), for unreachable-store tests.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `redis-server` on the unix socket `socket` only, without persistence, working in `dir`.
fn spawn_redis(dir: &Path, socket: &Path) -> Child {
    Command::new("redis-server")
        .args(["--port", "0", "--save", "", "--appendonly", "no"])
        .arg("--unixsocket")
        .arg(socket)
        .args(["--unixsocketperm", "700", "--dir"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn redis-server (install the Debian package redis-server)")
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // A paused server must be able to die.
        let _ = Command::new("kill")
            .arg("-CONT")
            .arg(self.child.id().to_string())
            .status();
        self.kill();
    }
}

/// A private PostgreSQL cluster owned by a test (or by a whole test binary, see
/// [`PostgresServer::shared`]).
///
/// The cluster lives in a temporary directory under `/tmp` (short enough for the unix socket
/// path, and traversable by the `postgres` user), listens on no TCP address, runs with
/// `fsync=off` (throwaway data) and trusts local connections. PostgreSQL refuses to run as
/// root, so when the test runs as root every server command runs as the `postgres` user
/// (`runuser -u postgres`) and the directory is handed to that user.
///
/// Lifecycle: `postgres` runs under a small `sh` supervisor whose stdin is a pipe from this
/// process. When the pipe closes (drop, or this process exiting or being killed) the supervisor
/// stops PostgreSQL (fast shutdown) and removes the directory, so even the never-dropped
/// [`PostgresServer::shared`] instance leaves nothing behind.
///
/// Binaries come from `$VOXPOOL_PG_BINDIR`, else the newest `/usr/lib/postgresql/<N>/bin`
/// (Debian/Ubuntu package `postgresql`), else `PATH`.
pub struct PostgresServer {
    supervisor: Child,
    stdin: Option<std::process::ChildStdin>,
    dir: PathBuf,
    bindir: PathBuf,
    port: u16,
    _tempdir: tempfile::TempDir,
}

/// Port number the cluster uses. Nothing listens on TCP: the number only names the socket
/// file (`<dir>/.s.PGSQL.<port>`), and every cluster has its own directory.
const PG_PORT: u16 = 5432;

/// The supervisor: starts postgres, waits for EOF on stdin, stops postgres, removes the dir.
/// `$1` bindir, `$2` cluster dir, `$3` port.
const PG_SUPERVISOR: &str = r#"
"$1/postgres" -D "$2/data" -k "$2" -p "$3" -c listen_addresses= -c fsync=off \
  -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 \
  >"$2/postgres.log" 2>&1 </dev/null &
pg=$!
cat >/dev/null
kill -INT "$pg" 2>/dev/null
wait "$pg"
rm -rf "$2"
"#;

impl PostgresServer {
    /// Starts a new cluster and waits until it accepts connections.
    ///
    /// Panics (it is a test helper) with the reason when PostgreSQL is not installed, `initdb`
    /// fails, or the server does not accept connections within 30 s.
    pub fn start() -> Self {
        let bindir = pg_bindir();
        let as_root = running_as_root();
        let tempdir = tempfile::Builder::new()
            .prefix("voxpool-pg-")
            .tempdir_in("/tmp")
            .expect("create temp dir for postgres");
        let dir = tempdir.path().to_path_buf();
        if as_root {
            let status = Command::new("chown")
                .arg("postgres:postgres")
                .arg(&dir)
                .status()
                .expect("run chown");
            assert!(
                status.success(),
                "chown postgres {} failed: is there a `postgres` user (package postgresql)?",
                dir.display()
            );
        }
        let initdb = pg_command(as_root, &bindir.join("initdb"))
            .arg("-D")
            .arg(dir.join("data"))
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ])
            .output()
            .expect("run initdb");
        assert!(
            initdb.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&initdb.stderr)
        );
        let mut supervisor = pg_command(as_root, Path::new("/bin/sh"))
            .arg("-c")
            .arg(PG_SUPERVISOR)
            .arg("voxpool-pg")
            .arg(&bindir)
            .arg(&dir)
            .arg(PG_PORT.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the postgres supervisor");
        let stdin = supervisor.stdin.take();
        let mut server = Self {
            supervisor,
            stdin,
            dir,
            bindir,
            port: PG_PORT,
            _tempdir: tempdir,
        };
        server.wait_ready();
        server
    }

    /// One cluster per test binary, started on first use and stopped when the process exits.
    pub fn shared() -> &'static PostgresServer {
        static SHARED: std::sync::OnceLock<PostgresServer> = std::sync::OnceLock::new();
        SHARED.get_or_init(PostgresServer::start)
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = Command::new(self.bindir.join("pg_isready"))
                .arg("-q")
                .arg("-h")
                .arg(&self.dir)
                .arg("-p")
                .arg(self.port.to_string())
                .args(["-U", "postgres"])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return;
            }
            let exited = self.supervisor.try_wait().ok().flatten().is_some();
            assert!(
                !exited && Instant::now() < deadline,
                "postgres did not accept connections within 30 s; its log:\n{}",
                std::fs::read_to_string(self.dir.join("postgres.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Creates a fresh, empty database and returns its connection URL (see [`Self::url`]).
    /// Names are unique within the process, so parallel tests never share a database.
    pub fn create_database(&self) -> String {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("t_{}_{n}", std::process::id());
        let out = Command::new(self.bindir.join("psql"))
            .args([
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-U",
                "postgres",
                "-d",
                "postgres",
            ])
            .arg("-h")
            .arg(&self.dir)
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-c")
            .arg(format!("CREATE DATABASE \"{name}\""))
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "CREATE DATABASE {name} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.url(&name)
    }

    /// Connection URL of `database` for sqlx / sea-orm / `--database`:
    /// `postgres://postgres@localhost/<database>?host=<socket dir>&port=<port>`.
    pub fn url(&self, database: &str) -> String {
        format!(
            "postgres://postgres@localhost/{database}?host={}&port={}",
            self.dir.display(),
            self.port
        )
    }

    /// The directory holding the cluster and its unix socket.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stops the server (fast shutdown) and waits for it; later connections fail. Used by
    /// unreachable-database tests. Idempotent.
    pub fn stop(&mut self) {
        drop(self.stdin.take());
        let _ = self.supervisor.wait();
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// `program` as the `postgres` user when running as root, else as is.
fn pg_command(as_root: bool, program: &Path) -> Command {
    if as_root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn pg_bindir() -> PathBuf {
    if let Some(dir) = std::env::var_os("VOXPOOL_PG_BINDIR") {
        return PathBuf::from(dir);
    }
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").exists().then_some((version, bin))
        })
        .max_by_key(|(version, _)| *version);
    if let Some((_, bin)) = newest {
        return bin;
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .find(|d| d.join("initdb").exists() && d.join("postgres").exists());
    on_path.unwrap_or_else(|| {
        panic!(
            "PostgreSQL server binaries not found: install the Debian package postgresql \
             (or set VOXPOOL_PG_BINDIR to the directory holding initdb and postgres)"
        )
    })
}
