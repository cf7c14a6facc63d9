//! [`RedisSentinel`]: a primary, a replica and three Redis Sentinels on 127.0.0.1.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::Path,
    time::{Duration, Instant},
};

use super::{
    redis_cli::{cli, info_field},
    redis_nodes::{Kind, Nodes, POLL, retrying},
};

/// The name the sentinels monitor the primary under.
const MASTER_NAME: &str = "voxpool";
/// How long the topology has to settle after launch, and a failover.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A Sentinel-managed primary/replica pair owned by a test (or by a whole test binary, see
/// [`RedisSentinel::shared`]).
///
/// One primary, one replica (`replicaof` the primary) and three sentinels, all
/// `redis-server` processes on 127.0.0.1 TCP ports drawn at random from 10000..22768 (never
/// handed out twice in one process). The sentinels monitor the primary as `voxpool` with
/// quorum 2, `down-after-milliseconds 1000`, `failover-timeout 4000` and `parallel-syncs 1`;
/// their config files live (writable, as sentinels rewrite them) in the topology's directory.
/// Data nodes keep nothing on disk and sync with `repl-diskless-sync-delay 0`. The sentinels
/// start only once the replica is linked: a sentinel learns replicas from the primary's
/// `INFO`, asked on connecting and then only every 10 s.
///
/// Lifecycle: the processes run under one `sh` supervisor whose stdin is a pipe from this
/// process; when the pipe closes (drop, or this process exiting or being killed) the
/// supervisor SIGKILLs every process and removes the directory, so even the never-dropped
/// [`RedisSentinel::shared`] instance leaves nothing behind. [`RedisSentinel::kill_primary`]
/// and [`RedisSentinel::pause_port`] act on single processes for failover and stall tests.
///
/// The helpers that ask the sentinels only ask processes that were neither killed nor paused
/// through this value, and panic when none is left.
pub struct RedisSentinel {
    nodes: Nodes,
    /// `[primary, replica]` as started.
    data: Vec<u16>,
    sentinels: Vec<u16>,
}

impl RedisSentinel {
    /// Starts the primary, the replica and three sentinels, and waits (at most 30 s) until the
    /// replica's link to the primary is up and every sentinel sees the primary as `master`
    /// with the two other sentinels and at least one replica.
    ///
    /// Panics (it is a test helper) when `redis-server`/`redis-cli` are not installed
    /// (packages `redis-server`, `redis-tools`), when a process does not start (with its log)
    /// or when the topology does not settle (with what the failing process reported).
    pub fn start() -> Self {
        let topology = retrying("sentinel", || {
            let mut nodes = Nodes::new("sentinel", 5, false);
            let ports = nodes.ports().to_vec();
            let (primary, replica) = (ports[0], ports[1]);
            write_data_conf(nodes.dir(), primary, None);
            write_data_conf(nodes.dir(), replica, Some(primary));
            nodes.start(&[(primary, Kind::Data), (replica, Kind::Data)])?;
            // Sentinels find replicas in the primary's INFO, which they ask for on connecting
            // and then only every 10 s: start them once the replica is linked.
            wait_replica_link(replica);
            let sentinels: Vec<(u16, Kind)> = ports[2..]
                .iter()
                .map(|&port| {
                    write_sentinel_conf(nodes.dir(), port, primary);
                    (port, Kind::Sentinel)
                })
                .collect();
            nodes.start(&sentinels)?;
            Ok(Self {
                nodes,
                data: ports[..2].to_vec(),
                sentinels: ports[2..].to_vec(),
            })
        });
        topology.wait_settled();
        topology
    }

    /// One topology per test binary, started on first use and stopped when the process exits.
    /// Tests sharing it must not kill or pause its processes.
    pub fn shared() -> &'static RedisSentinel {
        static SHARED: std::sync::OnceLock<RedisSentinel> = std::sync::OnceLock::new();
        SHARED.get_or_init(RedisSentinel::start)
    }

    fn wait_settled(&self) {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            match self.settled() {
                Ok(()) => return,
                Err(why) => assert!(
                    Instant::now() < deadline,
                    "the Redis Sentinel topology did not settle within {SETTLE_TIMEOUT:?}: {why}"
                ),
            }
            std::thread::sleep(POLL);
        }
    }

    fn settled(&self) -> Result<(), String> {
        let (primary, replica) = (self.data[0], self.data[1]);
        replica_linked(replica)?;
        for &sentinel in &self.sentinels {
            let raw = cli(sentinel, &["SENTINEL", "master", MASTER_NAME])
                .map_err(|e| format!("sentinel {sentinel}: {e}"))?;
            let master = pairs(&raw);
            let number = |key: &str| master.get(key).and_then(|v| v.parse::<u64>().ok());
            let good = master.get("flags").map(String::as_str) == Some("master")
                && master.get("port").map(String::as_str) == Some(primary.to_string().as_str())
                && number("num-other-sentinels").is_some_and(|n| n >= 2)
                && number("num-slaves").is_some_and(|n| n >= 1);
            if !good {
                return Err(format!(
                    "sentinel {sentinel}: SENTINEL master {MASTER_NAME} is not yet a master \
                     with 2 other sentinels and a replica:\n{raw}"
                ));
            }
        }
        Ok(())
    }

    /// The name the sentinels monitor the primary under: `voxpool`.
    pub fn master_name(&self) -> &'static str {
        MASTER_NAME
    }

    /// URL for Sentinel clients:
    /// `redis-sentinel://127.0.0.1:<s1>,127.0.0.1:<s2>,127.0.0.1:<s3>#voxpool`.
    pub fn url(&self) -> String {
        let sentinels: Vec<String> = self
            .sentinels
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        format!("redis-sentinel://{}#{MASTER_NAME}", sentinels.join(","))
    }

    /// The three sentinels' ports.
    pub fn sentinel_ports(&self) -> &[u16] {
        &self.sentinels
    }

    /// The data nodes' ports as started: `[primary, replica]` (roles change on failover).
    pub fn data_ports(&self) -> &[u16] {
        &self.data
    }

    /// The directory holding each process's config (`<port>.conf`, rewritten by sentinels)
    /// and log (`<port>.log`).
    pub fn dir(&self) -> &Path {
        self.nodes.dir()
    }

    /// The current primary's port, as the first live sentinel that answers names it
    /// (`SENTINEL get-master-addr-by-name voxpool`).
    ///
    /// Panics when no live sentinel answers.
    pub fn primary_port(&self) -> u16 {
        let mut errors = String::new();
        for port in self.live_sentinels() {
            match primary_named_by(port) {
                Ok(primary) => return primary,
                Err(e) => {
                    let _ = writeln!(errors, "{e}");
                }
            }
        }
        panic!("no live sentinel named the primary:\n{errors}");
    }

    /// SIGKILLs the current primary (see [`RedisSentinel::primary_port`]) as a crash would and
    /// returns its port.
    pub fn kill_primary(&self) -> u16 {
        let primary = self.primary_port();
        self.nodes.kill(primary);
        primary
    }

    /// Waits (at most 30 s) until every live sentinel names the same primary other than
    /// `old_port` and that node answers `ROLE` as `master`; returns its port.
    ///
    /// Panics on timeout, with the last discrepancy.
    pub fn wait_failover(&self, old_port: u16) -> u16 {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            match self.failed_over(old_port) {
                Ok(port) => return port,
                Err(why) => assert!(
                    Instant::now() < deadline,
                    "the sentinels did not fail over from {old_port} within {SETTLE_TIMEOUT:?}: \
                     {why}"
                ),
            }
            std::thread::sleep(POLL);
        }
    }

    fn failed_over(&self, old: u16) -> Result<u16, String> {
        let mut agreed = None;
        for sentinel in self.live_sentinels() {
            let named = primary_named_by(sentinel)?;
            if named == old {
                return Err(format!("sentinel {sentinel} still names {old}"));
            }
            match agreed {
                Some(seen) if seen != named => {
                    return Err(format!(
                        "sentinel {sentinel} names {named}, another sentinel {seen}"
                    ));
                }
                _ => agreed = Some(named),
            }
        }
        let primary = agreed.ok_or_else(|| "no live sentinel left to ask".to_owned())?;
        let role = cli(primary, &["ROLE"]).map_err(|e| format!("new primary {primary}: {e}"))?;
        if role.lines().next() != Some("master") {
            return Err(format!("new primary {primary} answers ROLE with:\n{role}"));
        }
        Ok(primary)
    }

    /// Freezes the process on `port` (SIGSTOP): its connections stay open and nothing answers,
    /// as in a stalled or partitioned node. Held on the primary longer than
    /// `down-after-milliseconds` (1 s), it makes the sentinels fail over.
    /// [`RedisSentinel::resume_port`] undoes it.
    ///
    /// Panics when `port` is not part of this topology or was killed.
    pub fn pause_port(&self, port: u16) {
        self.nodes.pause(port);
    }

    /// Lets a [`RedisSentinel::pause_port`]d process run again (SIGCONT).
    ///
    /// Panics when `port` is not part of this topology or was killed.
    pub fn resume_port(&self, port: u16) {
        self.nodes.resume(port);
    }

    fn live_sentinels(&self) -> Vec<u16> {
        self.nodes
            .live_ports()
            .into_iter()
            .filter(|port| self.sentinels.contains(port))
            .collect()
    }
}

/// Waits (at most 30 s) until the replica on `port` reports `master_link_status:up`.
fn wait_replica_link(port: u16) {
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    while let Err(why) = replica_linked(port) {
        assert!(
            Instant::now() < deadline,
            "the replica did not link to the primary within {SETTLE_TIMEOUT:?}: {why}"
        );
        std::thread::sleep(POLL);
    }
}

/// `Ok` when the replica on `port` reports `master_link_status:up`.
fn replica_linked(port: u16) -> Result<(), String> {
    let replication =
        cli(port, &["INFO", "replication"]).map_err(|e| format!("replica {port}: {e}"))?;
    let link = info_field(&replication, "master_link_status");
    if link == Some("up") {
        return Ok(());
    }
    Err(format!(
        "replica {port}: master_link_status is {link:?}; INFO replication:\n{replication}"
    ))
}

/// The primary's port per `SENTINEL get-master-addr-by-name` on `sentinel`.
fn primary_named_by(sentinel: u16) -> Result<u16, String> {
    let out = cli(
        sentinel,
        &["SENTINEL", "get-master-addr-by-name", MASTER_NAME],
    )
    .map_err(|e| format!("sentinel {sentinel}: {e}"))?;
    out.lines()
        .nth(1)
        .and_then(|port| port.trim().parse().ok())
        .ok_or_else(|| format!("sentinel {sentinel}: get-master-addr-by-name gave {out:?}"))
}

/// Writes `<dir>/<port>.conf` for a data node, a replica of `primary` when given.
fn write_data_conf(dir: &Path, port: u16, primary: Option<u16>) {
    let mut conf = format!(
        "port {port}\n\
         bind 127.0.0.1\n\
         daemonize no\n\
         save \"\"\n\
         appendonly no\n\
         repl-diskless-sync-delay 0\n\
         dir \"{}\"\n",
        dir.display()
    );
    if let Some(primary) = primary {
        let _ = writeln!(conf, "replicaof 127.0.0.1 {primary}");
    }
    std::fs::write(dir.join(format!("{port}.conf")), conf).expect("write a redis node config");
}

/// Writes `<dir>/<port>.conf` for a sentinel monitoring `primary`.
fn write_sentinel_conf(dir: &Path, port: u16, primary: u16) {
    let conf = format!(
        "port {port}\n\
         bind 127.0.0.1\n\
         daemonize no\n\
         dir \"{}\"\n\
         sentinel monitor {MASTER_NAME} 127.0.0.1 {primary} 2\n\
         sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
         sentinel failover-timeout {MASTER_NAME} 4000\n\
         sentinel parallel-syncs {MASTER_NAME} 1\n",
        dir.display()
    );
    std::fs::write(dir.join(format!("{port}.conf")), conf).expect("write a sentinel config");
}

/// `redis-cli`'s flat rendering of a map reply (`key\nvalue\n...`) as a map.
fn pairs(raw: &str) -> BTreeMap<String, String> {
    let lines: Vec<&str> = raw.lines().collect();
    lines
        .chunks(2)
        .filter_map(|pair| match pair {
            [key, value] => Some(((*key).to_owned(), (*value).to_owned())),
            _ => None,
        })
        .collect()
}
