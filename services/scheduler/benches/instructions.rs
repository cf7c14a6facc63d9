//! Instruction counts of the scheduler's hot paths (`make bench`; gungraun over valgrind's
//! callgrind, so the figure is the same on a busy machine as on an idle one). Each benchmark
//! runs once, steady state: its setup (not counted) builds the service, runs the same call
//! once to warm every lazy initialization, and hands everything to the measured function,
//! which returns it so that tearing it down is not counted either.
//!
//! - `acquire_release_memory` / `acquire_release_redis`: one Acquire and one Release through
//!   the gRPC handlers (`SchedulerService`, decoded from and encoded to protobuf bytes: the
//!   request path without the HTTP/2 transport), on the memory store and on a private
//!   redis-server (the client's side of the round trip: the server is another process);
//! - `store_acquire_release_memory`: the same pair on the memory store alone;
//! - `sign` / `verify`: one lease id signed, one verified.
//!
//! The binary's allocator (mimalloc) and log subscriber (`info`) are installed, as in the
//! wall-time `scheduler` bench. The committed counts and the check against them:
//! docs/BENCHMARKS.md ("Instruction counts").

#![allow(missing_docs, reason = "gungraun's macros generate undocumented items")]

/// The allocator the `voxpool-scheduler` binary uses (see its `main.rs`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::{hint::black_box, sync::Arc};

use gungraun::{LibraryBenchmarkConfig, library_benchmark, library_benchmark_group, main};
use prost::Message;
use tokio_util::sync::CancellationToken;
use voxpool_config::Config;
use voxpool_domain::secret::Secret;
use voxpool_proto::scheduler::v1::{self as pb, pool_scheduler_server::PoolScheduler};
use voxpool_runtime::auth::AdminAuth;
use voxpool_scheduler::{
    metrics::SchedulerMetrics,
    model::{AcquireParams, AcquireResult, Lease, LeaseId, LeaseToken, PoolSpec},
    service::SchedulerService,
    signing::{LeaseSigner, SignedLease},
    store::{
        LeaseStore,
        memory::MemoryStore,
        redis::{RedisOptions, RedisStore},
    },
};
use voxpool_testkit::RedisServer;

/// A lease secret of the configured kind (the store-kept one is read once, then the same).
const SECRET: &str = "0123456789abcdef0123456789abcdef0123456789abcdef";

/// One pool of 10 keys of capacity 100: never full in these benchmarks.
fn config() -> Config {
    let mut t = String::from(
        "[[pools]]\nid = \"bench\"\nprovider = \"espeak\"\n[[pools.upstreams]]\nid = \"u\"\n",
    );
    for k in 0..10 {
        t.push_str(&format!(
            "[[pools.upstreams.keys]]\nid = \"k{k}\"\ncapacity = 100\n"
        ));
    }
    Config::from_toml_str(&t).expect("bench config")
}

/// What a benchmark runs on; returned by it so its drop is not counted.
struct Fixture {
    rt: tokio::runtime::Runtime,
    service: SchedulerService,
    store: Arc<dyn LeaseStore>,
    /// Keeps the Redis benchmark's server running.
    _redis: Option<RedisServer>,
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// The service over `store` (seeded), warmed by one Acquire+Release.
fn fixture(
    rt: tokio::runtime::Runtime,
    store: Arc<dyn LeaseStore>,
    redis: Option<RedisServer>,
) -> Fixture {
    voxpool_runtime::telemetry::init_logging();
    let config = config();
    let service = rt.block_on(async {
        store
            .seed(&PoolSpec::from_config(&config))
            .await
            .expect("seed");
        let signer = LeaseSigner::configured(Secret::new(SECRET), None);
        SchedulerService::new(
            store.clone(),
            &config,
            AdminAuth::disabled(),
            Arc::new(SchedulerMetrics::new()),
            Arc::new(signer),
            CancellationToken::new(),
        )
    });
    // Every key but k0 holds one lease for the whole run, so every grant measured goes to k0,
    // the one least-utilized key. Among ten tied keys the pick is random, and finding the key
    // it rolled walks the memory store's sorted map of keys: the store pair's count moved by
    // 5 % from run to run with the roll (13,030 to 13,726).
    rt.block_on(async {
        for k in 1..10 {
            let others = (0..10)
                .filter(|&o| o != k)
                .map(|o| format!("u/k{o}"))
                .collect();
            let held = store
                .acquire(&params(others, HOUR_MS))
                .await
                .expect("acquire");
            assert!(
                matches!(held, AcquireResult::Granted(ref l) if l.key_id == format!("u/k{k}")),
                "k{k} holds a lease"
            );
        }
    });
    let fixture = Fixture {
        rt,
        service,
        store,
        _redis: redis,
    };
    grpc_pair(&fixture);
    store_pair(&fixture);
    fixture
}

fn memory() -> Fixture {
    fixture(runtime(), Arc::new(MemoryStore::new()), None)
}

fn redis() -> Fixture {
    let server = RedisServer::start();
    let rt = runtime();
    let store: Arc<dyn LeaseStore> = rt.block_on(async {
        Arc::new(
            RedisStore::connect(
                &server.url(),
                RedisOptions {
                    // valgrind runs this process about 50 times slower than usual.
                    timeout: std::time::Duration::from_secs(30),
                    replica_acks: Some(0),
                    recovery_window_ms: 0,
                    ..RedisOptions::from_settings(&config().scheduler)
                },
            )
            .await
            .expect("redis"),
        )
    });
    fixture(rt, store, Some(server))
}

/// Acquire then Release through the handlers, each request decoded from its wire bytes and
/// each answer encoded to them, as tonic's codec does.
fn grpc_pair(f: &Fixture) -> usize {
    f.rt.block_on(async {
        let wire = pb::AcquireRequest {
            pool: "bench".into(),
            ..Default::default()
        }
        .encode_to_vec();
        let request = pb::AcquireRequest::decode(wire.as_slice()).expect("decode");
        let lease = f
            .service
            .acquire(tonic::Request::new(request))
            .await
            .expect("acquire")
            .into_inner();
        let mut sent = lease.encode_to_vec();
        let wire = pb::ReleaseRequest {
            lease_id: lease.lease_id,
            ..Default::default()
        }
        .encode_to_vec();
        let request = pb::ReleaseRequest::decode(wire.as_slice()).expect("decode");
        let released = f
            .service
            .release(tonic::Request::new(request))
            .await
            .expect("release")
            .into_inner();
        assert!(released.released, "the lease was live");
        sent.extend(released.encode_to_vec());
        sent.len()
    })
}

/// An hour, in ms: longer than any run, so the leases held from the setup never expire.
const HOUR_MS: u64 = 3_600_000;

/// An Acquire on the bench pool under a new token, not on the keys `exclude_keys`.
fn params(exclude_keys: Vec<String>, ttl_ms: u64) -> AcquireParams {
    AcquireParams {
        pool: "bench".into(),
        token: LeaseToken::random(),
        idempotent: false,
        exclude_keys,
        upstream_ids: vec![],
        ttl_ms,
        priority: Default::default(),
        tenant: String::new(),
        join_line: false,
        ticket_ttl_ms: 0,
        characters: 0,
    }
}

/// Acquire then Release on the store alone.
fn store_pair(f: &Fixture) {
    f.rt.block_on(async {
        let params = params(vec![], 30_000);
        let AcquireResult::Granted(lease) = f.store.acquire(&params).await.expect("acquire") else {
            panic!("the bench pool is never full");
        };
        assert!(f.store.release(&lease.id).await.expect("release"));
    });
}

#[library_benchmark]
#[bench::memory(setup = memory)]
#[bench::redis(setup = redis)]
fn acquire_release(f: Fixture) -> Fixture {
    black_box(grpc_pair(&f));
    f
}

#[library_benchmark]
#[bench::memory(setup = memory)]
fn store_acquire_release(f: Fixture) -> Fixture {
    store_pair(&f);
    f
}

/// A signer and a granted lease, and that lease's signed id.
fn signing() -> (LeaseSigner, Lease, String) {
    let signer = LeaseSigner::configured(Secret::new(SECRET), None);
    let lease = Lease {
        id: LeaseId {
            pool: "bench".into(),
            token: LeaseToken::random(),
        },
        key_id: "u/k0".into(),
        expires_at_ms: 1_764_640_030_123,
        granted_at_ms: 1_764_640_000_123,
        key_in_flight: 1,
        key_capacity: 100,
    };
    let id = signer
        .sign(&lease, lease.granted_at_ms)
        .expect("signer ready")
        .to_string();
    (signer, lease, id)
}

#[library_benchmark]
#[bench::lease_id(setup = signing)]
fn sign(s: (LeaseSigner, Lease, String)) -> (String, (LeaseSigner, Lease, String)) {
    let id =
        s.0.sign(black_box(&s.1), s.1.granted_at_ms)
            .expect("signer ready")
            .to_string();
    (black_box(id), s)
}

#[library_benchmark]
#[bench::lease_id(setup = signing)]
fn verify(s: (LeaseSigner, Lease, String)) -> (SignedLease, (LeaseSigner, Lease, String)) {
    let verified = s.0.verify(black_box(&s.2)).expect("issued here");
    (black_box(verified), s)
}

library_benchmark_group!(
    name = scheduler,
    benchmarks = [acquire_release, store_acquire_release, sign, verify]
);

main!(
    // The Redis benchmark starts a redis-server from PATH; nothing else of the environment
    // (RUST_LOG would change what the log subscriber does).
    config = LibraryBenchmarkConfig::default().pass_through_env("PATH"),
    library_benchmark_groups = scheduler
);
