//! Budget rows in the memory store: the same rules as `lua/budget.lua` under one lock
//! (`store::budget` doc): expired reservations count in full as used, a new period starts
//! the used amounts from 0, a reservation is checked and taken in one step.

use std::collections::HashMap;

use async_trait::async_trait;

use super::{MemoryStore, fill::wall_ms, poisoned};
use crate::{
    model::{BudgetAmount, BudgetAnswer, BudgetRow, BudgetUse, LeaseToken, Settle},
    store::{StoreResult, budget::Budgets},
};

/// One row's counts.
#[derive(Debug, Default)]
struct RowState {
    window_start_ms: i64,
    used: BudgetAmount,
    reserved: BudgetAmount,
    /// Reservations by lease token: amount and expiry (row clock).
    held: HashMap<String, (BudgetAmount, i64)>,
    clock_offset_ms: i64,
}

/// Every row, and the rows each lease token reserved (with the note's expiry, wall clock).
#[derive(Debug, Default)]
pub(super) struct BudgetRows {
    rows: HashMap<(String, String), RowState>,
    notes: HashMap<String, (Vec<(String, String)>, i64)>,
}

fn add(a: BudgetAmount, b: BudgetAmount) -> BudgetAmount {
    BudgetAmount {
        characters: a.characters.saturating_add(b.characters),
        cost_micros: a.cost_micros.saturating_add(b.cost_micros),
    }
}

fn sub(a: BudgetAmount, b: BudgetAmount) -> BudgetAmount {
    BudgetAmount {
        characters: a.characters.saturating_sub(b.characters),
        cost_micros: a.cost_micros.saturating_sub(b.cost_micros),
    }
}

impl RowState {
    /// Reaps expired reservations and rolls the period over; the row's state at its clock.
    fn current(&mut self, row: &BudgetRow) -> BudgetUse {
        let now = wall_ms().saturating_add(self.clock_offset_ms);
        let expired: Vec<String> = self
            .held
            .iter()
            .filter(|(_, (_, until))| *until <= now)
            .map(|(t, _)| t.clone())
            .collect();
        for token in expired {
            self.drop_held(&token, |a| a);
        }
        let (start, end) = row.per.window(now);
        if self.window_start_ms != start {
            self.window_start_ms = start;
            self.used = BudgetAmount::default();
        }
        BudgetUse {
            used: self.used,
            reserved: self.reserved,
            resets_at_ms: end,
            now_ms: now,
        }
    }

    /// Drops `token`'s reservation, counting `charge(reserved)` as used.
    fn drop_held(&mut self, token: &str, charge: impl FnOnce(BudgetAmount) -> BudgetAmount) {
        if let Some((amount, _)) = self.held.remove(token) {
            self.reserved = sub(self.reserved, amount);
            self.used = add(self.used, charge(amount));
        }
    }
}

impl BudgetRows {
    fn row(&mut self, row: &BudgetRow) -> &mut RowState {
        self.rows
            .entry((row.budget.clone(), row.subject.clone()))
            .or_default()
    }
}

#[async_trait]
impl Budgets for MemoryStore {
    async fn reserve_budget(
        &self,
        row: &BudgetRow,
        token: &LeaseToken,
        amount: BudgetAmount,
        ttl_ms: u64,
    ) -> StoreResult<BudgetAnswer> {
        let mut rows = self.budgets.lock().map_err(poisoned)?;
        let state = rows.row(row);
        let u = state.current(row);
        if state.held.contains_key(token.as_str()) {
            return Ok(BudgetAnswer::Reserved(u));
        }
        if let Some(limit) = row.over(&u, amount) {
            return Ok(BudgetAnswer::Refused(limit, u));
        }
        let until = u
            .now_ms
            .saturating_add(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
        state
            .held
            .insert(token.as_str().to_owned(), (amount, until));
        state.reserved = add(state.reserved, amount);
        Ok(BudgetAnswer::Reserved(state.current(row)))
    }

    async fn settle_budget(
        &self,
        row: &BudgetRow,
        token: &LeaseToken,
        settle: Settle,
    ) -> StoreResult<()> {
        let mut rows = self.budgets.lock().map_err(poisoned)?;
        let state = rows.row(row);
        state.current(row);
        state.drop_held(token.as_str(), |reserved| match settle {
            Settle::Charged(spent) => BudgetAmount {
                characters: spent.characters.min(reserved.characters),
                cost_micros: spent.cost_micros.min(reserved.cost_micros),
            },
            Settle::Nothing => BudgetAmount::default(),
            Settle::Reserved => reserved,
        });
        Ok(())
    }

    async fn budget_use(&self, row: &BudgetRow) -> StoreResult<BudgetUse> {
        let mut rows = self.budgets.lock().map_err(poisoned)?;
        Ok(rows.row(row).current(row))
    }

    async fn note_budget_rows(
        &self,
        token: &LeaseToken,
        noted: &[(String, String)],
        ttl_ms: u64,
    ) -> StoreResult<()> {
        let mut rows = self.budgets.lock().map_err(poisoned)?;
        let now = wall_ms();
        rows.notes.retain(|_, (_, until)| *until > now);
        let until = now.saturating_add(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
        rows.notes
            .insert(token.as_str().to_owned(), (noted.to_vec(), until));
        Ok(())
    }

    async fn take_budget_rows(&self, token: &LeaseToken) -> StoreResult<Vec<(String, String)>> {
        let mut rows = self.budgets.lock().map_err(poisoned)?;
        let now = wall_ms();
        Ok(rows
            .notes
            .remove(token.as_str())
            .filter(|(_, until)| *until > now)
            .map(|(noted, _)| noted)
            .unwrap_or_default())
    }

    async fn advance_budget_clock(&self, row: &BudgetRow, ms: u64) -> StoreResult<()> {
        let mut rows = self.budgets.lock().map_err(poisoned)?;
        let state = rows.row(row);
        state.clock_offset_ms = state
            .clock_offset_ms
            .saturating_add(i64::try_from(ms).unwrap_or(i64::MAX));
        Ok(())
    }
}
