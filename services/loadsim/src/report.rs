//! Figures of a run and the markdown table of the side-by-side report, with the floors voxpool
//! must meet: 0 vendor 429s, ≥ 0.95 of theoretical throughput at saturation,
//! spread max/mean ≤ 1.2 at 50% load.

use std::{collections::BTreeMap, fmt::Write as _, time::Duration};

use voxpool_fake_vendors::KeyStats;

use crate::{
    config::{Load, SimConfig},
    strategy::Strategy,
};

/// Floor: completed requests/s over theoretical at saturation.
pub const FLOOR_THROUGHPUT_RATIO: f64 = 0.95;
/// Floor: requests per key, max over mean, at 50% load.
pub const FLOOR_SPREAD: f64 = 1.2;

/// The figures of one strategy under one load.
#[derive(Clone, Debug, PartialEq)]
pub struct RunResult {
    /// The strategy.
    pub strategy: Strategy,
    /// The load's label.
    pub load: String,
    /// Clients (M).
    pub clients: usize,
    /// Requests completed (audio received) per second in the window.
    pub rps: f64,
    /// N × cap / mean service time.
    pub theoretical_rps: f64,
    /// Requests that ended without audio in the window.
    pub failed: u64,
    /// Vendor calls beyond the first of successful requests (failovers), in the window.
    pub failovers: u64,
    /// Failure reasons and counts.
    pub failure_reasons: BTreeMap<String, u64>,
    /// 429s the vendor answered for being over a key's cap (whole run).
    pub vendor_429s: u64,
    /// Vendor requests and 429s answered within the measured window (after the warm-up).
    pub window_vendor: (u64, u64),
    /// Highest concurrency any key saw at the vendor, refused requests included (whole run).
    pub peak_per_key: u64,
    /// The cap it is measured against.
    pub cap: u32,
    /// Latency of successful requests (waits and failovers included), p50.
    pub p50: Duration,
    /// Same, p99.
    pub p99: Duration,
    /// Requests served per key at the vendor, max over mean (1.0 = perfectly even).
    pub spread: f64,
    /// Requests served per key at the vendor (whole run), in key order.
    pub served_per_key: Vec<u64>,
    /// Acquires retried as the scheduler's contract says (transient UNAVAILABLE; whole run).
    pub retried: u64,
}

impl RunResult {
    /// `rps / theoretical_rps`.
    pub fn ratio(&self) -> f64 {
        self.rps / self.theoretical_rps
    }
}

/// The `p` quantile (0..=1) of sorted values; zero when empty.
pub fn quantile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p.clamp(0.0, 1.0)).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Max over mean of `values`; 0 when the mean is 0.
pub fn spread(values: &[u64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let sum: u64 = values.iter().sum();
    let max = values.iter().copied().max().unwrap_or(0);
    let mean = sum as f64 / values.len() as f64;
    if mean == 0.0 { 0.0 } else { max as f64 / mean }
}

/// Builds the figures of a run from the client-side window and the vendor's counters.
#[allow(clippy::too_many_arguments)]
pub fn summarize(
    strategy: Strategy,
    config: &SimConfig,
    load: &Load,
    mut latencies: Vec<Duration>,
    failed: u64,
    failovers: u64,
    failure_reasons: BTreeMap<String, u64>,
    per_key: &[KeyStats],
    window_vendor: (u64, u64),
    retried: u64,
) -> RunResult {
    latencies.sort_unstable();
    let served: Vec<u64> = per_key.iter().map(|k| k.successes).collect();
    RunResult {
        strategy,
        load: load.label.clone(),
        clients: load.clients,
        rps: latencies.len() as f64 / config.window.as_secs_f64(),
        theoretical_rps: config.theoretical_rps(),
        failed,
        failovers,
        failure_reasons,
        vendor_429s: per_key.iter().map(|k| k.rejected_over_cap).sum(),
        window_vendor,
        peak_per_key: per_key
            .iter()
            .map(|k| k.peak_concurrency)
            .max()
            .unwrap_or(0),
        cap: config.cap,
        p50: quantile(&latencies, 0.50),
        p99: quantile(&latencies, 0.99),
        spread: spread(&served),
        served_per_key: served,
        retried,
    }
}

fn ms(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1000.0)
}

/// The side-by-side markdown table, one row per strategy × load.
pub fn table(results: &[RunResult]) -> String {
    let mut out = String::from(
        "| load | strategy | clients | completed req/s | of theoretical | failed | failovers | vendor 429s | peak per key (cap) | p50 ms | p99 ms | spread max/mean |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in results {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} | {:.2} | {} | {} | {} | {} ({}) | {} | {} | {:.2} |",
            r.load,
            r.strategy,
            r.clients,
            r.rps,
            r.ratio(),
            r.failed,
            r.failovers,
            r.vendor_429s,
            r.peak_per_key,
            r.cap,
            ms(r.p50),
            ms(r.p99),
            r.spread
        );
    }
    out
}

/// Whether voxpool's rows meet the floors, as one line per floor (`saturation` and `half`
/// name the loads).
pub fn floors(results: &[RunResult], saturation: &str, half: &str) -> (bool, String) {
    let voxpool = |load: &str| {
        results
            .iter()
            .find(|r| r.strategy == Strategy::Voxpool && r.load == load)
    };
    let mut ok = true;
    let mut out = String::new();
    let verdict = |pass: bool| if pass { "meets floor" } else { "BELOW FLOOR" };
    let all_429s: u64 = results
        .iter()
        .filter(|r| r.strategy == Strategy::Voxpool)
        .map(|r| r.vendor_429s)
        .sum();
    let peak_ok = results
        .iter()
        .filter(|r| r.strategy == Strategy::Voxpool)
        .all(|r| r.peak_per_key <= u64::from(r.cap));
    let pass = all_429s == 0 && peak_ok;
    ok &= pass;
    let _ = writeln!(
        out,
        "- voxpool vendor 429s from oversell: {all_429s} (floor 0; peak per key within cap: {peak_ok}): {}",
        verdict(pass)
    );
    match voxpool(saturation) {
        Some(r) => {
            let pass = r.ratio() >= FLOOR_THROUGHPUT_RATIO;
            ok &= pass;
            let _ = writeln!(
                out,
                "- voxpool throughput at saturation: {:.2} of theoretical (floor {FLOOR_THROUGHPUT_RATIO}): {}",
                r.ratio(),
                verdict(pass)
            );
        }
        None => ok = false,
    }
    match voxpool(half) {
        Some(r) => {
            let pass = r.spread <= FLOOR_SPREAD;
            ok &= pass;
            let _ = writeln!(
                out,
                "- voxpool spread max/mean at 50% load: {:.2} (floor {FLOOR_SPREAD}): {}",
                r.spread,
                verdict(pass)
            );
        }
        None => ok = false,
    }
    let retried: u64 = results
        .iter()
        .filter(|r| r.strategy == Strategy::Voxpool)
        .map(|r| r.retried)
        .sum();
    let _ = writeln!(
        out,
        "- voxpool Acquires retried as the contract says (transient UNAVAILABLE): {retried}"
    );
    (ok, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_spread() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(quantile(&v, 0.5), Duration::from_millis(51));
        assert_eq!(quantile(&v, 0.99), Duration::from_millis(99));
        assert_eq!(quantile(&[], 0.5), Duration::ZERO);
        assert!((spread(&[5, 5, 5, 5]) - 1.0).abs() < 1e-9);
        assert!((spread(&[10, 0]) - 2.0).abs() < 1e-9);
        assert_eq!(spread(&[0, 0]), 0.0);
    }
}
