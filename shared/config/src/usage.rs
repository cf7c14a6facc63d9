//! What speech costs and how much a tenant may spend: a pool's `price`, the `[usage]` table
//! and `[[budgets]]`.
//!
//! ```toml
//! [usage]
//! currency = "USD"          # ISO 4217 code every price and budget is in
//! cache_hit_factor = 0.0    # share of the price a cache hit costs the tenant (default nothing)
//! retention_days = 90       # raw usage records the catalog keeps for audit
//! on_store_down = "refuse"  # or "serve": see `UsageSettings::on_store_down`
//!
//! [[pools]]
//! id = "volc-standard"
//! price = { per_million_characters = 15.0, tiers = { PREMIUM = 2.0 } }
//!
//! [[budgets]]
//! id = "acme-daily"
//! tenants = ["acme", "globex"]   # each counted on its own unless pooled = true
//! characters = 10000
//! per = "day"
//! tiers = ["PRO", "PREMIUM"]     # optional: only requests on these tiers count
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use voxpool_domain::snapshot::Tier;

use crate::QuotaPeriod;

/// The `[usage]` table.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct UsageSettings {
    /// ISO 4217 code of every price and budget (three capital letters). Default `USD`.
    pub currency: String,
    /// Share of the price a chunk served from the audio cache costs the tenant, 0..=1
    /// (its characters still count as `cached_characters`, never as vendor characters).
    /// Default 0: a cache hit costs nothing and takes nothing from a budget.
    pub cache_hit_factor: f64,
    /// Days the catalog keeps raw usage records (for audit) before deleting them; the daily
    /// totals stay. 1..=3650, default 90.
    pub retention_days: u32,
    /// What a vendor call does when the usage store (`--usage-store`) does not take its
    /// Charge: `refuse` (default) sends the vendor nothing until the Charge is written
    /// (up to a quarter of the attempt timeout, 2 s at most, with the key held; then calls
    /// wait for the store holding no key), and fails the call UNAVAILABLE
    /// `USAGE_STORE_UNAVAILABLE` when its deadline runs out, so every text a vendor bills is
    /// on the stream
    /// before the vendor has it; `serve` waits at most 500 ms and calls the vendor anyway,
    /// keeping the record to send later (lost if the replica dies before the store answers).
    pub on_store_down: StoreDown,
}

/// `[usage] on_store_down` ([`UsageSettings::on_store_down`]).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum StoreDown {
    /// Nothing goes to a vendor before its Charge is written.
    #[default]
    Refuse,
    /// The call goes on; its Charge is sent once the store answers.
    Serve,
}

impl Default for UsageSettings {
    fn default() -> Self {
        Self {
            currency: "USD".to_owned(),
            cache_hit_factor: 0.0,
            retention_days: 90,
            on_store_down: StoreDown::Refuse,
        }
    }
}

/// A pool's `price`: what its vendor charges, in `[usage] currency`. Every field adds up
/// (a vendor billing characters and GPU time sets both); all default to 0.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PriceConfig {
    /// Per million characters, counted by the provider's billing rule.
    pub per_million_characters: f64,
    /// Per second of audio produced.
    pub per_audio_second: f64,
    /// Per second of server time (self-hosted pools).
    pub per_gpu_second: f64,
    /// Factor per pack tier (`{ PREMIUM = 2.0 }`); a tier not named pays 1.0.
    pub tiers: BTreeMap<Tier, f64>,
}

/// Largest cost a request or a budget may state, in millionths (10^15 = a billion units).
pub const MAX_COST_MICROS: i64 = 1_000_000_000_000_000;

impl PriceConfig {
    /// The cost in millionths of the currency of `characters`, `audio_ms` and `gpu_ms` spoken
    /// with a pack of `tier`, rounded to the nearest millionth and bounded by
    /// [`MAX_COST_MICROS`].
    pub fn cost_micros(
        &self,
        tier: Option<Tier>,
        characters: u64,
        audio_ms: u64,
        gpu_ms: u64,
    ) -> i64 {
        let factor = tier
            .and_then(|t| self.tiers.get(&t).copied())
            .unwrap_or(1.0);
        let units = characters as f64 * self.per_million_characters / 1_000_000.0
            + audio_ms as f64 / 1000.0 * self.per_audio_second
            + gpu_ms as f64 / 1000.0 * self.per_gpu_second;
        let micros = (units * factor * 1_000_000.0).round();
        if micros.is_finite() && micros > 0.0 {
            (micros as i64).min(MAX_COST_MICROS)
        } else {
            0
        }
    }
}

/// One `[[budgets]]` row: a spending limit per UTC period over some tenants and callers.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    /// Id, unique among budgets; same characters as pool ids. Named in refusals.
    pub id: String,
    /// Tenants it covers (`tenant` of the request; `""` names requests without one).
    #[serde(default)]
    pub tenants: Vec<String>,
    /// Callers it covers: client token names, mTLS subjects, HTTP API key names.
    #[serde(default)]
    pub callers: Vec<String>,
    /// Characters per period (vendor characters, by each provider's billing rule).
    #[serde(default)]
    pub characters: Option<u64>,
    /// Cost per period, in `[usage] currency`.
    #[serde(default)]
    pub cost: Option<f64>,
    /// The period, a UTC calendar `day` or `month`.
    pub per: QuotaPeriod,
    /// Only requests speaking with packs of these tiers count; empty = every tier.
    #[serde(default)]
    pub tiers: Vec<Tier>,
    /// False (default): each tenant and caller listed has the whole allowance on its own
    /// (one row per subject, like a pricing tier shared by many). True: one allowance shared
    /// by all of them.
    #[serde(default)]
    pub pooled: bool,
}

impl BudgetConfig {
    /// [`BudgetConfig::cost`] in millionths of the currency.
    pub fn cost_limit_micros(&self) -> Option<i64> {
        self.cost
            .map(|c| ((c * 1_000_000.0).round() as i64).clamp(0, MAX_COST_MICROS))
    }

    /// Whether a request of `tenant`, `caller` on a pack of `tier` counts against it.
    pub fn covers(&self, tenant: &str, caller: &str, tier: Option<Tier>) -> bool {
        let subject = self.tenants.iter().any(|t| t == tenant)
            || (!caller.is_empty() && self.callers.iter().any(|c| c == caller));
        let tier_ok = self.tiers.is_empty() || tier.is_some_and(|t| self.tiers.contains(&t));
        subject && tier_ok
    }

    /// The row a request of `tenant`/`caller` counts in: `*` when pooled, else the tenant
    /// when it is listed, else the caller.
    pub fn subject<'a>(&self, tenant: &'a str, caller: &'a str) -> &'a str {
        if self.pooled {
            "*"
        } else if self.tenants.iter().any(|t| t == tenant) {
            tenant
        } else {
            caller
        }
    }
}

/// Every problem of `[usage]`, each pool's `price` and `[[budgets]]`, each naming its path.
pub(super) fn problems(config: &crate::Config) -> Vec<crate::ConfigProblem> {
    let mut out = Vec::new();
    let mut push = |path: String, message: String| out.push(crate::ConfigProblem { path, message });
    let usage = &config.usage;
    if !(usage.currency.len() == 3 && usage.currency.bytes().all(|b| b.is_ascii_uppercase())) {
        push(
            "usage.currency".into(),
            format!(
                "must be an ISO 4217 code of three capital letters (USD, EUR, CNY), got {:?}",
                usage.currency
            ),
        );
    }
    if !(usage.cache_hit_factor.is_finite() && (0.0..=1.0).contains(&usage.cache_hit_factor)) {
        push(
            "usage.cache_hit_factor".into(),
            format!(
                "must be 0..=1 (a share of the price), got {}",
                usage.cache_hit_factor
            ),
        );
    }
    if !(1..=3650).contains(&usage.retention_days) {
        push(
            "usage.retention_days".into(),
            format!("must be 1 to 3650 days, got {}", usage.retention_days),
        );
    }
    for (pi, pool) in config.pools.iter().enumerate() {
        let price = &pool.price;
        let fields = [
            ("per_million_characters", price.per_million_characters),
            ("per_audio_second", price.per_audio_second),
            ("per_gpu_second", price.per_gpu_second),
        ];
        for (field, value) in fields {
            if !(value.is_finite() && value >= 0.0) {
                push(
                    format!("pools[{pi}].price.{field}"),
                    format!("must be a price of 0 or more, got {value}"),
                );
            }
        }
        for (tier, factor) in &price.tiers {
            if !(factor.is_finite() && *factor >= 0.0) {
                push(
                    format!("pools[{pi}].price.tiers.{}", tier.as_str()),
                    format!("must be a factor of 0 or more, got {factor}"),
                );
            }
        }
    }
    let mut ids = std::collections::HashSet::new();
    for (bi, budget) in config.budgets.iter().enumerate() {
        let path = |field: &str| format!("budgets[{bi}].{field}");
        if !crate::is_valid_id(&budget.id) {
            push(
                path("id"),
                format!(
                    "{:?} is not a valid id: use 1-64 of [a-z0-9._-], starting with a letter or digit",
                    budget.id
                ),
            );
        } else if !ids.insert(budget.id.as_str()) {
            push(path("id"), format!("duplicate budget id {:?}", budget.id));
        }
        if budget.tenants.is_empty() && budget.callers.is_empty() {
            push(
                path("tenants"),
                "names nobody: list the tenants (or callers) the budget covers".into(),
            );
        }
        for (field, names) in [("tenants", &budget.tenants), ("callers", &budget.callers)] {
            for (i, name) in names.iter().enumerate() {
                if name.chars().count() > 64 || name.chars().any(char::is_control) || name == "*" {
                    push(
                        format!("budgets[{bi}].{field}[{i}]"),
                        "must be at most 64 characters, no control characters, and not \"*\""
                            .into(),
                    );
                }
            }
        }
        match (budget.characters, budget.cost) {
            (None, None) => push(
                path("characters"),
                "the budget limits nothing: set characters, cost or both".into(),
            ),
            (Some(0), _) => push(path("characters"), "must be at least 1".into()),
            _ => {}
        }
        if let Some(cost) = budget.cost
            && !(cost.is_finite() && cost > 0.0 && cost * 1_000_000.0 <= MAX_COST_MICROS as f64)
        {
            push(
                path("cost"),
                format!("must be above 0 and at most 10^9, got {cost}"),
            );
        }
    }
    out
}
