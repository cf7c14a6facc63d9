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
//! counts inside the same script that increments them (invariant 1); time is Redis `TIME` read
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

mod acks;
pub mod conn;
mod wake;

use std::time::Duration;

use async_trait::async_trait;
use redis::{Script, Value};

use super::{LeaseStore, StoreError, StoreResult};
use crate::{
    model::{
        AcquireParams, AcquireResult, ClassLine, HealthPolicy, KeyState, KeyStatus, Lease, LeaseId,
        LeaseToken, PoolSpec, PoolStatus, Refusal, ReportParams, ReportResult, TicketState,
    },
    store::memory::{RETRY_HINT_MAX_MS, RETRY_HINT_MIN_MS},
};
use conn::{Conn, Topology};

const PRELUDE: &str = include_str!("lua/prelude.lua");

struct Scripts {
    acquire: Script,
    release: Script,
    renew: Script,
    report: Script,
    status: Script,
    seed: Script,
    admin: Script,
    waiting: Script,
}

impl Scripts {
    fn new() -> Self {
        let s = |body: &str| Script::new(&format!("{PRELUDE}\n{body}"));
        Self {
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
    .map(|suffix| format!("{prefix}:{{{pool}}}:{suffix}"))
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
        let source = conn.wake_source(url).map_err(StoreError::Unavailable)?;
        let store = Self {
            wake: std::sync::Arc::new(wake::Wake::start(
                source,
                options.key_prefix.clone(),
                options.timeout,
            )),
            scripts: std::sync::Arc::new(Scripts::new()),
            replica_acks: options
                .replica_acks
                .unwrap_or_else(|| conn.topology().default_replica_acks()),
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
        let want = self
            .replica_acks
            .min(u32::try_from(online.max(0)).unwrap_or(0));
        if want == 0 {
            return Ok(());
        }
        let [first, ..] = self.keys(pool);
        let timeout = self.options.replica_ack_timeout;
        let waited = self
            .in_time(
                "WAIT",
                self.acks.wait(&self.conn, pool, &first, want, timeout),
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
                    "pool {pool:?}: {what} was acknowledged by {acked} of {want} replica(s) within {}ms (scheduler.store_replica_acks); a failover could lose it, so it was withdrawn: retry, and check the Redis replicas",
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

    /// Runs `waiting.lua` in `mode` (`claim` or `renew`) for `tokens`: the replicas in sync
    /// with the primary (to acknowledge a claim) and each token's state.
    async fn tickets(
        &self,
        pool: &str,
        mode: &str,
        tokens: &[LeaseToken],
        ttl_ms: u64,
    ) -> StoreResult<(i64, Vec<TicketState>)> {
        let mut args = vec![
            mode.to_owned(),
            ttl_ms.to_string(),
            tokens.len().to_string(),
        ];
        args.extend(tokens.iter().map(|t| t.as_str().to_owned()));
        let reply = items(self.run(&self.scripts.waiting, pool, args).await?)?;
        if matches!(reply.first(), Some(v) if text(v).is_ok_and(|t| t == "unseeded")) {
            return Err(StoreError::NotSeeded(pool.to_owned()));
        }
        let online = int(get(&reply, 0)?)?;
        let mut out = Vec::with_capacity(tokens.len());
        for (token, answer) in tokens.iter().zip(reply.into_iter().skip(1)) {
            let answer = items(answer)?;
            out.push(match text(get(&answer, 0)?)?.as_str() {
                "granted" => TicketState::Granted(lease_reply(
                    LeaseId {
                        pool: pool.to_owned(),
                        token: token.clone(),
                    },
                    &answer,
                )?),
                "handed" => TicketState::Handed,
                "waiting" => TicketState::Waiting,
                "gone" => TicketState::Gone,
                other => return Err(StoreError::Protocol(format!("{mode} replied {other:?}"))),
            });
        }
        if out.len() != tokens.len() {
            return Err(StoreError::Protocol(format!(
                "{mode} answered {} of {} tickets",
                out.len(),
                tokens.len()
            )));
        }
        Ok((online, out))
    }

    /// Tells this replica's own waiters among `tokens` (a script's hand-overs) at once; the
    /// pub/sub message reaches them too, later (a repeat they ignore).
    fn handed_here(&self, pool: &str, tokens: &[Value]) {
        for token in tokens {
            if let Ok(token) = text(token) {
                self.wake.announce(super::Handover {
                    pool: pool.to_owned(),
                    token,
                });
            }
        }
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

fn map_err(e: redis::RedisError) -> StoreError {
    use redis::{ErrorKind, ServerErrorKind};
    let failing_over = matches!(
        e.kind(),
        // The sentinels name no primary that answers as one: mid-failover.
        ErrorKind::MasterNameNotFoundBySentinel
            | ErrorKind::Server(
                ServerErrorKind::ReadOnly
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::BusyLoading
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::Moved
                    | ServerErrorKind::Ask
            )
    );
    if failing_over
        || e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
    {
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

fn text(v: &Value) -> StoreResult<String> {
    match v {
        Value::BulkString(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Ok(s.clone()),
        Value::Int(i) => Ok(i.to_string()),
        other => Err(StoreError::Protocol(format!(
            "expected a string, got {other:?}"
        ))),
    }
}

fn int(v: &Value) -> StoreResult<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        other => text(other)?
            .parse::<f64>()
            .map(|f| f as i64)
            .map_err(|_| StoreError::Protocol(format!("expected a number, got {other:?}"))),
    }
}

fn u32_of(v: &Value) -> StoreResult<u32> {
    Ok(u32::try_from(int(v)?.max(0)).unwrap_or(u32::MAX))
}

fn get(items: &[Value], i: usize) -> StoreResult<&Value> {
    items
        .get(i)
        .ok_or_else(|| StoreError::Protocol(format!("reply too short: no item {i}")))
}

/// The lease `id` as the scripts reply it: items 1-5 are its key, expiry, the key's in-flight
/// count and capacity, and its grant time (`lua/acquire.lua`, `lua/renew.lua`,
/// `lua/waiting.lua`).
fn lease_reply(id: LeaseId, reply: &[Value]) -> StoreResult<Lease> {
    Ok(Lease {
        id,
        key_id: text(get(reply, 1)?)?,
        expires_at_ms: int(get(reply, 2)?)?,
        key_in_flight: u32_of(get(reply, 3)?)?,
        key_capacity: u32_of(get(reply, 4)?)?,
        granted_at_ms: int(get(reply, 5)?)?,
    })
}

/// A refusal as the scripts reply it (`lua/acquire.lua`).
fn refusal(reply: &[Value]) -> StoreResult<Refusal> {
    let hint = |v: &Value| -> StoreResult<u64> {
        Ok((int(v)?.max(0) as u64).clamp(RETRY_HINT_MIN_MS, RETRY_HINT_MAX_MS))
    };
    Ok(match text(get(reply, 0)?)?.as_str() {
        "recovering" => Refusal::Recovering {
            until_ms: int(get(reply, 1)?)?,
            now_ms: int(get(reply, 2)?)?,
        },
        "full" => Refusal::Full {
            capacity: int(get(reply, 1)?)?.max(0) as u64,
            in_flight: int(get(reply, 2)?)?.max(0) as u64,
            retry_after_ms: hint(get(reply, 3)?)?,
            quota_short: int(get(reply, 4)?)?.max(0) as u64,
        },
        "batch_share" => Refusal::BatchShare {
            limit: int(get(reply, 1)?)?.max(0) as u64,
            in_flight: int(get(reply, 2)?)?.max(0) as u64,
            retry_after_ms: hint(get(reply, 3)?)?,
        },
        "unavailable" => {
            let next = int(get(reply, 1)?)?;
            Refusal::Unavailable {
                next_available_ms: (next >= 0).then_some(next),
                now_ms: int(get(reply, 2)?)?,
            }
        }
        "none" => Refusal::NoEligibleKey,
        other => return Err(StoreError::Protocol(format!("acquire replied {other:?}"))),
    })
}

fn state_of(s: &str) -> StoreResult<KeyState> {
    match s {
        "available" => Ok(KeyState::Available),
        "cooling" => Ok(KeyState::Cooling),
        "disabled" => Ok(KeyState::Disabled),
        "over_quota" => Ok(KeyState::OverQuota),
        other => Err(StoreError::Protocol(format!("unknown key state {other:?}"))),
    }
}

#[async_trait]
impl LeaseStore for RedisStore {
    async fn seed(&self, pools: &[PoolSpec]) -> StoreResult<()> {
        for spec in pools {
            self.wake.follow(&spec.pool);
            let mut args = vec![
                self.options.recovery_window_ms.to_string(),
                spec.batch_max_share.to_string(),
                if spec.adaptive { "1" } else { "0" }.to_owned(),
                spec.keys.len().to_string(),
            ];
            for k in &spec.keys {
                args.push(k.key_id.clone());
                args.push(k.capacity.to_string());
                args.push(
                    k.quota
                        .map(|q| format!("{}:{}", q.characters, q.per.as_str()))
                        .unwrap_or_default(),
                );
            }
            self.run(&self.scripts.seed, &spec.pool, args).await?;
        }
        Ok(())
    }

    async fn acquire(&self, p: &AcquireParams) -> StoreResult<AcquireResult> {
        let mut args = vec![
            p.token.as_str().to_owned(),
            p.ttl_ms.to_string(),
            format!("{:.12}", rand::random::<f64>()),
            p.exclude_keys.len().to_string(),
        ];
        args.extend(p.exclude_keys.iter().cloned());
        args.push(p.upstream_ids.len().to_string());
        args.extend(p.upstream_ids.iter().cloned());
        args.push(p.priority.as_str().to_owned());
        args.push(p.tenant.clone());
        args.push(if p.join_line { "1" } else { "0" }.to_owned());
        args.push(p.ticket_ttl_ms.to_string());
        args.push(p.characters.to_string());
        let reply = items(self.run(&self.scripts.acquire, &p.pool, args).await?)?;
        if text(get(&reply, 0)?)? == "queued" {
            return Ok(AcquireResult::Queued(refusal(&reply[1..])?));
        }
        match text(get(&reply, 0)?)?.as_str() {
            "ok" => {
                let lease = lease_reply(p.lease_id(), &reply)?;
                let online = int(get(&reply, 6)?)?;
                self.withdrawn_unless_replicated(&lease, "the grant", online)
                    .await?;
                Ok(AcquireResult::Granted(lease))
            }
            "unseeded" => Err(StoreError::NotSeeded(p.pool.clone())),
            _ => Ok(AcquireResult::Refused(refusal(&reply)?)),
        }
    }

    async fn release_granted(&self, id: &LeaseId, granted_at_ms: Option<i64>) -> StoreResult<bool> {
        let reply = self
            .run(
                &self.scripts.release,
                &id.pool,
                vec![
                    id.token.as_str().to_owned(),
                    granted_at_ms.unwrap_or(-1).to_string(),
                ],
            )
            .await?;
        let reply = items(reply)?;
        self.handed_here(&id.pool, reply.get(1..).unwrap_or_default());
        Ok(int(get(&reply, 0)?)? == 1)
    }

    async fn renew_granted(
        &self,
        id: &LeaseId,
        ttl_ms: u64,
        key_id: Option<&str>,
        granted_at_ms: Option<i64>,
    ) -> StoreResult<Option<Lease>> {
        let reply = items(
            self.run(
                &self.scripts.renew,
                &id.pool,
                vec![
                    id.token.as_str().to_owned(),
                    ttl_ms.to_string(),
                    key_id.unwrap_or_default().to_owned(),
                    self.options.recovery_lease_ttl_ms.to_string(),
                    granted_at_ms.unwrap_or(-1).to_string(),
                ],
            )
            .await?,
        )?;
        match text(get(&reply, 0)?)?.as_str() {
            "ok" => {}
            "reregistered" => {
                let online = int(get(&reply, 6)?)?;
                self.replicated(&id.pool, "the re-registered lease", online)
                    .await?;
            }
            "unseeded" => return Err(StoreError::NotSeeded(id.pool.clone())),
            _ => return Ok(None),
        }
        Ok(Some(lease_reply(id.clone(), &reply)?))
    }

    async fn report(
        &self,
        r: &ReportParams,
        policy: &HealthPolicy,
    ) -> StoreResult<Option<ReportResult>> {
        let args = vec![
            r.id.token.as_str().to_owned(),
            r.outcome.as_str().to_owned(),
            r.retry_after_ms.to_string(),
            if r.release { "1" } else { "0" }.to_owned(),
            r.key_id.clone().unwrap_or_default(),
            policy.rate_limit_cooldown_ms.to_string(),
            policy.failure_threshold.to_string(),
            policy.failure_backoff_base_ms.to_string(),
            policy.failure_backoff_max_ms.to_string(),
            policy.credential_cooldown_ms.to_string(),
            policy.adaptive_decrease.to_string(),
            policy.adaptive_hold_ms.to_string(),
            policy.adaptive_increase_ms.to_string(),
            r.characters.to_string(),
            policy.adaptive_increase_max_ms.to_string(),
            r.granted_at_ms.unwrap_or(-1).to_string(),
        ];
        let reply = items(self.run(&self.scripts.report, &r.id.pool, args).await?)?;
        if text(get(&reply, 0)?)? != "ok" {
            return Ok(None);
        }
        let result = ReportResult {
            key_id: text(get(&reply, 1)?)?,
            state: state_of(&text(get(&reply, 2)?)?)?,
            cooldown_until_ms: int(get(&reply, 3)?)?,
            released: int(get(&reply, 4)?)? == 1,
            effective_change: {
                let (before, after) = (u32_of(get(&reply, 5)?)?, u32_of(get(&reply, 6)?)?);
                (before != after).then_some((before, after))
            },
            applied: int(get(&reply, 7)?)? == 1,
        };
        self.handed_here(&r.id.pool, reply.get(8..).unwrap_or_default());
        Ok(Some(result))
    }

    async fn status(&self, pool: &str) -> StoreResult<Option<PoolStatus>> {
        let reply = items(self.run(&self.scripts.status, pool, vec![]).await?)?;
        let now_ms = int(get(&reply, 0)?)?;
        let recovering_until_ms = int(get(&reply, 1)?)?;
        let batch_in_flight = int(get(&reply, 2)?)?.max(0) as u64;
        let batch_max_share = text(get(&reply, 3)?)?
            .parse::<f64>()
            .map_err(|e| StoreError::Protocol(format!("batch share: {e}")))?;
        let mut line = [ClassLine::default(); 3];
        for (i, class) in line.iter_mut().enumerate() {
            class.waiters = int(get(&reply, 4 + 2 * i)?)?.max(0) as u64;
            class.oldest_since_ms = int(get(&reply, 5 + 2 * i)?)?;
        }
        if reply.len() == 10 {
            return Ok(None);
        }
        let keys = reply[10..]
            .chunks(10)
            .map(|c| {
                Ok(KeyStatus {
                    key_id: text(get(c, 0)?)?,
                    capacity: u32_of(get(c, 1)?)?,
                    effective_capacity: u32_of(get(c, 6)?)?,
                    in_flight: u32_of(get(c, 2)?)?,
                    state: state_of(&text(get(c, 3)?)?)?,
                    cooldown_until_ms: int(get(c, 4)?)?,
                    consecutive_failures: u32_of(get(c, 5)?)?,
                    quota_used: int(get(c, 7)?)?.max(0) as u64,
                    quota_limit: int(get(c, 8)?)?.max(0) as u64,
                    quota_resets_at_ms: int(get(c, 9)?)?,
                })
            })
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(Some(PoolStatus {
            pool: pool.to_owned(),
            keys,
            now_ms,
            recovering_until_ms,
            batch_in_flight,
            batch_max_share,
            line,
        }))
    }

    async fn set_capacity(
        &self,
        pool: &str,
        key_id: &str,
        capacity: u32,
    ) -> StoreResult<Option<KeyStatus>> {
        self.admin(pool, "capacity", key_id, capacity).await
    }

    async fn set_disabled(
        &self,
        pool: &str,
        key_id: &str,
        disabled: bool,
    ) -> StoreResult<Option<KeyStatus>> {
        self.admin(pool, if disabled { "disable" } else { "enable" }, key_id, 0)
            .await
    }

    async fn lease_secret(
        &self,
        candidate: &voxpool_domain::secret::Secret,
    ) -> StoreResult<voxpool_domain::secret::Secret> {
        let key = format!("{}:lease-secret", self.options.key_prefix);
        let mut set = redis::cmd("SET");
        set.arg(&key).arg(candidate.expose()).arg("NX");
        self.bounded("SET NX", self.conn.query(&set)).await?;
        let mut get = redis::cmd("GET");
        get.arg(&key);
        match self.bounded("GET", self.conn.query(&get)).await? {
            Value::BulkString(bytes) => String::from_utf8(bytes)
                .map(voxpool_domain::secret::Secret::new)
                .map_err(|_| {
                    StoreError::Protocol("the lease secret in the store is not text".into())
                }),
            // Deleted between the two calls: keep ours, the next refresh stores it again.
            Value::Nil => Ok(candidate.clone()),
            _ => Err(StoreError::Protocol(
                "unexpected reply reading the lease secret".into(),
            )),
        }
    }

    async fn ping(&self) -> StoreResult<()> {
        self.bounded("PING", self.conn.ping()).await
    }

    async fn claim(&self, pool: &str, token: &LeaseToken, ttl_ms: u64) -> StoreResult<TicketState> {
        let (online, mut states) = self
            .tickets(pool, "claim", std::slice::from_ref(token), ttl_ms)
            .await?;
        let state = states.pop().unwrap_or(TicketState::Gone);
        if let TicketState::Granted(lease) = &state {
            self.withdrawn_unless_replicated(lease, "the hand-over", online)
                .await?;
        }
        Ok(state)
    }

    async fn keep_waiting(
        &self,
        pool: &str,
        tokens: &[LeaseToken],
        ttl_ms: u64,
    ) -> StoreResult<Vec<TicketState>> {
        Ok(self.tickets(pool, "renew", tokens, ttl_ms).await?.1)
    }

    async fn leave(&self, pool: &str, token: &LeaseToken, keep_lease: bool) -> StoreResult<()> {
        let args = vec![
            "leave".to_owned(),
            token.as_str().to_owned(),
            if keep_lease { "1" } else { "0" }.to_owned(),
        ];
        self.run(&self.scripts.waiting, pool, args)
            .await
            .map(|_| ())
    }

    fn handovers(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<super::Handover>> {
        self.wake.take()
    }

    async fn forget_pool(&self, pool: &str) -> StoreResult<()> {
        let mut cmd = redis::cmd("DEL");
        cmd.arg(&self.keys(pool));
        self.bounded("DEL", self.conn.query(&cmd)).await?;
        Ok(())
    }

    async fn advance_clock(&self, pool: &str, ms: u64) -> StoreResult<()> {
        let [_, _, _, _, _, _, _, _, _, _, clock, ..] = self.keys(pool);
        let mut cmd = redis::cmd("INCRBY");
        cmd.arg(clock).arg(ms);
        self.bounded("INCRBY", self.conn.query(&cmd)).await?;
        Ok(())
    }
}

impl RedisStore {
    async fn admin(
        &self,
        pool: &str,
        op: &str,
        key_id: &str,
        capacity: u32,
    ) -> StoreResult<Option<KeyStatus>> {
        let reply = items(
            self.run(
                &self.scripts.admin,
                pool,
                vec![op.to_owned(), key_id.to_owned(), capacity.to_string()],
            )
            .await?,
        )?;
        if text(get(&reply, 0)?)? != "ok" {
            return Ok(None);
        }
        Ok(Some(KeyStatus {
            key_id: text(get(&reply, 1)?)?,
            capacity: u32_of(get(&reply, 2)?)?,
            effective_capacity: u32_of(get(&reply, 7)?)?,
            in_flight: u32_of(get(&reply, 3)?)?,
            state: state_of(&text(get(&reply, 4)?)?)?,
            cooldown_until_ms: int(get(&reply, 5)?)?,
            consecutive_failures: u32_of(get(&reply, 6)?)?,
            quota_used: int(get(&reply, 8)?)?.max(0) as u64,
            quota_limit: int(get(&reply, 9)?)?.max(0) as u64,
            quota_resets_at_ms: int(get(&reply, 10)?)?,
        }))
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
