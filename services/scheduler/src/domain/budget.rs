//! Budgets at Acquire, Report and Release ([`Scheduler::acquire`], docs/SCHEDULER.md
//! "Budgets"): every `[[budgets]]` row covering a request is reserved in the store before a
//! key is granted, and settled by the lease's Report.
//!
//! Owns the budget side of invariant 1 of docs/ARCHITECTURE.md (never oversell, here a
//! budget): the store reserves each row in one atomic step (`store::budget`), so concurrent
//! Acquires on any replica never take a budget past its limit; a grant that fails lets its
//! reservations go; a request that goes away while it waits lets them go too (unless it is
//! idempotent: its retry is answered the same lease, which the reservation covers); a Report
//! settles what the vendor charged; a Release without a Report counts the whole reservation;
//! a reservation nobody settles counts in full when it expires.
//!
//! A spent budget refuses at once: it does not free up in seconds, so the request never waits
//! in a pool's line for it.

use std::sync::Arc;

use voxpool_config::{BudgetConfig, Config};
use voxpool_domain::snapshot::Tier;

use super::{AcquireRequest, Granted, Scheduler};
use crate::{
    error::{BudgetRefused, SchedulerError},
    model::{BudgetAmount, BudgetAnswer, BudgetRow, BudgetUse, Lease, LeaseId, LeaseToken, Settle},
    store::LeaseStore,
};

/// How much longer than the lease TTL (and the wait) a reservation lives before it counts as
/// spent (ms): room for a late Report.
pub const RESERVATION_MARGIN_MS: u64 = 60_000;

/// The configured budgets and their currency.
#[derive(Debug, Default)]
pub struct BudgetBook {
    budgets: Vec<BudgetConfig>,
    rows: Vec<BudgetRow>,
    currency: String,
}

/// One budget row as the status shows it.
#[derive(Clone, Debug)]
pub struct BudgetStatusRow {
    /// The row and its limits.
    pub row: BudgetRow,
    /// The tiers the budget covers (empty = every tier).
    pub tiers: Vec<Tier>,
    /// What it holds now.
    pub usage: BudgetUse,
    /// `[usage] currency`.
    pub currency: String,
}

impl BudgetBook {
    /// The budgets of `config`.
    pub fn from_config(config: &Config) -> Self {
        Self {
            budgets: config.budgets.clone(),
            rows: rows_of(config),
            currency: config.usage.currency.clone(),
        }
    }

    /// The rows covering a request of `tenant`, `caller`, `tier`.
    fn covering(&self, tenant: &str, caller: &str, tier: Option<Tier>) -> Vec<BudgetRow> {
        self.budgets
            .iter()
            .filter(|b| b.covers(tenant, caller, tier))
            .map(|b| BudgetRow::of(b, b.subject(tenant, caller)))
            .collect()
    }

    /// The row `(id, subject)` names, while its budget is configured.
    fn row(&self, id: &str, subject: &str) -> Option<BudgetRow> {
        self.budgets
            .iter()
            .find(|b| b.id == id)
            .map(|b| BudgetRow::of(b, subject))
    }
}

/// Every row of every configured budget: a pooled budget's one row, else one per tenant and
/// caller it names; sorted by budget id, then subject.
pub fn rows_of(config: &Config) -> Vec<BudgetRow> {
    let mut budgets: Vec<&BudgetConfig> = config.budgets.iter().collect();
    budgets.sort_by(|a, b| a.id.cmp(&b.id));
    let mut out = Vec::new();
    for b in budgets {
        let mut subjects: Vec<&str> = if b.pooled {
            vec!["*"]
        } else {
            b.tenants
                .iter()
                .chain(&b.callers)
                .map(String::as_str)
                .collect()
        };
        subjects.sort_unstable();
        subjects.dedup();
        out.extend(subjects.into_iter().map(|s| BudgetRow::of(b, s)));
    }
    out
}

/// Reservations of one Acquire, let go on drop unless disarmed (module doc).
struct Hold {
    store: Arc<dyn LeaseStore>,
    token: LeaseToken,
    rows: Vec<BudgetRow>,
    armed: bool,
}

impl Hold {
    /// Lets every reservation go now (nothing charged).
    async fn release(mut self) {
        self.armed = false;
        let rows = std::mem::take(&mut self.rows);
        release(self.store.clone(), self.token.clone(), rows).await;
    }
}

async fn release(store: Arc<dyn LeaseStore>, token: LeaseToken, rows: Vec<BudgetRow>) {
    for row in &rows {
        if let Err(e) = store.settle_budget(row, &token, Settle::Nothing).await {
            tracing::warn!(budget = %row.budget, error = %e, "could not let a budget reservation go; it counts as spent when it expires");
        }
    }
    let _ = store.take_budget_rows(&token).await;
}

impl Drop for Hold {
    fn drop(&mut self) {
        if !self.armed || self.rows.is_empty() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let rows = std::mem::take(&mut self.rows);
            runtime.spawn(release(self.store.clone(), self.token.clone(), rows));
        }
    }
}

impl Scheduler {
    /// Admits `request` within its budgets (module doc), then as `admission` says.
    ///
    /// Errors: `BudgetExhausted` naming the budget, its use and its reset; every refusal of
    /// [`Scheduler::admit`]; a quota refusal names the keys' quota (`quota` module).
    pub async fn acquire(
        &self,
        mut request: AcquireRequest,
        on_wait: impl FnOnce(),
    ) -> Result<(Lease, Granted), SchedulerError> {
        if !request.params.idempotent {
            request.params.token = LeaseToken::random();
        }
        let p = &request.params;
        let rows = self
            .budgets
            .covering(&p.tenant, &request.caller, request.tier);
        let hold = if rows.is_empty() {
            None
        } else {
            Some(self.reserve(&request, rows).await?)
        };
        let characters = request.params.characters;
        match self.admit(request, on_wait).await {
            Ok(granted) => {
                if let Some(mut hold) = hold {
                    hold.armed = false;
                }
                Ok(granted)
            }
            Err(e) => {
                match hold {
                    // A store failure may still have granted (a script run late): the
                    // reservation stays and counts when it expires, never as free.
                    Some(mut hold) if matches!(e, SchedulerError::Store(_)) => hold.armed = false,
                    Some(hold) => hold.release().await,
                    None => {}
                }
                Err(self.name_quota(e, characters).await)
            }
        }
    }

    /// Reserves `rows` for `request`, or says which budget cannot hold it.
    async fn reserve(
        &self,
        request: &AcquireRequest,
        rows: Vec<BudgetRow>,
    ) -> Result<Hold, SchedulerError> {
        let p = &request.params;
        let ttl_ms = u64::try_from(request.wait.as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(p.ttl_ms)
            .saturating_add(RESERVATION_MARGIN_MS);
        let noted: Vec<(String, String)> = rows
            .iter()
            .map(|r| (r.budget.clone(), r.subject.clone()))
            .collect();
        self.store
            .note_budget_rows(&p.token, &noted, ttl_ms)
            .await?;
        let amount = BudgetAmount {
            characters: p.characters,
            cost_micros: request.cost_micros,
        };
        self.whole_request_fits(request, &rows, amount).await?;
        let mut hold = Hold {
            store: self.store.clone(),
            token: p.token.clone(),
            rows: Vec::with_capacity(rows.len()),
            // A request that goes away lets its reservations go, unless its retry claims them.
            armed: !p.idempotent,
        };
        for row in rows {
            match self
                .store
                .reserve_budget(&row, &p.token, amount, ttl_ms)
                .await
            {
                Ok(BudgetAnswer::Reserved(_)) => hold.rows.push(row),
                Ok(BudgetAnswer::Refused(limit, usage)) => {
                    hold.release().await;
                    return Err(SchedulerError::BudgetExhausted(Box::new(BudgetRefused {
                        row,
                        limit,
                        asked: amount,
                        usage,
                        currency: self.budgets.currency.clone(),
                    })));
                }
                Err(e) => {
                    hold.release().await;
                    return Err(e.into());
                }
            }
        }
        Ok(hold)
    }

    /// Refuses at once when a row cannot hold what the whole request needs
    /// (`request_characters` / `request_cost_micros`, when more than this call): its later
    /// calls would be refused after its first ones were spent, and the caller would get
    /// nothing for them. A read, not a reservation: concurrent requests may still each pass
    /// it, and the reservations (atomic) keep the limit.
    async fn whole_request_fits(
        &self,
        request: &AcquireRequest,
        rows: &[BudgetRow],
        call: BudgetAmount,
    ) -> Result<(), SchedulerError> {
        let need = BudgetAmount {
            characters: request.request_characters.max(call.characters),
            cost_micros: request.request_cost_micros.max(call.cost_micros),
        };
        if need == call {
            return Ok(());
        }
        for row in rows {
            let usage = self.store.budget_use(row).await?;
            let Some(limit) = row.over(&usage, need) else {
                continue;
            };
            return Err(SchedulerError::BudgetExhausted(Box::new(BudgetRefused {
                row: row.clone(),
                limit,
                asked: need,
                usage,
                currency: self.budgets.currency.clone(),
            })));
        }
        Ok(())
    }

    /// Settles the budget reservations of the lease `id` (module doc); best effort: a row
    /// not settled counts its whole reservation when it expires.
    pub(super) async fn settle_budgets(&self, id: &LeaseId, settle: Settle) {
        if self.budgets.budgets.is_empty() {
            return;
        }
        let noted = match self.store.take_budget_rows(&id.token).await {
            Ok(noted) => noted,
            Err(e) => {
                tracing::warn!(lease = %id, error = %e, "could not read a lease's budget reservations; they count as spent when they expire");
                return;
            }
        };
        for (budget, subject) in noted {
            let Some(row) = self.budgets.row(&budget, &subject) else {
                continue;
            };
            if let Err(e) = self.store.settle_budget(&row, &id.token, settle).await {
                tracing::warn!(budget = %budget, error = %e, "could not settle a budget reservation; it counts as spent when it expires");
            }
        }
    }

    /// Every configured budget's rows ([`rows_of`]) and what each holds now.
    /// Errors: the store's.
    pub async fn budget_status(&self) -> Result<Vec<BudgetStatusRow>, SchedulerError> {
        let mut out = Vec::with_capacity(self.budgets.rows.len());
        for row in &self.budgets.rows {
            let usage = self.store.budget_use(row).await?;
            let tiers = self
                .budgets
                .budgets
                .iter()
                .find(|b| b.id == row.budget)
                .map(|b| b.tiers.clone())
                .unwrap_or_default();
            out.push(BudgetStatusRow {
                row: row.clone(),
                tiers,
                usage,
                currency: self.budgets.currency.clone(),
            });
        }
        Ok(out)
    }

    /// Test hook: moves the clock of the row `(budget, subject)` forward by `ms`.
    /// Errors: the store's; an unknown budget changes nothing.
    pub async fn advance_budget_clock(
        &self,
        budget: &str,
        subject: &str,
        ms: u64,
    ) -> Result<(), SchedulerError> {
        if let Some(row) = self.budgets.row(budget, subject) {
            self.store.advance_budget_clock(&row, ms).await?;
        }
        Ok(())
    }
}
