//! The details of two refusals that name a limit: a budget that cannot hold a request
//! ([`BudgetRefused`], reason `BUDGET_EXHAUSTED`) and keys whose character quota cannot
//! ([`QuotaNote`], in POOL_FULL and KEYS_UNAVAILABLE messages). Messages name the limit, its
//! use, when it resets (RFC 3339 UTC) and what to do.

use std::{collections::HashMap, time::Duration};

use tonic::{Code, Status};
use voxpool_domain::{contract::SchedulerReason, status::with_info, untrusted::quote};

use crate::model::{BudgetAmount, BudgetLimit, BudgetRow, BudgetUse};

/// `ms` since the epoch as RFC 3339 UTC (`2027-01-01T00:00:00Z`).
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|d| d.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

/// A budget row that cannot hold a request this period.
#[derive(Clone, Debug)]
pub struct BudgetRefused {
    /// The row and its limits.
    pub row: BudgetRow,
    /// Which limit refused.
    pub limit: BudgetLimit,
    /// What the request asked for.
    pub asked: BudgetAmount,
    /// The row when it refused.
    pub usage: BudgetUse,
    /// `[usage] currency`.
    pub currency: String,
}

impl BudgetRefused {
    /// `(used, reserved, limit, asked)` of the refusing limit.
    fn figures(&self) -> (u64, u64, u64, u64) {
        match self.limit {
            BudgetLimit::Characters => (
                self.usage.used.characters,
                self.usage.reserved.characters,
                self.row.characters,
                self.asked.characters,
            ),
            BudgetLimit::Cost => (
                self.usage.used.cost_micros,
                self.usage.reserved.cost_micros,
                self.row.cost_micros,
                self.asked.cost_micros,
            ),
        }
    }

    fn amount(&self, v: u64) -> String {
        match self.limit {
            BudgetLimit::Characters if v == 1 => "1 character".to_owned(),
            BudgetLimit::Characters => format!("{v} characters"),
            BudgetLimit::Cost => format!("{:.6} {}", v as f64 / 1e6, self.currency),
        }
    }

    fn retry_ms(&self) -> u64 {
        u64::try_from(self.usage.resets_at_ms - self.usage.now_ms)
            .unwrap_or(0)
            .max(1)
    }

    /// The RESOURCE_EXHAUSTED status carrying `message`: ErrorInfo `BUDGET_EXHAUSTED`
    /// (metadata `budget`, `subject`, `used`, `reserved`, `limit`, `unit`, `resets_at_ms`) and
    /// RetryInfo until the reset.
    pub fn status(&self, message: String) -> Status {
        let (used, reserved, limit, _) = self.figures();
        let unit = match self.limit {
            BudgetLimit::Characters => "characters".to_owned(),
            BudgetLimit::Cost => format!("{}_micros", self.currency),
        };
        with_info(
            Code::ResourceExhausted,
            message,
            SchedulerReason::BudgetExhausted.as_str(),
            HashMap::from([
                ("budget".to_owned(), self.row.budget.clone()),
                ("subject".to_owned(), self.row.subject.clone()),
                ("used".to_owned(), used.to_string()),
                ("reserved".to_owned(), reserved.to_string()),
                ("limit".to_owned(), limit.to_string()),
                ("unit".to_owned(), unit),
                (
                    "resets_at_ms".to_owned(),
                    self.usage.resets_at_ms.to_string(),
                ),
            ]),
            Some(Duration::from_millis(self.retry_ms())),
        )
    }
}

impl std::fmt::Display for BudgetRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (used, reserved, limit, asked) = self.figures();
        let field = match self.limit {
            BudgetLimit::Characters => "characters",
            BudgetLimit::Cost => "cost",
        };
        write!(
            f,
            "budget {:?} for {} is exhausted: {} used and {} reserved by calls in flight of its {} per {}, so this request's {} {} not fit; it resets at {} (in {}ms); wait for the reset, or raise the budget's {field} in [[budgets]]",
            self.row.budget,
            if self.row.subject == "*" {
                "all it covers (pooled)".to_owned()
            } else {
                quote(&self.row.subject)
            },
            self.amount(used),
            self.amount(reserved),
            self.amount(limit),
            self.row.per.as_str(),
            self.amount(asked),
            if self.limit == BudgetLimit::Characters && asked == 1 {
                "does"
            } else {
                "do"
            },
            rfc3339(self.usage.resets_at_ms),
            self.retry_ms(),
        )
    }
}

/// A key whose character quota cannot hold a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaNote {
    /// `upstream/key`.
    pub key: String,
    /// Characters used this period.
    pub used: u64,
    /// The quota per period.
    pub limit: u64,
    /// When the period ends (store clock, ms).
    pub resets_at_ms: i64,
}

/// `; key quota cannot hold the request's N characters: u0/k0 (9990/10000 used, …, resets at
/// …)` when `notes` name keys; `why` says what holds the rest.
pub fn quota_suffix(notes: &[QuotaNote], characters: u64, why: &str) -> String {
    if notes.is_empty() {
        return String::new();
    }
    let listed: Vec<String> = notes
        .iter()
        .map(|n| {
            format!(
                "{} ({}/{} characters used this period, resets at {} = {} ms)",
                n.key,
                n.used,
                n.limit,
                rfc3339(n.resets_at_ms),
                n.resets_at_ms
            )
        })
        .collect();
    format!(
        "; the character quota of {} cannot hold this request's {characters} {} ({why}): {}",
        if notes.len() == 1 { "key" } else { "keys" },
        if characters == 1 {
            "character"
        } else {
            "characters"
        },
        listed.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use voxpool_config::QuotaPeriod;

    use super::*;

    #[test]
    fn one_character_is_singular_in_refusals() {
        let refused = |asked: u64| {
            BudgetRefused {
                row: BudgetRow {
                    budget: "b".to_owned(),
                    subject: "acme".to_owned(),
                    per: QuotaPeriod::Day,
                    characters: 10,
                    cost_micros: 0,
                },
                limit: BudgetLimit::Characters,
                asked: BudgetAmount {
                    characters: asked,
                    cost_micros: 0,
                },
                usage: BudgetUse::default(),
                currency: "EUR".to_owned(),
            }
            .to_string()
        };
        assert!(refused(1).contains("this request's 1 character does not fit"));
        assert!(refused(2).contains("this request's 2 characters do not fit"));
        let note = QuotaNote {
            key: "u0/k0".to_owned(),
            used: 10,
            limit: 10,
            resets_at_ms: 0,
        };
        let one = quota_suffix(std::slice::from_ref(&note), 1, "over quota");
        assert!(one.contains("this request's 1 character ("), "{one}");
    }
}
