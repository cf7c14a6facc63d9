//! Items that wait for a spent budget. When synthesis answers `BUDGET_EXHAUSTED` for an item
//! (a budget covering the job's tenant is used up for its period), the item is not failed and
//! spends no attempt and no delivery: it is queued again while it stays in the stream's pending
//! list (`crate::store::JobStore::wait_for_budget`), its job shows the wait (`budget_wait`),
//! and its tenant's items pause fleet-wide (`crate::store::JobStore::pause_tenant`) until the
//! budget resets or `--budget-recheck` has passed, whichever is first (so a raised budget is
//! noticed). Every replica's dispatcher reads the pause at its refresh and neither takes nor
//! reclaims that tenant's items meanwhile; other tenants' items run on. When the pause is
//! over, any replica reclaims the waiting items; the next success clears the job's wait.

use std::time::Duration;

use tokio::time::Instant;

use super::Workers;
use crate::{store::Claimed, synth::JobParams, usage::BudgetWait};

impl Workers {
    /// Whether `tenant`'s items wait for a budget now.
    pub(super) fn tenant_paused(&self, tenant: &str) -> bool {
        self.paused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(tenant)
            .is_some_and(|until| *until > Instant::now())
    }

    /// Reads the fleet's pauses of `tenants` (the dispatcher's refresh).
    pub(super) async fn refresh_pauses<'a>(
        &self,
        tenants: impl Iterator<Item = &'a str>,
    ) -> crate::store::StoreResult<()> {
        let mut found = Vec::new();
        for tenant in tenants {
            found.push((tenant.to_owned(), self.store.tenant_pause(tenant).await?));
        }
        let now = Instant::now();
        let mut paused = self
            .paused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        paused.retain(|_, until| *until > now);
        for (tenant, left) in found {
            match left {
                Some(left) => {
                    paused.insert(tenant, now + left);
                }
                None => {
                    paused.remove(&tenant);
                }
            }
        }
        Ok(())
    }

    /// Synthesis refused `claimed` for a spent budget (module doc): the item waits, the job
    /// shows why, the tenant pauses here at once and fleet-wide. The caller hands the item
    /// back.
    pub(super) async fn budget_refused(
        &self,
        claimed: &Claimed,
        params: &JobParams,
        mut wait: BudgetWait,
    ) {
        let now_ms = chrono::Utc::now().timestamp_millis();
        let recheck = self.options.budget_recheck;
        let to_reset = u64::try_from(wait.resets_at_ms.saturating_sub(now_ms))
            .ok()
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis);
        let pause = to_reset.map_or(recheck, |d| d.min(recheck));
        wait.next_try_ms = now_ms.saturating_add(i64::try_from(pause.as_millis()).unwrap_or(0));
        self.paused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(params.tenant.clone(), Instant::now() + pause);
        tracing::info!(
            job = %claimed.job,
            tenant = %voxpool_domain::untrusted::quote(&params.tenant),
            budget = %voxpool_domain::untrusted::quote(&wait.budget),
            pause_ms = pause.as_millis(),
            "a budget of the tenant is spent: its items wait (not failed, no attempt spent)"
        );
        if let Err(e) = self.store.wait_for_budget(claimed, &wait).await {
            tracing::warn!(job = %claimed.job, error = %e, "could not send an item back to wait for its budget: it is reclaimed as a delivery");
        }
        let why = serde_json::to_string(&wait).unwrap_or_default();
        if let Err(e) = self.store.pause_tenant(&params.tenant, pause, &why).await {
            tracing::warn!(job = %claimed.job, error = %e, "could not pause the tenant fleet-wide: other replicas may try it sooner");
        }
    }
}
