//! A key's character quota in the memory store: what the current period used, what live
//! leases reserved, and whether more characters fit (the same rules as `lua/prelude.lua`).
//!
//! Invariant: calls in flight never take a key past its quota: a grant reserves its
//! Acquire's `characters` and is only made while used + reserved + asked fit the budget; a
//! SUCCESS report settles at most what its lease reserved.

use super::key::KeyEntry;
use crate::model::CoolReason;

impl KeyEntry {
    /// Characters used in the quota period containing `now` (0 once a new period began).
    pub(super) fn quota_used_at(&self, now: i64) -> u64 {
        match self.quota {
            Some(q) if q.per.window(now).0 == self.quota_window_start_ms => self.quota_used,
            _ => 0,
        }
    }

    /// Whether `characters` more fit in the quota next to what is used and reserved.
    pub(super) fn quota_room(&self, characters: u64, now: i64) -> bool {
        match self.quota {
            Some(q) if characters > 0 => {
                self.quota_used_at(now)
                    .saturating_add(self.quota_reserved)
                    .saturating_add(characters)
                    <= q.characters
            }
            _ => true,
        }
    }

    /// Whether `characters` exceed what the period has left even with nothing reserved: only
    /// the next period can serve them.
    pub(super) fn quota_spent_for(&self, characters: u64, now: i64) -> bool {
        self.quota.is_some_and(|q| {
            characters > 0 && self.quota_used_at(now).saturating_add(characters) > q.characters
        })
    }

    /// Within a tenth of its quota: picked only when no other key has room.
    pub(super) fn near_quota(&self, now: i64) -> bool {
        self.quota
            .is_some_and(|q| self.quota_used_at(now).saturating_mul(10) >= q.characters * 9)
    }

    /// Counts `characters` against the quota; spent, the key is out until the period ends.
    pub(super) fn spend(&mut self, characters: u64, now: i64) {
        let Some(q) = self.quota else { return };
        let (start, end) = q.per.window(now);
        if self.quota_window_start_ms != start {
            self.quota_window_start_ms = start;
            self.quota_used = 0;
        }
        self.quota_used = self.quota_used.saturating_add(characters);
        if self.quota_used >= q.characters {
            self.cool(end, CoolReason::Quota);
        }
    }
}
