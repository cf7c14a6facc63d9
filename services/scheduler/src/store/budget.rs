//! Budgets in the store (docs/SCHEDULER.md "Budgets"): each budget row (`model::budget`) is
//! counted on its own, one atomic step per row, on the store's clock.
//!
//! Invariant guarded: a row's settled + reserved amounts never pass its limit through a
//! reservation: [`Budgets::reserve_budget`] checks and reserves in one step, so concurrent
//! requests on any replica never take a budget past its limit. A reservation lives under the
//! request's lease token until [`Budgets::settle_budget`] settles it (what the vendor charged,
//! at most what was reserved) or its TTL ends: an expired reservation counts in full as spent
//! (the vendor may have done the work), so a call whose holder died is never free.
//!
//! The rows a lease reserved are noted under its token ([`Budgets::note_budget_rows`]), so a
//! Report on any replica finds them without the request's tenant or caller.
//!
//! Redis: a row lives under its own hash tag, `<prefix>:budget:{<id>:<hex subject>}` (its
//! hash, `:res` ZSET of reservations by expiry, `:amt` HASH of their amounts, `:clock` test
//! offset): one Cluster slot per row, whatever pools the requests use. A request covered by
//! several rows reserves them one after the other and lets the reserved ones go if one
//! refuses; a budget is never oversold, at worst a request is refused while another's
//! reservation is let go.

use async_trait::async_trait;

use super::StoreResult;
use crate::model::{BudgetAmount, BudgetAnswer, BudgetRow, BudgetUse, LeaseToken, Settle};

/// The budget part of a [`LeaseStore`](super::LeaseStore) (module doc).
#[async_trait]
pub trait Budgets: Send + Sync + 'static {
    /// Reserves `amount` on `row` under `token` for `ttl_ms` if the row's used + reserved +
    /// `amount` stay within each of its limits (a row whose limit is already used up refuses
    /// even an empty amount); a token that already holds a reservation on the row reserves
    /// nothing more. One atomic step.
    async fn reserve_budget(
        &self,
        row: &BudgetRow,
        token: &LeaseToken,
        amount: BudgetAmount,
        ttl_ms: u64,
    ) -> StoreResult<BudgetAnswer>;

    /// Settles the reservation of `token` on `row` (module doc); nothing when it holds none.
    async fn settle_budget(
        &self,
        row: &BudgetRow,
        token: &LeaseToken,
        settle: Settle,
    ) -> StoreResult<()>;

    /// The row's state in its current period (expired reservations counted as used).
    async fn budget_use(&self, row: &BudgetRow) -> StoreResult<BudgetUse>;

    /// Notes which rows (`(budget id, subject)`) `token` reserved, for `ttl_ms`.
    async fn note_budget_rows(
        &self,
        token: &LeaseToken,
        rows: &[(String, String)],
        ttl_ms: u64,
    ) -> StoreResult<()>;

    /// Takes the rows noted for `token` (empty when none, or the note expired).
    async fn take_budget_rows(&self, token: &LeaseToken) -> StoreResult<Vec<(String, String)>>;

    /// Test hook: moves `row`'s clock forward by `ms`. Production code never calls it.
    async fn advance_budget_clock(&self, row: &BudgetRow, ms: u64) -> StoreResult<()>;
}

/// Encodes noted rows as one string (`id` and hex subject pairs); ids never hold `,` or `=`.
pub(crate) fn encode_rows(rows: &[(String, String)]) -> String {
    rows.iter()
        .map(|(id, subject)| format!("{id}={}", hex::encode(subject)))
        .collect::<Vec<_>>()
        .join(",")
}

/// The rows [`encode_rows`] wrote; malformed entries are skipped.
pub(crate) fn decode_rows(raw: &str) -> Vec<(String, String)> {
    raw.split(',')
        .filter_map(|entry| {
            let (id, subject) = entry.split_once('=')?;
            let subject = String::from_utf8(hex::decode(subject).ok()?).ok()?;
            Some((id.to_owned(), subject))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noted_rows_round_trip_whatever_the_subject_holds() {
        let rows = vec![
            ("a".to_owned(), "acme,x=y{}".to_owned()),
            ("b".to_owned(), String::new()),
            ("c".to_owned(), "*".to_owned()),
        ];
        assert_eq!(decode_rows(&encode_rows(&rows)), rows);
        assert!(decode_rows("").is_empty());
    }
}
