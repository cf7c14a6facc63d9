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

/// Calls the contract told the benchmark to retry (a grant withdrawn because no replica
/// acknowledged it in time, UNAVAILABLE, RESOURCE_EXHAUSTED with a retry hint), counted so the
/// report can say how many there were.
pub static RETRIED: AtomicU64 = AtomicU64::new(0);

/// Most retries of one call before the benchmark gives up on it (the store is down, not
/// failing over).
const MAX_RETRIES: u32 = 1_000;

/// Runs `call` until it returns `Ok`, retrying (and counting in [`RETRIED`]) what `retry`
/// says the contract lets a caller retry; any other error, or [`MAX_RETRIES`] in a row, ends
/// the benchmark with the error.
pub async fn retrying<T, E: std::fmt::Display, Fut>(
    what: &str,
    retry: impl Fn(&E) -> bool,
    mut call: impl FnMut() -> Fut,
) -> T
where
    Fut: Future<Output = Result<T, E>>,
{
    for _ in 0..MAX_RETRIES {
        match call().await {
            Ok(value) => return value,
            Err(e) if retry(&e) => {
                RETRIED.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
    panic!("{what}: still failing after {MAX_RETRIES} retries")
}

/// Whether the scheduler's contract lets a caller retry `status` (its typed reason, else its
/// code).
pub fn grpc_retryable(status: &tonic::Status) -> bool {
    use voxpool_domain::contract::{Retry, SchedulerReason, retry_of};
    retry_of::<SchedulerReason>(status) == Retry::Again
}

/// Whether a raw store error is one a caller retries (the store unreachable or a grant
/// withdrawn for want of replica acknowledgements).
#[allow(dead_code)] // the raw-store calls are the scheduler bench's only
pub fn store_retryable(error: &voxpool_scheduler::store::StoreError) -> bool {
    matches!(error, voxpool_scheduler::store::StoreError::Unavailable(_))
}
