//! Per-replica least-busy with local counts, what a proxy without shared state does: each
//! replica counts its own in-flight requests per key, sends a request to the key with the
//! lowest count (ties rotate), queues locally (bounded) when every key is at the cap *by its
//! own count*, and on 429 moves to the next-lowest key not tried yet, up to the attempt limit.
//! With one replica this never oversells; with R replicas each one believes it owns the whole
//! cap, so a key can see up to R × cap requests.

use std::{
    sync::{Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use tokio::{sync::Notify, time::Instant};

use super::RequestOutcome;
use crate::{
    config::SimConfig,
    vendor::{CallOutcome, VendorClient},
};

#[derive(Debug)]
struct Counts {
    in_flight: Vec<u32>,
    /// Where the tie-breaking scan starts next, so equal keys take turns.
    cursor: usize,
}

/// One least-busy proxy.
#[derive(Debug)]
pub struct Replica {
    keys: Vec<String>,
    cap: u32,
    attempts: u32,
    wait: Duration,
    counts: Mutex<Counts>,
    freed: Notify,
}

impl Replica {
    /// A proxy over the config's keys with nothing in flight.
    pub fn new(config: &SimConfig) -> Self {
        Self {
            keys: (0..config.keys).map(|i| config.key_name(i)).collect(),
            cap: config.cap,
            attempts: config.attempts,
            wait: config.wait,
            counts: Mutex::new(Counts {
                in_flight: vec![0; config.keys],
                cursor: 0,
            }),
            freed: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the untried key with the lowest local count below the cap, if any.
    fn try_take(&self, tried: &[bool]) -> Option<usize> {
        let mut c = self.lock();
        let n = c.in_flight.len();
        let start = c.cursor;
        let best = (0..n)
            .map(|i| (start + i) % n)
            .filter(|&k| !tried[k] && c.in_flight[k] < self.cap)
            .min_by_key(|&k| c.in_flight[k])?;
        c.in_flight[best] += 1;
        c.cursor = (best + 1) % n;
        Some(best)
    }

    fn put_back(&self, key: usize) {
        {
            let mut c = self.lock();
            c.in_flight[key] = c.in_flight[key].saturating_sub(1);
        }
        self.freed.notify_one();
    }

    /// A key for the first attempt, queueing (bounded by the wait) while every key is full by
    /// local count.
    async fn take_waiting(&self, tried: &[bool], until: Instant) -> Option<usize> {
        loop {
            // Registered before looking, so a release between the look and the wait counts.
            let freed = self.freed.notified();
            if let Some(k) = self.try_take(tried) {
                return Some(k);
            }
            if tokio::time::timeout_at(until, freed).await.is_err() {
                return None;
            }
        }
    }

    /// One request: least-busy key by local count, next-lowest untried key on 429.
    pub async fn request(&self, vendor: &VendorClient) -> RequestOutcome {
        let until = Instant::now() + self.wait;
        let mut tried = vec![false; self.keys.len()];
        for attempt in 0..self.attempts {
            // Only the first attempt queues; a failover takes a free key or gives up.
            let key = if attempt == 0 {
                self.take_waiting(&tried, until).await
            } else {
                self.try_take(&tried)
            };
            let Some(key) = key else {
                return RequestOutcome::Failed {
                    reason: if attempt == 0 {
                        "no local slot freed in time".into()
                    } else {
                        "every attempt answered 429".into()
                    },
                };
            };
            let outcome = vendor.speak(&self.keys[key]).await;
            self.put_back(key);
            match outcome {
                CallOutcome::Ok => {
                    return RequestOutcome::Success {
                        attempts: attempt + 1,
                    };
                }
                CallOutcome::RateLimited => tried[key] = true,
                CallOutcome::Failed(reason) => return RequestOutcome::Failed { reason },
            }
        }
        RequestOutcome::Failed {
            reason: "every attempt answered 429".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_least_busy_key_and_rotates_ties() {
        let config = SimConfig {
            keys: 3,
            cap: 2,
            ..SimConfig::default()
        };
        let r = Replica::new(&config);
        let none = [false; 3];
        let first: Vec<usize> = (0..3).map(|_| r.try_take(&none).unwrap()).collect();
        assert_eq!(first, vec![0, 1, 2]);
        r.put_back(1);
        assert_eq!(r.try_take(&none), Some(1));
        let _ = (r.try_take(&none), r.try_take(&none), r.try_take(&none));
        assert_eq!(r.try_take(&none), None, "every key at the local cap");
        r.put_back(2);
        assert_eq!(r.try_take(&[false, false, true]), None, "2 was tried");
        assert_eq!(r.try_take(&none), Some(2));
    }
}
