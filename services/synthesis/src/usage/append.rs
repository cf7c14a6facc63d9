//! Appending usage records to the stream so that a Redis failover keeps them: on Sentinel and
//! Cluster stores an append counts once a replica holds it too (`WAIT`), while the primary has
//! one online; a single server waits for nobody.

use std::{sync::LazyLock, time::Duration};

use redis::Script;
use voxpool_domain::usage::{USAGE_FIELD, USAGE_STREAM};
use voxpool_redis::Conn;

/// Appends every record it is given (ARGV) to the stream (KEYS[1]), in order, and answers
/// how many replicas are online (for the `WAIT` of Sentinel and Cluster stores).
static APPEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
for i = 1, #ARGV do
  redis.call('XADD', KEYS[1], '*', 'r', ARGV[i])
end
local online = 0
for _ in string.gmatch(redis.call('INFO', 'replication'), 'state=online') do online = online + 1 end
return online
",
    )
});

/// [`APPEND`] for a single server, which waits for no replica: no `INFO` to build and read.
static APPEND_SINGLE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
for i = 1, #ARGV do
  redis.call('XADD', KEYS[1], '*', 'r', ARGV[i])
end
return 0
",
    )
});

/// How long an append waits for a replica to acknowledge it (`WAIT`).
pub(super) const REPLICA_ACK_TIMEOUT: Duration = Duration::from_millis(250);

/// Whether an append is held by enough replicas too ([`append`]).
pub(super) enum Replicated {
    Yes,
    /// Fewer replicas than wanted acknowledged it in time: why, for the log.
    Short(String),
}

/// Appends `records` (JSON) to the usage stream in one call and says whether a
/// replica holds them as well (module doc). Errors: the store's.
pub(super) async fn append(conn: &Conn, records: &[String]) -> redis::RedisResult<Replicated> {
    let replicas = conn.topology().default_replica_acks();
    if replicas == 0
        && let [record] = records
    {
        // One record on a single server (a Charge, awaited before its vendor call): a plain
        // XADD, which Redis runs in a fraction of a script call's time.
        let mut xadd = redis::cmd("XADD");
        xadd.arg(USAGE_STREAM).arg("*").arg(USAGE_FIELD).arg(record);
        conn.query(&xadd).await?;
        return Ok(Replicated::Yes);
    }
    let script = if replicas == 0 {
        &*APPEND_SINGLE
    } else {
        &*APPEND
    };
    let mut invocation = script.key(USAGE_STREAM);
    for record in records {
        invocation.arg(record);
    }
    let online = match conn.invoke(&invocation).await? {
        redis::Value::Int(n) => u32::try_from(n).unwrap_or(0),
        _ => 0,
    };
    let want = replicas.min(online);
    if want == 0 {
        return Ok(Replicated::Yes);
    }
    // The connection the script just ran on (a Sentinel store looks its primary up lazily,
    // so the generation is known only once the write went).
    let generation = conn.generation();
    let acked = conn
        .wait_replicas(USAGE_STREAM, want, REPLICA_ACK_TIMEOUT, generation)
        .await?;
    Ok(if acked >= i64::from(want) {
        Replicated::Yes
    } else {
        Replicated::Short(format!(
            "usage records acknowledged by {acked} of {want} replica(s) within {} ms",
            REPLICA_ACK_TIMEOUT.as_millis()
        ))
    })
}
