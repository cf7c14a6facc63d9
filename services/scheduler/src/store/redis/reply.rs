//! Decoding what the Lua scripts reply: Redis values into domain types, and Redis errors
//! into [`StoreError`] (a failover or an unreachable server is `Unavailable`, to retry; a
//! reply this code does not understand is `Protocol`).
//!
//! Invariant: the reply shapes here are the scripts' (`lua/*.lua`); a short or foreign reply
//! is an error, never a default value.

use redis::Value;

use super::super::{RETRY_HINT_MAX_MS, RETRY_HINT_MIN_MS, StoreError, StoreResult};
use crate::model::{KeyState, Lease, LeaseId, Refusal};

pub(super) fn map_err(e: redis::RedisError) -> StoreError {
    if voxpool_redis::is_unavailable(&e) {
        StoreError::Unavailable(format!("redis: {e}"))
    } else {
        StoreError::Protocol(format!("redis: {e}"))
    }
}

pub(super) fn items(v: Value) -> StoreResult<Vec<Value>> {
    match v {
        Value::Array(items) => Ok(items),
        other => Err(StoreError::Protocol(format!(
            "expected an array, got {other:?}"
        ))),
    }
}

pub(super) fn text(v: &Value) -> StoreResult<String> {
    match v {
        Value::BulkString(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Ok(s.clone()),
        Value::Int(i) => Ok(i.to_string()),
        other => Err(StoreError::Protocol(format!(
            "expected a string, got {other:?}"
        ))),
    }
}

pub(super) fn int(v: &Value) -> StoreResult<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        other => text(other)?
            .parse::<f64>()
            .map(|f| f as i64)
            .map_err(|_| StoreError::Protocol(format!("expected a number, got {other:?}"))),
    }
}

pub(super) fn u32_of(v: &Value) -> StoreResult<u32> {
    Ok(u32::try_from(int(v)?.max(0)).unwrap_or(u32::MAX))
}

pub(super) fn get(items: &[Value], i: usize) -> StoreResult<&Value> {
    items
        .get(i)
        .ok_or_else(|| StoreError::Protocol(format!("reply too short: no item {i}")))
}

/// The lease `id` as the scripts reply it: items 1-5 are its key, expiry, the key's in-flight
/// count and capacity, and its grant time (`lua/acquire.lua`, `lua/renew.lua`,
/// `lua/waiting.lua`).
pub(super) fn lease_reply(id: LeaseId, reply: &[Value]) -> StoreResult<Lease> {
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
pub(super) fn refusal(reply: &[Value]) -> StoreResult<Refusal> {
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

pub(super) fn state_of(s: &str) -> StoreResult<KeyState> {
    match s {
        "available" => Ok(KeyState::Available),
        "cooling" => Ok(KeyState::Cooling),
        "disabled" => Ok(KeyState::Disabled),
        "over_quota" => Ok(KeyState::OverQuota),
        other => Err(StoreError::Protocol(format!("unknown key state {other:?}"))),
    }
}
