//! Redis lease store: sorted sets + Lua scripts, shared by every scheduler replica.
//!
//! Data model (one pool per hash slot; see `lua/prelude.lua` for the full key list): all of
//! pool P's keys carry the hash tag `{P}` (`vp:{P}:load`, `vp:{P}:leases`, ...), so each
//! script runs on one Redis Cluster slot. `vp:{P}:load` is a ZSET of the keys that may take
//! leases scored by utilization (in-flight / capacity): the pick reads its head and the
//! number of keys tied there (ZRANGE + ZCOUNT, O(log n)), then takes one of the ties at
//! random, so 10 keys and 10,000 keys cost the same. Exact counts live in a HASH; the lease
//! ZSET is scored by expiry so each call reclaims a bounded batch of expired leases.
//!
//! Why it is safe across replicas: every operation is one Lua script, which Redis runs
//! atomically; the grant re-checks `in_flight < capacity` on the exact counts inside the same
//! script that increments them (invariant 1); time is Redis `TIME` read inside the script, so
//! replica clock skew cannot shorten or lengthen a lease or cooldown (invariant 6); leases
//! of a crashed replica expire on that clock and are reclaimed by the next call (invariant 3).
//!
//! Scripts run with EVALSHA and are re-loaded on NOSCRIPT (after a Redis restart or
//! failover) by `redis::Script`. Every call is bounded by the store timeout: an unreachable
//! or stalled Redis gives [`StoreError::Unavailable`], never a hang.

use std::time::Duration;

use async_trait::async_trait;
use redis::{Script, Value, aio::ConnectionManager};

use super::{LeaseStore, StoreError, StoreResult};
use crate::{
    model::{
        AcquireParams, AcquireResult, HealthPolicy, KeyState, KeyStatus, Lease, LeaseId, PoolSpec,
        PoolStatus, Refusal, ReportParams, ReportResult,
    },
    store::memory::{RETRY_HINT_MAX_MS, RETRY_HINT_MIN_MS},
};

const PRELUDE: &str = include_str!("lua/prelude.lua");

struct Scripts {
    acquire: Script,
    release: Script,
    renew: Script,
    report: Script,
    status: Script,
    seed: Script,
    admin: Script,
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
        }
    }
}

/// The Redis [`LeaseStore`]. Cheap to clone (shares one multiplexed connection).
#[derive(Clone)]
pub struct RedisStore {
    conn: ConnectionManager,
    scripts: std::sync::Arc<Scripts>,
    timeout: Duration,
    reap_batch: u32,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password: never print it.
        f.debug_struct("RedisStore")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// The pool's Redis keys in the order the scripts expect (see `lua/prelude.lua`).
pub fn pool_keys(pool: &str) -> [String; 11] {
    [
        "cap", "cfgcap", "inflight", "load", "leases", "lease", "cool", "coolwhy", "disabled",
        "fails", "clock",
    ]
    .map(|suffix| format!("vp:{{{pool}}}:{suffix}"))
}

impl RedisStore {
    /// Connects to `url` (`redis://host:port/db`, `rediss://…`, `unix:///path`) with connect
    /// and command timeouts of `timeout`, and checks the server answers.
    ///
    /// Errors: [`StoreError::Unavailable`] naming the host (never a password) when the URL is
    /// malformed or the server does not answer in time.
    pub async fn connect(url: &str, timeout: Duration, reap_batch: u32) -> StoreResult<Self> {
        let client = redis::Client::open(url)
            .map_err(|e| StoreError::Unavailable(format!("invalid redis url ({:?})", e.kind())))?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1);
        let conn = tokio::time::timeout(
            timeout * 2,
            client.get_connection_manager_with_config(config),
        )
        .await
        .map_err(|_| StoreError::Unavailable(format!("no answer from redis within {timeout:?}")))?
        .map_err(map_err)?;
        let store = Self {
            conn,
            scripts: std::sync::Arc::new(Scripts::new()),
            timeout,
            reap_batch,
        };
        store.ping().await?;
        Ok(store)
    }

    async fn run(&self, script: &Script, pool: &str, args: Vec<String>) -> StoreResult<Value> {
        let mut inv = script.prepare_invoke();
        for k in pool_keys(pool) {
            inv.key(k);
        }
        inv.arg(self.reap_batch);
        for a in args {
            inv.arg(a);
        }
        let mut conn = self.conn.clone();
        tokio::time::timeout(self.timeout, inv.invoke_async::<Value>(&mut conn))
            .await
            .map_err(|_| {
                StoreError::Unavailable(format!("redis did not answer within {:?}", self.timeout))
            })?
            .map_err(map_err)
    }
}

fn map_err(e: redis::RedisError) -> StoreError {
    if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() {
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

fn state_of(s: &str) -> StoreResult<KeyState> {
    match s {
        "available" => Ok(KeyState::Available),
        "cooling" => Ok(KeyState::Cooling),
        "disabled" => Ok(KeyState::Disabled),
        other => Err(StoreError::Protocol(format!("unknown key state {other:?}"))),
    }
}

#[async_trait]
impl LeaseStore for RedisStore {
    async fn seed(&self, pools: &[PoolSpec]) -> StoreResult<()> {
        for spec in pools {
            let mut args = vec![spec.keys.len().to_string()];
            for k in &spec.keys {
                args.push(k.key_id.clone());
                args.push(k.capacity.to_string());
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
        let reply = items(self.run(&self.scripts.acquire, &p.pool, args).await?)?;
        match text(get(&reply, 0)?)?.as_str() {
            "ok" => Ok(AcquireResult::Granted(Lease {
                id: LeaseId {
                    pool: p.pool.clone(),
                    token: p.token.clone(),
                },
                key_id: text(get(&reply, 1)?)?,
                expires_at_ms: int(get(&reply, 2)?)?,
                key_in_flight: u32_of(get(&reply, 3)?)?,
                key_capacity: u32_of(get(&reply, 4)?)?,
            })),
            "full" => Ok(AcquireResult::Refused(Refusal::Full {
                capacity: int(get(&reply, 1)?)?.max(0) as u64,
                in_flight: int(get(&reply, 2)?)?.max(0) as u64,
                retry_after_ms: (int(get(&reply, 3)?)?.max(0) as u64)
                    .clamp(RETRY_HINT_MIN_MS, RETRY_HINT_MAX_MS),
            })),
            "unavailable" => {
                let next = int(get(&reply, 1)?)?;
                Ok(AcquireResult::Refused(Refusal::Unavailable {
                    next_available_ms: (next >= 0).then_some(next),
                    now_ms: int(get(&reply, 2)?)?,
                }))
            }
            "none" => Ok(AcquireResult::Refused(Refusal::NoEligibleKey)),
            "unseeded" => Err(StoreError::NotSeeded(p.pool.clone())),
            other => Err(StoreError::Protocol(format!("acquire replied {other:?}"))),
        }
    }

    async fn release(&self, id: &LeaseId) -> StoreResult<bool> {
        let reply = self
            .run(
                &self.scripts.release,
                &id.pool,
                vec![id.token.as_str().to_owned()],
            )
            .await?;
        Ok(int(&reply)? == 1)
    }

    async fn renew(&self, id: &LeaseId, ttl_ms: u64) -> StoreResult<Option<Lease>> {
        let reply = items(
            self.run(
                &self.scripts.renew,
                &id.pool,
                vec![id.token.as_str().to_owned(), ttl_ms.to_string()],
            )
            .await?,
        )?;
        if text(get(&reply, 0)?)? != "ok" {
            return Ok(None);
        }
        Ok(Some(Lease {
            id: id.clone(),
            key_id: text(get(&reply, 1)?)?,
            expires_at_ms: int(get(&reply, 2)?)?,
            key_in_flight: u32_of(get(&reply, 3)?)?,
            key_capacity: u32_of(get(&reply, 4)?)?,
        }))
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
        ];
        let reply = items(self.run(&self.scripts.report, &r.id.pool, args).await?)?;
        if text(get(&reply, 0)?)? != "ok" {
            return Ok(None);
        }
        Ok(Some(ReportResult {
            key_id: text(get(&reply, 1)?)?,
            state: state_of(&text(get(&reply, 2)?)?)?,
            cooldown_until_ms: int(get(&reply, 3)?)?,
            released: int(get(&reply, 4)?)? == 1,
        }))
    }

    async fn status(&self, pool: &str) -> StoreResult<Option<PoolStatus>> {
        let reply = items(self.run(&self.scripts.status, pool, vec![]).await?)?;
        let now_ms = int(get(&reply, 0)?)?;
        if reply.len() == 1 {
            return Ok(None);
        }
        let keys = reply[1..]
            .chunks(6)
            .map(|c| {
                Ok(KeyStatus {
                    key_id: text(get(c, 0)?)?,
                    capacity: u32_of(get(c, 1)?)?,
                    in_flight: u32_of(get(c, 2)?)?,
                    state: state_of(&text(get(c, 3)?)?)?,
                    cooldown_until_ms: int(get(c, 4)?)?,
                    consecutive_failures: u32_of(get(c, 5)?)?,
                })
            })
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(Some(PoolStatus {
            pool: pool.to_owned(),
            keys,
            now_ms,
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

    async fn ping(&self) -> StoreResult<()> {
        let mut conn = self.conn.clone();
        tokio::time::timeout(
            self.timeout,
            redis::cmd("PING").query_async::<String>(&mut conn),
        )
        .await
        .map_err(|_| {
            StoreError::Unavailable(format!(
                "redis did not answer PING within {:?}",
                self.timeout
            ))
        })?
        .map_err(map_err)?;
        Ok(())
    }

    async fn advance_clock(&self, pool: &str, ms: u64) -> StoreResult<()> {
        let mut conn = self.conn.clone();
        let [.., clock] = pool_keys(pool);
        tokio::time::timeout(
            self.timeout,
            redis::cmd("INCRBY")
                .arg(clock)
                .arg(ms)
                .query_async::<i64>(&mut conn),
        )
        .await
        .map_err(|_| StoreError::Unavailable("redis timeout".into()))?
        .map_err(map_err)?;
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
            in_flight: u32_of(get(&reply, 3)?)?,
            state: state_of(&text(get(&reply, 4)?)?)?,
            cooldown_until_ms: int(get(&reply, 5)?)?,
            consecutive_failures: u32_of(get(&reply, 6)?)?,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_pool_shares_one_hash_tag() {
        for k in pool_keys("volc-standard") {
            assert!(k.starts_with("vp:{volc-standard}:"), "{k}");
        }
    }
}
