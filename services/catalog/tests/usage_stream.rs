//! The usage consumer on a real redis-server: records read from the stream reach the ledger
//! once (malformed ones acknowledged and skipped), acknowledged entries are trimmed, and the
//! entries a killed consumer left pending are taken over and counted once, even those it had
//! already written to the ledger before it died; then its name is forgotten, while a consumer
//! that still owns entries keeps its name.

mod common;
mod usage;

use std::time::{Duration, Instant};

use redis::streams::StreamInfoConsumersReply;
use tokio_util::sync::CancellationToken;
use usage::{AT_MS, context, request, tenant_row};
use voxpool_catalog::{
    repo::PackRepository,
    usage::{
        Ledger, UsageStore,
        consumer::{self, ConsumerConfig, GROUP},
    },
};
use voxpool_domain::usage::{USAGE_FIELD, USAGE_STREAM, UsageEvent};
use voxpool_testkit::RedisServer;

fn config(name: &str) -> ConsumerConfig {
    ConsumerConfig {
        name: name.to_owned(),
        batch: 50,
        poll: Duration::from_millis(50),
        claim_idle: Duration::from_millis(300),
        grace: Duration::from_secs(600),
        ..ConsumerConfig::default()
    }
}

async fn redis_conn(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

async fn xadd(conn: &mut redis::aio::MultiplexedConnection, field: &str, value: &str) {
    let _: String = redis::cmd("XADD")
        .arg(USAGE_STREAM)
        .arg("*")
        .arg(field)
        .arg(value)
        .query_async(conn)
        .await
        .expect("xadd");
}

/// The group's consumers: name → pending entries.
async fn consumers(conn: &mut redis::aio::MultiplexedConnection) -> Vec<(String, usize)> {
    let reply: StreamInfoConsumersReply = redis::Cmd::xinfo_consumers(USAGE_STREAM, GROUP)
        .query_async(conn)
        .await
        .expect("xinfo consumers");
    reply
        .consumers
        .into_iter()
        .map(|c| (c.name, c.pending))
        .collect()
}

async fn xlen(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    redis::cmd("XLEN")
        .arg(USAGE_STREAM)
        .query_async(conn)
        .await
        .expect("xlen")
}

async fn write(conn: &mut redis::aio::MultiplexedConnection, events: &[UsageEvent]) {
    for e in events {
        xadd(conn, USAGE_FIELD, &serde_json::to_string(e).expect("json")).await;
    }
}

/// Polls the ledger until `done` holds (each poll is a query; the deadline only bounds a
/// failing test).
async fn until<F: AsyncFnMut() -> bool>(mut done: F, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_records_reach_the_ledger_once_and_acknowledged_entries_are_trimmed() {
    let redis = RedisServer::start();
    let (repo, _db) = common::repo(common::Backend::Sqlite).await;
    let store = UsageStore::new(repo.database().expect("open"));
    let mut conn = redis_conn(&redis).await;
    let mut events = Vec::new();
    for i in 0..40 {
        events.extend(request(&context(&format!("r{i}"), "acme", "p"), 10));
    }
    write(&mut conn, &events).await;
    write(&mut conn, &events[..10]).await; // a producer retrying: the same records again
    xadd(&mut conn, USAGE_FIELD, "{\"kind\":\"nonsense\u{1b}[31m\"}").await;
    xadd(&mut conn, "other", "x").await;
    // A field name that is not UTF-8: the redis client cannot type the read that holds it.
    let _: String = redis::cmd("XADD")
        .arg(USAGE_STREAM)
        .arg("*")
        .arg(&b"\xff\xfe"[..])
        .arg("x")
        .query_async(&mut conn)
        .await
        .expect("xadd");
    write(&mut conn, &request(&context("after", "acme", "p"), 10)).await;
    let stop = CancellationToken::new();
    tokio::spawn(consumer::run(
        redis.url(),
        Ledger::open(store.clone()),
        config("c1"),
        stop.clone(),
    ));
    until(
        async || {
            tenant_row(&store, "acme")
                .await
                .is_some_and(|r| r.requests == 41)
        },
        "41 requests, the one after the unreadable entry too",
    )
    .await;
    let row = tenant_row(&store, "acme").await.expect("row");
    assert_eq!((row.requests, row.characters), (41, 410));
    let pending = async |conn: &mut redis::aio::MultiplexedConnection| {
        let reply: redis::Value = redis::cmd("XPENDING")
            .arg(USAGE_STREAM)
            .arg(GROUP)
            .query_async(conn)
            .await
            .expect("xpending");
        match reply {
            redis::Value::Array(parts) => matches!(parts.first(), Some(redis::Value::Int(0))),
            _ => false,
        }
    };
    let mut c = conn.clone();
    until(
        async || pending(&mut c).await,
        "nothing pending, malformed entries too",
    )
    .await;
    let mut c = conn.clone();
    until(
        async || xlen(&mut c).await <= 1,
        "acknowledged entries trimmed",
    )
    .await;
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_consumers_pending_entries_are_taken_over_and_counted_once() {
    let redis = RedisServer::start();
    let (repo, _db) = common::repo(common::Backend::Sqlite).await;
    let store = UsageStore::new(repo.database().expect("open"));
    let mut conn = redis_conn(&redis).await;
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(USAGE_STREAM)
        .arg(GROUP)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut conn)
        .await
        .expect("group");
    let mut events = Vec::new();
    for i in 0..30 {
        events.extend(request(&context(&format!("r{i}"), "globex", "p"), 7));
    }
    write(&mut conn, &events).await;
    // The consumer that dies: it reads everything, commits the first half to the ledger,
    // and is killed before acknowledging anything.
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(GROUP)
        .arg("dead")
        .arg("COUNT")
        .arg(1000)
        .arg("STREAMS")
        .arg(USAGE_STREAM)
        .arg(">")
        .query_async(&mut conn)
        .await
        .expect("read as the dead consumer");
    store
        .apply(&events[..75], AT_MS)
        .await
        .expect("the dead consumer's commit");
    let stop = CancellationToken::new();
    tokio::spawn(consumer::run(
        redis.url(),
        Ledger::open(store.clone()),
        config("survivor"),
        stop.clone(),
    ));
    until(
        async || {
            tenant_row(&store, "globex")
                .await
                .is_some_and(|r| r.requests == 30)
        },
        "30 requests",
    )
    .await;
    let row = tenant_row(&store, "globex").await.expect("row");
    assert_eq!(
        (row.requests, row.characters, row.failed_attempts),
        (30, 210, 30)
    );
    let mut c = conn.clone();
    until(
        async || xlen(&mut c).await <= 1,
        "the taken-over entries acknowledged and trimmed",
    )
    .await;
    // The dead consumer, silent past the claim idle time and owning nothing now, is forgotten.
    let mut c = conn.clone();
    until(
        async || {
            consumers(&mut c)
                .await
                .iter()
                .all(|(name, _)| name != "dead")
        },
        "the dead consumer's name removed from the group",
    )
    .await;
    let names: Vec<String> = consumers(&mut conn)
        .await
        .into_iter()
        .map(|c| c.0)
        .collect();
    assert_eq!(names, ["survivor"]);
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_silent_consumers_owning_no_entry_are_forgotten() {
    let redis = RedisServer::start();
    let mut conn = redis_conn(&redis).await;
    let _: () = redis::Cmd::xgroup_create_mkstream(USAGE_STREAM, GROUP, "0")
        .query_async(&mut conn)
        .await
        .expect("group");
    write(&mut conn, &request(&context("r", "acme", "p"), 5)).await;
    // holder reads every entry and never acknowledges them; ghost and me read nothing.
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(GROUP)
        .arg("holder")
        .arg("STREAMS")
        .arg(USAGE_STREAM)
        .arg(">")
        .query_async(&mut conn)
        .await
        .expect("read as holder");
    for name in ["ghost", "me"] {
        let _: i64 = redis::cmd("XGROUP")
            .arg("CREATECONSUMER")
            .arg(USAGE_STREAM)
            .arg(GROUP)
            .arg(name)
            .query_async(&mut conn)
            .await
            .expect("create consumer");
    }
    let store = voxpool_redis::Conn::connect(&redis.url(), Duration::from_secs(5))
        .await
        .expect("connect");
    let mut removed = Vec::new();
    until(
        async || {
            removed.extend(
                consumer::forget_idle(&store, Duration::from_millis(1), "me")
                    .await
                    .expect("forget"),
            );
            !removed.is_empty()
        },
        "the ghost forgotten",
    )
    .await;
    assert_eq!(removed, ["ghost"]);
    let mut left = consumers(&mut conn).await;
    left.sort();
    assert_eq!(
        left,
        [("holder".to_owned(), 5), ("me".to_owned(), 0)],
        "holder owns its 5 entries, me is the caller"
    );
}
