//! Fill locks on Redis ([`FillLocks`], `store::fill` doc): one STRING per fill key,
//! `<prefix>:fill:{<key>}`, holding its holder's fill id with the lock's TTL as its PX, and the
//! key's test clock offset beside it in the same hash slot (`lua/fill.lua`), so every call is
//! one script on one Cluster slot and fill keys spread over the shards.
//!
//! A fill key holds only `[A-Za-z0-9._:/-]` (`model::fill`), never a brace, so the hash tag is
//! exactly the key, and the names cannot meet a pool's (`<prefix>:{<pool>}:…`).
//!
//! A release PUBLISHes the key on `<prefix>:fills:released` ([`super::wake`] follows it on every
//! replica) and is also passed on locally at once. Grants do not wait for replica
//! acknowledgements (`store_replica_acks`): a failover that loses a lock costs at most one
//! more fill of that entry (a second vendor call), never a key over its capacity, which the
//! leases still guard.

use std::sync::LazyLock;

use async_trait::async_trait;
use redis::{Script, Value};
use tokio::sync::mpsc;

use super::{
    RedisStore,
    reply::{get, int, items, text},
};
use crate::{
    model::{FillHolder, FillId, FillKey, FillState},
    store::{FillLocks, StoreError, StoreResult},
};

static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/fill.lua")));

/// The channel fill releases are published on, under `prefix`.
pub(super) fn channel(prefix: &str) -> String {
    format!("{prefix}:fills:released")
}

/// The lock's Redis key and its test clock's, under `prefix`.
fn keys(prefix: &str, key: &FillKey) -> [String; 2] {
    let lock = format!("{prefix}:fill:{{{key}}}");
    let clock = format!("{lock}:clock");
    [lock, clock]
}

fn ms_of(v: &Value) -> StoreResult<u64> {
    Ok(u64::try_from(int(v)?).unwrap_or(0))
}

fn parse_id(v: &Value) -> StoreResult<FillId> {
    let raw = text(v)?;
    FillId::parse(&raw).ok_or_else(|| {
        StoreError::Protocol(format!(
            "a fill lock holds {} bytes that are no fill id (a foreign writer on our keys?)",
            raw.len()
        ))
    })
}

impl RedisStore {
    /// Runs `lua/fill.lua`'s `op` on `key` with `id` and `ms`.
    async fn fill(
        &self,
        op: &str,
        key: &FillKey,
        id: Option<&FillId>,
        ms: u64,
    ) -> StoreResult<Value> {
        let prefix = &self.options.key_prefix;
        let mut inv = SCRIPT.prepare_invoke();
        for k in keys(prefix, key) {
            inv.key(k);
        }
        inv.arg(op)
            .arg(id.map_or("", FillId::as_str))
            .arg(ms)
            .arg(channel(prefix))
            .arg(key.as_str());
        self.bounded("a fill-lock script", self.conn.invoke(&inv))
            .await
    }
}

#[async_trait]
impl FillLocks for RedisStore {
    async fn acquire_fill(
        &self,
        key: &FillKey,
        id: &FillId,
        ttl_ms: u64,
    ) -> StoreResult<FillState> {
        let reply = items(self.fill("acquire", key, Some(id), ttl_ms).await?)?;
        if int(get(&reply, 0)?)? == 1 {
            return Ok(FillState::Granted);
        }
        Ok(FillState::Held {
            ttl_left_ms: ms_of(get(&reply, 1)?)?,
            holder: parse_id(get(&reply, 2)?)?,
        })
    }

    async fn renew_fill(&self, key: &FillKey, id: &FillId, ttl_ms: u64) -> StoreResult<bool> {
        Ok(int(&self.fill("renew", key, Some(id), ttl_ms).await?)? == 1)
    }

    async fn release_fill(&self, key: &FillKey, id: &FillId) -> StoreResult<bool> {
        let released = int(&self.fill("release", key, Some(id), 0).await?)? == 1;
        if released {
            // This replica's waiters need not wait for the message to come round.
            self.wake.fill_released(key.clone());
        }
        Ok(released)
    }

    async fn fill_holder(&self, key: &FillKey) -> StoreResult<Option<FillHolder>> {
        let reply = items(self.fill("holder", key, None, 0).await?)?;
        if reply.is_empty() {
            return Ok(None);
        }
        Ok(Some(FillHolder {
            fill_id: parse_id(get(&reply, 0)?)?,
            ttl_left_ms: ms_of(get(&reply, 1)?)?,
        }))
    }

    fn fill_releases(&self) -> Option<mpsc::UnboundedReceiver<FillKey>> {
        self.wake.take_fills()
    }

    async fn advance_fill_clock(&self, key: &FillKey, ms: u64) -> StoreResult<()> {
        self.fill("advance", key, None, ms).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fill_lock_and_its_clock_share_the_key_s_hash_slot() {
        let key = FillKey::parse("tts:v1/ab.c_d-e").unwrap();
        let [lock, clock] = keys("vp", &key);
        assert_eq!(lock, "vp:fill:{tts:v1/ab.c_d-e}");
        assert_eq!(
            redis::cluster_routing::Slot::for_key(&lock),
            redis::cluster_routing::Slot::for_key(&clock)
        );
        assert!(!lock.starts_with("vp:{"), "never a pool's key");
    }
}
