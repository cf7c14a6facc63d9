//! A lease store that is still being connected at start-up: the server serves (health
//! NOT_SERVING) while `server::open_store_waiting` retries the real store in the background,
//! and every call answers [`StoreError::Unavailable`] naming the last reason until it is in
//! place. Then every call goes to it, and its hand-over and fill-release announcements are forwarded to the
//! receiver handed out before.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use async_trait::async_trait;
use tokio::sync::mpsc;

use super::{Budgets, FillLocks, Handover, LeaseStore, StoreError, StoreResult};
use crate::model::{
    AcquireParams, AcquireResult, BudgetAmount, BudgetAnswer, BudgetRow, BudgetUse, FillHolder,
    FillId, FillKey, FillState, HealthPolicy, KeyStatus, Lease, LeaseId, LeaseToken, PoolSpec,
    PoolStatus, ReportParams, ReportResult, Settle, TicketState,
};

/// The store being connected (module doc).
pub struct Connecting {
    store: OnceLock<Arc<dyn LeaseStore>>,
    why: Mutex<String>,
    forward: mpsc::UnboundedSender<Handover>,
    handovers: Mutex<Option<mpsc::UnboundedReceiver<Handover>>>,
    forward_fills: mpsc::UnboundedSender<FillKey>,
    fill_releases: Mutex<Option<mpsc::UnboundedReceiver<FillKey>>>,
}

impl Connecting {
    /// A store not connected yet, for `why` (shown by every call until [`Connecting::ready`]).
    pub fn new(why: String) -> Self {
        let (forward, handovers) = mpsc::unbounded_channel();
        let (forward_fills, fill_releases) = mpsc::unbounded_channel();
        Self {
            forward_fills,
            fill_releases: Mutex::new(Some(fill_releases)),
            store: OnceLock::new(),
            why: Mutex::new(why),
            forward,
            handovers: Mutex::new(Some(handovers)),
        }
    }

    /// Records why the last try failed.
    pub fn not_yet(&self, why: String) {
        *self.why.lock().unwrap_or_else(PoisonError::into_inner) = why;
    }

    /// Puts the connected store in place (once; later calls are ignored).
    pub fn ready(&self, store: Arc<dyn LeaseStore>) {
        if let Some(from) = store.handovers() {
            forward(from, self.forward.clone());
        }
        if let Some(from) = store.fill_releases() {
            forward(from, self.forward_fills.clone());
        }
        let _ = self.store.set(store);
    }

    fn get(&self) -> StoreResult<&Arc<dyn LeaseStore>> {
        self.store.get().ok_or_else(|| {
            let why = self.why.lock().unwrap_or_else(PoisonError::into_inner);
            StoreError::Unavailable(format!("not connected yet (start-up): {why}"))
        })
    }
}

/// Passes what `from` receives on to `to` until either side closes.
fn forward<T: Send + 'static>(mut from: mpsc::UnboundedReceiver<T>, to: mpsc::UnboundedSender<T>) {
    tokio::spawn(async move {
        while let Some(item) = from.recv().await {
            if to.send(item).is_err() {
                break;
            }
        }
    });
}

#[async_trait]
impl LeaseStore for Connecting {
    async fn seed(&self, pools: &[PoolSpec]) -> StoreResult<()> {
        self.get()?.seed(pools).await
    }

    async fn acquire(&self, params: &AcquireParams) -> StoreResult<AcquireResult> {
        self.get()?.acquire(params).await
    }

    async fn release_granted(&self, id: &LeaseId, granted_at_ms: Option<i64>) -> StoreResult<bool> {
        self.get()?.release_granted(id, granted_at_ms).await
    }

    async fn renew_granted(
        &self,
        id: &LeaseId,
        ttl_ms: u64,
        key_id: Option<&str>,
        granted_at_ms: Option<i64>,
    ) -> StoreResult<Option<Lease>> {
        self.get()?
            .renew_granted(id, ttl_ms, key_id, granted_at_ms)
            .await
    }

    async fn report(
        &self,
        params: &ReportParams,
        policy: &HealthPolicy,
    ) -> StoreResult<Option<ReportResult>> {
        self.get()?.report(params, policy).await
    }

    async fn status(&self, pool: &str) -> StoreResult<Option<PoolStatus>> {
        self.get()?.status(pool).await
    }

    async fn set_capacity(
        &self,
        pool: &str,
        key_id: &str,
        capacity: u32,
    ) -> StoreResult<Option<KeyStatus>> {
        self.get()?.set_capacity(pool, key_id, capacity).await
    }

    async fn set_disabled(
        &self,
        pool: &str,
        key_id: &str,
        disabled: bool,
    ) -> StoreResult<Option<KeyStatus>> {
        self.get()?.set_disabled(pool, key_id, disabled).await
    }

    async fn lease_secret(
        &self,
        candidate: &voxpool_domain::secret::Secret,
    ) -> StoreResult<voxpool_domain::secret::Secret> {
        self.get()?.lease_secret(candidate).await
    }

    async fn ping(&self) -> StoreResult<()> {
        self.get()?.ping().await
    }

    async fn claim(&self, pool: &str, token: &LeaseToken, ttl_ms: u64) -> StoreResult<TicketState> {
        self.get()?.claim(pool, token, ttl_ms).await
    }

    async fn keep_waiting(
        &self,
        pool: &str,
        tokens: &[LeaseToken],
        ttl_ms: u64,
    ) -> StoreResult<Vec<TicketState>> {
        self.get()?.keep_waiting(pool, tokens, ttl_ms).await
    }

    async fn leave(&self, pool: &str, token: &LeaseToken, keep_lease: bool) -> StoreResult<()> {
        self.get()?.leave(pool, token, keep_lease).await
    }

    fn handovers(&self) -> Option<mpsc::UnboundedReceiver<Handover>> {
        self.handovers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    async fn advance_clock(&self, pool: &str, ms: u64) -> StoreResult<()> {
        self.get()?.advance_clock(pool, ms).await
    }

    async fn forget_pool(&self, pool: &str) -> StoreResult<()> {
        self.get()?.forget_pool(pool).await
    }
}

#[async_trait]
impl FillLocks for Connecting {
    async fn acquire_fill(
        &self,
        key: &FillKey,
        fill_id: &FillId,
        ttl_ms: u64,
    ) -> StoreResult<FillState> {
        self.get()?.acquire_fill(key, fill_id, ttl_ms).await
    }

    async fn renew_fill(&self, key: &FillKey, fill_id: &FillId, ttl_ms: u64) -> StoreResult<bool> {
        self.get()?.renew_fill(key, fill_id, ttl_ms).await
    }

    async fn release_fill(&self, key: &FillKey, fill_id: &FillId) -> StoreResult<bool> {
        self.get()?.release_fill(key, fill_id).await
    }

    async fn fill_holder(&self, key: &FillKey) -> StoreResult<Option<FillHolder>> {
        self.get()?.fill_holder(key).await
    }

    fn fill_releases(&self) -> Option<mpsc::UnboundedReceiver<FillKey>> {
        self.fill_releases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    async fn advance_fill_clock(&self, key: &FillKey, ms: u64) -> StoreResult<()> {
        self.get()?.advance_fill_clock(key, ms).await
    }
}

#[async_trait]
impl Budgets for Connecting {
    async fn reserve_budget(
        &self,
        row: &BudgetRow,
        token: &LeaseToken,
        amount: BudgetAmount,
        ttl_ms: u64,
    ) -> StoreResult<BudgetAnswer> {
        self.get()?.reserve_budget(row, token, amount, ttl_ms).await
    }
    async fn settle_budget(
        &self,
        row: &BudgetRow,
        token: &LeaseToken,
        settle: Settle,
    ) -> StoreResult<()> {
        self.get()?.settle_budget(row, token, settle).await
    }
    async fn budget_use(&self, row: &BudgetRow) -> StoreResult<BudgetUse> {
        self.get()?.budget_use(row).await
    }
    async fn note_budget_rows(
        &self,
        token: &LeaseToken,
        rows: &[(String, String)],
        ttl_ms: u64,
    ) -> StoreResult<()> {
        self.get()?.note_budget_rows(token, rows, ttl_ms).await
    }
    async fn take_budget_rows(&self, token: &LeaseToken) -> StoreResult<Vec<(String, String)>> {
        self.get()?.take_budget_rows(token).await
    }
    async fn advance_budget_clock(&self, row: &BudgetRow, ms: u64) -> StoreResult<()> {
        self.get()?.advance_budget_clock(row, ms).await
    }
}
