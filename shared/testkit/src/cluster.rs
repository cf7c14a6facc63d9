//! [`RedisCluster`]: a real Redis Cluster of `redis-server` processes on 127.0.0.1.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::Path,
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

mod view;

use self::view::{NodeEntry, cluster_problem, owns, parse_nodes};
use super::{
    redis_cli::{cli, info_field, run_cli},
    redis_nodes::{Kind, Nodes, POLL, retrying},
};

/// How long the cluster has to settle after `redis-cli --cluster create`, and a failover.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `redis-cli --cluster create` itself may take.
const CREATE_TIMEOUT: Duration = Duration::from_secs(60);

/// A Redis Cluster owned by a test (or by a whole test binary, see [`RedisCluster::shared`]).
///
/// `masters × (1 + replicas_per_master)` `redis-server` processes listen on 127.0.0.1 TCP
/// ports drawn at random from 10000..22768 (each with its cluster bus port, +10000, free too,
/// and never handed out twice in one process). Every node runs with `cluster-node-timeout
/// 1000` (failures are noticed within about a second), `cluster-replica-validity-factor 0`
/// (a replica may always be promoted), `cluster-allow-reads-when-down no`,
/// `cluster-require-full-coverage no` (a shard that is down leaves the other shards serving,
/// as voxpool's production advice has it), no persistence
/// and `repl-diskless-sync-delay 0`. The slots are spread by `redis-cli --cluster create`.
///
/// Lifecycle: the processes run under one `sh` supervisor whose stdin is a pipe from this
/// process; when the pipe closes (drop, or this process exiting or being killed) the
/// supervisor SIGKILLs every node and removes the directory, so even the never-dropped
/// [`RedisCluster::shared`] instance leaves nothing behind. [`RedisCluster::kill_node`] and
/// [`RedisCluster::pause_port`] act on single nodes for failover and stall tests.
///
/// The helpers that ask the cluster ([`RedisCluster::primary_port_for_key`],
/// [`RedisCluster::replica_ports_of`], the waits) only ask nodes that were neither killed nor
/// paused through this value, and panic when none is left.
pub struct RedisCluster {
    nodes: Nodes,
    /// The masters right after start, in port order of [`RedisCluster::ports`].
    masters: Vec<u16>,
    /// Last known slots of each port that was a master: at start, when killed or paused,
    /// and after [`RedisCluster::wait_promoted`].
    slots: Mutex<BTreeMap<u16, Vec<(u16, u16)>>>,
}

impl RedisCluster {
    /// Starts `masters` masters with `replicas_per_master` replicas each and waits (at most
    /// 30 s) until every node reports `cluster_state:ok`, knows every other node, every
    /// master has its replicas and every replica's link to its master is up.
    ///
    /// Panics (it is a test helper) when `masters < 3` (`redis-cli --cluster create` refuses
    /// fewer), when `redis-server`/`redis-cli` are not installed (packages `redis-server`,
    /// `redis-tools`), when a node does not start (with its log), when the create command
    /// fails (with its output) or when the cluster does not settle (with the failing node's
    /// `CLUSTER INFO` and `CLUSTER NODES`).
    pub fn start(masters: usize, replicas_per_master: usize) -> Self {
        assert!(
            masters >= 3,
            "a Redis Cluster needs at least 3 masters (redis-cli --cluster create), asked for {masters}"
        );
        let total = masters * (1 + replicas_per_master);
        let nodes = retrying("cluster", || {
            let mut nodes = Nodes::new("cluster", total, true);
            let servers: Vec<(u16, Kind)> = nodes
                .ports()
                .iter()
                .map(|&port| {
                    write_node_conf(nodes.dir(), port);
                    (port, Kind::Data)
                })
                .collect();
            nodes.start(&servers)?;
            Ok(nodes)
        });
        let addresses: Vec<String> = nodes
            .ports()
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        let replicas = replicas_per_master.to_string();
        let mut args = vec!["--cluster", "create"];
        args.extend(addresses.iter().map(String::as_str));
        args.extend(["--cluster-replicas", &replicas, "--cluster-yes"]);
        let created = run_cli(&args, CREATE_TIMEOUT)
            .unwrap_or_else(|e| panic!("redis-cli --cluster create failed: {e}"));
        assert!(
            created.contains("All 16384 slots covered"),
            "redis-cli --cluster create did not cover every slot:\n{created}"
        );
        let mut cluster = Self {
            nodes,
            masters: Vec::new(),
            slots: Mutex::default(),
        };
        let view = cluster.wait_settled(masters, replicas_per_master);
        let mut slots = BTreeMap::new();
        for entry in view.iter().filter(|e| !e.slots.is_empty()) {
            slots.insert(entry.port, entry.slots.clone());
        }
        cluster.masters = cluster
            .nodes
            .ports()
            .iter()
            .copied()
            .filter(|port| slots.contains_key(port))
            .collect();
        cluster.slots = Mutex::new(slots);
        cluster
    }

    /// One cluster (3 masters, 1 replica each) per test binary, started on first use and
    /// stopped when the process exits. Tests sharing it must not kill or pause its nodes.
    pub fn shared() -> &'static RedisCluster {
        static SHARED: std::sync::OnceLock<RedisCluster> = std::sync::OnceLock::new();
        SHARED.get_or_init(|| RedisCluster::start(3, 1))
    }

    /// Polls until the cluster is fully formed; returns the last node's `CLUSTER NODES`.
    fn wait_settled(&self, masters: usize, replicas: usize) -> Vec<NodeEntry> {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            match self.settled(masters, replicas) {
                Ok(view) => return view,
                Err(why) => assert!(
                    Instant::now() < deadline,
                    "the Redis Cluster did not settle within {SETTLE_TIMEOUT:?}: {why}"
                ),
            }
            std::thread::sleep(POLL);
        }
    }

    fn settled(&self, masters: usize, replicas: usize) -> Result<Vec<NodeEntry>, String> {
        let total = self.nodes.ports().len();
        let mut last = Vec::new();
        for &port in self.nodes.ports() {
            let info = cli(port, &["CLUSTER", "INFO"])
                .map_err(|e| format!("node {port}: CLUSTER INFO: {e}"))?;
            let raw = cli(port, &["CLUSTER", "NODES"])
                .map_err(|e| format!("node {port}: CLUSTER NODES: {e}"))?;
            let view = parse_nodes(&raw);
            let problem = cluster_problem(&info, &view, total, masters, replicas).or_else(|| {
                let me = view.iter().find(|e| e.has("myself"))?;
                if !me.has("slave") {
                    return None;
                }
                let replication = cli(port, &["INFO", "replication"]).unwrap_or_default();
                let link = info_field(&replication, "master_link_status");
                (link != Some("up")).then(|| {
                    format!(
                        "replica master_link_status is {link:?}; INFO replication:\n{replication}"
                    )
                })
            });
            if let Some(problem) = problem {
                return Err(format!(
                    "node {port}: {problem}\nits CLUSTER INFO:\n{info}\nits CLUSTER NODES:\n{raw}"
                ));
            }
            last = view;
        }
        Ok(last)
    }

    /// Seed URL for cluster clients: `redis-cluster://127.0.0.1:<p1>,127.0.0.1:<p2>,...`
    /// naming the masters as they were right after start (a client needs only one seed to be
    /// reachable, so the URL stays usable after a failover).
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .masters
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        format!("redis-cluster://{}", seeds.join(","))
    }

    /// Every node's port (masters and replicas, killed ones included), in start order.
    pub fn ports(&self) -> &[u16] {
        self.nodes.ports()
    }

    /// The directory holding each node's config (`<port>.conf`), log (`<port>.log`) and
    /// cluster state file (`nodes-<port>.conf`).
    pub fn dir(&self) -> &Path {
        self.nodes.dir()
    }

    /// The port of the master that owns `key`'s slot (`CLUSTER KEYSLOT`) in the cluster's
    /// current view (`CLUSTER NODES` of a live node). Right after a master died and before a
    /// replica took over, that is still the dead master.
    ///
    /// Panics when no live node answers or no node owns the slot.
    pub fn primary_port_for_key(&self, key: &str) -> u16 {
        let mut errors = String::new();
        for port in self.nodes.live_ports() {
            let slot = match cli(port, &["CLUSTER", "KEYSLOT", key]) {
                Ok(out) => out.trim().parse::<u16>().ok(),
                Err(e) => {
                    let _ = writeln!(errors, "{e}");
                    continue;
                }
            };
            let Some(slot) = slot else {
                let _ = writeln!(errors, "node {port}: CLUSTER KEYSLOT gave no number");
                continue;
            };
            match cli(port, &["CLUSTER", "NODES"]) {
                Ok(raw) => {
                    let view = parse_nodes(&raw);
                    if let Some(owner) = view.iter().find(|e| owns(&e.slots, slot, slot)) {
                        return owner.port;
                    }
                    let _ = writeln!(errors, "node {port}: nobody owns slot {slot}:\n{raw}");
                }
                Err(e) => {
                    let _ = writeln!(errors, "{e}");
                }
            }
        }
        panic!("no live node named the primary for key {key:?}:\n{errors}");
    }

    /// The replicas of the master on `primary_port` in the cluster's current view, minus
    /// nodes killed through [`RedisCluster::kill_node`], sorted.
    ///
    /// Panics when no live node answers or `primary_port` is not a node.
    pub fn replica_ports_of(&self, primary_port: u16) -> Vec<u16> {
        let (_, view) = self.any_view();
        let primary = view
            .iter()
            .find(|e| e.port == primary_port)
            .unwrap_or_else(|| panic!("port {primary_port} is not in the cluster's view"));
        let mut replicas: Vec<u16> = view
            .iter()
            .filter(|e| e.master.as_deref() == Some(primary.id.as_str()))
            .map(|e| e.port)
            .filter(|&port| !self.nodes.is_dead(port))
            .collect();
        replicas.sort_unstable();
        replicas
    }

    /// SIGKILLs the node on `port` (as a crash would) and remembers it is dead; its slots, if
    /// it was a master, are remembered for [`RedisCluster::wait_promoted`]. Idempotent.
    ///
    /// Panics when `port` is not a node of this cluster.
    pub fn kill_node(&self, port: u16) {
        if self.nodes.is_dead(port) {
            return;
        }
        if !self.nodes.is_paused(port) {
            self.remember_slots(port);
        }
        self.nodes.kill(port);
    }

    /// Freezes the node on `port` (SIGSTOP): its connections stay open and nothing answers,
    /// as in a stalled or partitioned node. Held longer than the node timeout (1 s), it makes
    /// the cluster fail it over. [`RedisCluster::resume_port`] undoes it.
    ///
    /// Panics when `port` is not a node or was killed.
    pub fn pause_port(&self, port: u16) {
        if !self.nodes.is_paused(port) {
            self.remember_slots(port);
        }
        self.nodes.pause(port);
    }

    /// Lets a [`RedisCluster::pause_port`]d node run again (SIGCONT).
    ///
    /// Panics when `port` is not a node or was killed.
    pub fn resume_port(&self, port: u16) {
        self.nodes.resume(port);
    }

    /// Waits (at most 30 s) until another node is master for every slot `old_primary_port`
    /// served when it was killed or paused, as seen by every live node, and every live node
    /// reports `cluster_state:ok`; returns the new master's port.
    ///
    /// Panics when `old_primary_port` was not a master, or on timeout (with the last
    /// discrepancy and that node's `CLUSTER INFO`).
    pub fn wait_promoted(&self, old_primary_port: u16) -> u16 {
        let slots = self
            .lock_slots()
            .get(&old_primary_port)
            .cloned()
            .unwrap_or_default();
        assert!(
            !slots.is_empty(),
            "port {old_primary_port} served no slots when last seen: not a primary"
        );
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            match self.promoted(old_primary_port, &slots) {
                Ok((port, now_serves)) => {
                    self.lock_slots().insert(port, now_serves);
                    return port;
                }
                Err(why) => assert!(
                    Instant::now() < deadline,
                    "no node took over the slots of {old_primary_port} within \
                     {SETTLE_TIMEOUT:?}: {why}"
                ),
            }
            std::thread::sleep(POLL);
        }
    }

    /// `Ok((new master, its slots))` when every live node agrees on one.
    fn promoted(&self, old: u16, slots: &[(u16, u16)]) -> Result<(u16, Vec<(u16, u16)>), String> {
        let live = self.nodes.live_ports();
        if live.is_empty() {
            return Err("no live node left to ask".to_owned());
        }
        let mut agreed: Option<(u16, Vec<(u16, u16)>)> = None;
        for port in live {
            let info = cli(port, &["CLUSTER", "INFO"])
                .map_err(|e| format!("node {port}: CLUSTER INFO: {e}"))?;
            if info_field(&info, "cluster_state") != Some("ok") {
                return Err(format!("node {port} is not ok; its CLUSTER INFO:\n{info}"));
            }
            let raw = cli(port, &["CLUSTER", "NODES"])
                .map_err(|e| format!("node {port}: CLUSTER NODES: {e}"))?;
            let view = parse_nodes(&raw);
            let owner = view.iter().find(|e| {
                e.port != old
                    && e.has("master")
                    && !e.failing()
                    && slots.iter().all(|&(a, b)| owns(&e.slots, a, b))
            });
            let Some(owner) = owner else {
                return Err(format!(
                    "node {port} sees no new master for the slots; its CLUSTER INFO:\n{info}\
                     its CLUSTER NODES:\n{raw}"
                ));
            };
            match &agreed {
                Some((seen, _)) if *seen != owner.port => {
                    return Err(format!(
                        "node {port} names {} as the new master, another node {seen}",
                        owner.port
                    ));
                }
                Some(_) => {}
                None => agreed = Some((owner.port, owner.slots.clone())),
            }
        }
        agreed.ok_or_else(|| "no live node answered".to_owned())
    }

    /// Records the slots `port` serves now, asking it first, then the other live nodes.
    fn remember_slots(&self, port: u16) {
        let mut asked = vec![port];
        asked.extend(self.nodes.live_ports().into_iter().filter(|&p| p != port));
        for p in asked {
            if let Ok(raw) = cli(p, &["CLUSTER", "NODES"])
                && let Some(entry) = parse_nodes(&raw).into_iter().find(|e| e.port == port)
            {
                self.lock_slots().insert(port, entry.slots);
                return;
            }
        }
    }

    /// `CLUSTER NODES` of the first live node that answers.
    fn any_view(&self) -> (u16, Vec<NodeEntry>) {
        let mut errors = String::new();
        for port in self.nodes.live_ports() {
            match cli(port, &["CLUSTER", "NODES"]) {
                Ok(raw) => return (port, parse_nodes(&raw)),
                Err(e) => {
                    let _ = writeln!(errors, "{e}");
                }
            }
        }
        panic!("no live cluster node answered CLUSTER NODES:\n{errors}");
    }

    fn lock_slots(&self) -> std::sync::MutexGuard<'_, BTreeMap<u16, Vec<(u16, u16)>>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Writes `<dir>/<port>.conf` for one cluster node.
fn write_node_conf(dir: &Path, port: u16) {
    let dir_s = dir.display();
    let conf = format!(
        "port {port}\n\
         bind 127.0.0.1\n\
         daemonize no\n\
         cluster-enabled yes\n\
         cluster-config-file \"{dir_s}/nodes-{port}.conf\"\n\
         cluster-node-timeout 1000\n\
         cluster-replica-validity-factor 0\n\
         cluster-allow-reads-when-down no\n\
         cluster-require-full-coverage no\n\
         save \"\"\n\
         appendonly no\n\
         repl-diskless-sync-delay 0\n\
         dir \"{dir_s}\"\n"
    );
    std::fs::write(dir.join(format!("{port}.conf")), conf).expect("write a redis node config");
}
