//! Redis lease store: sorted sets + Lua scripts, shared by every scheduler replica, on a
//! single node, a Sentinel-managed primary or a Redis Cluster ([`conn`]).
//!
//! Data model (one pool per hash slot; see `lua/prelude.lua` for the full key list): all of
//! pool P's keys carry the hash tag `{P}` (`vp:{P}:load`, `vp:{P}:leases`, ...; `vp` is
//! `scheduler.store_key_prefix`), so each script runs on one Redis Cluster slot and pools
//! spread over a cluster's shards by their names, while one pool's throughput is one shard's.
//! `vp:{P}:load` is a ZSET of the keys that may take leases scored by utilization (in-flight /
//! capacity): the pick reads its head and the number of keys tied there (ZRANGE + ZCOUNT,
//! O(log n)), then takes one of the ties at random, so 10 keys and 10,000 keys cost the same.
//! Exact counts live in a HASH; the lease ZSET is scored by expiry so each call reclaims a
//! bounded batch of expired leases.
//!
//! Why it is safe across replicas: every operation is one Lua script, which Redis runs
//! atomically and replicates whole; the grant re-checks `in_flight < capacity` on the exact
//! counts inside the same script that increments them (invariant 1 of docs/ARCHITECTURE.md); time is Redis `TIME` read
//! inside the script, so replica clock skew cannot shorten or lengthen a lease or cooldown
//! (invariant 6); leases of a crashed replica expire on that clock and are reclaimed by the
//! next call (invariant 3). Counts and leases change in the same script, so even a replica
//! that missed recent writes holds a consistent (older) state: never a negative count.
//!
//! Failover (invariant 1 across a Redis failover): replication is asynchronous, so a grant
//! the primary answered may be missing on the replica promoted after it dies, and that
//! replica would lease the slot again. With `scheduler.store_replica_acks` = N > 0 every grant
//! (and every lease re-registered during recovery) waits for N replicas to acknowledge it
//! (`WAIT`, at most `store_replica_ack_timeout_ms`) before Acquire answers; a grant fewer
//! replicas acknowledge is withdrawn and the caller gets UNAVAILABLE, to retry with its
//! idempotency key. N is capped by the replicas in sync with the primary at the grant (the
//! script counts them in `INFO replication`): a primary whose only replica just took over
//! from it (a cluster shard after a failover) keeps serving, since no replica exists that a
//! further failover could promote; operators who want grants refused then set Redis's own
//! `min-replicas-to-write`. A store that lost a pool entirely opens a recovery window
//! (`super` doc).
//!
//! The pool's line (`super` doc, "The line") lives in the same hash slot; a slot handed to a
//! ticket is announced by pub/sub to every replica ([`wake`]).
//!
//! Scripts run with EVALSHA and are re-loaded on NOSCRIPT (after a Redis restart or
//! failover) by `redis::Script`. Every call is bounded by the store timeout: an unreachable
//! or stalled Redis gives [`StoreError::Unavailable`], never a hang.
//!
//! Here: the connection, the scripts, running one bounded script call and the replica
//! acknowledgement wait. Each [`LeaseStore`] method's script call is in `calls`, the decoding
//! of the scripts' replies (and of Redis errors) in `reply`, the topologies in [`conn`], fill
//! locks (one key per content key, `<prefix>:fill:{<key>}`, `lua/fill.lua`) in `fill`.

mod acks;
mod budget;
mod calls;
/// The connection every topology is reached through (the `voxpool-redis` crate).
pub use voxpool_redis as conn;
mod fill;
mod reply;
mod wake;

use std::time::Duration;

use redis::{Script, Value};

use super::{LeaseStore, StoreError, StoreResult};
use crate::model::Lease;
use conn::{Conn, Topology};
use reply::map_err;

/// Every pool script's start: the calendar periods (`lua/calendar.lua`, shared with the budget
/// script), then the pool's keys and helpers.
const PRELUDE: &str = concat!(
    include_str!("lua/calendar.lua"),
    include_str!("lua/prelude.lua")
);

struct Scripts {
    acquire: Script,
    release: Script,
    renew: Script,
    report: Script,
    status: Script,
    seed: Script,
    admin: Script,
    waiting: Script,
    /// `lua/budget.lua` (after the calendar, without the pool prelude).
    budget: Script,
}

impl Scripts {
    /// The scripts; `count_replicas`: whether grants and budget reservations count the
    /// primary's online replicas (`COUNT_REPLICAS`, the first line of every script: an
    /// `INFO replication` each time), which only a store that waits for replica
    /// acknowledgements reads.
    fn new(count_replicas: bool) -> Self {
        let head = format!("local COUNT_REPLICAS = {count_replicas}\n");
        let s = |body: &str| Script::new(&format!("{head}{PRELUDE}\n{body}"));
        Self {
            budget: Script::new(&format!(
                "{head}{}{}",
                include_str!("lua/calendar.lua"),
                include_str!("lua/budget.lua")
            )),
            acquire: s(include_str!("lua/acquire.lua")),
            release: s(include_str!("lua/release.lua")),
            renew: s(include_str!("lua/renew.lua")),
            report: s(include_str!("lua/report.lua")),
            status: s(include_str!("lua/status.lua")),
            seed: s(include_str!("lua/seed.lua")),
            admin: s(include_str!("lua/admin.lua")),
            waiting: s(include_str!("lua/waiting.lua")),
        }
    }
}

/// How a [`RedisStore`] behaves (the `[scheduler]` settings it reads).
#[derive(Clone, Debug)]
pub struct RedisOptions {
    /// Connect and command timeout (`store_timeout_ms`).
    pub timeout: Duration,
    /// Most expired leases reclaimed per script (`reap_batch`).
    pub reap_batch: u32,
    /// Replicas that must acknowledge a grant (`store_replica_acks`); `None` = the
    /// topology's default (1 for Sentinel and Cluster, 0 for a single node).
    pub replica_acks: Option<u32>,
    /// How long a grant waits for them (`store_replica_ack_timeout_ms`).
    pub replica_ack_timeout: Duration,
    /// Recovery window opened when a pool is found absent (`recovery_window_ms`).
    pub recovery_window_ms: u64,
    /// Key prefix (`store_key_prefix`).
    pub key_prefix: String,
    /// Longest TTL of a lease re-registered during a recovery window
    /// (`default_lease_ttl_ms`).
    pub recovery_lease_ttl_ms: u64,
}

impl RedisOptions {
    /// The options the `[scheduler]` settings give.
    pub fn from_settings(s: &voxpool_config::SchedulerSettings) -> Self {
        Self {
            timeout: Duration::from_millis(s.store_timeout_ms),
            reap_batch: s.reap_batch,
            replica_acks: s.store_replica_acks,
            replica_ack_timeout: Duration::from_millis(s.store_replica_ack_timeout_ms),
            recovery_window_ms: s.recovery_window_ms,
            key_prefix: s.store_key_prefix.clone(),
            recovery_lease_ttl_ms: s.default_lease_ttl_ms,
        }
    }
}

/// The Redis [`LeaseStore`]. Cheap to clone (shares one connection).
#[derive(Clone)]
pub struct RedisStore {
    conn: Conn,
    scripts: std::sync::Arc<Scripts>,
    replica_acks: u32,
    acks: std::sync::Arc<acks::Acks>,
    options: RedisOptions,
    wake: std::sync::Arc<wake::Wake>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password: never print it.
        f.debug_struct("RedisStore")
            .field("topology", &self.conn.topology())
            .field("replica_acks", &self.replica_acks)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// How many Redis keys one pool has.
pub const POOL_KEYS: usize = 32;

/// The pool's Redis keys in the order the scripts expect (see `lua/prelude.lua`).
pub fn pool_keys(prefix: &str, pool: &str) -> [String; POOL_KEYS] {
    [
        "cap", "cfgcap", "inflight", "load", "leases", "lease", "cool", "coolwhy", "disabled",
        "fails", "clock", "recover", "batch", "share", "line", "tickets", "tickexp", "rounds",
        "handed", "arrivals", "ceil", "adapted", "adaptive", "lowered", "quota", "qused", "qstart",
        "probe", "reported", "granted", "reserved", "lres",
    ]
    .map(|suffix| {
        // Concatenated, not `format!`: every Acquire and Release names all of these, and the
        // formatting machinery cost about 1,400 instructions a key (40 % of a Redis pair).
        let mut key = String::with_capacity(prefix.len() + pool.len() + suffix.len() + 4);
        for part in [prefix, ":{", pool, "}:", suffix] {
            key.push_str(part);
        }
        key
    })
}

impl RedisStore {
    /// Connects to `url` (any form of [`conn`]) and checks the server answers.
    ///
    /// Errors: [`StoreError::Unavailable`] with a one-line reason naming no password when the
    /// URL is malformed or the store does not answer in time.
    pub async fn connect(url: &str, options: RedisOptions) -> StoreResult<Self> {
        let conn = Conn::connect(url, options.timeout)
            .await
            .map_err(StoreError::Unavailable)?;
        let source = conn
            .subscriber_source(url)
            .map_err(StoreError::Unavailable)?;
        let replica_acks = options
            .replica_acks
            .unwrap_or_else(|| conn.topology().default_replica_acks());
        let store = Self {
            wake: std::sync::Arc::new(wake::Wake::start(
                source,
                options.key_prefix.clone(),
                options.timeout,
            )),
            scripts: std::sync::Arc::new(Scripts::new(replica_acks > 0)),
            replica_acks,
            conn,
            acks: std::sync::Arc::default(),
            options,
        };
        store.ping().await?;
        Ok(store)
    }

    /// Which topology the store runs on.
    pub fn topology(&self) -> Topology {
        self.conn.topology()
    }

    /// Replica acknowledgements each grant waits for (0 = off).
    pub fn replica_acks(&self) -> u32 {
        self.replica_acks
    }

    fn keys(&self, pool: &str) -> [String; POOL_KEYS] {
        pool_keys(&self.options.key_prefix, pool)
    }

    /// Bounds `call` by the store timeout, mapping its errors.
    async fn bounded<T>(
        &self,
        what: &str,
        call: impl Future<Output = redis::RedisResult<T>>,
    ) -> StoreResult<T> {
        self.in_time(what, call).await?.map_err(map_err)
    }

    /// `call`'s output, or [`StoreError::Unavailable`] when the store timeout passes first.
    async fn in_time<T>(&self, what: &str, call: impl Future<Output = T>) -> StoreResult<T> {
        tokio::time::timeout(self.options.timeout, call)
            .await
            .map_err(|_| {
                StoreError::Unavailable(format!(
                    "redis did not answer {what} within {:?}",
                    self.options.timeout
                ))
            })
    }

    /// Waits for `store_replica_acks` replicas, or as many as are in sync with the primary
    /// now (`online`, which the script that wrote counted) if fewer, to hold this client's
    /// writes so far (module doc; one WAIT serves every grant written before it, see
    /// [`acks`]). Errors: [`StoreError::Unavailable`] saying how many did.
    async fn replicated(&self, pool: &str, what: &str, online: i64) -> StoreResult<()> {
        let [first, ..] = self.keys(pool);
        self.replicated_at(pool, &first, what, online).await
    }

    /// [`RedisStore::replicated`] for the writes to `key`'s node, group-committed under
    /// `pool` (a pool id, or a budget row's tag: `budget`).
    async fn replicated_at(
        &self,
        pool: &str,
        first: &str,
        what: &str,
        online: i64,
    ) -> StoreResult<()> {
        let want = self
            .replica_acks
            .min(u32::try_from(online.max(0)).unwrap_or(0));
        if want == 0 {
            return Ok(());
        }
        let timeout = self.options.replica_ack_timeout;
        let waited = self
            .in_time(
                "WAIT",
                self.acks.wait(&self.conn, pool, first, want, timeout),
            )
            .await?;
        match waited {
            Ok(()) => Ok(()),
            Err(acks::AckError::Redis(e)) => Err(map_err(e)),
            Err(acks::AckError::Short { acked }) => {
                if self.acks.should_warn() {
                    tracing::warn!(pool = %pool, acked, want, timeout_ms = timeout.as_millis(),
                        "grants withdrawn: too few Redis replicas acknowledge them (scheduler.store_replica_acks); a stalled replica keeps this up until Redis drops it (repl-timeout)");
                }
                Err(StoreError::Unavailable(format!(
                    "pool {pool:?}: {what} was acknowledged by {acked} of {want} replica(s) within {}ms (scheduler.store_replica_acks); a failover could lose it, so it was not answered: retry (with the same idempotency key), and check the Redis replicas",
                    timeout.as_millis()
                )))
            }
        }
    }

    /// [`RedisStore::replicated`] for a lease just granted (`what` names how), releasing it
    /// when too few replicas hold it: best effort, and if that fails too the lease ends at its
    /// TTL (a slot held for a while, never a slot leased twice).
    async fn withdrawn_unless_replicated(
        &self,
        lease: &Lease,
        what: &str,
        online: i64,
    ) -> StoreResult<()> {
        if let Err(e) = self.replicated(&lease.id.pool, what, online).await {
            let _ = self.release(&lease.id).await;
            return Err(e);
        }
        Ok(())
    }

    async fn run(&self, script: &Script, pool: &str, args: Vec<String>) -> StoreResult<Value> {
        let mut inv = script.prepare_invoke();
        for k in self.keys(pool) {
            inv.key(k);
        }
        inv.arg(self.options.reap_batch);
        for a in args {
            inv.arg(a);
        }
        self.bounded("a script", self.conn.invoke(&inv)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_pool_shares_one_hash_tag() {
        for k in pool_keys("vp", "volc-standard") {
            assert!(k.starts_with("vp:{volc-standard}:"), "{k}");
        }
        let slots: std::collections::HashSet<redis::cluster_routing::Slot> =
            pool_keys("vp", "a}b{c")
                .iter()
                .map(redis::cluster_routing::Slot::for_key)
                .collect();
        assert_eq!(
            slots.len(),
            1,
            "a pool name with braces still maps to one slot"
        );
    }
}
