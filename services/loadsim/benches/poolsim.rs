//! Pool simulation benchmark (`make bench`; not a test). Prints one markdown table: voxpool,
//! fixed-order rotation with 429 failover, and per-replica local least-busy, side by side at
//! saturation (2 × capacity clients) and at 50% load, against the same fake vendor, plus the
//! floors line for voxpool. Sizes: `POOLSIM_*` variables (see `voxpool_loadsim::config`).

// The in-process stack (scheduler with the Redis cluster client, synthesis, fake vendors)
// nests deep async types; the default limit of 128 is too small for its futures.
#![recursion_limit = "256"]

use std::process::ExitCode;

use voxpool_loadsim::{
    config::{Load, SimConfig},
    report, run,
    strategy::Strategy,
};
use voxpool_testkit::RedisServer;

fn main() -> ExitCode {
    let config = match SimConfig::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("poolsim: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let redis = RedisServer::start();
    let saturation = Load {
        label: "saturation".into(),
        clients: config.saturation_clients,
    };
    let half = Load {
        label: "50%".into(),
        clients: config.half_clients,
    };
    let mut results = Vec::new();
    runtime.block_on(async {
        for (i, load) in [&saturation, &half].into_iter().enumerate() {
            for (j, strategy) in Strategy::ALL.into_iter().enumerate() {
                let pool = format!("poolsim-{i}-{j}");
                match run::run(strategy, &config, load, &redis.url(), &pool).await {
                    Ok(r) => {
                        eprintln!(
                            "poolsim: {} / {}: {:.0} req/s, {} vendor 429s, failures {:?}, served per key {:?}",
                            load.label, strategy, r.rps, r.vendor_429s, r.failure_reasons, r.served_per_key
                        );
                        results.push(r);
                    }
                    Err(e) => eprintln!("poolsim: {} / {strategy} failed: {e}", load.label),
                }
            }
        }
    });
    println!("## Pool simulation\n");
    println!(
        "{} keys × cap {} at a fake OpenAI-compatible vendor (HTTP on loopback; over-cap requests get 429), \
         service time log-normal median {:.0} ms, sigma {} (mean {:.1} ms; 800 ms scaled down); \
         {} replicas per strategy; {:.0} s measured after {:.1} s warm-up per run; up to {} vendor calls per request. \
         Theoretical = N × cap / mean service time = {:.0} req/s.\n",
        config.keys,
        config.cap,
        config.median.as_secs_f64() * 1000.0,
        config.sigma,
        config.mean_service().as_secs_f64() * 1000.0,
        config.replicas,
        config.window.as_secs_f64(),
        config.warmup.as_secs_f64(),
        config.attempts,
        config.theoretical_rps(),
    );
    print!("{}", report::table(&results));
    println!();
    let (_, floors) = report::floors(&results, &saturation.label, &half.label);
    print!("{floors}");
    println!();
    ExitCode::SUCCESS
}
