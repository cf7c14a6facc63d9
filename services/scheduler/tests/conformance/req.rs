//! Request builders: each RPC's request with what a test sets and defaults for the rest, so
//! a test says `req::acquire("p").wait_ms(100)` instead of a struct literal. Tests that send
//! raw wire values on purpose (unknown enum numbers, both of two exclusive fields) keep
//! their literals.

use voxpool_proto::scheduler::v1::{self as pb, Outcome};

/// An Acquire on `pool`, answered at once, with the server's default TTL.
pub fn acquire(pool: impl Into<String>) -> pb::AcquireRequest {
    pb::AcquireRequest {
        pool: pool.into(),
        ..Default::default()
    }
}

/// A Report of `outcome` on `lease_id` that keeps the lease.
pub fn report(lease_id: impl Into<String>, outcome: Outcome) -> pb::ReportRequest {
    pb::ReportRequest {
        lease_id: lease_id.into(),
        outcome: outcome as i32,
        ..Default::default()
    }
}

/// A Release of `lease_id`.
pub fn release(lease_id: impl Into<String>) -> pb::ReleaseRequest {
    pb::ReleaseRequest {
        lease_id: lease_id.into(),
        ..Default::default()
    }
}

/// A Release of the lease the idempotency key `key` was granted in `pool`.
pub fn release_by_key(pool: impl Into<String>, key: impl Into<String>) -> pb::ReleaseRequest {
    pb::ReleaseRequest {
        pool: pool.into(),
        idempotency_key: key.into(),
        ..Default::default()
    }
}

/// A Renew of `lease_id` for the server's default TTL.
pub fn renew(lease_id: impl Into<String>) -> pb::RenewRequest {
    pb::RenewRequest {
        lease_id: lease_id.into(),
        ..Default::default()
    }
}

/// An admin DisableKey of `key` of `pool` (send it through `admin`).
pub fn disable(pool: impl Into<String>, key: impl Into<String>) -> pb::DisableKeyRequest {
    pb::DisableKeyRequest {
        pool: pool.into(),
        key_id: key.into(),
    }
}

/// An admin EnableKey of `key` of `pool` (send it through `admin`).
pub fn enable(pool: impl Into<String>, key: impl Into<String>) -> pb::EnableKeyRequest {
    pb::EnableKeyRequest {
        pool: pool.into(),
        key_id: key.into(),
    }
}

/// An admin SetKeyCapacity of `key` of `pool` to `capacity` (send it through `admin`).
pub fn set_capacity(
    pool: impl Into<String>,
    key: impl Into<String>,
    capacity: i32,
) -> pb::SetKeyCapacityRequest {
    pb::SetKeyCapacityRequest {
        pool: pool.into(),
        key_id: key.into(),
        capacity,
    }
}

/// The optional fields of an Acquire.
pub trait AcquireExt {
    /// `wait_timeout_ms`.
    fn wait_ms(self, ms: i64) -> Self;
    /// `lease_ttl_ms`.
    fn ttl_ms(self, ms: i64) -> Self;
    /// `request_id`.
    fn request_id(self, id: impl Into<String>) -> Self;
    /// `exclude_keys`.
    fn exclude_keys(self, keys: Vec<String>) -> Self;
    /// `upstream_ids`.
    fn upstream_ids(self, ids: Vec<String>) -> Self;
    /// `idempotency_key`.
    fn idempotency_key(self, key: impl Into<String>) -> Self;
    /// `priority`.
    fn class(self, priority: pb::Priority) -> Self;
    /// `tenant`.
    fn tenant(self, tenant: impl Into<String>) -> Self;
    /// `characters`.
    fn characters(self, characters: i64) -> Self;
}

impl AcquireExt for pb::AcquireRequest {
    fn wait_ms(mut self, ms: i64) -> Self {
        self.wait_timeout_ms = ms;
        self
    }
    fn ttl_ms(mut self, ms: i64) -> Self {
        self.lease_ttl_ms = ms;
        self
    }
    fn request_id(mut self, id: impl Into<String>) -> Self {
        self.request_id = id.into();
        self
    }
    fn exclude_keys(mut self, keys: Vec<String>) -> Self {
        self.exclude_keys = keys;
        self
    }
    fn upstream_ids(mut self, ids: Vec<String>) -> Self {
        self.upstream_ids = ids;
        self
    }
    fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = key.into();
        self
    }
    fn class(mut self, priority: pb::Priority) -> Self {
        self.priority = priority as i32;
        self
    }
    fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = tenant.into();
        self
    }
    fn characters(mut self, characters: i64) -> Self {
        self.characters = characters;
        self
    }
}

/// The optional fields of a Report.
pub trait ReportExt {
    /// `retry_after_ms`.
    fn retry_after_ms(self, ms: i64) -> Self;
    /// `release = true`.
    fn releasing(self) -> Self;
    /// `key_id`.
    fn key_id(self, key: impl Into<String>) -> Self;
    /// `characters`.
    fn characters(self, characters: i64) -> Self;
}

impl ReportExt for pb::ReportRequest {
    fn retry_after_ms(mut self, ms: i64) -> Self {
        self.retry_after_ms = ms;
        self
    }
    fn releasing(mut self) -> Self {
        self.release = true;
        self
    }
    fn key_id(mut self, key: impl Into<String>) -> Self {
        self.key_id = key.into();
        self
    }
    fn characters(mut self, characters: i64) -> Self {
        self.characters = characters;
        self
    }
}

/// The optional fields of a Renew.
pub trait RenewExt {
    /// `lease_ttl_ms`.
    fn ttl_ms(self, ms: i64) -> Self;
    /// `key_id` (re-registration during a recovery window).
    fn key_id(self, key: impl Into<String>) -> Self;
}

impl RenewExt for pb::RenewRequest {
    fn ttl_ms(mut self, ms: i64) -> Self {
        self.lease_ttl_ms = ms;
        self
    }
    fn key_id(mut self, key: impl Into<String>) -> Self {
        self.key_id = key.into();
        self
    }
}
