//! The job store on Redis (any of the three topologies `voxpool-redis` reaches): every job's
//! record and items, the item streams, and the fleet-wide queues of jobs to work on, to
//! finalize and to expire. No replica keeps a job in memory that another could not read.
//!
//! Keys (prefix `P`, `--key-prefix`, default `vj`). One job's seven keys share the hash tag
//! `{job}`, so each script ([`lua`](self) `*.lua`, with `prelude.lua`) runs on one slot:
//! - `P:{J}` hash: the record ([`crate::model::JobRecord`]: its [`crate::model::JobSpec`],
//!   counts, times; priority and format as their wire numbers);
//! - `P:{J}:spec` hash: item id → `JobItemSpec` (protobuf bytes);
//! - `P:{J}:state` hash: item id → `Q R S F C`;
//! - `P:{J}:result` hash: item id → [`crate::model::ItemResult`] JSON;
//! - `P:{J}:order` list: item ids in submission order (paging);
//! - `P:{J}:items` stream with consumer group `workers`: one entry per item;
//! - `P:{J}:count` hash: `d:<id>` deliveries, `a:<id>` Synthesize calls.
//!
//! Fleet-wide: `P:active` zset (jobs with work: the workers' round), `P:tenant:<t>` zset
//! (ListJobs), `P:req:<sha256(tenant, request_id)>` (idempotency), `P:finalize` zset (ended
//! jobs whose summary is due, scored by when), `P:webhooks` zset (finalized jobs whose webhook
//! is due, scored by when), `P:ended` zset (ended jobs by expiry, for their blobs),
//! `P:pause:<hex t>` string (tenant `t`'s items wait for a spent budget until it expires).
//!
//! Invariants: an item's state and the job's counts change in one script, so they never
//! disagree; an item is taken from the stream (`XREADGROUP`) or reclaimed (`XAUTOCLAIM`) only
//! by a script that also checks its state, so an ended item is never run again; time comes
//! from Redis (`TIME`), never from a replica's clock.

mod items;
mod jobs;
mod listing;
mod pause;
mod queues;

use std::{collections::HashMap, time::Duration};

use redis::{Script, Value};
use voxpool_redis::{Conn, Topology};

pub use items::{Claimed, Taken};
pub use jobs::{Created, ItemRow, NotDeletable};
pub use listing::Cursor;

/// The consumer group of every item stream.
pub const GROUP: &str = "workers";

/// Why a store call failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Redis did not answer (down, failing over, timed out): retry.
    #[error("the job store does not answer ({0}); retry")]
    Unavailable(String),
    /// A job was written but fewer replicas than configured acknowledged it in time: it
    /// runs, but a failover now could lose it.
    #[error(
        "job jobs/{job} written but {acked} of {wanted} replicas acknowledged it within {waited:?}"
    )]
    NotReplicated {
        /// The job written.
        job: String,
        /// Replicas that acknowledged it.
        acked: i64,
        /// Replicas that must (`--replica-acks`).
        wanted: u32,
        /// How long the acknowledgement was awaited.
        waited: Duration,
    },
    /// Redis answered something the scripts never reply (a bug or a foreign key).
    #[error("the job store answered unexpectedly: {0}")]
    Protocol(String),
}

/// Result of a store call.
pub type StoreResult<T> = Result<T, StoreError>;

struct Scripts {
    create: Script,
    take: Script,
    claim: Script,
    finish: Script,
    cancel: Script,
    delete: Script,
    wait: Script,
}

impl Scripts {
    fn new() -> Self {
        let s = |body: &str| Script::new(&format!("{}\n{body}", include_str!("lua/prelude.lua")));
        Self {
            create: s(include_str!("lua/create.lua")),
            take: s(include_str!("lua/take.lua")),
            claim: s(include_str!("lua/claim.lua")),
            finish: s(include_str!("lua/finish.lua")),
            cancel: s(include_str!("lua/cancel.lua")),
            delete: s(include_str!("lua/delete.lua")),
            wait: s(include_str!("lua/wait.lua")),
        }
    }
}

/// The job store (module doc). Cheap to clone.
#[derive(Clone)]
pub struct JobStore {
    conn: Conn,
    prefix: String,
    scripts: std::sync::Arc<Scripts>,
    /// Replicas that must acknowledge a created job before CreateJob answers.
    replica_acks: u32,
    /// Kept on every key of an ended job (and its blobs).
    retention: Duration,
    /// The store's response timeout (a replica acknowledgement is awaited for half of it).
    timeout: Duration,
}

impl JobStore {
    /// Connects to `url` (a Redis URL of any topology). `replica_acks` `None` takes the
    /// topology's default (1 on Sentinel and Cluster, 0 on a single node). Errors: a one-line
    /// reason without credentials.
    pub async fn connect(
        url: &str,
        prefix: &str,
        replica_acks: Option<u32>,
        retention: Duration,
        timeout: Duration,
    ) -> Result<Self, String> {
        let conn = Conn::connect(url, timeout).await?;
        let replica_acks = replica_acks.unwrap_or_else(|| conn.topology().default_replica_acks());
        Ok(Self {
            conn,
            prefix: prefix.to_owned(),
            scripts: std::sync::Arc::new(Scripts::new()),
            replica_acks,
            retention,
            timeout,
        })
    }

    /// Checks a `--store` URL without connecting (what no retry can fix). Errors: one line.
    pub fn check_url(url: &str) -> Result<Topology, String> {
        Conn::check_url(url)
    }

    /// How long ended jobs are kept.
    pub fn retention(&self) -> Duration {
        self.retention
    }

    /// PING (health).
    pub async fn ping(&self) -> StoreResult<()> {
        self.conn.ping().await.map_err(map_err)
    }

    /// The seven keys of job `id`, in the scripts' order (`prelude.lua`).
    fn job_keys(&self, id: &str) -> [String; 7] {
        let p = &self.prefix;
        let base = format!("{p}:{{{id}}}");
        [
            base.clone(),
            format!("{base}:spec"),
            format!("{base}:state"),
            format!("{base}:result"),
            format!("{base}:order"),
            format!("{base}:items"),
            format!("{base}:count"),
        ]
    }

    fn global(&self, name: &str) -> String {
        format!("{}:{name}", self.prefix)
    }

    fn retention_ms(&self) -> u64 {
        u64::try_from(self.retention.as_millis()).unwrap_or(u64::MAX)
    }

    /// Runs `script` with job `id`'s keys and `args`.
    async fn run(&self, script: &Script, id: &str, args: &[&[u8]]) -> StoreResult<Vec<Value>> {
        let mut inv = script.prepare_invoke();
        for key in self.job_keys(id) {
            inv.key(key);
        }
        for arg in args {
            inv.arg(*arg);
        }
        items(self.conn.invoke(&inv).await.map_err(map_err)?)
    }

    async fn query(&self, cmd: &redis::Cmd) -> StoreResult<Value> {
        self.conn.query(cmd).await.map_err(map_err)
    }

    /// HGETALL of `key` as text.
    async fn hash(&self, key: &str) -> StoreResult<HashMap<String, String>> {
        let v = self.query(redis::cmd("HGETALL").arg(key)).await?;
        redis::from_redis_value(v).map_err(|e| StoreError::Protocol(e.to_string()))
    }
}

/// A Redis error as a [`StoreError`]: connection-class and failover errors are `Unavailable`.
fn map_err(e: redis::RedisError) -> StoreError {
    if voxpool_redis::is_unavailable(&e) {
        StoreError::Unavailable(format!("redis: {e}"))
    } else {
        StoreError::Protocol(format!("redis: {e}"))
    }
}

fn items(v: Value) -> StoreResult<Vec<Value>> {
    match v {
        Value::Array(items) => Ok(items),
        other => Err(StoreError::Protocol(format!(
            "expected an array, got {other:?}"
        ))),
    }
}

fn text(v: Option<&Value>) -> StoreResult<String> {
    match v {
        Some(Value::BulkString(b)) => Ok(String::from_utf8_lossy(b).into_owned()),
        Some(Value::SimpleString(s)) => Ok(s.clone()),
        Some(Value::Int(i)) => Ok(i.to_string()),
        Some(Value::Nil) | None => Ok(String::new()),
        other => Err(StoreError::Protocol(format!(
            "expected a string, got {other:?}"
        ))),
    }
}

fn bytes(v: Option<&Value>) -> StoreResult<Vec<u8>> {
    match v {
        Some(Value::BulkString(b)) => Ok(b.clone()),
        other => Err(StoreError::Protocol(format!(
            "expected bytes, got {other:?}"
        ))),
    }
}

fn int(v: Option<&Value>) -> StoreResult<i64> {
    match v {
        Some(Value::Int(i)) => Ok(*i),
        Some(Value::BulkString(b)) => String::from_utf8_lossy(b)
            .parse()
            .map_err(|_| StoreError::Protocol("expected an integer".into())),
        other => Err(StoreError::Protocol(format!(
            "expected an integer, got {other:?}"
        ))),
    }
}
