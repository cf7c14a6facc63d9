//! Quota refusals name the quota: an Acquire refused because keys' character quotas cannot
//! hold its characters says which keys, their use and limit, and when each period resets
//! (docs/SCHEDULER.md "Character quotas"). Read from the pool's status on the refusal path
//! only.

use super::Scheduler;
use crate::{
    error::{QuotaNote, SchedulerError},
    model::{KeyState, KeyStatus},
};

impl Scheduler {
    /// `e` with the keys whose quota cannot hold `characters` named: every key over quota
    /// (or whose period cannot hold them) on UNAVAILABLE; the keys with a free slot whose
    /// quota reservations hold the rest on POOL_FULL.
    pub(super) async fn name_quota(&self, e: SchedulerError, characters: u64) -> SchedulerError {
        match e {
            SchedulerError::KeysUnavailable {
                pool,
                next_available_ms,
                now_ms,
                ..
            } => {
                let over_quota = self
                    .quota_notes(&pool, |k| {
                        k.state == KeyState::OverQuota
                            || (k.quota_limit > 0
                                && k.quota_used.saturating_add(characters) > k.quota_limit)
                    })
                    .await;
                SchedulerError::KeysUnavailable {
                    pool,
                    next_available_ms,
                    now_ms,
                    over_quota,
                    characters,
                }
            }
            SchedulerError::PoolFull {
                pool,
                capacity,
                in_flight,
                retry_after_ms,
                waited_ms,
                quota_short,
                ..
            } if quota_short > 0 => {
                let quota_keys = self
                    .quota_notes(&pool, |k| {
                        k.state == KeyState::Available
                            && k.quota_limit > 0
                            && k.in_flight < k.effective_capacity
                    })
                    .await;
                SchedulerError::PoolFull {
                    pool,
                    capacity,
                    in_flight,
                    retry_after_ms,
                    waited_ms,
                    quota_short,
                    quota_keys,
                    characters,
                }
            }
            other => other,
        }
    }

    /// The keys of `pool` that `pick` selects, with their quota (none when the status cannot
    /// be read: the refusal stands without the names).
    async fn quota_notes(&self, pool: &str, pick: impl Fn(&KeyStatus) -> bool) -> Vec<QuotaNote> {
        match self.store.status(pool).await {
            Ok(Some(status)) => status
                .keys
                .iter()
                .filter(|k| pick(k))
                .map(|k| QuotaNote {
                    key: k.key_id.clone(),
                    used: k.quota_used,
                    limit: k.quota_limit,
                    resets_at_ms: k.quota_resets_at_ms,
                })
                .collect(),
            _ => Vec::new(),
        }
    }
}
