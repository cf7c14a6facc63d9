//! Pieces the scheduler benchmarks share: a closed-loop driver, percentiles, verdicts.

use std::{
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

/// Closed loop: `workers` tasks each running `pair()` back to back for `secs`; pairs/s.
pub async fn closed_loop<F, Fut>(workers: u64, secs: u64, pair: F) -> f64
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (pair, done, stop) = (pair.clone(), done.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    pair().await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let n = done.load(Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    for t in tasks {
        t.await.expect("closed-loop worker");
    }
    n as f64 / elapsed
}

/// Percentile `p` (0..=1) of sorted microseconds, in ms.
pub fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

/// The last column of a report row.
pub fn verdict(ok: bool) -> &'static str {
    if ok { "meets floor" } else { "BELOW FLOOR" }
}
