//! The real Redis topologies of `voxpool_testkit` come up, serve, and fail over.

use std::{
    process::Command,
    time::{Duration, Instant},
};

use voxpool_testkit::{RedisCluster, RedisSentinel};

/// `redis-cli -p <port> <args...>` on 127.0.0.1, trimmed stdout; panics when it fails.
fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("run redis-cli");
    assert!(
        out.status.success(),
        "redis-cli -p {port} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `commands` (one per line) sent to `port` over one connection; the answers, one per line.
fn cli_session(port: u16, commands: &str) -> String {
    use std::io::Write;
    let mut child = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run redis-cli");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(commands.as_bytes())
        .expect("write commands");
    let out = child.wait_with_output().expect("redis-cli output");
    assert!(out.status.success(), "redis-cli -p {port} failed");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Whether `port` answers PING within `limit` (a paused server accepts and never answers).
fn answers_ping(port: u16, limit: Duration) -> bool {
    let mut child = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "PING"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn redis-cli");
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("poll redis-cli") {
            let mut out = String::new();
            if let Some(mut stdout) = child.stdout.take() {
                let _ = std::io::Read::read_to_string(&mut stdout, &mut out);
            }
            return status.success() && out.trim() == "PONG";
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

#[test]
fn cluster_comes_up_serves_and_promotes_a_replica() {
    let started = Instant::now();
    let cluster = RedisCluster::start(3, 1);
    eprintln!("RedisCluster::start(3, 1) took {:?}", started.elapsed());

    assert_eq!(cluster.ports().len(), 6);
    let url = cluster.url();
    let seeds = url
        .strip_prefix("redis-cluster://")
        .expect("cluster URL scheme");
    assert_eq!(seeds.split(',').count(), 3, "{url}");

    let entry = cluster.ports()[0];
    assert_eq!(cli(entry, &["-c", "SET", "{a}x", "1"]), "OK");
    let primary = cluster.primary_port_for_key("{a}x");
    assert!(seeds.contains(&format!("127.0.0.1:{primary}")), "{url}");
    // Without -c: a wrong node would answer MOVED instead of the value.
    assert_eq!(cli(primary, &["GET", "{a}x"]), "1");
    // WAIT counts the replicas holding its own connection's writes (a fresh connection has
    // none, so it answers at once): write again and wait on one connection.
    assert_eq!(cli_session(primary, "SET {a}x 1\nWAIT 1 1000\n"), "OK\n1");

    let replicas = cluster.replica_ports_of(primary);
    assert_eq!(replicas.len(), 1, "{replicas:?}");

    cluster.kill_node(primary);
    let killed = Instant::now();
    let promoted = cluster.wait_promoted(primary);
    eprintln!(
        "cluster failover (kill {primary} -> {promoted} promoted) took {:?}",
        killed.elapsed()
    );
    assert!(
        replicas.contains(&promoted),
        "{promoted} not in {replicas:?}"
    );
    assert_eq!(cli(promoted, &["GET", "{a}x"]), "1");
    assert_eq!(cluster.primary_port_for_key("{a}x"), promoted);
    assert!(cli(promoted, &["ROLE"]).starts_with("master"));

    // A paused node stops answering; resumed, it answers again.
    let other = *cluster
        .ports()
        .iter()
        .find(|&&p| p != primary && p != promoted)
        .expect("a third node");
    cluster.pause_port(other);
    assert!(!answers_ping(other, Duration::from_millis(300)));
    cluster.resume_port(other);
    assert!(answers_ping(other, Duration::from_secs(5)));
}

#[test]
fn sentinel_comes_up_serves_and_fails_over() {
    let started = Instant::now();
    let sentinel = RedisSentinel::start();
    eprintln!("RedisSentinel::start() took {:?}", started.elapsed());

    assert_eq!(sentinel.master_name(), "voxpool");
    assert_eq!(sentinel.sentinel_ports().len(), 3);
    let expected_url = format!(
        "redis-sentinel://{}#voxpool",
        sentinel
            .sentinel_ports()
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    assert_eq!(sentinel.url(), expected_url);

    let [first, replica] = sentinel.data_ports() else {
        panic!("two data ports: {:?}", sentinel.data_ports());
    };
    let primary = sentinel.primary_port();
    assert_eq!(primary, *first);
    assert_eq!(cli_session(primary, "SET k v\nWAIT 1 1000\n"), "OK\n1");

    assert_eq!(sentinel.kill_primary(), primary);
    let killed = Instant::now();
    let promoted = sentinel.wait_failover(primary);
    eprintln!(
        "sentinel failover (kill {primary} -> {promoted} promoted) took {:?}",
        killed.elapsed()
    );
    assert_eq!(promoted, *replica);
    assert_eq!(sentinel.primary_port(), promoted);
    assert_eq!(cli(promoted, &["GET", "k"]), "v");
    assert!(cli(promoted, &["ROLE"]).starts_with("master"));
}

#[test]
fn shared_topologies_are_one_per_process_and_serve() {
    let cluster = RedisCluster::shared();
    assert!(std::ptr::eq(cluster, RedisCluster::shared()));
    let port = cluster.primary_port_for_key("{shared}k");
    assert_eq!(cli(port, &["SET", "{shared}k", "1"]), "OK");
    assert_eq!(cli(cluster.ports()[0], &["-c", "GET", "{shared}k"]), "1");

    let sentinel = RedisSentinel::shared();
    assert!(std::ptr::eq(sentinel, RedisSentinel::shared()));
    assert_eq!(cli(sentinel.primary_port(), &["SET", "k", "1"]), "OK");
}
