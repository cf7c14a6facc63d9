//! The Cluster topology's connection: the `redis` crate's `ClusterClient` and the
//! `ClusterConnection` it built, rebuilt from the seed nodes when calls keep failing.
//!
//! Why: the crate's connection follows MOVED/ASK and refreshes its slot map after a failover,
//! but under load a refresh can leave it answering every call with a timeout for good (seen
//! with a primary SIGKILLed among 150 callers: "beginning slot refresh", then only "timed
//! out"). A fresh connection from the seed nodes reads the slot map anew. When
//! [`super::heal::REBUILD_AFTER`] calls in a row fail with a connection-class error, one
//! rebuild runs in the background (bounded by twice the store timeout); calls keep using the
//! old connection until the new one is in place, and calls already running on the old one
//! finish on it. Each connection has a generation, so a replica acknowledgement is never
//! checked on a connection other than the one that wrote (`super::Conn::wait_replicas`).

use std::{
    sync::{Arc, PoisonError, RwLock},
    time::Duration,
};

use redis::{RedisResult, cluster::ClusterClient, cluster_async::ClusterConnection};

use super::heal::{Streak, timed_out};

/// The cluster connection and its healing (module doc). Shared behind an `Arc`.
pub struct ClusterConn {
    client: ClusterClient,
    /// `(generation, connection)`: the generation counts rebuilds.
    current: RwLock<(u64, ClusterConnection)>,
    streak: Streak,
    timeout: Duration,
}

impl ClusterConn {
    /// Connects through `client`'s seed nodes. Errors: no seed node answers with a slot map.
    pub(super) async fn connect(client: ClusterClient, timeout: Duration) -> RedisResult<Self> {
        let conn = client.get_async_connection().await?;
        Ok(Self {
            client,
            current: RwLock::new((0, conn)),
            streak: Streak::new(timeout),
            timeout,
        })
    }

    fn current(&self) -> (u64, ClusterConnection) {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many times the connection was rebuilt.
    pub(super) fn generation(&self) -> u64 {
        self.current().0
    }

    /// Runs `call` on the current connection, bounded by the store timeout, counting its
    /// outcome towards a rebuild (module doc).
    pub(super) async fn run<T, F>(
        self: &Arc<Self>,
        what: &str,
        call: impl FnOnce(ClusterConnection) -> F,
    ) -> RedisResult<T>
    where
        F: Future<Output = RedisResult<T>>,
    {
        let (generation, conn) = self.current();
        self.counted(generation, what, call(conn)).await
    }

    /// [`ClusterConn::run`] on the connection of `generation` only: an error when it was
    /// replaced since (the caller's earlier writes went to the old one).
    pub(super) async fn run_on<T, F>(
        self: &Arc<Self>,
        generation: u64,
        what: &str,
        call: impl FnOnce(ClusterConnection) -> F,
    ) -> RedisResult<T>
    where
        F: Future<Output = RedisResult<T>>,
    {
        let (now, conn) = self.current();
        if now != generation {
            return Err(redis::RedisError::from(std::io::Error::other(format!(
                "{what}: the cluster connection was rebuilt since the write it is for; retry"
            ))));
        }
        self.counted(generation, what, call(conn)).await
    }

    /// `call`'s result, bounded by the store timeout and counted towards a rebuild, unless
    /// the connection it ran on (`generation`) was replaced meanwhile: the old one's last
    /// failures say nothing of the new one.
    async fn counted<T>(
        self: &Arc<Self>,
        generation: u64,
        what: &str,
        call: impl Future<Output = RedisResult<T>>,
    ) -> RedisResult<T> {
        let result = tokio::time::timeout(self.timeout, call)
            .await
            .unwrap_or_else(|_| Err(timed_out(what, self.timeout)));
        if self.generation() != generation {
            return result;
        }
        if let Some(failures) = self.streak.record(&result) {
            self.rebuild_in_background(failures);
        }
        result
    }

    fn rebuild_in_background(self: &Arc<Self>, failures: u32) {
        let this = self.clone();
        tokio::spawn(async move {
            tracing::warn!(
                failures,
                "redis cluster calls keep failing; rebuilding the cluster connection from the seed nodes"
            );
            let bound = this.timeout * 2;
            let built = tokio::time::timeout(bound, this.client.get_async_connection()).await;
            match built {
                Ok(Ok(conn)) => {
                    let generation = {
                        let mut current =
                            this.current.write().unwrap_or_else(PoisonError::into_inner);
                        *current = (current.0 + 1, conn);
                        current.0
                    };
                    this.streak.rebuilt(true);
                    tracing::info!(generation, "redis cluster connection rebuilt");
                }
                Ok(Err(e)) => {
                    this.streak.rebuilt(false);
                    tracing::warn!(error = %e, "rebuilding the redis cluster connection failed; the old one stays, and the next failures try again");
                }
                Err(_) => {
                    this.streak.rebuilt(false);
                    tracing::warn!(
                        bound_ms = bound.as_millis(),
                        "rebuilding the redis cluster connection timed out; the old one stays, and the next failures try again"
                    );
                }
            }
        });
    }
}
