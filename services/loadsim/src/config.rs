//! Simulation sizes, read from `POOLSIM_*` environment variables (each optional):
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `POOLSIM_KEYS` | 10 | keys in the pool (N) |
//! | `POOLSIM_CAP` | 10 | vendor concurrency cap per key |
//! | `POOLSIM_REPLICAS` | 2 | replicas per strategy (R) |
//! | `POOLSIM_MEDIAN_MS` | 200 | median vendor service time (800 ms scaled by 1/4) |
//! | `POOLSIM_SIGMA` | 0.5 | log-normal shape (standard deviation of the log) |
//! | `POOLSIM_SECONDS` | 8 | measured window per run |
//! | `POOLSIM_WARMUP_MS` | 1500 | load before the window opens (not counted) |
//! | `POOLSIM_SATURATION_CLIENTS` | 2 × N × cap | clients (M) of the saturation load |
//! | `POOLSIM_HALF_CLIENTS` | N × cap / 2 | clients of the 50% load |
//! | `POOLSIM_ATTEMPTS` | 3 | vendor attempts per request (failover on 429) |
//! | `POOLSIM_FAIL_BACKOFF_MS` | 50 | pause of a client after a failed request |
//! | `POOLSIM_WAIT_MS` | 10000 | longest wait for a free slot (voxpool Acquire, local queue) |

use std::time::Duration;

use voxpool_fake_vendors::Latency;

/// Sizes and timings of one simulation (module doc lists the variables).
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Keys in the pool (N).
    pub keys: usize,
    /// Vendor concurrency cap per key.
    pub cap: u32,
    /// Replicas per strategy (R).
    pub replicas: usize,
    /// Median vendor service time.
    pub median: Duration,
    /// Log-normal shape.
    pub sigma: f64,
    /// Measured window per run.
    pub window: Duration,
    /// Load applied before the window opens.
    pub warmup: Duration,
    /// Clients of the saturation load.
    pub saturation_clients: usize,
    /// Clients of the 50% load.
    pub half_clients: usize,
    /// Vendor attempts per request.
    pub attempts: u32,
    /// Pause of a client after a failed request.
    pub fail_backoff: Duration,
    /// Longest wait for a free slot.
    pub wait: Duration,
    /// Capacity each key is configured with in voxpool's pool; `None` = `cap` (the config
    /// tells the truth). Above `cap`: a vendor whose real limit is lower than configured.
    pub configured_cap: Option<u32>,
    /// voxpool's pool learns the keys' real limits (`adaptive`): the vendor's 429s are
    /// reported as CONCURRENCY_LIMITED. Off: `adaptive = false` and 429s are RATE_LIMITED
    /// (a cooldown each).
    pub adaptive: bool,
}

/// A load level of one run: how many clients.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Load {
    /// Name in the report (`saturation`, `50%`).
    pub label: String,
    /// Closed-loop clients (M).
    pub clients: usize,
}

impl Default for SimConfig {
    fn default() -> Self {
        let (keys, cap) = (10, 10);
        let capacity = keys * cap as usize;
        Self {
            keys,
            cap,
            replicas: 2,
            median: Duration::from_millis(200),
            sigma: 0.5,
            window: Duration::from_secs(8),
            warmup: Duration::from_millis(1500),
            saturation_clients: 2 * capacity,
            half_clients: capacity / 2,
            attempts: 3,
            fail_backoff: Duration::from_millis(50),
            wait: Duration::from_secs(10),
            configured_cap: None,
            adaptive: true,
        }
    }
}

fn read<T: std::str::FromStr>(name: &str) -> Result<Option<T>, String> {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| format!("{name}={v:?} is not a valid number")),
        Err(_) => Ok(None),
    }
}

impl SimConfig {
    /// The defaults overridden by the `POOLSIM_*` variables; errors name the bad variable.
    pub fn from_env() -> Result<Self, String> {
        let mut c = Self::default();
        if let Some(v) = read("POOLSIM_KEYS")? {
            c.keys = v;
        }
        if let Some(v) = read("POOLSIM_CAP")? {
            c.cap = v;
        }
        let capacity = c.keys * c.cap as usize;
        c.saturation_clients = read("POOLSIM_SATURATION_CLIENTS")?.unwrap_or(2 * capacity);
        c.half_clients = read("POOLSIM_HALF_CLIENTS")?.unwrap_or(capacity / 2);
        if let Some(v) = read("POOLSIM_REPLICAS")? {
            c.replicas = v;
        }
        if let Some(v) = read::<f64>("POOLSIM_MEDIAN_MS")? {
            c.median = Duration::from_secs_f64(v.max(0.0) / 1000.0);
        }
        if let Some(v) = read("POOLSIM_SIGMA")? {
            c.sigma = v;
        }
        if let Some(v) = read::<f64>("POOLSIM_SECONDS")? {
            c.window = Duration::from_secs_f64(v.max(0.0));
        }
        if let Some(v) = read("POOLSIM_WARMUP_MS")? {
            c.warmup = Duration::from_millis(v);
        }
        if let Some(v) = read("POOLSIM_ATTEMPTS")? {
            c.attempts = v;
        }
        if let Some(v) = read("POOLSIM_FAIL_BACKOFF_MS")? {
            c.fail_backoff = Duration::from_millis(v);
        }
        if let Some(v) = read("POOLSIM_WAIT_MS")? {
            c.wait = Duration::from_millis(v);
        }
        c.validate()?;
        Ok(c)
    }

    /// Refuses sizes the simulation cannot run with.
    pub fn validate(&self) -> Result<(), String> {
        let problems = [
            (
                self.keys == 0 || self.keys > 1000,
                "POOLSIM_KEYS must be 1..=1000",
            ),
            (
                self.cap == 0 || self.cap > 1000,
                "POOLSIM_CAP must be 1..=1000",
            ),
            (
                self.replicas == 0 || self.replicas > 16,
                "POOLSIM_REPLICAS must be 1..=16",
            ),
            (self.median.is_zero(), "POOLSIM_MEDIAN_MS must be above 0"),
            (
                !(0.0..=2.0).contains(&self.sigma),
                "POOLSIM_SIGMA must be 0..=2",
            ),
            (
                self.window.is_zero() || self.window > Duration::from_secs(600),
                "POOLSIM_SECONDS must be in (0, 600]",
            ),
            (
                self.saturation_clients == 0 || self.saturation_clients > 20_000,
                "POOLSIM_SATURATION_CLIENTS must be 1..=20000",
            ),
            (
                self.half_clients == 0 || self.half_clients > 20_000,
                "POOLSIM_HALF_CLIENTS must be 1..=20000",
            ),
            (
                self.attempts == 0 || self.attempts > 100,
                "POOLSIM_ATTEMPTS must be 1..=100",
            ),
            (
                self.wait > Duration::from_secs(600),
                "POOLSIM_WAIT_MS must be at most 600000",
            ),
        ];
        match problems.iter().find(|(bad, _)| *bad) {
            Some((_, why)) => Err((*why).to_owned()),
            None => Ok(()),
        }
    }

    /// N × cap.
    pub fn capacity(&self) -> usize {
        self.keys * self.cap as usize
    }

    /// The fake vendor's service time distribution.
    pub fn latency(&self) -> Latency {
        Latency::LogNormal {
            median: self.median,
            sigma: self.sigma,
        }
    }

    /// Mean service time: `median · e^(sigma²/2)`.
    pub fn mean_service(&self) -> Duration {
        Duration::from_secs_f64(self.median.as_secs_f64() * (self.sigma * self.sigma / 2.0).exp())
    }

    /// The pool's ceiling: N × cap / mean service time, in requests per second.
    pub fn theoretical_rps(&self) -> f64 {
        self.capacity() as f64 / self.mean_service().as_secs_f64()
    }

    /// Key `i`'s id (also the bearer credential the fake counts it under): `k00`, `k01`, ….
    pub fn key_name(&self, i: usize) -> String {
        format!("k{i:02}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn theoretical_throughput_uses_the_log_normal_mean() {
        let c = SimConfig {
            median: Duration::from_millis(100),
            sigma: 0.0,
            ..SimConfig::default()
        };
        assert!((c.theoretical_rps() - 1000.0).abs() < 1e-6);
        let c = SimConfig { sigma: 0.5, ..c };
        // mean = 100 ms · e^0.125 ≈ 113.3 ms
        assert!((c.mean_service().as_secs_f64() - 0.113_314_8).abs() < 1e-6);
    }

    #[test]
    fn the_fake_vendor_draws_the_configured_log_normal() {
        let c = SimConfig::default();
        let latency = c.latency();
        let mut draws: Vec<f64> = (0..20_000)
            .map(|_| latency.sample().as_secs_f64())
            .collect();
        draws.sort_by(f64::total_cmp);
        let median = draws[draws.len() / 2];
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        let want_median = c.median.as_secs_f64();
        let want_mean = c.mean_service().as_secs_f64();
        assert!((median / want_median - 1.0).abs() < 0.05, "median {median}");
        assert!((mean / want_mean - 1.0).abs() < 0.05, "mean {mean}");
    }

    #[test]
    fn bad_sizes_are_refused_with_the_variable_name() {
        let c = SimConfig {
            keys: 0,
            ..SimConfig::default()
        };
        assert!(c.validate().unwrap_err().contains("POOLSIM_KEYS"));
    }
}
