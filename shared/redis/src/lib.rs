//! `voxpool-redis`: connections to Redis on its three topologies, behind one type; nothing about
//! what is stored (the scheduler's lease store and the jobs queue each keep their own keys).
//!
//! Owns: parsing `--store` Redis URLs, connecting, and routing each call so that a store's rules
//! hold on every topology:
//! - **single node** (`redis://`, `rediss://`, `unix://`): one multiplexed connection that
//!   reconnects by itself (`redis::aio::ConnectionManager`);
//! - **Sentinel** (`redis-sentinel://h:p[,h:p...][/db]#<master>`, TLS `rediss-sentinel://`):
//!   the primary is asked of the sentinels (and checked with `ROLE`); a connection that fails
//!   or answers READONLY (a demoted primary) is dropped and the next call asks the sentinels
//!   again, so a failover is followed within one store timeout of the promotion; a sentinel
//!   client whose lookups keep failing is rebuilt ([`sentinel`]);
//! - **Cluster** (`redis-cluster://h:p[,h:p...]`, TLS `rediss-cluster://`): the `redis`
//!   crate's cluster client, which routes each script by its first key, follows MOVED/ASK and
//!   refreshes the slot map after a failover, and is rebuilt from the seed nodes when its
//!   calls keep failing ([`cluster`]). A store keeps the keys one script touches under one
//!   hash tag (`{pool}`, `{job}`), so each script runs on one slot.
//!
//! Healing ([`heal`]): on the two topologies whose client the crate never rebuilds, calls
//! that keep failing with connection-class errors (timeouts, I/O, refused, CLUSTERDOWN, ...)
//! across concurrent callers rebuild the client once (single-flight, bounded by the store
//! timeout); any answer resets the count. So a wedged client costs a few failed calls, not
//! the replica: health returns to SERVING by itself once the store answers.
//!
//! Replica acknowledgement ([`Conn::wait_replicas`]) sends `WAIT` on the very connection that
//! wrote (Redis counts a client's own writes), routed in a cluster to the primary of the
//! key's slot; it fails instead when that connection was replaced since
//! ([`Conn::generation`]).
//!
//! Credentials in a URL are never printed: [`redact`] is what messages show.
//!
//! The `redis` crate's own warnings (one per call in flight while a cluster node fails over)
//! reach the log at most once per 10 s with a count of the rest: [`log_limit`].

mod cluster;
mod heal;
pub mod log_limit;
mod sentinel;
mod url;

use std::{sync::Arc, time::Duration};

use redis::{
    Cmd, RedisError, RedisResult, ScriptInvocation, Value,
    aio::ConnectionManager,
    cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, Route, RoutingInfo, SlotAddr},
};

pub use cluster::ClusterConn;
pub use sentinel::SentinelConn;
pub use url::redact;
use url::split_multi_host;

/// Which topology a `--store` URL names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// One Redis server (`redis://`, `rediss://`, `unix://`, `redis+unix://`).
    Single,
    /// A Sentinel-managed primary with replicas (`redis-sentinel://`, `rediss-sentinel://`).
    Sentinel,
    /// A Redis Cluster (`redis-cluster://`, `rediss-cluster://`).
    Cluster,
}

impl Topology {
    /// The topology of `url`, or `None` when it is no Redis URL of ours.
    pub fn of(url: &str) -> Option<Self> {
        let scheme = url.split_once("://")?.0;
        match scheme {
            "redis" | "rediss" | "unix" | "redis+unix" => Some(Self::Single),
            "redis-sentinel" | "rediss-sentinel" => Some(Self::Sentinel),
            "redis-cluster" | "rediss-cluster" => Some(Self::Cluster),
            _ => None,
        }
    }

    /// Replica acknowledgements per grant when `scheduler.store_replica_acks` is unset: one on
    /// the replicated topologies, none on a single node (which usually has no replica).
    pub fn default_replica_acks(self) -> u32 {
        match self {
            Self::Single => 0,
            Self::Sentinel | Self::Cluster => 1,
        }
    }
}

/// A live connection to one of the three topologies (module doc). Cheap to clone.
#[derive(Clone)]
pub enum Conn {
    /// One server.
    Single(ConnectionManager),
    /// The current primary, found through the sentinels.
    Sentinel(Arc<SentinelConn>),
    /// The cluster.
    Cluster(Arc<ClusterConn>),
}

/// Where a subscriber connects ([`Conn::subscriber_source`]).
pub enum SubscriberSource {
    /// One server.
    Single(Box<redis::Client>),
    /// The primary the sentinels name.
    Sentinel(Arc<SentinelConn>),
    /// Any node of the cluster, tried in turn.
    Cluster(Vec<redis::Client>),
}

impl SubscriberSource {
    /// A client for the `attempt`-th try (0, 1, ...): the server, the current primary, or the
    /// cluster's nodes in turn.
    pub async fn client(&self, attempt: usize) -> RedisResult<redis::Client> {
        match self {
            SubscriberSource::Single(c) => Ok((**c).clone()),
            SubscriberSource::Sentinel(s) => s.primary_client().await,
            SubscriberSource::Cluster(nodes) => nodes
                .get(attempt % nodes.len().max(1))
                .cloned()
                .ok_or_else(|| RedisError::from((redis::ErrorKind::Client, "no cluster node"))),
        }
    }
}

impl Conn {
    /// The topology this connection talks to.
    pub fn topology(&self) -> Topology {
        match self {
            Conn::Single(_) => Topology::Single,
            Conn::Sentinel(_) => Topology::Sentinel,
            Conn::Cluster(_) => Topology::Cluster,
        }
    }

    /// Connects to `url` with connect and response timeouts of `timeout`. The whole connect is
    /// bounded by twice that.
    ///
    /// Errors: a one-line reason without credentials (malformed URL, no answer in time, no
    /// primary known to the sentinels, cluster not reachable).
    pub async fn connect(url: &str, timeout: Duration) -> Result<Self, String> {
        let topology = Topology::of(url).ok_or_else(|| {
            "not a Redis URL (redis://, rediss://, unix://, redis-sentinel://, redis-cluster://)"
                .to_owned()
        })?;
        let connecting = async {
            match topology {
                Topology::Single => {
                    let client =
                        redis::Client::open(url).map_err(|e| format!("invalid redis url ({e})"))?;
                    let config = redis::aio::ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(timeout))
                        .set_response_timeout(Some(timeout))
                        .set_number_of_retries(1);
                    client
                        .get_connection_manager_with_config(config)
                        .await
                        .map(Conn::Single)
                        .map_err(|e| format!("redis: {e}"))
                }
                Topology::Sentinel => SentinelConn::connect(url, timeout)
                    .await
                    .map(|c| Conn::Sentinel(Arc::new(c))),
                Topology::Cluster => {
                    let client = cluster_client(url, timeout)?;
                    ClusterConn::connect(client, timeout)
                        .await
                        .map(|c| Conn::Cluster(Arc::new(c)))
                        .map_err(|e| format!("redis cluster: {e}"))
                }
            }
        };
        tokio::time::timeout(timeout * 2, connecting)
            .await
            .map_err(|_| format!("no answer from redis within {:?}", timeout * 2))?
    }

    /// Checks `url` the way [`Conn::connect`] reads it, without connecting: a `--store`
    /// that no retry can fix (not a Redis URL, malformed hosts, a cluster URL with a
    /// database, a sentinel URL without `#master`) is found at start-up. Errors: one line,
    /// no password.
    pub fn check_url(url: &str) -> Result<Topology, String> {
        let topology = Topology::of(url).ok_or_else(|| {
            "not a Redis URL (redis://, rediss://, unix://, redis-sentinel://, redis-cluster://)"
                .to_owned()
        })?;
        match topology {
            Topology::Single => redis::Client::open(url)
                .map(drop)
                .map_err(|e| format!("invalid redis url ({e})"))?,
            Topology::Sentinel => sentinel::Recipe::parse(url)?
                .build(0)
                .map(drop)
                .map_err(|e| format!("invalid sentinel url: {e}"))?,
            Topology::Cluster => cluster_client(url, Duration::from_secs(1)).map(drop)?,
        }
        Ok(topology)
    }

    /// Where a subscriber (SUBSCRIBE needs a connection of its own) to the Redis of `url`
    /// connects: the server, the primary the sentinels name, or any node of the cluster.
    pub fn subscriber_source(&self, url: &str) -> Result<SubscriberSource, String> {
        match self {
            Conn::Single(_) => redis::Client::open(url)
                .map(|c| SubscriberSource::Single(Box::new(c)))
                .map_err(|e| format!("invalid redis url ({e})")),
            Conn::Sentinel(s) => Ok(SubscriberSource::Sentinel(s.clone())),
            Conn::Cluster(_) => {
                let parts = split_multi_host(url).map_err(|e| format!("invalid url: {e}"))?;
                parts
                    .node_infos(false)?
                    .into_iter()
                    .map(|info| {
                        redis::Client::open(info).map_err(|e| format!("invalid cluster url: {e}"))
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(SubscriberSource::Cluster)
            }
        }
    }

    /// Which connection calls go to now: it changes when the cluster connection is rebuilt or
    /// the Sentinel primary's connection is replaced (always 0 on a single node, whose
    /// connection manager reconnects on its own). Read it after a write to check that write's
    /// acknowledgement on the same connection ([`Conn::wait_replicas`]).
    pub fn generation(&self) -> u64 {
        match self {
            Conn::Single(_) => 0,
            Conn::Sentinel(s) => s.generation(),
            Conn::Cluster(c) => c.generation(),
        }
    }

    /// Runs a script invocation (EVALSHA, loading the script on NOSCRIPT) where its keys live.
    pub async fn invoke(&self, inv: &ScriptInvocation<'_>) -> RedisResult<Value> {
        match self {
            Conn::Single(c) => inv.invoke_async(&mut c.clone()).await,
            Conn::Cluster(c) => {
                c.run(
                    "a script",
                    |mut c| async move { inv.invoke_async(&mut c).await },
                )
                .await
            }
            Conn::Sentinel(s) => {
                let result = s
                    .bounded("a script", async {
                        let (_, mut c) = s.primary().await?;
                        inv.invoke_async(&mut c).await
                    })
                    .await;
                s.check(&result);
                result
            }
        }
    }

    /// Runs a plain command: on the server, the primary, or (cluster) the node its key is on.
    pub async fn query(&self, cmd: &Cmd) -> RedisResult<Value> {
        match self {
            Conn::Single(c) => cmd.query_async(&mut c.clone()).await,
            Conn::Cluster(c) => {
                c.run(
                    "a command",
                    |mut c| async move { cmd.query_async(&mut c).await },
                )
                .await
            }
            Conn::Sentinel(s) => {
                let result = s
                    .bounded("a command", async {
                        let (_, mut c) = s.primary().await?;
                        cmd.query_async(&mut c).await
                    })
                    .await;
                s.check(&result);
                result
            }
        }
    }

    /// `WAIT replicas timeout` on the connection that wrote `key`'s last change: how many
    /// replicas acknowledged every write this client sent so far. `generation` is
    /// [`Conn::generation`] read after that write: when the connection was replaced since,
    /// the write's acknowledgement can no longer be checked and this fails (I/O error).
    pub async fn wait_replicas(
        &self,
        key: &str,
        replicas: u32,
        timeout: Duration,
        generation: u64,
    ) -> RedisResult<i64> {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(replicas).arg(
            u64::try_from(timeout.as_millis())
                .unwrap_or(u64::MAX)
                .max(1),
        );
        let replaced = || {
            RedisError::from(std::io::Error::other(
                "WAIT: the connection that wrote was replaced since; the write's acknowledgement cannot be checked",
            ))
        };
        let answer = match self {
            Conn::Single(c) => cmd.query_async(&mut c.clone()).await?,
            Conn::Cluster(c) => {
                let route = RoutingInfo::SingleNode(
                    redis::cluster_routing::SingleNodeRoutingInfo::SpecificNode(Route::with_key(
                        key,
                        SlotAddr::Master,
                    )),
                );
                c.run_on(generation, "WAIT", |mut c| async move {
                    c.route_command(cmd, route).await
                })
                .await?
            }
            Conn::Sentinel(s) => {
                let result = s
                    .bounded("WAIT", async {
                        let (now, mut c) = s.primary().await?;
                        if now != generation {
                            return Err(replaced());
                        }
                        cmd.query_async(&mut c).await
                    })
                    .await;
                s.check(&result);
                result?
            }
        };
        match answer {
            Value::Int(n) => Ok(n),
            // Mid-failover the slot map can briefly name a node that is a replica now ("WAIT
            // cannot be used with replica instances"): the topology is moving, retry later.
            other => Err(RedisError::from(std::io::Error::other(format!(
                "WAIT answered {other:?}: the primary of the slot is changing (failover?)"
            )))),
        }
    }

    /// PING: the single server, the current primary, or (cluster) any primary, so that one
    /// shard down does not take the whole replica out of service (its pools answer
    /// UNAVAILABLE by themselves).
    pub async fn ping(&self) -> RedisResult<()> {
        let cmd = redis::cmd("PING");
        match self {
            Conn::Cluster(c) => {
                let route = RoutingInfo::MultiNode((
                    MultipleNodeRoutingInfo::AllMasters,
                    Some(ResponsePolicy::OneSucceeded),
                ));
                c.run(
                    "PING",
                    |mut c| async move { c.route_command(cmd, route).await },
                )
                .await
                .map(drop)
            }
            other => other.query(&cmd).await.map(drop),
        }
    }
}

/// True when `e` means Redis did not answer or is moving (down, timed out, refused, dropped, a
/// failover or resharding under way: READONLY, MASTERDOWN, LOADING, CLUSTERDOWN, TRYAGAIN,
/// MOVED, ASK, no primary known to the sentinels): a call worth retrying. Any other error is
/// an answer the caller did not expect.
pub fn is_unavailable(e: &RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    let moving = matches!(
        e.kind(),
        ErrorKind::MasterNameNotFoundBySentinel
            | ErrorKind::Server(
                ServerErrorKind::ReadOnly
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::BusyLoading
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::Moved
                    | ServerErrorKind::Ask
            )
    );
    moving
        || e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
}

/// The cluster client of a `redis-cluster://` URL (nothing connected yet).
fn cluster_client(url: &str, timeout: Duration) -> Result<redis::cluster::ClusterClient, String> {
    let parts = split_multi_host(url).map_err(|e| format!("invalid url: {e}"))?;
    if parts.db.is_some_and(|d| d != "0") || parts.name.is_some() {
        return Err(
            "a cluster URL takes no /db (a cluster has only database 0) and no #name".into(),
        );
    }
    let nodes = parts.node_infos(false)?;
    redis::cluster::ClusterClientBuilder::new(nodes)
        .connection_timeout(timeout)
        .response_timeout(timeout)
        .retries(2)
        .min_retry_wait(10)
        .max_retry_wait(200)
        .build()
        .map_err(|e| format!("invalid cluster url: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_name_their_topology() {
        assert_eq!(Topology::of("redis://h:1"), Some(Topology::Single));
        assert_eq!(Topology::of("unix:///r.sock"), Some(Topology::Single));
        assert_eq!(
            Topology::of("rediss-sentinel://h:1#m"),
            Some(Topology::Sentinel)
        );
        assert_eq!(
            Topology::of("redis-cluster://a:1,b:2"),
            Some(Topology::Cluster)
        );
        assert_eq!(Topology::of("memcached://h:1"), None);
        assert_eq!(Topology::of("memory"), None);
    }

    #[test]
    fn urls_no_retry_can_fix_are_found_without_connecting() {
        for good in [
            "redis://127.0.0.1:1/0",
            "redis-cluster://127.0.0.1:1,127.0.0.1:2",
            "redis-sentinel://127.0.0.1:1,127.0.0.1:2/1#m",
        ] {
            assert!(Conn::check_url(good).is_ok(), "{good}");
        }
        for (bad, why) in [
            ("memcached://h:1", "not a Redis URL"),
            ("redis-cluster://a:1/3", "no /db"),
            ("redis-cluster://a", "no port"),
            ("redis-sentinel://a:1", "#<master-name>"),
            ("redis-sentinel://:s3cret@a:1/x#m", "not a number"),
        ] {
            let e = Conn::check_url(bad).expect_err(bad);
            assert!(e.contains(why), "{bad}: {e}");
            assert!(!e.contains("s3cret"), "{e}");
        }
    }
}
