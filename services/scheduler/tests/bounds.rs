//! Invariant 10 of docs/ARCHITECTURE.md: no single caller keeps the scheduler from answering. Any number of waiters
//! leaves health, status, Release/Renew and other pools answerable; a stalled Redis answers
//! every caller, waiters included, UNAVAILABLE while it is still stalled; a request that is
//! not valid protobuf is INVALID_ARGUMENT, and so is a filter entry (`exclude_keys[i]`,
//! `upstream_ids[i]`) that is over-long or holds control characters.

mod common;

use std::time::Duration;

use common::{Backend, start_with};
use tonic::{Code, transport::Channel};
use tonic_types::StatusExt;
use voxpool_proto::scheduler::v1::{self as pb, pool_scheduler_client::PoolSchedulerClient};

/// Pool `a` (one key of capacity 1, to fill) and pool `b` (another pool that must stay served).
const POOLS: &str = "[[pools]]\nid = \"a\"\nprovider = \"espeak\"\n[[pools.upstreams]]\nid = \"u0\"\n[[pools.upstreams.keys]]\nid = \"k0\"\ncapacity = 1\n\
[[pools]]\nid = \"b\"\nprovider = \"espeak\"\n[[pools.upstreams]]\nid = \"u0\"\n[[pools.upstreams.keys]]\nid = \"k0\"\ncapacity = 5\n";

/// What a probe may take: far above an idle server's answer, far below a wait.
const PROBE: Duration = Duration::from_secs(1);

async fn channel(addr: std::net::SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .expect("url")
        .connect()
        .await
        .expect("connect")
}

fn probe<T>(message: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    r.set_timeout(PROBE);
    r
}

fn waiting_acquire(pool: &str) -> pb::AcquireRequest {
    pb::AcquireRequest {
        pool: pool.into(),
        wait_timeout_ms: 120_000,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_five_hundred_waiters_leave_health_status_release_and_other_pools_answerable() {
    // More waiters than --max-concurrent-requests (2048 by default) may hold at once.
    let h = start_with(Backend::Memory, POOLS, "max_waiters = 3000\n").await;
    let held = h.acquire("a").await.expect("fill pool a");
    let mut waiters = Vec::new();
    for _ in 0..25 {
        let client = PoolSchedulerClient::new(channel(h.addr).await);
        for _ in 0..100 {
            let mut c = client.clone();
            waiters.push(tokio::spawn(async move {
                c.acquire(waiting_acquire("a")).await
            }));
        }
    }
    h.wait_until("a", "2500 waiters queued", |s| s.waiters == 2500)
        .await;

    // A fresh connection, as a load balancer's probe or another synthesis replica would use.
    let fresh = channel(h.addr).await;
    let mut health = tonic_health::pb::health_client::HealthClient::new(fresh.clone());
    let serving = health
        .check(probe(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        }))
        .await
        .expect("health answers under 2500 waiters")
        .into_inner();
    assert_eq!(
        serving.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    let mut c = PoolSchedulerClient::new(fresh);
    let status = c
        .get_pool_status(probe(pb::GetPoolStatusRequest { pool: "a".into() }))
        .await
        .expect("status answers")
        .into_inner();
    assert_eq!(status.waiters, 2500);
    c.list_pools(probe(pb::ListPoolsRequest::default()))
        .await
        .expect("ListPools answers");
    let other = c
        .acquire(probe(pb::AcquireRequest {
            pool: "b".into(),
            ..Default::default()
        }))
        .await
        .expect("another pool is served")
        .into_inner();
    c.renew(probe(pb::RenewRequest {
        lease_id: other.lease_id.clone(),
        lease_ttl_ms: 0,
        ..Default::default()
    }))
    .await
    .expect("Renew answers");
    let released = c
        .release(probe(pb::ReleaseRequest {
            lease_id: other.lease_id,
            ..Default::default()
        }))
        .await
        .expect("Release answers")
        .into_inner();
    assert!(released.released);

    // The held slot goes to the head of the line; the rest keep waiting.
    let released = c
        .release(probe(pb::ReleaseRequest {
            lease_id: held.lease_id,
            ..Default::default()
        }))
        .await
        .expect("Release of pool a answers")
        .into_inner();
    assert!(released.released);
    h.wait_until("a", "the head was granted the slot", |s| {
        s.waiters == 2499 && s.in_flight == 1
    })
    .await;
    for w in waiters {
        w.abort();
    }
    h.wait_until("a", "every waiter left", |s| s.waiters == 0)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_redis_answers_every_caller_unavailable_while_it_is_still_stalled() {
    let h = start_with(Backend::Redis, POOLS, "store_timeout_ms = 1000\n").await;
    let held = h.acquire("a").await.expect("fill pool a");
    let client = PoolSchedulerClient::new(channel(h.addr).await);
    let mut waiters = Vec::new();
    for _ in 0..50 {
        let mut c = client.clone();
        waiters.push(tokio::spawn(async move {
            c.acquire(waiting_acquire("a")).await
        }));
    }
    h.wait_until("a", "50 waiters queued", |s| s.waiters == 50)
        .await;

    let redis = h.redis.as_ref().expect("redis backend");
    // Callers that arrive during the stall, each on its own connection: Acquires on another
    // pool, Releases.
    let mut arrivals = Vec::new();
    let mut fresh = Vec::new();
    for _ in 0..20 {
        fresh.push(PoolSchedulerClient::new(channel(h.addr).await));
    }
    redis.pause();
    let stalled_at = tokio::time::Instant::now();
    for (i, mut c) in fresh.into_iter().enumerate() {
        let lease_id = held.lease_id.clone();
        arrivals.push(tokio::spawn(async move {
            if i % 2 == 0 {
                c.acquire(waiting_acquire("b")).await.map(|_| ())
            } else {
                c.release(pb::ReleaseRequest {
                    lease_id,
                    ..Default::default()
                })
                .await
                .map(|_| ())
            }
        }));
    }
    let everyone = async {
        let mut slowest = Duration::ZERO;
        for w in waiters {
            let err = w
                .await
                .expect("waiter task")
                .expect_err("no grant while stalled");
            assert_eq!(err.code(), Code::Unavailable, "waiter: {err:?}");
            slowest = slowest.max(stalled_at.elapsed());
        }
        for a in arrivals {
            let err = a
                .await
                .expect("caller task")
                .expect_err("no answer from a stalled store");
            assert_eq!(err.code(), Code::Unavailable, "arrival: {err:?}");
            slowest = slowest.max(stalled_at.elapsed());
        }
        slowest
    };
    // The stall lasts 5 s: every caller must have its answer before it ends.
    let answered = tokio::time::timeout(Duration::from_secs(5), everyone).await;
    redis.resume();
    let slowest = answered.expect("every caller answered while redis was still stalled");
    println!(
        "slowest answer {}ms after the stall began (store timeout 1000ms)",
        slowest.as_millis()
    );
    h.wait_until("a", "waiters gone and the store back", |s| s.waiters == 0)
        .await;
}

/// An `AcquireRequest` whose `pool` (field 1) is raw bytes, to send invalid UTF-8.
#[derive(Clone, PartialEq, voxpool_proto::prost::Message)]
struct RawAcquire {
    #[prost(bytes = "vec", tag = "1")]
    pool: Vec<u8>,
}

#[tokio::test]
async fn invalid_utf8_in_a_string_field_is_invalid_argument() {
    let h = start_with(Backend::Memory, POOLS, "").await;
    let mut grpc = tonic::client::Grpc::new(channel(h.addr).await);
    grpc.ready().await.expect("ready");
    let err = grpc
        .unary::<RawAcquire, pb::Lease, _>(
            tonic::Request::new(RawAcquire {
                pool: vec![b'a', 0xff, 0xfe],
            }),
            http::uri::PathAndQuery::from_static("/voxpool.scheduler.v1.PoolScheduler/Acquire"),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .expect_err("invalid UTF-8 is refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("UTF-8"), "{}", err.message());
}

#[tokio::test]
async fn filter_entries_are_bounded_and_free_of_control_characters_like_every_caller_string() {
    let h = start_with(Backend::Memory, POOLS, "").await;
    let huge = "u0/".to_owned() + &"k".repeat(10 * 1024 * 1024);
    let with = |exclude: Vec<String>, upstreams: Vec<String>| pb::AcquireRequest {
        pool: "a".into(),
        exclude_keys: exclude,
        upstream_ids: upstreams,
        ..Default::default()
    };
    for (req, field, want) in [
        (
            with(vec!["u0/k9".into(), huge.clone()], vec![]),
            "exclude_keys[1]",
            "at most 129 characters",
        ),
        (
            with(vec!["u0/k0\nforged log line".into()], vec![]),
            "exclude_keys[0]",
            "control",
        ),
        (
            with(vec![], vec!["u0".into(), "u0\u{202e}".into()]),
            "upstream_ids[1]",
            "control",
        ),
        (
            with(vec![], vec![huge.clone()]),
            "upstream_ids[0]",
            "at most 129 characters",
        ),
    ] {
        let err = h.acquire_with(req).await.expect_err(field);
        assert_eq!(err.code(), Code::InvalidArgument, "{field}: {err:?}");
        let details = err.get_error_details();
        let violation = &details
            .bad_request()
            .expect("BadRequest detail")
            .field_violations[0];
        assert_eq!(violation.field, field);
        assert!(
            err.message().contains(field) && err.message().contains(want),
            "{field}: {}",
            err.message()
        );
        assert!(
            err.message().len() < 1024,
            "the entry is not echoed: {} bytes",
            err.message().len()
        );
    }
    // The longest key id a config can hold still passes (and, unknown, excludes nothing).
    let longest = format!("{}/{}", "u".repeat(64), "k".repeat(64));
    let lease = h
        .acquire_with(with(vec![longest], vec![]))
        .await
        .expect("a 129-character entry is accepted");
    assert!(h.release(&lease.lease_id).await);
}
