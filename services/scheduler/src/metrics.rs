//! Scheduler metrics (OpenTelemetry; exported over OTLP when configured, no-ops otherwise).
//!
//! | instrument | kind | unit | attributes |
//! |---|---|---|---|
//! | `voxpool.key.in_flight` | gauge | `{lease}` | `pool`, `upstream`, `key` |
//! | `voxpool.key.capacity` | gauge | `{lease}` | `pool`, `upstream`, `key` |
//! | `voxpool.key.effective_capacity` | gauge | `{lease}` | `pool`, `upstream`, `key` (what grants are held to: learned from the vendor's concurrency refusals) |
//! | `voxpool.key.quota_used` / `.quota_limit` | gauge | `{character}` | `pool`, `upstream`, `key` (keys with a quota only; used in the current period) |
//! | `voxpool.key.utilization` | gauge | `1` (0..1) | `pool`, `upstream`, `key` |
//! | `voxpool.key.state` | gauge | `1` (1 = in this state) | `pool`, `upstream`, `key`, `state` |
//! | `voxpool.pool.in_flight` / `.capacity` | gauge | `{lease}` | `pool` |
//! | `voxpool.pool.utilization` | gauge | `1` (0..1) | `pool` |
//! | `voxpool.scheduler.acquires` | counter | `{acquire}` | `pool`, `priority`, `result` (granted, waited, exhausted, unavailable, deadline, invalid) |
//! | `voxpool.scheduler.acquire.duration` | histogram | `s` | `pool`, `priority`, `result` (the wait time per class) |
//! | `voxpool.scheduler.grants` | counter | `{lease}` | `pool`, `priority`, `tenant` |
//! | `voxpool.scheduler.cooldowns` | counter | `{cooldown}` | `pool`, `upstream`, `key`, `reason` |
//! | `voxpool.budget.used` | gauge | `1` (0..1+) | `budget` (its most used row: settled / limit, characters or cost, whichever is higher) |
//! | `voxpool.scheduler.budget.refusals` | counter | `{acquire}` | `budget` (Acquires refused BUDGET_EXHAUSTED) |
//!
//! Gauges read a per-replica snapshot of every pool's status, refreshed each second by the
//! health task, so exporting never touches the store. Attribute values come from the config
//! (pool, upstream, key and budget ids), so cardinality is bounded by it; credentials never appear.
//! Budget subjects (tenants, callers) are not attributes: a budget's gauge is its most used row.
//! `tenant` comes from callers (validated: at most 64 characters, no control characters): the
//! first [`MAX_TENANT_SERIES`] tenants a replica sees get their own series, later ones count
//! as `other`, so a caller cannot grow the series without bound.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex, PoisonError, RwLock},
};

use opentelemetry::{
    KeyValue, global,
    metrics::{Counter, Histogram, ObservableGauge},
};

use crate::model::{KeyState, PoolStatus, Priority, upstream_of};

/// Distinct `tenant` attribute values per replica (module doc).
pub const MAX_TENANT_SERIES: usize = 100;

/// Latest status of every pool, as seen by this replica.
pub type StatusCache = Arc<RwLock<Vec<PoolStatus>>>;

/// Used fraction of every budget (its most used row), as last read.
pub type BudgetCache = Arc<RwLock<HashMap<String, f64>>>;

/// Appends `(value, attributes)` points of one pool to a gauge's observation list.
type PointsOf = fn(&PoolStatus, &mut Vec<(f64, Vec<KeyValue>)>);

/// The scheduler's instruments.
pub struct SchedulerMetrics {
    acquires: Counter<u64>,
    acquire_duration: Histogram<f64>,
    grants: Counter<u64>,
    tenants: Mutex<HashSet<String>>,
    cooldowns: Counter<u64>,
    budget_refusals: Counter<u64>,
    cache: StatusCache,
    budgets: BudgetCache,
    _gauges: Vec<ObservableGauge<f64>>,
}

impl std::fmt::Debug for SchedulerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerMetrics").finish_non_exhaustive()
    }
}

fn key_attrs(pool: &str, key: &str) -> Vec<KeyValue> {
    vec![
        KeyValue::new("pool", pool.to_owned()),
        KeyValue::new("upstream", upstream_of(key).to_owned()),
        KeyValue::new("key", key.to_owned()),
    ]
}

fn state_name(s: KeyState) -> &'static str {
    match s {
        KeyState::Available => "available",
        KeyState::Cooling => "cooling",
        KeyState::Disabled => "disabled",
        KeyState::OverQuota => "over_quota",
    }
}

impl SchedulerMetrics {
    /// Registers the instruments on the global meter provider.
    pub fn new() -> Self {
        let meter = global::meter("voxpool-scheduler");
        let cache: StatusCache = Arc::default();
        let gauge =
            |name: &'static str, unit: &'static str, description: &'static str, f: PointsOf| {
                let cache = cache.clone();
                meter
                    .f64_observable_gauge(name)
                    .with_unit(unit)
                    .with_description(description)
                    .with_callback(move |obs| {
                        let Ok(pools) = cache.read() else { return };
                        let mut points = Vec::new();
                        for p in pools.iter() {
                            f(p, &mut points);
                        }
                        for (v, attrs) in points {
                            obs.observe(v, &attrs);
                        }
                    })
                    .build()
            };
        let budgets: BudgetCache = Arc::default();
        let read = budgets.clone();
        let budget_gauge = meter
            .f64_observable_gauge("voxpool.budget.used")
            .with_unit("1")
            .with_description(
                "settled share of the budget's limit in its period (its most used row)",
            )
            .with_callback(move |obs| {
                let Ok(all) = read.read() else { return };
                for (id, v) in all.iter() {
                    obs.observe(*v, &[KeyValue::new("budget", id.clone())]);
                }
            })
            .build();
        let mut gauges = vec![
            gauge(
                "voxpool.key.in_flight",
                "{lease}",
                "live leases on the key",
                |p, out| {
                    out.extend(
                        p.keys
                            .iter()
                            .map(|k| (f64::from(k.in_flight), key_attrs(&p.pool, &k.key_id))),
                    );
                },
            ),
            gauge(
                "voxpool.key.capacity",
                "{lease}",
                "concurrent requests the key allows",
                |p, out| {
                    out.extend(
                        p.keys
                            .iter()
                            .map(|k| (f64::from(k.capacity), key_attrs(&p.pool, &k.key_id))),
                    );
                },
            ),
            gauge(
                "voxpool.key.effective_capacity",
                "{lease}",
                "concurrent requests the key is granted now (learned from the vendor)",
                |p, out| {
                    out.extend(p.keys.iter().map(|k| {
                        (
                            f64::from(k.effective_capacity),
                            key_attrs(&p.pool, &k.key_id),
                        )
                    }));
                },
            ),
            gauge(
                "voxpool.key.quota_used",
                "{character}",
                "characters used in the current quota period",
                |p, out| {
                    out.extend(
                        p.keys
                            .iter()
                            .filter(|k| k.quota_limit > 0)
                            .map(|k| (k.quota_used as f64, key_attrs(&p.pool, &k.key_id))),
                    );
                },
            ),
            gauge(
                "voxpool.key.quota_limit",
                "{character}",
                "characters the key's quota allows per period",
                |p, out| {
                    out.extend(
                        p.keys
                            .iter()
                            .filter(|k| k.quota_limit > 0)
                            .map(|k| (k.quota_limit as f64, key_attrs(&p.pool, &k.key_id))),
                    );
                },
            ),
            gauge(
                "voxpool.key.utilization",
                "1",
                "in-flight / effective capacity of the key",
                |p, out| {
                    out.extend(
                        p.keys
                            .iter()
                            .map(|k| (k.utilization(), key_attrs(&p.pool, &k.key_id))),
                    );
                },
            ),
            gauge(
                "voxpool.key.state",
                "1",
                "1 for the key's current state",
                |p, out| {
                    for k in &p.keys {
                        for s in [
                            KeyState::Available,
                            KeyState::Cooling,
                            KeyState::Disabled,
                            KeyState::OverQuota,
                        ] {
                            let mut attrs = key_attrs(&p.pool, &k.key_id);
                            attrs.push(KeyValue::new("state", state_name(s)));
                            out.push((if k.state == s { 1.0 } else { 0.0 }, attrs));
                        }
                    }
                },
            ),
            gauge(
                "voxpool.pool.in_flight",
                "{lease}",
                "live leases on available keys",
                |p, out| {
                    out.push((
                        p.in_flight() as f64,
                        vec![KeyValue::new("pool", p.pool.clone())],
                    ));
                },
            ),
            gauge(
                "voxpool.pool.capacity",
                "{lease}",
                "capacity of available keys",
                |p, out| {
                    out.push((
                        p.capacity() as f64,
                        vec![KeyValue::new("pool", p.pool.clone())],
                    ));
                },
            ),
            gauge(
                "voxpool.pool.utilization",
                "1",
                "pool in-flight / capacity over available keys",
                |p, out| {
                    out.push((p.utilization(), vec![KeyValue::new("pool", p.pool.clone())]));
                },
            ),
        ];
        gauges.push(budget_gauge);
        Self {
            budget_refusals: meter
                .u64_counter("voxpool.scheduler.budget.refusals")
                .with_unit("{acquire}")
                .with_description("Acquires refused BUDGET_EXHAUSTED, by budget")
                .build(),
            budgets,
            acquires: meter
                .u64_counter("voxpool.scheduler.acquires")
                .with_unit("{acquire}")
                .with_description("Acquire calls by result")
                .build(),
            acquire_duration: meter
                .f64_histogram("voxpool.scheduler.acquire.duration")
                .with_unit("s")
                .with_description("time from Acquire call to its answer, including waiting")
                .build(),
            grants: meter
                .u64_counter("voxpool.scheduler.grants")
                .with_unit("{lease}")
                .with_description("leases granted, by traffic class and tenant")
                .build(),
            tenants: Mutex::default(),
            cooldowns: meter
                .u64_counter("voxpool.scheduler.cooldowns")
                .with_unit("{cooldown}")
                .with_description("keys taken out of rotation by a report, by reason")
                .build(),
            cache,
            _gauges: gauges,
        }
    }

    /// The budget gauge's values; the health task and status reads refresh them.
    pub fn budget_cache(&self) -> BudgetCache {
        self.budgets.clone()
    }

    /// Records every budget's used fraction from its rows (module doc).
    pub fn budgets(&self, rows: &[crate::domain::BudgetStatusRow]) {
        record_budgets(&self.budgets, rows.iter().map(|r| (&r.row, &r.usage)));
    }

    /// Counts an Acquire refused by `budget`.
    pub fn budget_refused(&self, budget: &str) {
        self.budget_refusals
            .add(1, &[KeyValue::new("budget", budget.to_owned())]);
    }

    /// The cache the gauges read; the health task refreshes it.
    pub fn cache(&self) -> StatusCache {
        self.cache.clone()
    }

    /// Records one Acquire of class `priority`: `result` is granted, waited, exhausted,
    /// unavailable, deadline or invalid; `seconds` from call to answer.
    pub fn acquire(&self, pool: &str, priority: Priority, result: &'static str, seconds: f64) {
        let attrs = [
            KeyValue::new("pool", pool.to_owned()),
            KeyValue::new("priority", priority.as_str()),
            KeyValue::new("result", result),
        ];
        self.acquires.add(1, &attrs);
        self.acquire_duration.record(seconds, &attrs);
    }

    /// Records a granted lease of class `priority` for `tenant` (empty: the shared tenant).
    pub fn grant(&self, pool: &str, priority: Priority, tenant: &str) {
        let tenant = {
            let mut seen = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
            if seen.contains(tenant)
                || (seen.len() < MAX_TENANT_SERIES && seen.insert(tenant.to_owned()))
            {
                tenant.to_owned()
            } else {
                "other".to_owned()
            }
        };
        self.grants.add(
            1,
            &[
                KeyValue::new("pool", pool.to_owned()),
                KeyValue::new("priority", priority.as_str()),
                KeyValue::new("tenant", tenant),
            ],
        );
    }

    /// Records a key leaving rotation after a report (`reason`: rate_limited, failures,
    /// credential).
    pub fn cooldown(&self, pool: &str, key: &str, reason: &'static str) {
        let mut attrs = key_attrs(pool, key);
        attrs.push(KeyValue::new("reason", reason));
        self.cooldowns.add(1, &attrs);
    }
}

/// Puts each budget's most used row's fraction into `cache`.
pub fn record_budgets<'a>(
    cache: &BudgetCache,
    rows: impl Iterator<Item = (&'a crate::model::BudgetRow, &'a crate::model::BudgetUse)>,
) {
    let mut out: HashMap<String, f64> = HashMap::new();
    for (row, usage) in rows {
        let share = |used: u64, limit: u64| {
            if limit == 0 {
                0.0
            } else {
                used as f64 / limit as f64
            }
        };
        let v = share(usage.used.characters, row.characters)
            .max(share(usage.used.cost_micros, row.cost_micros));
        let e = out.entry(row.budget.clone()).or_insert(0.0);
        *e = e.max(v);
    }
    if let Ok(mut c) = cache.write() {
        *c = out;
    }
}

impl Default for SchedulerMetrics {
    fn default() -> Self {
        Self::new()
    }
}
