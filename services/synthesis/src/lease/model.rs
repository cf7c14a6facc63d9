//! The scheduler's requests and answers in synthesis's own terms ([`Acquire`], [`Lease`],
//! [`Priority`]), and the one place they become protobuf and back: the scheduler client
//! converts at its own edge, so no prost type travels into a job.

use std::time::Duration;

use voxpool_proto::scheduler::v1 as pb;

/// Longest wait for a slot (`wait_timeout_ms`) the scheduler accepts.
const MAX_WAIT: Duration = Duration::from_millis(600_000);

/// Traffic class of a lease: waiters are served INTERACTIVE, STANDARD, BATCH, and BATCH
/// leases are held to the pool's `batch_max_share`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Priority {
    /// Live traffic: served first.
    Interactive,
    /// The default (an unspecified class on the wire).
    #[default]
    Standard,
    /// Bulk jobs: served last, within the batch share.
    Batch,
}

/// One Acquire: a key of `pool` for one vendor call.
#[derive(Clone, Debug)]
pub struct Acquire {
    /// Pool id.
    pub pool: String,
    /// Keys not to lease (no credential here, or already tried).
    pub exclude_keys: Vec<String>,
    /// Only keys of these upstreams (the snapshot's); empty = any.
    pub upstream_ids: Vec<String>,
    /// TTL of the lease.
    pub lease_ttl: Duration,
    /// How long to wait for a slot (capped at what the scheduler accepts).
    pub wait: Duration,
    /// The request's id, for the scheduler's logs.
    pub request_id: String,
    /// Fresh per lease attempt; the same on the client's retries of this Acquire.
    pub idempotency_key: String,
    /// Traffic class.
    pub priority: Priority,
    /// Tenant (fairness inside its class).
    pub tenant: String,
    /// Characters reserved against the key's quota and the request's budgets while the call
    /// runs (by the provider's billing rule).
    pub characters: u64,
    /// The pack's tier (budgets limited to tiers).
    pub tier: Option<voxpool_domain::snapshot::Tier>,
    /// The caller's name (budgets covering callers).
    pub caller: String,
    /// What the call may cost, millionths of the currency, reserved against cost budgets.
    pub cost_micros: i64,
    /// What the whole request needs (every chunk, by the billing rule, and its cost), sent
    /// on its first chunk: budgets that cannot hold it refuse before anything is spent.
    /// 0 = only this call.
    pub request_characters: u64,
    /// The same for cost, millionths.
    pub request_cost_micros: i64,
}

/// A lease the scheduler granted.
///
/// `lease_id` is a capability (`<pool>/<upstream>/<key>/<token>.<granted_at_ms>.<mac>`): whoever
/// holds it can report on and release the lease. Logs and `Debug` show [`shown`] instead,
/// which leaves the MAC out.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Lease {
    /// The lease's id (signed by the scheduler): sent back to the scheduler, never printed.
    pub lease_id: String,
    /// `upstream/key`.
    pub key_id: String,
    /// The key's upstream.
    pub upstream_id: String,
    /// How often the scheduler asks to be renewed, when it asks (`renew_interval_ms`).
    pub renew_interval: Option<Duration>,
}

/// `lease_id` as logs may show it: everything before its MAC (the last `.`-separated part),
/// enough to find the lease in the scheduler's logs and useless to present. An id of another
/// shape shows as `<lease id>`.
pub fn shown(lease_id: &str) -> &str {
    match lease_id.rsplit_once('.') {
        Some((head, _mac)) if head.contains('.') => head,
        _ => "<lease id>",
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("lease_id", &shown(&self.lease_id))
            .field("key_id", &self.key_id)
            .field("upstream_id", &self.upstream_id)
            .field("renew_interval", &self.renew_interval)
            .finish()
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Acquire {
    /// The wire request.
    pub(super) fn to_pb(&self) -> pb::AcquireRequest {
        let priority = match self.priority {
            Priority::Interactive => pb::Priority::Interactive,
            Priority::Standard => pb::Priority::Standard,
            Priority::Batch => pb::Priority::Batch,
        };
        pb::AcquireRequest {
            pool: self.pool.clone(),
            exclude_keys: self.exclude_keys.clone(),
            upstream_ids: self.upstream_ids.clone(),
            lease_ttl_ms: ms(self.lease_ttl),
            wait_timeout_ms: ms(self.wait.min(MAX_WAIT)),
            request_id: self.request_id.clone(),
            idempotency_key: self.idempotency_key.clone(),
            priority: priority as i32,
            tenant: self.tenant.clone(),
            characters: i64::try_from(self.characters).unwrap_or(i64::MAX),
            tier: self.tier.map_or(0, |t| t.to_pb() as i32),
            caller: self.caller.clone(),
            cost_micros: self.cost_micros.clamp(0, voxpool_config::MAX_COST_MICROS),
            request_characters: i64::try_from(self.request_characters).unwrap_or(i64::MAX),
            request_cost_micros: self
                .request_cost_micros
                .clamp(0, voxpool_config::MAX_COST_MICROS),
        }
    }
}

impl From<pb::Lease> for Lease {
    fn from(l: pb::Lease) -> Self {
        Self {
            lease_id: l.lease_id,
            key_id: l.key_id,
            upstream_id: l.upstream_id,
            renew_interval: u64::try_from(l.renew_interval_ms)
                .ok()
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acquire_goes_out_as_asked_with_its_wait_capped() {
        let acquire = Acquire {
            pool: "p".into(),
            exclude_keys: vec!["u/k1".into()],
            upstream_ids: vec!["u".into()],
            lease_ttl: Duration::from_secs(30),
            wait: Duration::from_secs(3600),
            request_id: "r".into(),
            idempotency_key: "i".into(),
            priority: Priority::Batch,
            tenant: "t".into(),
            characters: 12,
            tier: Some(voxpool_domain::snapshot::Tier::Pro),
            caller: "c".into(),
            cost_micros: 34,
            request_characters: 0,
            request_cost_micros: 0,
        };
        let pb = acquire.to_pb();
        assert_eq!(pb.lease_ttl_ms, 30_000);
        assert_eq!(pb.wait_timeout_ms, 600_000);
        assert_eq!(pb.priority, pb::Priority::Batch as i32);
        assert_eq!(pb.characters, 12);
        assert_eq!(pb.caller, "c");
        assert_eq!(pb.cost_micros, 34);
        assert_ne!(pb.tier, 0);
        let lease = Lease::from(pb::Lease {
            lease_id: "l".into(),
            key_id: "u/k2".into(),
            upstream_id: "u".into(),
            ..Default::default()
        });
        assert_eq!(lease.renew_interval, None);
    }

    #[test]
    fn a_lease_id_is_shown_without_its_mac() {
        let mac = "9c0d5e7f00112233445566778899aabb";
        let id =
            format!("pool-a/acct-a/app-1/3f2a00000000000000000000000000e1.1764640000123.{mac}");
        assert_eq!(
            shown(&id),
            "pool-a/acct-a/app-1/3f2a00000000000000000000000000e1.1764640000123"
        );
        let lease = Lease {
            lease_id: id.clone(),
            key_id: "acct-a/app-1".into(),
            ..Default::default()
        };
        let debug = format!("{lease:?}");
        assert!(!debug.contains(mac), "{debug}");
        assert!(debug.contains("acct-a/app-1"), "{debug}");
        // Not the signed form: nothing of it is echoed.
        assert_eq!(shown("opaque-capability"), "<lease id>");
        assert_eq!(shown("a.b"), "<lease id>");
    }
}
