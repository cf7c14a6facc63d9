//! Budgets (`[[budgets]]`, docs/SCHEDULER.md "Budgets"): the rows the store counts and what it
//! answers about them.
//!
//! A budget counts in *rows*: one per subject (a tenant or caller it names) unless it is
//! pooled (one row, subject `*`). A row holds, for the current UTC period on the store's
//! clock, what settled (`used`) and what calls in flight reserved (`reserved`), in characters
//! and in cost (millionths of the configured currency).

use voxpool_config::{BudgetConfig, QuotaPeriod};

/// One row of a budget, with its limits (from the config).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetRow {
    /// The budget's id.
    pub budget: String,
    /// Whom the row counts: a tenant or caller name, `*` for a pooled budget.
    pub subject: String,
    /// The period.
    pub per: QuotaPeriod,
    /// Characters per period; 0 = no character limit.
    pub characters: u64,
    /// Cost per period in millionths; 0 = no cost limit.
    pub cost_micros: u64,
}

impl BudgetRow {
    /// The row of `budget` that `subject` counts in.
    pub fn of(budget: &BudgetConfig, subject: &str) -> Self {
        Self {
            budget: budget.id.clone(),
            subject: subject.to_owned(),
            per: budget.per,
            characters: budget.characters.unwrap_or(0),
            cost_micros: budget
                .cost_limit_micros()
                .and_then(|c| u64::try_from(c).ok())
                .unwrap_or(0),
        }
    }

    /// Which limit `amount` more would pass, with the row holding `u`, if any (a limit
    /// already used up refuses even an empty amount).
    pub fn over(&self, u: &BudgetUse, amount: BudgetAmount) -> Option<BudgetLimit> {
        let passes = |limit: u64, used: u64, reserved: u64, asked: u64| {
            limit > 0
                && (used >= limit || used.saturating_add(reserved).saturating_add(asked) > limit)
        };
        if passes(
            self.characters,
            u.used.characters,
            u.reserved.characters,
            amount.characters,
        ) {
            Some(BudgetLimit::Characters)
        } else if passes(
            self.cost_micros,
            u.used.cost_micros,
            u.reserved.cost_micros,
            amount.cost_micros,
        ) {
            Some(BudgetLimit::Cost)
        } else {
            None
        }
    }
}

/// What a request asks of a row: reserved under its lease token until settled or expired.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BudgetAmount {
    /// Characters.
    pub characters: u64,
    /// Cost in millionths of the currency.
    pub cost_micros: u64,
}

/// A row's state in its current period (store clock).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BudgetUse {
    /// Settled this period (and reservations that expired unsettled: counted as spent).
    pub used: BudgetAmount,
    /// Held by calls in flight.
    pub reserved: BudgetAmount,
    /// When the period ends (store clock, ms).
    pub resets_at_ms: i64,
    /// The store's clock at the call (ms).
    pub now_ms: i64,
}

/// Which limit of a row refused a reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetLimit {
    /// The characters per period.
    Characters,
    /// The cost per period.
    Cost,
}

/// What the store answers a reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetAnswer {
    /// Reserved (or already reserved under this token: an idempotent retry reserves once);
    /// the row after it.
    Reserved(BudgetUse),
    /// The row cannot hold the request this period: used + reserved + asked passes `limit`.
    Refused(BudgetLimit, BudgetUse),
}

/// What a report settles: what the vendor charged for (at most what was reserved counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settle {
    /// The call ended; it cost this much.
    Charged(BudgetAmount),
    /// The call never reached the vendor: the reservation is let go, nothing counted.
    Nothing,
    /// What it cost is unknown (a Release without a Report): the whole reservation counts.
    Reserved,
}
