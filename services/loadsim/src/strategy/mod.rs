//! The three ways of picking a key that the simulation compares, each deployed as R replicas.
//! A client is bound to one replica and asks it to run whole requests
//! ([`Replica::request`]); the replica picks keys, calls the vendor and fails over on 429 up
//! to [`SimConfig::attempts`] vendor calls.
//!
//! - [`voxpool`]: leases from the real scheduler (R in-process replicas, one Redis).
//! - [`rotation`]: fixed-order round-robin per replica, next key on 429.
//! - [`least_busy`]: lowest local in-flight count per replica, next-lowest on 429.

pub mod least_busy;
pub mod rotation;
pub mod voxpool;

use std::{fmt, sync::Arc};

use tokio_util::sync::CancellationToken;

use crate::{config::SimConfig, vendor::VendorClient};

/// A key-picking strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Leases from the voxpool scheduler (shared state in Redis).
    Voxpool,
    /// Fixed-order round-robin with failover on 429 (the design voxpool replaces).
    Rotation,
    /// Per-replica least-busy key from local counts (a proxy without shared state).
    LocalLeastBusy,
}

impl Strategy {
    /// Every strategy, in table order.
    pub const ALL: [Strategy; 3] = [
        Strategy::Voxpool,
        Strategy::Rotation,
        Strategy::LocalLeastBusy,
    ];

    /// Name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Voxpool => "voxpool",
            Strategy::Rotation => "rotation + 429 failover",
            Strategy::LocalLeastBusy => "local least-busy",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How one request (up to `attempts` vendor calls) ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestOutcome {
    /// Audio received from the vendor.
    Success {
        /// Vendor calls made (1 = first try).
        attempts: u32,
    },
    /// No audio: every attempt was rate limited, no slot freed in time, or an error.
    Failed {
        /// Why (short, for the report's notes).
        reason: String,
    },
}

/// One replica of a strategy.
#[derive(Debug)]
pub enum Replica {
    /// A scheduler replica's client.
    Voxpool(voxpool::Replica),
    /// A rotation proxy.
    Rotation(rotation::Replica),
    /// A least-busy proxy.
    LeastBusy(least_busy::Replica),
}

impl Replica {
    /// Runs one request through this replica against `vendor`.
    pub async fn request(&self, vendor: &VendorClient) -> RequestOutcome {
        match self {
            Replica::Voxpool(r) => r.request(vendor).await,
            Replica::Rotation(r) => r.request(vendor).await,
            Replica::LeastBusy(r) => r.request(vendor).await,
        }
    }
}

/// R replicas of one strategy, and whatever servers they need (stopped on drop).
#[derive(Debug)]
pub struct Deployment {
    /// The replicas, shared by the clients.
    pub replicas: Vec<Arc<Replica>>,
    shutdown: CancellationToken,
}

impl Drop for Deployment {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Deployment {
    /// Acquires the voxpool replicas retried as the scheduler's contract says (0 for the
    /// other strategies).
    pub fn retried(&self) -> u64 {
        self.replicas
            .iter()
            .map(|r| match &**r {
                Replica::Voxpool(r) => r.retried(),
                _ => 0,
            })
            .sum()
    }

    /// Starts R replicas of `strategy`. Voxpool needs `redis_url` (one Redis shared by its
    /// scheduler replicas) and a `pool` id not used by an earlier run on that Redis.
    pub async fn start(
        strategy: Strategy,
        config: &SimConfig,
        redis_url: &str,
        pool: &str,
    ) -> Result<Self, String> {
        let shutdown = CancellationToken::new();
        let mut replicas = Vec::with_capacity(config.replicas);
        for _ in 0..config.replicas {
            let replica = match strategy {
                Strategy::Voxpool => Replica::Voxpool(
                    voxpool::Replica::start(config, redis_url, pool, shutdown.clone()).await?,
                ),
                Strategy::Rotation => Replica::Rotation(rotation::Replica::new(config)),
                Strategy::LocalLeastBusy => Replica::LeastBusy(least_busy::Replica::new(config)),
            };
            replicas.push(Arc::new(replica));
        }
        Ok(Self { replicas, shutdown })
    }
}
