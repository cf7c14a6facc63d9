//! Fixed-order key rotation with failover on 429, the common design voxpool replaces: each
//! replica keeps its own round-robin index over the keys in config order; a request starts at
//! the next index and, on 429, moves to the following key, up to the attempt limit. No replica
//! knows what the others (or its own in-flight requests) hold, so under load keys are
//! overrun and the vendor answers 429.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::RequestOutcome;
use crate::{
    config::SimConfig,
    vendor::{CallOutcome, VendorClient},
};

/// One rotation proxy.
#[derive(Debug)]
pub struct Replica {
    keys: Vec<String>,
    next: AtomicUsize,
    attempts: u32,
}

impl Replica {
    /// A proxy over the config's keys, starting at the first.
    pub fn new(config: &SimConfig) -> Self {
        Self {
            keys: (0..config.keys).map(|i| config.key_name(i)).collect(),
            next: AtomicUsize::new(0),
            attempts: config.attempts,
        }
    }

    /// One request: next key in turn, following keys on 429.
    pub async fn request(&self, vendor: &VendorClient) -> RequestOutcome {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for attempt in 0..self.attempts {
            let key = &self.keys[(start + attempt as usize) % self.keys.len()];
            match vendor.speak(key).await {
                CallOutcome::Ok => {
                    return RequestOutcome::Success {
                        attempts: attempt + 1,
                    };
                }
                CallOutcome::RateLimited => {}
                CallOutcome::Failed(reason) => return RequestOutcome::Failed { reason },
            }
        }
        RequestOutcome::Failed {
            reason: "every attempt answered 429".into(),
        }
    }
}
