//! Conversions between the scheduler's domain types ([`crate::model`]) and their protobuf
//! forms, in one place: the gRPC edge decodes requests into domain values and encodes domain
//! answers with these, and nothing else in the crate builds a `pb` message by hand.

use voxpool_proto::scheduler::v1 as pb;

use crate::model::{KeyState, KeyStatus, Lease, PoolStatus, upstream_of};

fn int(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

impl From<Lease> for pb::Lease {
    fn from(l: Lease) -> Self {
        pb::Lease {
            lease_id: l.id.to_string(),
            pool: l.id.pool.clone(),
            upstream_id: upstream_of(&l.key_id).to_owned(),
            key_id: l.key_id,
            expires_at_ms: l.expires_at_ms,
            key_in_flight: int(l.key_in_flight),
            key_capacity: int(l.key_capacity),
            renew_interval_ms: 0,
        }
    }
}

impl From<KeyState> for pb::KeyState {
    fn from(s: KeyState) -> Self {
        match s {
            KeyState::Available => pb::KeyState::Available,
            KeyState::Cooling => pb::KeyState::Cooling,
            KeyState::Disabled => pb::KeyState::Disabled,
            KeyState::OverQuota => pb::KeyState::OverQuota,
        }
    }
}

/// A key's status in pool `pool`, as `GetPoolStatus` and the admin RPCs show it.
pub fn key_status(pool: &str, k: &KeyStatus) -> pb::KeyStatus {
    pb::KeyStatus {
        key_id: k.key_id.clone(),
        upstream_id: upstream_of(&k.key_id).to_owned(),
        capacity: int(k.capacity),
        effective_capacity: int(k.effective_capacity),
        in_flight: int(k.in_flight),
        utilization: k.utilization(),
        state: pb::KeyState::from(k.state) as i32,
        cooldown_until_ms: k.cooldown_until_ms,
        consecutive_failures: int(k.consecutive_failures),
        pool: pool.to_owned(),
        quota_used: i64::try_from(k.quota_used).unwrap_or(i64::MAX),
        quota_limit: i64::try_from(k.quota_limit).unwrap_or(i64::MAX),
        quota_resets_at_ms: k.quota_resets_at_ms,
    }
}

impl From<&PoolStatus> for pb::PoolStatus {
    /// The pool's status; `waiters` and `class_waiters` are left empty for the caller to fill
    /// (they are per replica).
    fn from(s: &PoolStatus) -> Self {
        pb::PoolStatus {
            pool: s.pool.clone(),
            capacity: i32::try_from(s.capacity()).unwrap_or(i32::MAX),
            in_flight: i32::try_from(s.in_flight()).unwrap_or(i32::MAX),
            utilization: s.utilization(),
            keys: s.keys.iter().map(|k| key_status(&s.pool, k)).collect(),
            now_ms: s.now_ms,
            waiters: 0,
            recovering_until_ms: s.recovering_until_ms,
            store_error: String::new(),
            class_waiters: Vec::new(),
            batch_in_flight: i32::try_from(s.batch_in_flight).unwrap_or(i32::MAX),
            batch_limit: i32::try_from(s.batch_limit()).unwrap_or(i32::MAX),
            budgets: Vec::new(),
        }
    }
}

impl From<&crate::domain::BudgetStatusRow> for pb::BudgetStatus {
    fn from(b: &crate::domain::BudgetStatusRow) -> Self {
        let money = |micros: u64| micros as f64 / 1e6;
        let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let tier = |t: voxpool_domain::snapshot::Tier| {
            voxpool_proto::catalog::v1::Tier::from_str_name(t.as_str()).map_or(0, |t| t as i32)
        };
        Self {
            id: b.row.budget.clone(),
            subject: b.row.subject.clone(),
            per: b.row.per.as_str().to_owned(),
            characters_used: ms(b.usage.used.characters),
            characters_reserved: ms(b.usage.reserved.characters),
            characters_limit: ms(b.row.characters),
            cost_used: money(b.usage.used.cost_micros),
            cost_reserved: money(b.usage.reserved.cost_micros),
            cost_limit: money(b.row.cost_micros),
            currency: b.currency.clone(),
            resets_at_ms: b.usage.resets_at_ms,
            tiers: b.tiers.iter().map(|t| tier(*t)).collect(),
        }
    }
}
