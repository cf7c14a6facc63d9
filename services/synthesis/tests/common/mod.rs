//! Test harness: an in-process PoolScheduler (memory store) and an in-process Synthesis server
//! built with a chosen adapter registry, both on 127.0.0.1:0 and reached through real gRPC
//! clients. Snapshot helpers build sealed snapshots; `scripted` holds a programmable adapter.
#![allow(dead_code)]

pub mod clones;
pub mod scripted;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::{service::interceptor::InterceptedService, transport::Channel};
use voxpool_config::Config;
use voxpool_domain::{secret::Secret, snapshot::Snapshot};
use voxpool_proto::{
    scheduler::v1::{self as spb, pool_scheduler_client::PoolSchedulerClient},
    synthesis::v1::{self as pb, synthesis_client::SynthesisClient},
};
use voxpool_runtime::{
    auth::{AdminAuth, ClientToken},
    limits::ServerFlags,
};
use voxpool_synthesis::{
    adapters::registry::Registry,
    server::{self, Options},
};

/// Scheduler settings for tests: fast polling, no recovery window unless [`Opts`] asks.
pub const SCHEDULER_SETTINGS: &str =
    "\n[scheduler]\nwait_poll_ms = 10\nrate_limit_cooldown_ms = 60000\n";

/// Client tokens every stack runs with (their files are written by [`materialize`]): the
/// synthesis server presents `synthesis` to the scheduler, the tests' own clients `tests`.
pub const CLIENT_TOKENS: &str = "
[[client_tokens]]
name = \"synthesis\"
token = { file = \"{dir}/client-synthesis\" }
services = [\"scheduler\"]

[[client_tokens]]
name = \"tests\"
token = { file = \"{dir}/client-tests\" }
";

/// The token [`CLIENT_TOKENS`] gives `name` (what [`materialize`] writes).
pub fn client_token(name: &str) -> ClientToken {
    ClientToken::new(&Secret::new(format!("secret-client-{name}"))).expect("a header value")
}

/// A gRPC client type of the tests: their calls carry the `tests` client token.
pub type Authed = InterceptedService<Channel, ClientToken>;

/// Synthesis server options for a test.
pub struct Opts {
    /// Catalog URL (default: a closed port).
    pub catalog: String,
    /// Lease TTL (default 15 s).
    pub lease_ttl: Duration,
    /// Server limits (default: the binary's defaults).
    pub flags: ServerFlags,
    /// The scheduler's `recovery_window_ms` (default 0: the store starts fresh).
    pub recovery_window_ms: u64,
    /// When set, synthesis reaches the scheduler through a TCP proxy that stops passing the
    /// scheduler's bytes back while the gate holds `false` (answers get lost in transit).
    pub scheduler_gate: Option<tokio::sync::watch::Receiver<bool>>,
    /// Reference clips (default none: voices with clips are refused).
    pub references: Option<Arc<voxpool_synthesis::references::ReferenceClips>>,
    /// `--usage-store` (default none: no usage records written).
    pub usage_store: Option<String>,
}

impl Default for Opts {
    fn default() -> Self {
        Self {
            catalog: "http://127.0.0.1:1".into(),
            lease_ttl: Duration::from_secs(15),
            flags: ServerFlags::default(),
            recovery_window_ms: 0,
            scheduler_gate: None,
            references: None,
            usage_store: None,
        }
    }
}

/// A TCP proxy to `upstream` whose upstream-to-client direction pauses while `gate` is false.
pub async fn gated_proxy(
    upstream: SocketAddr,
    gate: tokio::sync::watch::Receiver<bool>,
) -> SocketAddr {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
    let addr = listener.local_addr().expect("proxy addr");
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                continue;
            };
            let (mut client_rd, mut client_wr) = client.into_split();
            let (mut server_rd, mut server_wr) = server.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut client_rd, &mut server_wr).await;
            });
            let mut gate = gate.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                loop {
                    let n = match server_rd.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if gate.wait_for(|open| *open).await.is_err()
                        || client_wr.write_all(&buf[..n]).await.is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A running scheduler + synthesis pair.
pub struct Stack {
    pub synthesis: SynthesisClient<Authed>,
    pub scheduler: PoolSchedulerClient<Authed>,
    pub synthesis_addr: SocketAddr,
    pub scheduler_addr: SocketAddr,
    pub config: Config,
    pub dir: tempfile::TempDir,
    /// The scheduler's store (to make it lose a pool, as a Redis restart would).
    pub store: std::sync::Arc<dyn voxpool_scheduler::store::LeaseStore>,
    shutdown: CancellationToken,
    scheduler_stop: CancellationToken,
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// `{dir}` in the TOML is replaced by a temp dir holding credential files `<key>` containing
/// `secret-<key>` for every `{dir}/<key>` reference.
fn materialize(toml: &str, dir: &std::path::Path) -> String {
    let text = toml.replace("{dir}", &dir.display().to_string());
    for part in text.split(&format!("{}/", dir.display())).skip(1) {
        let name: String = part
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .collect();
        std::fs::write(dir.join(&name), format!("secret-{name}\n")).expect("write credential file");
    }
    text
}

pub async fn start_scheduler(
    config: &Config,
    shutdown: CancellationToken,
) -> (
    SocketAddr,
    std::sync::Arc<dyn voxpool_scheduler::store::LeaseStore>,
) {
    let store = voxpool_scheduler::server::open_store("memory", config)
        .await
        .expect("memory store");
    let served = store.clone();
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind scheduler");
    let addr = listener.local_addr().expect("scheduler addr");
    let config = config.clone();
    tokio::spawn(async move {
        voxpool_scheduler::server::serve(
            listener,
            served,
            &config,
            AdminAuth::disabled(),
            shutdown,
        )
        .await
        .expect("scheduler serve");
    });
    (addr, store)
}

pub async fn client<T>(addr: SocketAddr, make: impl FnOnce(Channel) -> T) -> T {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("url")
        .connect()
        .await
        .expect("connect");
    make(channel)
}

impl Stack {
    /// Starts both servers for `toml` (pools + settings) with `registry`; the catalog URL points
    /// at `catalog` (default: a closed port).
    pub async fn start(toml: &str, registry: Registry) -> Self {
        Self::start_with_catalog(toml, registry, "http://127.0.0.1:1").await
    }

    pub async fn start_with_catalog(toml: &str, registry: Registry, catalog: &str) -> Self {
        let opts = Opts {
            catalog: catalog.to_owned(),
            ..Opts::default()
        };
        Self::start_with(toml, registry, opts).await
    }

    /// Like [`Stack::start`] with chosen options.
    pub async fn start_with(toml: &str, registry: Registry, opts: Opts) -> Self {
        let Opts {
            catalog,
            lease_ttl,
            flags,
            recovery_window_ms,
            scheduler_gate,
            references,
            usage_store,
        } = opts;
        let dir = tempfile::tempdir().expect("tempdir");
        let text = format!(
            "{}{SCHEDULER_SETTINGS}recovery_window_ms = {recovery_window_ms}\n{}",
            materialize(toml, dir.path()),
            materialize(CLIENT_TOKENS, dir.path())
        );
        let config = Config::from_toml_str(&text).expect("config parses");
        config
            .validate(voxpool_config::Credentials::Ignore)
            .expect("config valid");
        let shutdown = CancellationToken::new();
        let scheduler_stop = shutdown.child_token();
        let (scheduler_addr, store) = start_scheduler(&config, scheduler_stop.clone()).await;
        let reach_scheduler = match scheduler_gate {
            Some(gate) => gated_proxy(scheduler_addr, gate).await,
            None => scheduler_addr,
        };
        let options = Options {
            scheduler_url: format!("http://{reach_scheduler}"),
            catalog_url: catalog,
            lease_ttl,
            client_token: client_token("synthesis"),
            cache: None,
            references,
            admin: voxpool_runtime::auth::AdminAuth::disabled(),
            usage_store: usage_store.map(|url| {
                voxpool_synthesis::usage::Writer::start(&url, 1000, config.usage.on_store_down)
                    .expect("usage store url")
            }),
        };
        let core = server::build(&config, registry, &options).expect("build synthesis");
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind synthesis");
        let synthesis_addr = listener.local_addr().expect("synthesis addr");
        let token = shutdown.clone();
        tokio::spawn(async move {
            server::serve_with(listener, core, &flags, token)
                .await
                .expect("synthesis serve");
        });
        let synthesis = client(synthesis_addr, |c| {
            SynthesisClient::with_interceptor(c, client_token("tests"))
                .max_decoding_message_size(64 << 20)
        })
        .await;
        let scheduler = client(scheduler_addr, |c| {
            PoolSchedulerClient::with_interceptor(c, client_token("tests"))
        })
        .await;
        Self {
            synthesis,
            scheduler,
            synthesis_addr,
            scheduler_addr,
            config,
            dir,
            store,
            shutdown,
            scheduler_stop,
        }
    }

    /// Stops the scheduler only (synthesis keeps running).
    pub fn stop_scheduler(&self) {
        self.scheduler_stop.cancel();
    }

    pub async fn pool_status(&self, pool: &str) -> spb::PoolStatus {
        self.scheduler
            .clone()
            .get_pool_status(spb::GetPoolStatusRequest { pool: pool.into() })
            .await
            .expect("pool status")
            .into_inner()
    }

    /// Takes a slot of `pool` directly from the scheduler, as another caller would (e.g. to
    /// fill a pool of capacity 1); give it back with a Release of the returned lease.
    pub async fn hold_slot(&self, pool: &str) -> spb::Lease {
        self.scheduler
            .clone()
            .acquire(spb::AcquireRequest {
                pool: pool.into(),
                ..Default::default()
            })
            .await
            .expect("test holds a slot")
            .into_inner()
    }

    pub async fn in_flight(&self, pool: &str) -> i32 {
        self.pool_status(pool).await.in_flight
    }

    /// Waits (bounded, 5 s) until the pool has no lease in flight: releases spawned by drop
    /// guards are asynchronous.
    pub async fn wait_until_idle(&self, pool: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let n = self.in_flight(pool).await;
            if n == 0 {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "pool {pool} still has {n} leases in flight after 5 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits (bounded, 5 s) until the pool has exactly `left` leases in flight.
    pub async fn wait_until_idle_but(&self, left: i32, pool: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let n = self.in_flight(pool).await;
            if n == left {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "pool {pool} still has {n} leases in flight after 5 s (want {left})"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn key(&self, pool: &str, key_id: &str) -> spb::KeyStatus {
        self.pool_status(pool)
            .await
            .keys
            .into_iter()
            .find(|k| k.key_id == key_id)
            .expect("key in pool status")
    }

    pub async fn synthesize(
        &self,
        request: pb::SynthesizeRequest,
    ) -> Result<pb::SynthesizeResponse, tonic::Status> {
        self.synthesis
            .clone()
            .synthesize(request)
            .await
            .map(tonic::Response::into_inner)
    }
}

/// A sealed snapshot for `provider` on pool `pool` with `voice_id` and params JSON (`{}` = none).
pub fn snapshot(provider: &str, pool: &str, voice_id: &str, params_json: &str) -> Snapshot {
    let json = format!(
        r#"{{"packId":"vp_test","packVersion":"1","provider":"{provider}","model":"","voiceId":"{voice_id}",
            "ttsModelId":"{pool}","params":{params_json},"tier":"STANDARD","frozenAt":"2026-01-01T00:00:00Z","digest":""}}"#
    );
    Snapshot::from_json(&json).expect("test snapshot").seal()
}

/// The snapshot's JSON form, as a card stores it.
pub fn json_of(s: &Snapshot) -> String {
    serde_json::to_string(&s.to_json_value()).expect("json")
}

/// A request with the snapshot as JSON.
pub fn request(s: &Snapshot, text: &str) -> pb::SynthesizeRequest {
    pb::SynthesizeRequest {
        voice: Some(pb::synthesize_request::Voice::SnapshotJson(json_of(s))),
        text: text.into(),
        ..Default::default()
    }
}

/// A `[[pools]]` block of `provider` with upstreams `u0..` holding keys `k0..` of `capacity`;
/// non-espeak keys read credentials from `{dir}/<upstream>-<key>`.
pub fn pool_toml(
    pool: &str,
    provider: &str,
    upstreams: usize,
    keys_per: usize,
    capacity: u32,
) -> String {
    let mut t = format!("[[pools]]\nid = \"{pool}\"\nprovider = \"{provider}\"\nmodel = \"m1\"\n");
    for u in 0..upstreams {
        t.push_str(&format!("[[pools.upstreams]]\nid = \"u{u}\"\n"));
        for k in 0..keys_per {
            t.push_str(&format!(
                "[[pools.upstreams.keys]]\nid = \"k{k}\"\ncapacity = {capacity}\n"
            ));
            if provider != "espeak" {
                t.push_str(&format!(
                    "credential = {{ file = \"{{dir}}/u{u}-k{k}\" }}\n"
                ));
            }
        }
    }
    t
}

/// Asserts that `err` ended a stream whose vendor broke mid-chunk after `delivered` bytes had
/// gone out (ABORTED, `VENDOR_STREAM_BROKEN`, chunk 1); returns its ErrorInfo metadata.
pub fn assert_stream_broken(
    err: &tonic::Status,
    delivered: usize,
) -> std::collections::HashMap<String, String> {
    use tonic_types::StatusExt;
    assert_eq!(err.code(), tonic::Code::Aborted, "{err:?}");
    let info = err
        .get_error_details()
        .error_info()
        .cloned()
        .expect("error info");
    assert_eq!(info.reason, "VENDOR_STREAM_BROKEN");
    assert_eq!(info.metadata["delivered_bytes"], delivered.to_string());
    assert_eq!(info.metadata["failed_chunk"], "1");
    info.metadata
}
