//! One key of a memory-store pool: its counts, capacities, cooldown and quota counters, and
//! the state and status read from them.
//!
//! Invariant: `capacity <= ceiling` (the effective capacity never exceeds the configured or
//! admin-set one), and a new cooldown never shortens the one running ([`KeyEntry::cool`]).

use crate::model::{CoolReason, KeyState, KeyStatus, Lease, LeaseId, QuotaConfig};

#[derive(Debug, Default)]
pub(super) struct KeyEntry {
    /// What grants are held to: the effective capacity (`ceiling` on a pool that does not
    /// adapt).
    pub(super) capacity: u32,
    /// The configured or admin-set capacity: `capacity` never exceeds it.
    pub(super) ceiling: u32,
    /// When `capacity` last changed by adaptation (store clock, ms).
    pub(super) adapted_at_ms: i64,
    /// When a concurrency refusal last lowered `capacity` (store clock, ms).
    pub(super) lowered_at_ms: i64,
    /// Wait before the next probe (ms); 0 = `adaptive_increase_ms`.
    pub(super) probe_ms: u64,
    /// The key's character budget per period.
    pub(super) quota: Option<QuotaConfig>,
    /// Characters used in the period starting at `quota_window_start_ms`.
    pub(super) quota_used: u64,
    /// Characters reserved by live leases (their Acquire's `characters`), not counted yet.
    pub(super) quota_reserved: u64,
    /// Start of the period `quota_used` counts (store clock, ms).
    pub(super) quota_window_start_ms: i64,
    pub(super) config_capacity: u32,
    pub(super) in_flight: u32,
    pub(super) cool_until_ms: i64,
    pub(super) cool_reason: Option<CoolReason>,
    pub(super) disabled: bool,
    pub(super) failures: u32,
}

impl KeyEntry {
    pub(super) fn state(&self, now: i64) -> KeyState {
        if self.ceiling == 0 || self.disabled {
            KeyState::Disabled
        } else if self.cool_until_ms > now {
            match self.cool_reason {
                Some(CoolReason::Credential) => KeyState::Disabled,
                Some(CoolReason::Quota) => KeyState::OverQuota,
                _ => KeyState::Cooling,
            }
        } else {
            KeyState::Available
        }
    }

    pub(super) fn status(&self, key_id: &str, now: i64) -> KeyStatus {
        KeyStatus {
            key_id: key_id.to_owned(),
            capacity: self.ceiling,
            effective_capacity: self.capacity,
            in_flight: self.in_flight,
            state: self.state(now),
            cooldown_until_ms: if self.cool_until_ms > now {
                self.cool_until_ms
            } else {
                0
            },
            consecutive_failures: self.failures,
            quota_used: self.quota_used_at(now),
            quota_limit: self.quota.map_or(0, |q| q.characters),
            quota_resets_at_ms: self.quota.map_or(0, |q| q.per.window(now).1),
        }
    }

    /// The lease `id` on this key (`key_id`), ending at `expires_at_ms`, with the key's
    /// counts now.
    pub(super) fn lease(
        &self,
        id: LeaseId,
        key_id: String,
        expires_at_ms: i64,
        granted_at_ms: i64,
    ) -> Lease {
        Lease {
            id,
            key_id,
            expires_at_ms,
            granted_at_ms,
            key_in_flight: self.in_flight,
            key_capacity: self.capacity,
        }
    }

    pub(super) fn cool(&mut self, until: i64, reason: CoolReason) {
        // A new cooldown never shortens an existing one.
        if until > self.cool_until_ms {
            self.cool_until_ms = until;
            self.cool_reason = Some(reason);
        }
    }

    /// Admin: a new ceiling; learning starts again from it.
    pub(super) fn set_capacity(&mut self, capacity: u32, now: i64) {
        self.capacity = capacity;
        self.ceiling = capacity;
        self.adapted_at_ms = now;
    }

    /// Admin: disables or enables the key; enabling also clears its cooldown and failures.
    pub(super) fn set_disabled(&mut self, disabled: bool) {
        self.disabled = disabled;
        if !disabled {
            self.cool_until_ms = 0;
            self.cool_reason = None;
            self.failures = 0;
        }
    }
}
