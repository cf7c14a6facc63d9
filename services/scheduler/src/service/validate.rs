//! Decoding and checking requests at the gRPC edge: every field a caller can get wrong is
//! refused here with INVALID_ARGUMENT naming it (or NOT_FOUND for an unknown pool or key),
//! before any store call, and turned into a domain value.
//!
//! Untrusted strings (invariant 10 of docs/ARCHITECTURE.md): ids holding control characters are refused before
//! anything logs them; messages quote at most a short escaped prefix of a caller's value.

use std::time::Duration;

use tokio::time::Instant;
use voxpool_config::MAX_KEY_CAPACITY;
use voxpool_domain::{
    contract::Outcome,
    untrusted::{FieldProblem, check_field, quote},
};
use voxpool_proto::scheduler::v1 as pb;

use super::SchedulerService;
use crate::{
    domain::{AcquireRequest, PoolEntry},
    error::SchedulerError,
    model::{AcquireParams, LeaseId, LeaseToken, Priority, ReportParams},
    signing::{Refused, SignedLease},
    store::StoreError,
};

/// Most entries accepted in `exclude_keys` / `upstream_ids`.
pub const MAX_FILTER_ENTRIES: usize = 256;
/// Longest accepted `exclude_keys` / `upstream_ids` entry: a key id `upstream/key` is at
/// most 64 + 1 + 64 characters (config ids are at most 64).
pub const MAX_FILTER_ENTRY_CHARS: usize = 129;
/// Longest accepted `request_id`.
pub const MAX_REQUEST_ID_CHARS: usize = 128;
/// Longest accepted `wait_timeout_ms` (10 minutes).
pub const MAX_WAIT_TIMEOUT_MS: i64 = 600_000;
/// Longest accepted `retry_after_ms` in a report (24 hours).
pub const MAX_RETRY_AFTER_MS: i64 = 86_400_000;
/// Longest id (pool, key, upstream) checked for control characters before it is looked up.
const MAX_ID_CHARS: usize = 1024;
/// Margin kept before the gRPC deadline so our DEADLINE_EXCEEDED (with details) reaches the
/// caller before its own timer fires.
const DEADLINE_MARGIN: Duration = Duration::from_millis(50);

/// Most characters one Report may count against a key's quota (one vendor call's text).
const MAX_REPORT_CHARACTERS: u64 = 10_000_000;

pub(super) fn invalid(field: impl Into<String>, message: impl Into<String>) -> SchedulerError {
    SchedulerError::InvalidArgument {
        field: field.into(),
        message: message.into(),
    }
}

/// The caller's deadline (`grpc-timeout`), less [`DEADLINE_MARGIN`], as an instant.
pub(super) fn deadline(md: &tonic::metadata::MetadataMap) -> Option<Instant> {
    let timeout = voxpool_runtime::serve::grpc_timeout(md)?;
    Instant::now().checked_add(timeout.saturating_sub(DEADLINE_MARGIN))
}

/// `priority`: a `Priority` value; PRIORITY_UNSPECIFIED is STANDARD.
pub(super) fn priority(raw: i32) -> Result<Priority, SchedulerError> {
    match pb::Priority::try_from(raw) {
        Ok(pb::Priority::Interactive) => Ok(Priority::Interactive),
        Ok(pb::Priority::Standard | pb::Priority::Unspecified) => Ok(Priority::Standard),
        Ok(pb::Priority::Batch) => Ok(Priority::Batch),
        Err(_) => Err(invalid(
            "priority",
            format!("unknown value {raw}: use INTERACTIVE, STANDARD or BATCH"),
        )),
    }
}

/// `request_id`: at most [`MAX_REQUEST_ID_CHARS`], no control characters (it goes into logs).
pub(super) fn request_id(raw: &str) -> Result<(), SchedulerError> {
    check_field(raw, MAX_REQUEST_ID_CHARS).map_err(|p| invalid("request_id", p.to_string()))
}

impl SchedulerService {
    /// The configured pool `pool`, named `field` in errors.
    pub(super) fn pool(&self, field: &str, pool: &str) -> Result<&PoolEntry, SchedulerError> {
        if pool.is_empty() {
            return Err(invalid(
                field,
                "required: a pool id such as \"volc-standard\"",
            ));
        }
        if let Err(problem @ FieldProblem::ControlCharacter { .. }) =
            check_field(pool, MAX_ID_CHARS)
        {
            return Err(invalid(field, problem.to_string()));
        }
        let pools = self.scheduler.pools();
        pools.get(pool).ok_or_else(|| SchedulerError::UnknownPool {
            pool: pool.to_owned(),
            known: pools.names().to_owned(),
        })
    }

    pub(super) fn ttl(&self, field: &str, ttl_ms: i64) -> Result<u64, SchedulerError> {
        let max = self.settings.max_lease_ttl_ms;
        match u64::try_from(ttl_ms) {
            Ok(0) => Ok(self.settings.default_lease_ttl_ms),
            Ok(t) if t <= max => Ok(t),
            _ => Err(invalid(
                field,
                format!("must be 0 (server default) or 1..={max} ms, got {ttl_ms}"),
            )),
        }
    }

    /// A lease id this fleet issued, of a configured pool (`signing` module doc): malformed
    /// is INVALID_ARGUMENT naming `field`, a signature that does not verify PERMISSION_DENIED.
    /// Call after [`SchedulerService::ensure_signer`].
    pub(super) fn lease_id(&self, field: &str, raw: &str) -> Result<SignedLease, SchedulerError> {
        let malformed = || {
            invalid(
                field,
                format!(
                    "{} is not a lease id: expected <pool>/<upstream>/<key>/<32 hex digits>.<grant ms>.<32 hex digits> as returned by Acquire",
                    quote(raw)
                ),
            )
        };
        // The shape and the pool first: an id of a pool this fleet does not serve is NOT_FOUND
        // naming the pools it does, whatever its signature.
        let shape = SignedLease::parse(raw).ok_or_else(malformed)?;
        self.pool(field, &shape.id.pool)?;
        // Every caller read the secret first (`SchedulerService::ensure_signer`).
        self.signer.verify(raw).map_err(|refused| match refused {
            Refused::Malformed => malformed(),
            Refused::NotIssued => SchedulerError::LeaseNotIssued {
                lease_id: raw.to_owned(),
            },
        })
    }

    /// The lease's own key when the request names one (`key_id` of Report / Renew): naming
    /// another key than the lease was granted on is refused.
    pub(super) fn same_key(
        &self,
        lease: &SignedLease,
        field: &str,
        key: &str,
    ) -> Result<(), SchedulerError> {
        if key.is_empty() || key == lease.key_id {
            return Ok(());
        }
        self.key_of(&lease.id.pool, field, key)?;
        Err(invalid(
            field,
            format!(
                "the lease is on key {:?}, not {}; send the keyId the lease was granted on (or leave it empty)",
                lease.key_id,
                quote(key)
            ),
        ))
    }

    /// An Acquire as the admission policy takes it.
    ///
    /// `caller` is the authenticated caller's identity (empty when callers are not
    /// authenticated): an idempotency key is bound to it.
    pub(super) fn acquire_request(
        &self,
        r: &pb::AcquireRequest,
        caller: &str,
        deadline: Option<Instant>,
    ) -> Result<AcquireRequest, SchedulerError> {
        let pool = self.pool("pool", &r.pool)?;
        for (field, entries) in [
            ("exclude_keys", &r.exclude_keys),
            ("upstream_ids", &r.upstream_ids),
        ] {
            if entries.len() > MAX_FILTER_ENTRIES {
                return Err(invalid(
                    field,
                    format!(
                        "at most {MAX_FILTER_ENTRIES} entries, got {}",
                        entries.len()
                    ),
                ));
            }
            // Checked before anything compares, logs or stores them (module doc).
            for (i, entry) in entries.iter().enumerate() {
                check_field(entry, MAX_FILTER_ENTRY_CHARS)
                    .map_err(|p| invalid(format!("{field}[{i}]"), p.to_string()))?;
            }
        }
        for (i, u) in r.upstream_ids.iter().enumerate() {
            if !pool.upstreams.contains(u) {
                return Err(invalid(
                    format!("upstream_ids[{i}]"),
                    format!(
                        "pool {:?} has no upstream {} (upstreams: {})",
                        r.pool,
                        quote(u),
                        pool.upstreams.join(", ")
                    ),
                ));
            }
        }
        let ttl_ms = self.ttl("lease_ttl_ms", r.lease_ttl_ms)?;
        let wait_ms = u64::try_from(r.wait_timeout_ms)
            .ok()
            .filter(|_| r.wait_timeout_ms <= MAX_WAIT_TIMEOUT_MS)
            .ok_or_else(|| {
                invalid(
                    "wait_timeout_ms",
                    format!(
                        "must be 0..={MAX_WAIT_TIMEOUT_MS} ms, got {}",
                        r.wait_timeout_ms
                    ),
                )
            })?;
        check_field(&r.idempotency_key, MAX_REQUEST_ID_CHARS)
            .map_err(|p| invalid("idempotency_key", p.to_string()))?;
        let idempotent = !r.idempotency_key.is_empty();
        let priority = priority(r.priority)?;
        voxpool_domain::contract::check_tenant(&r.tenant)
            .map_err(|p| invalid("tenant", p.to_string()))?;
        let characters = characters(r.characters)?;
        check_field(&r.caller, 64).map_err(|p| invalid("caller", p.to_string()))?;
        let tier = match voxpool_proto::catalog::v1::Tier::try_from(r.tier) {
            Ok(_) => voxpool_domain::snapshot::Tier::from_pb(r.tier),
            Err(_) => {
                return Err(invalid(
                    "tier",
                    format!(
                        "unknown tier {}: send a voxpool.catalog.v1.Tier value",
                        r.tier
                    ),
                ));
            }
        };
        Ok(AcquireRequest {
            caller: r.caller.clone(),
            tier,
            cost_micros: cost_micros(r.cost_micros)?,
            request_characters: self::characters(r.request_characters).map_err(|_| {
                invalid(
                    "request_characters",
                    format!(
                        "{} is out of range 0..={MAX_REPORT_CHARACTERS}",
                        r.request_characters
                    ),
                )
            })?,
            request_cost_micros: cost_micros(r.request_cost_micros).map_err(|_| {
                invalid(
                    "request_cost_micros",
                    format!("{} is out of range 0..=10^15", r.request_cost_micros),
                )
            })?,
            params: AcquireParams {
                pool: r.pool.clone(),
                token: if idempotent {
                    LeaseToken::for_idempotency_key(&r.pool, caller, &r.idempotency_key)
                } else {
                    LeaseToken::random()
                },
                idempotent,
                // Keys the pool does not have exclude nothing: callers pass back what they tried.
                exclude_keys: r
                    .exclude_keys
                    .iter()
                    .filter(|k| pool.has_key(k))
                    .cloned()
                    .collect(),
                upstream_ids: r.upstream_ids.clone(),
                ttl_ms,
                priority,
                tenant: r.tenant.clone(),
                join_line: false,
                ticket_ttl_ms: 0,
                characters,
            },
            wait: Duration::from_millis(wait_ms),
            deadline,
        })
    }

    /// The lease a Release names: `lease_id`, or `pool` + `idempotency_key` (the lease an
    /// idempotent Acquire got or will get), never both.
    /// The lease a Release frees (and its grant time, from its signed id); by idempotency key,
    /// the one `caller` was granted, whenever.
    pub(super) fn release_target(
        &self,
        r: &pb::ReleaseRequest,
        caller: &str,
    ) -> Result<(LeaseId, Option<i64>), SchedulerError> {
        match (r.lease_id.is_empty(), r.idempotency_key.is_empty()) {
            (false, true) if r.pool.is_empty() => self
                .lease_id("lease_id", &r.lease_id)
                .map(|l| (l.id, Some(l.granted_at_ms))),
            (true, false) => {
                self.pool("pool", &r.pool)?;
                check_field(&r.idempotency_key, MAX_REQUEST_ID_CHARS)
                    .map_err(|p| invalid("idempotency_key", p.to_string()))?;
                Ok((
                    LeaseId {
                        pool: r.pool.clone(),
                        token: LeaseToken::for_idempotency_key(&r.pool, caller, &r.idempotency_key),
                    },
                    None,
                ))
            }
            (true, true) => Err(invalid(
                "lease_id",
                "required: the lease id Acquire returned (or pool with idempotency_key)",
            )),
            _ => Err(invalid(
                "lease_id",
                "give either lease_id, or pool with idempotency_key, not both",
            )),
        }
    }

    /// A Report as the store takes it.
    pub(super) fn report_params(
        &self,
        r: &pb::ReportRequest,
    ) -> Result<ReportParams, SchedulerError> {
        let lease = self.lease_id("lease_id", &r.lease_id)?;
        self.same_key(&lease, "key_id", &r.key_id)?;
        let outcome =
            Outcome::try_from(r.outcome).map_err(|e| invalid("outcome", e.to_string()))?;
        let retry_after_ms = u64::try_from(r.retry_after_ms)
            .ok()
            .filter(|_| r.retry_after_ms <= MAX_RETRY_AFTER_MS)
            .ok_or_else(|| {
                invalid(
                    "retry_after_ms",
                    format!(
                        "must be 0..={MAX_RETRY_AFTER_MS} ms, got {}",
                        r.retry_after_ms
                    ),
                )
            })?;
        if r.latency_ms < 0 {
            return Err(invalid(
                "latency_ms",
                format!("must be >= 0, got {}", r.latency_ms),
            ));
        }
        let characters = characters(r.characters)?;
        Ok(ReportParams {
            id: lease.id,
            key_id: Some(lease.key_id),
            outcome,
            retry_after_ms,
            release: r.release,
            characters,
            granted_at_ms: Some(lease.granted_at_ms),
        })
    }

    /// `key` as a key of the lease's pool (Report / Renew `key_id`): a configured key, else
    /// INVALID_ARGUMENT naming `field`.
    pub(super) fn key_of<'k>(
        &self,
        pool: &str,
        field: &str,
        key: &'k str,
    ) -> Result<&'k str, SchedulerError> {
        if self.pool("lease_id", pool)?.has_key(key) {
            return Ok(key);
        }
        Err(invalid(
            field,
            format!(
                "{} is not a key of pool {pool:?}; send the keyId the lease was granted on",
                quote(key)
            ),
        ))
    }

    /// The key an admin RPC addresses: a configured key of a configured pool.
    pub(super) fn admin_target(&self, pool: &str, key: &str) -> Result<(), SchedulerError> {
        let info = self.pool("pool", pool)?;
        if key.is_empty() {
            return Err(invalid(
                "key_id",
                "required: `upstream/key` as shown by GetPoolStatus",
            ));
        }
        if !info.has_key(key) {
            return Err(SchedulerError::UnknownKey {
                pool: pool.to_owned(),
                key: key.to_owned(),
            });
        }
        Ok(())
    }
}

/// `cost_micros` of an Acquire or Report: 0..=10^15 (`voxpool_config::MAX_COST_MICROS`).
pub(super) fn cost_micros(raw: i64) -> Result<u64, SchedulerError> {
    u64::try_from(raw)
        .ok()
        .filter(|_| raw <= voxpool_config::MAX_COST_MICROS)
        .ok_or_else(|| {
            invalid(
                "cost_micros",
                format!("must be 0..=10^15 (millionths of the configured currency), got {raw}"),
            )
        })
}

/// `characters` of an Acquire or Report: 0..=[`MAX_REPORT_CHARACTERS`].
fn characters(raw: i64) -> Result<u64, SchedulerError> {
    u64::try_from(raw)
        .ok()
        .filter(|c| *c <= MAX_REPORT_CHARACTERS)
        .ok_or_else(|| {
            invalid(
                "characters",
                format!(
                    "must be 0..={MAX_REPORT_CHARACTERS} (the characters of one vendor call), got {raw}"
                ),
            )
        })
}

/// UNAVAILABLE while a store-kept lease secret has not been read yet (`signing` module doc).
pub(super) fn not_ready() -> SchedulerError {
    SchedulerError::Store(StoreError::Unavailable(
        "this replica has not read the fleet's lease secret from the store yet; retry (another replica may answer)".into(),
    ))
}

/// A `SetKeyCapacity.capacity`: 0 (disables the key) to [`MAX_KEY_CAPACITY`].
pub(super) fn capacity(raw: i32) -> Result<u32, SchedulerError> {
    u32::try_from(raw)
        .ok()
        .filter(|c| *c <= MAX_KEY_CAPACITY)
        .ok_or_else(|| {
            invalid(
                "capacity",
                format!("must be 0..={MAX_KEY_CAPACITY} (0 disables the key), got {raw}"),
            )
        })
}
