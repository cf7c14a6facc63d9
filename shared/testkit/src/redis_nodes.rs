//! Plumbing shared by [`super::RedisCluster`] and [`super::RedisSentinel`]: TCP port choice,
//! the `sh` supervisor that owns every `redis-server` of one topology and per-process signals
//! (the `redis-cli` runner is in [`super::redis_cli`]).

use std::{
    collections::{BTreeMap, BTreeSet},
    io::{BufRead, BufReader, Write},
    path::Path,
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    sync::{Mutex, MutexGuard, PoisonError},
    time::{Duration, Instant},
};

use super::redis_cli::cli;

/// Lowest port handed out; ports are drawn from `PORT_LOW..PORT_HIGH`.
const PORT_LOW: u16 = 10000;
/// One past the highest port handed out. The cluster bus port is `port + BUS_OFFSET`, so every
/// port handed out (bus ports too) stays below Linux's default ephemeral range (32768–60999):
/// no outgoing connection's source port can take one, so a node restarted on its port always
/// gets it back and a walk-through's service binds the port it was given.
const PORT_HIGH: u16 = 22768;
/// Redis Cluster's bus port is the client port plus this.
pub(super) const BUS_OFFSET: u16 = 10000;
/// How long each `redis-server` has to answer PING after it was started.
const PING_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the bounded waits poll.
pub(super) const POLL: Duration = Duration::from_millis(50);

/// Ports (client and bus) handed out in this process, never handed out twice.
static TAKEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// The supervisor: for each `<port> <kind>` line on stdin starts one `redis-server` (config
/// file `<dir>/<port>.conf`, log `<dir>/<port>.log`, `--sentinel` when the kind is
/// `sentinel`) and prints `<port> <pid>`. On EOF it SIGKILLs every server (SIGCONT first, for
/// paused ones), reaps them and removes the directory. `$1` is the directory.
const SUPERVISOR: &str = r#"
dir=$1
pids=
while read -r port kind; do
  case $kind in
    sentinel) redis-server "$dir/$port.conf" --sentinel >"$dir/$port.log" 2>&1 </dev/null & ;;
    *) redis-server "$dir/$port.conf" >"$dir/$port.log" 2>&1 </dev/null & ;;
  esac
  pids="$pids $!"
  echo "$port $!"
done
kill -CONT $pids 2>/dev/null
kill -KILL $pids 2>/dev/null
wait
rm -rf "$dir"
"#;

/// What one process of a topology runs as.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A data node: `redis-server <conf>`.
    Data,
    /// A sentinel: `redis-server <conf> --sentinel`.
    Sentinel,
}

/// The `redis-server` processes of one topology, under one supervisor.
pub(super) struct Nodes {
    supervisor: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// Reserved ports, in order; [`Nodes::start`] runs a process on some of them.
    ports: Vec<u16>,
    pids: BTreeMap<u16, u32>,
    state: Mutex<Liveness>,
    dir: tempfile::TempDir,
}

/// Which processes this helper killed or stopped.
#[derive(Default)]
struct Liveness {
    dead: BTreeSet<u16>,
    paused: BTreeSet<u16>,
}

/// A server could not bind its port (another program took it after the check): worth
/// retrying the whole topology with other ports, see [`retrying`].
pub(super) struct PortTaken(String);

/// Runs `attempt` (which builds a topology) until it does not fail with [`PortTaken`], at
/// most 3 times; panics after that.
pub(super) fn retrying<T>(what: &str, mut attempt: impl FnMut() -> Result<T, PortTaken>) -> T {
    for n in 1..=3 {
        match attempt() {
            Ok(topology) => return topology,
            Err(PortTaken(why)) if n < 3 => {
                eprintln!("redis {what}: {why}; retrying with other ports");
            }
            Err(PortTaken(why)) => {
                panic!("redis {what} did not start after 3 attempts: {why}")
            }
        }
    }
    unreachable!("the last attempt returns or panics")
}

impl Nodes {
    /// Reserves `count` fresh ports (each with `port + BUS_OFFSET` free too when `bus`),
    /// creates the topology's directory and starts its supervisor, with no server yet: write
    /// `<dir>/<port>.conf` files, then call [`Nodes::start`].
    ///
    /// Panics when `redis-server` or `redis-cli` is missing.
    pub(super) fn new(what: &str, count: usize, bus: bool) -> Self {
        require_binaries();
        let ports = reserve_ports(count, bus);
        let dir = tempfile::Builder::new()
            .prefix(&format!("voxpool-redis-{what}-"))
            .tempdir()
            .expect("create temp dir for redis");
        let mut supervisor = Command::new("/bin/sh")
            .arg("-c")
            .arg(SUPERVISOR)
            .arg("voxpool-redis")
            .arg(dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the redis supervisor (/bin/sh)");
        let stdin = supervisor.stdin.take();
        let stdout = BufReader::new(
            supervisor
                .stdout
                .take()
                .expect("supervisor stdout is piped"),
        );
        Self {
            supervisor,
            stdin,
            stdout,
            ports,
            pids: BTreeMap::new(),
            state: Mutex::default(),
            dir,
        }
    }

    /// Starts one server per `(port, kind)` (its config written beforehand) and waits until
    /// each answers PING. A server that exits because its port is taken is a [`PortTaken`];
    /// any other failure panics with the server's log.
    pub(super) fn start(&mut self, servers: &[(u16, Kind)]) -> Result<(), PortTaken> {
        let stdin = self.stdin.as_mut().expect("the supervisor is running");
        for &(port, kind) in servers {
            assert!(
                self.ports.contains(&port),
                "port {port} was not reserved for this topology"
            );
            let kind = match kind {
                Kind::Data => "data",
                Kind::Sentinel => "sentinel",
            };
            writeln!(stdin, "{port} {kind}").expect("tell the redis supervisor to start a server");
        }
        stdin
            .flush()
            .expect("tell the redis supervisor to start servers");
        for _ in servers {
            let mut line = String::new();
            let read = self
                .stdout
                .read_line(&mut line)
                .expect("read the redis supervisor's output");
            assert!(read > 0, "the redis supervisor exited");
            let (port, pid) = line
                .trim()
                .split_once(' ')
                .and_then(|(port, pid)| Some((port.parse().ok()?, pid.parse().ok()?)))
                .unwrap_or_else(|| panic!("redis supervisor printed {line:?}"));
            self.pids.insert(port, pid);
        }
        let ports: Vec<u16> = servers.iter().map(|(port, _)| *port).collect();
        self.wait_pings(&ports)
    }

    /// Waits until every process on `ports` answers PING; a process that exited is a
    /// [`PortTaken`] when its log says so, else a panic showing the log.
    fn wait_pings(&self, ports: &[u16]) -> Result<(), PortTaken> {
        let deadline = Instant::now() + PING_TIMEOUT;
        let mut waiting = ports.to_vec();
        loop {
            let mut still = Vec::new();
            for &port in &waiting {
                if cli(port, &["PING"]).is_ok_and(|out| out.trim() == "PONG") {
                    continue;
                }
                if !process_alive(self.pid(port)) {
                    let log = self.log(port);
                    if log.contains("Address already in use") {
                        return Err(PortTaken(format!("port {port} was taken")));
                    }
                    panic!("redis-server on port {port} exited at startup; its log:\n{log}");
                }
                still.push(port);
            }
            waiting = still;
            let Some(&first) = waiting.first() else {
                return Ok(());
            };
            assert!(
                Instant::now() < deadline,
                "redis-server on port {first} did not answer PING within {PING_TIMEOUT:?}; \
                 its log:\n{}",
                self.log(first)
            );
            std::thread::sleep(POLL);
        }
    }

    /// Every reserved port, in order.
    pub(super) fn ports(&self) -> &[u16] {
        &self.ports
    }

    /// The topology's directory (configs, logs, cluster state files).
    pub(super) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The log of the process on `port` (empty when unreadable).
    pub(super) fn log(&self, port: u16) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{port}.log"))).unwrap_or_default()
    }

    fn state(&self) -> MutexGuard<'_, Liveness> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn pid(&self, port: u16) -> u32 {
        *self
            .pids
            .get(&port)
            .unwrap_or_else(|| panic!("port {port} is not a running node of this topology"))
    }

    /// Whether [`Nodes::kill`] was called for `port`.
    pub(super) fn is_dead(&self, port: u16) -> bool {
        self.pid(port);
        self.state().dead.contains(&port)
    }

    /// Whether `port` is paused (SIGSTOP) right now.
    pub(super) fn is_paused(&self, port: u16) -> bool {
        self.pid(port);
        self.state().paused.contains(&port)
    }

    /// Started ports neither killed nor paused, in order: the ones worth asking.
    pub(super) fn live_ports(&self) -> Vec<u16> {
        let state = self.state();
        self.ports
            .iter()
            .copied()
            .filter(|p| self.pids.contains_key(p))
            .filter(|p| !state.dead.contains(p) && !state.paused.contains(p))
            .collect()
    }

    /// SIGKILLs the process on `port`. Idempotent.
    pub(super) fn kill(&self, port: u16) {
        let pid = self.pid(port);
        let mut state = self.state();
        if state.dead.insert(port) {
            signal(pid, "-KILL");
            state.paused.remove(&port);
        }
    }

    /// SIGSTOPs the process on `port`. Panics when it was killed.
    pub(super) fn pause(&self, port: u16) {
        let pid = self.pid(port);
        let mut state = self.state();
        assert!(!state.dead.contains(&port), "port {port} was killed");
        signal(pid, "-STOP");
        state.paused.insert(port);
    }

    /// SIGCONTs the process on `port`. Panics when it was killed.
    pub(super) fn resume(&self, port: u16) {
        let pid = self.pid(port);
        let mut state = self.state();
        assert!(!state.dead.contains(&port), "port {port} was killed");
        signal(pid, "-CONT");
        state.paused.remove(&port);
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        // EOF on its stdin makes the supervisor kill every server and remove the directory.
        drop(self.stdin.take());
        let _ = self.supervisor.wait();
    }
}

/// Panics naming the Debian packages when `redis-server` or `redis-cli` is missing.
fn require_binaries() {
    for (binary, package) in [
        ("redis-server", "redis-server"),
        ("redis-cli", "redis-tools"),
    ] {
        let found = Command::new(binary)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            found,
            "{binary} not found: install the Debian package {package}"
        );
    }
}

/// `count` TCP ports on 127.0.0.1 for services a test starts on fixed ports (a README
/// walk-through's): free now, never handed out before in this process, and below the ephemeral
/// range, so neither another test's listener on port 0 nor an outgoing connection takes them.
pub fn free_ports(count: usize) -> Vec<u16> {
    reserve_ports(count, false)
}

/// Picks `count` ports in `PORT_LOW..PORT_HIGH` that bind on 127.0.0.1 now (and whose
/// `port + BUS_OFFSET` does too when `bus`) and that this process never handed out before.
fn reserve_ports(count: usize, bus: bool) -> Vec<u16> {
    let mut taken = TAKEN.lock().unwrap_or_else(PoisonError::into_inner);
    let mut ports = Vec::with_capacity(count);
    let mut tries = 0u32;
    while ports.len() < count {
        tries += 1;
        assert!(
            tries < 100_000,
            "no free TCP ports left in {PORT_LOW}..{PORT_HIGH} on 127.0.0.1"
        );
        let span = u64::from(PORT_HIGH - PORT_LOW);
        let port = PORT_LOW + u16::try_from(random() % span).expect("port offset fits u16");
        let wanted = if bus {
            vec![port, port + BUS_OFFSET]
        } else {
            vec![port]
        };
        if wanted.iter().any(|p| taken.contains(p)) {
            continue;
        }
        if !wanted
            .iter()
            .all(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok())
        {
            continue;
        }
        taken.extend(wanted);
        ports.push(port);
    }
    ports
}

/// A random number from std's per-instance hasher keys (no `rand` dependency needed).
fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    if let Ok(now) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        hasher.write_u128(now.as_nanos());
    }
    hasher.finish()
}

/// Whether `pid` is running (a zombie, i.e. exited but not yet reaped, counts as dead).
fn process_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // `pid (comm) S ...`: the state follows the last `)`.
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

fn signal(pid: u32, which: &str) {
    let status = Command::new("kill")
        .arg(which)
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {which} {pid} failed");
}
