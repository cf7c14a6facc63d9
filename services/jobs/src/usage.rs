//! What an item's Synthesize calls spent, and a job's items added up (the proto's
//! `voxpool.synthesis.v1.Usage`, kept without protobuf: `crate::convert::metering::usage` maps it).
//!
//! An item's usage is kept in its result document ([`crate::model::ItemResult::usage`]); a
//! job's is kept as integer fields of its record hash (`u_characters`, ...), added to in the
//! script that ends each item (`finish.lua`), so the job's figures always equal its ended
//! items' added up. Cost is kept in millionths of the currency: integers add up exactly in
//! Redis (`HINCRBY`) and in JSON, where a float sum would drift.
//!
//! Also: a job waiting on a spent budget ([`BudgetWait`]), as its record shows it while its
//! tenant's items are paused (`crate::worker`).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// What some Synthesize calls spent (see the module doc).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Characters vendors were sent and charge for.
    #[serde(default)]
    pub characters: i64,
    /// What vendors said they billed, where they say it.
    #[serde(default)]
    pub billed_characters: i64,
    /// Characters served from the audio cache.
    #[serde(default)]
    pub cached_characters: i64,
    /// Audio produced, ms.
    #[serde(default)]
    pub audio_ms: i64,
    /// Cost in millionths of `currency`.
    #[serde(default)]
    pub cost_micros: i64,
    /// ISO 4217 code of the cost (empty: no call said).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub currency: String,
    /// Server time on self-hosted pools, ms.
    #[serde(default)]
    pub gpu_ms: i64,
    /// Vendor attempts that failed.
    #[serde(default)]
    pub failed_attempts: i64,
}

/// Reads one figure of a [`Usage`].
type Getter = fn(&Usage) -> i64;

/// The record hash's fields of a job's usage, each with its getter (the order `finish.lua`
/// adds them in).
const FIELDS: [(&str, Getter); 7] = [
    ("u_characters", |u| u.characters),
    ("u_billed_characters", |u| u.billed_characters),
    ("u_cached_characters", |u| u.cached_characters),
    ("u_audio_ms", |u| u.audio_ms),
    ("u_cost_micros", |u| u.cost_micros),
    ("u_gpu_ms", |u| u.gpu_ms),
    ("u_failed_attempts", |u| u.failed_attempts),
];

/// The record hash's field of a job's currency.
pub const CURRENCY_FIELD: &str = "u_currency";

impl Usage {
    /// Adds `other` to this (the currency: the first one said).
    pub fn add(&mut self, other: &Usage) {
        self.characters = self.characters.saturating_add(other.characters);
        self.billed_characters = self
            .billed_characters
            .saturating_add(other.billed_characters);
        self.cached_characters = self
            .cached_characters
            .saturating_add(other.cached_characters);
        self.audio_ms = self.audio_ms.saturating_add(other.audio_ms);
        self.cost_micros = self.cost_micros.saturating_add(other.cost_micros);
        self.gpu_ms = self.gpu_ms.saturating_add(other.gpu_ms);
        self.failed_attempts = self.failed_attempts.saturating_add(other.failed_attempts);
        if self.currency.is_empty() {
            self.currency.clone_from(&other.currency);
        }
    }

    /// Whether nothing was spent and nothing said (an item that made no call, or whose
    /// synthesis reports no usage).
    pub fn is_empty(&self) -> bool {
        *self == Usage::default()
    }

    /// The cost as a number of the currency.
    #[allow(clippy::cast_precision_loss)]
    pub fn cost(&self) -> f64 {
        self.cost_micros as f64 / 1e6
    }

    /// Millionths of a cost given as a number of the currency (rounded; a cost that is not
    /// a finite number counts nothing).
    #[allow(clippy::cast_possible_truncation)]
    pub fn micros_of(cost: f64) -> i64 {
        if cost.is_finite() {
            (cost * 1e6).round() as i64
        } else {
            0
        }
    }

    /// A job's usage as its record hash keeps it (absent fields: 0, as in records written
    /// before usage was kept).
    pub fn from_hash(h: &HashMap<String, String>) -> Self {
        let int = |k: &str| h.get(k).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
        Self {
            characters: int(FIELDS[0].0),
            billed_characters: int(FIELDS[1].0),
            cached_characters: int(FIELDS[2].0),
            audio_ms: int(FIELDS[3].0),
            cost_micros: int(FIELDS[4].0),
            currency: h.get(CURRENCY_FIELD).cloned().unwrap_or_default(),
            gpu_ms: int(FIELDS[5].0),
            failed_attempts: int(FIELDS[6].0),
        }
    }

    /// The script arguments that add this to a job's record: field and amount pairs, the
    /// currency last (`finish.lua`).
    pub fn increments(&self) -> Vec<String> {
        let mut out = Vec::with_capacity(FIELDS.len() * 2 + 1);
        for (field, get) in FIELDS {
            out.push(field.to_owned());
            out.push(get(self).to_string());
        }
        out.push(self.currency.clone());
        out
    }
}

/// Why a job's items wait: a budget covering its tenant is spent (Synthesize answered
/// `BUDGET_EXHAUSTED`). Kept on the job's record until an item of the job ends.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetWait {
    /// The budget's name (`ErrorInfo` metadata `budget`).
    #[serde(default)]
    pub budget: String,
    /// What it covers (metadata `subject`).
    #[serde(default)]
    pub subject: String,
    /// When its period resets, Unix ms (metadata `resets_at_ms`; 0 when not said).
    #[serde(default)]
    pub resets_at_ms: i64,
    /// When the workers look again, Unix ms (this replica's clock).
    #[serde(default)]
    pub next_try_ms: i64,
    /// Synthesize's message.
    #[serde(default)]
    pub message: String,
}

/// The record hash's field of a [`BudgetWait`] (JSON).
pub const BUDGET_WAIT_FIELD: &str = "budget_wait";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_adds_up_and_reads_back_from_the_record_hash() {
        let mut sum = Usage::default();
        assert!(sum.is_empty());
        let one = Usage {
            characters: 10,
            billed_characters: 9,
            cached_characters: 3,
            audio_ms: 700,
            cost_micros: Usage::micros_of(0.000_15),
            currency: "EUR".into(),
            gpu_ms: 5,
            failed_attempts: 1,
        };
        sum.add(&one);
        sum.add(&one);
        assert_eq!((sum.characters, sum.cost_micros), (20, 300));
        assert_eq!(sum.currency, "EUR");
        let args = sum.increments();
        let h: HashMap<String, String> = args
            .chunks(2)
            .filter(|p| p.len() == 2)
            .map(|p| (p[0].clone(), p[1].clone()))
            .chain([(CURRENCY_FIELD.to_owned(), "EUR".to_owned())])
            .collect();
        assert_eq!(Usage::from_hash(&h), sum);
        assert_eq!(Usage::from_hash(&HashMap::new()), Usage::default());
        assert_eq!(Usage::micros_of(f64::NAN), 0);
    }
}
