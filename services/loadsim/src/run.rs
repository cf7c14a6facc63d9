//! One measured run: a fresh fake vendor, R replicas of one strategy, M closed-loop clients
//! (client i on replica i mod R) issuing requests back to back for warm-up + window. Requests
//! that end inside the window count; the vendor's own counters (whole run) give 429s, peak
//! concurrency and requests per key.
//!
//! Every loop is bounded: clients stop starting requests when the window closes, each request
//! is bounded by its own timeouts (vendor call 30 s, slot wait [`SimConfig::wait`]), and the
//! run gives up waiting for clients [`DRAIN_LIMIT`] after the window.

use std::{sync::Arc, time::Duration};

use tokio::time::Instant;
use voxpool_fake_vendors::{FakeConfig, FakeVendor, KeyStats, VendorKind};

use crate::{
    config::{Load, SimConfig},
    report::{self, RunResult},
    strategy::{Deployment, RequestOutcome, Strategy},
    vendor::VendorClient,
};

/// Longest the run waits for clients to finish their last request after the window.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// What one client saw: (end of request, latency, outcome) per request.
type ClientLog = Vec<(Instant, Duration, RequestOutcome)>;

async fn client_loop(
    replica: Arc<crate::strategy::Replica>,
    vendor: VendorClient,
    stop: Instant,
    backoff: Duration,
) -> ClientLog {
    let mut log = Vec::new();
    while Instant::now() < stop {
        let started = Instant::now();
        let outcome = replica.request(&vendor).await;
        let ended = Instant::now();
        let failed = matches!(outcome, RequestOutcome::Failed { .. });
        log.push((ended, ended - started, outcome));
        if failed && ended < stop {
            tokio::time::sleep(backoff).await;
        }
    }
    log
}

/// Runs `load` against `strategy` and measures it. `redis_url` is the Redis shared by the
/// voxpool replicas; `pool` must be unique per run on it.
pub async fn run(
    strategy: Strategy,
    config: &SimConfig,
    load: &Load,
    redis_url: &str,
    pool: &str,
) -> Result<RunResult, String> {
    let mut fake_config = FakeConfig::new(VendorKind::OpenAi)
        .cap(config.cap)
        .latency(config.latency());
    fake_config.tone_ms = 10;
    let fake = FakeVendor::start(fake_config)
        .await
        .map_err(|e| format!("fake vendor: {e}"))?;
    let vendor = VendorClient::new(&fake.base_url())?;
    let deployment = Deployment::start(strategy, config, redis_url, pool).await?;

    let begin = Instant::now();
    let window_start = begin + config.warmup;
    let stop = window_start + config.window;
    let clients: Vec<_> = (0..load.clients)
        .map(|i| {
            let replica = Arc::clone(&deployment.replicas[i % deployment.replicas.len()]);
            tokio::spawn(client_loop(
                replica,
                vendor.clone(),
                stop,
                config.fail_backoff,
            ))
        })
        .collect();
    // The vendor's own counters over the window: requests and 429s.
    let vendor_totals = || {
        fake.stats().values().fold((0, 0), |(n, r), k| {
            (n + k.total_requests, r + k.rejected_over_cap)
        })
    };
    tokio::time::sleep_until(window_start).await;
    let at_start = vendor_totals();
    tokio::time::sleep_until(stop).await;
    let at_stop = vendor_totals();
    let window_vendor = (at_stop.0 - at_start.0, at_stop.1 - at_start.1);
    let mut logs = Vec::with_capacity(clients.len());
    let drain_until = stop + DRAIN_LIMIT;
    for task in clients {
        let abort = task.abort_handle();
        match tokio::time::timeout_at(drain_until, task).await {
            Ok(Ok(log)) => logs.push(log),
            Ok(Err(e)) => return Err(format!("a client task failed: {e}")),
            Err(_) => {
                abort.abort();
                return Err(format!(
                    "clients still busy {} s after the window",
                    DRAIN_LIMIT.as_secs()
                ));
            }
        }
    }
    let retried = deployment.retried();
    drop(deployment);

    let in_window = |at: &Instant| *at >= window_start && *at <= stop;
    let mut latencies = Vec::new();
    let mut failed = 0u64;
    let mut extra_attempts = 0u64;
    let mut reasons = std::collections::BTreeMap::<String, u64>::new();
    for (ended, latency, outcome) in logs.iter().flatten() {
        if !in_window(ended) {
            continue;
        }
        match outcome {
            RequestOutcome::Success { attempts } => {
                latencies.push(*latency);
                extra_attempts += u64::from(attempts.saturating_sub(1));
            }
            RequestOutcome::Failed { reason } => {
                failed += 1;
                *reasons.entry(reason.clone()).or_default() += 1;
            }
        }
    }
    let per_key: Vec<KeyStats> = {
        let stats = fake.stats();
        (0..config.keys)
            .map(|i| stats.get(&config.key_name(i)).copied().unwrap_or_default())
            .collect()
    };
    Ok(report::summarize(
        strategy,
        config,
        load,
        latencies,
        failed,
        extra_attempts,
        reasons,
        &per_key,
        window_vendor,
        retried,
    ))
}
