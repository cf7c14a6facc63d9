//! Adaptive capacity benchmark (`make bench`; not a test): the pool simulation's "vendor limit
//! lower than configured" scenario. Ten keys configured at 10 whose vendor allows 4 each, 100
//! closed-loop clients on two voxpool replicas (one Redis), the fake vendor's log-normal service
//! time. Side by side in one run: adaptive on (the vendor's 429s reported as
//! CONCURRENCY_LIMITED, effective capacities learned) and off (`adaptive = false`, 429s reported
//! as RATE_LIMITED: a cooldown each, as before). Measured in the window after a warm-up in
//! which the keys learn: the share of vendor answers that were 429s, and goodput against the
//! real limits' bound (10 × 4 / mean service time). Floors: 429 share < 1%, goodput ≥ 0.9.
//! Sizes: `POOLSIM_*` variables as for the pool simulation; `ADAPTIVE_CONFIGURED_CAP` (10)
//! the capacity the keys are configured with (4 = the truth: no learning needed).

// The in-process stack nests deep async types (see poolsim.rs).
#![recursion_limit = "256"]

use std::{process::ExitCode, time::Duration};

use voxpool_loadsim::{
    config::{Load, SimConfig},
    run,
    strategy::Strategy,
};
use voxpool_testkit::RedisServer;

const FLOOR_429_SHARE: f64 = 0.01;
const FLOOR_GOODPUT: f64 = 0.9;

fn main() -> ExitCode {
    let base = match SimConfig::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("adaptive: {e}");
            return ExitCode::from(2);
        }
    };
    let configured = std::env::var("ADAPTIVE_CONFIGURED_CAP")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let config = SimConfig {
        cap: 4,
        configured_cap: Some(configured),
        warmup: base.warmup.max(Duration::from_secs(3)),
        ..base
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let redis = RedisServer::start();
    let load = Load {
        label: "100 clients".into(),
        clients: 100,
    };
    let mut rows = Vec::new();
    runtime.block_on(async {
        for (i, adaptive) in [true, false].into_iter().enumerate() {
            let config = SimConfig {
                adaptive,
                ..config.clone()
            };
            let pool = format!("adaptive-{i}");
            match run::run(Strategy::Voxpool, &config, &load, &redis.url(), &pool).await {
                Ok(r) => rows.push((adaptive, r)),
                Err(e) => eprintln!("adaptive: run failed: {e}"),
            }
        }
    });
    println!("## Vendor limit lower than configured (pool simulation)\n");
    println!(
        "{} keys configured at 10, the vendor allows {} each; {} clients, 2 voxpool replicas on \
         one Redis; log-normal service time (median {} ms, sigma {}); {} s warm-up, then a {} s \
         window. Real bound: {:.0} requests/s.\n",
        config.keys,
        config.cap,
        load.clients,
        config.median.as_millis(),
        config.sigma,
        config.warmup.as_secs_f64(),
        config.window.as_secs_f64(),
        config.theoretical_rps()
    );
    println!(
        "| adaptive | vendor 429s / answers (window) | 429 share | goodput req/s | vs real bound | failed |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let mut met = true;
    for (adaptive, r) in &rows {
        let (answers, refused) = r.window_vendor;
        let share = if answers == 0 {
            0.0
        } else {
            refused as f64 / answers as f64
        };
        println!(
            "| {} | {refused} / {answers} | {:.2}% | {:.0} | {:.2} | {} |",
            if *adaptive { "on" } else { "off" },
            share * 100.0,
            r.rps,
            r.ratio(),
            r.failed
        );
        if *adaptive {
            met = share < FLOOR_429_SHARE && r.ratio() >= FLOOR_GOODPUT;
        }
    }
    println!();
    println!(
        "- adaptive on: floors 429 share < {:.0}% and goodput ≥ {FLOOR_GOODPUT} of the real bound: {}\n",
        FLOOR_429_SHARE * 100.0,
        if met { "met" } else { "NOT MET" }
    );
    ExitCode::SUCCESS
}
