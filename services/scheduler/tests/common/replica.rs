//! A `voxpool-scheduler` process for tests that run the real binary (`processes.rs`,
//! `topologies.rs`): started on 127.0.0.1:0, its address read from its first stdout line,
//! killed on drop.
#![allow(dead_code)]

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
};

use std::time::{Duration, Instant};

use tonic::transport::Channel;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};
use voxpool_proto::scheduler::v1::pool_scheduler_client::PoolSchedulerClient;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_voxpool-scheduler");

/// A scheduler process, killed on drop.
pub struct Replica {
    /// The process.
    pub child: Child,
    /// `127.0.0.1:port` it listens on.
    pub addr: String,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where replicas log: nowhere, unless `VOXPOOL_TEST_REPLICA_LOG` names a file (appended to by
/// every replica: how to see what a replica did in a failed run).
fn replica_log() -> Stdio {
    std::env::var_os("VOXPOOL_TEST_REPLICA_LOG")
        .and_then(|path| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .ok()
        })
        .map_or_else(Stdio::null, Stdio::from)
}

/// Starts a replica with exactly `args` after `--config`.
pub fn spawn_args(config: &Path, args: &[&str]) -> Replica {
    let mut child = Command::new(BIN)
        .arg("--config")
        .arg(config)
        .args(args)
        .env("VOXPOOL_ADMIN_TOKEN", "processes-test-admin-token")
        .stdout(Stdio::piped())
        .stderr(replica_log())
        .spawn()
        .expect("spawn voxpool-scheduler");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("voxpool-scheduler listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    Replica { child, addr }
}

/// A client of `r`.
/// A scheduler client.
pub type SchedulerClient = PoolSchedulerClient<Channel>;

pub async fn client(r: &Replica) -> PoolSchedulerClient<Channel> {
    PoolSchedulerClient::connect(format!("http://{}", r.addr))
        .await
        .unwrap()
}

/// The health status `addr` reports for `""`.
pub async fn health(addr: &str) -> ServingStatus {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut h = HealthClient::new(channel);
    let r = h
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    ServingStatus::try_from(r.status).unwrap()
}

/// Polls health until it is `want` (a readiness signal, bounded to 15 s).
pub async fn wait_health(addr: &str, want: ServingStatus) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while health(addr).await != want {
        assert!(Instant::now() < deadline, "health never became {want:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
