//! The three Redis topologies the store runs on, behind one connection type.
//!
//! Owns: parsing `--store` Redis URLs, connecting, and routing each call so that the rules of
//! the store hold on every topology:
//! - **single node** (`redis://`, `rediss://`, `unix://`): one multiplexed connection that
//!   reconnects by itself (`redis::aio::ConnectionManager`);
//! - **Sentinel** (`redis-sentinel://h:p[,h:p...][/db]#<master>`, TLS `rediss-sentinel://`):
//!   the primary is asked of the sentinels (and checked with `ROLE`); a connection that fails
//!   or answers READONLY (a demoted primary) is dropped and the next call asks the sentinels
//!   again, so a failover is followed within one store timeout of the promotion;
//! - **Cluster** (`redis-cluster://h:p[,h:p...]`, TLS `rediss-cluster://`): the `redis`
//!   crate's cluster client, which routes each script by its first key, follows MOVED/ASK and
//!   refreshes the slot map after a failover. Every key of a pool carries the hash tag
//!   `{pool}`, so each script runs on the pool's one slot.
//!
//! Replica acknowledgement ([`Conn::wait_replicas`]) sends `WAIT` on the very connection that
//! wrote (Redis counts a client's own writes), routed in a cluster to the primary of the
//! pool's slot.
//!
//! Credentials in a URL are never printed: [`redact`] is what messages show.

use std::{sync::Arc, time::Duration};

use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, IntoConnectionInfo, RedisError, RedisResult,
    ScriptInvocation, TlsMode, Value,
    aio::{ConnectionManager, MultiplexedConnection},
    cluster_async::ClusterConnection,
    cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, Route, RoutingInfo, SlotAddr},
    sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType},
};

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

/// `url` with any credentials replaced by `***`, safe to print: the user info before the
/// hosts, and everything from the first `?` on (`unix:///r.sock?pass=…` carries a password
/// there, which may itself hold a `#`).
pub fn redact(url: &str) -> String {
    let (url, fragment) = match url.split_once('?') {
        Some((before, _)) => (before, Some("?***")),
        None => (url, None),
    };
    let (url, fragment) = match (fragment, url.rsplit_once('#')) {
        (None, Some((u, f))) if !f.contains('@') => (u, format!("#{f}")),
        (f, _) => (url, f.unwrap_or_default().to_owned()),
    };
    let masked = match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    };
    format!("{masked}{fragment}")
}

/// A multi-host URL split into its parts: `scheme://[userinfo@]h:p,h:p[/db][#name]`.
struct MultiHost<'a> {
    tls: bool,
    userinfo: Option<&'a str>,
    hosts: Vec<&'a str>,
    db: Option<&'a str>,
    name: Option<&'a str>,
}

/// Splits a multi-host URL. The user info ends at the *last* `@`, so a password holding `#`,
/// `/` or `?` never leaks into a host, database or name (and so into an error message).
fn split_multi_host(url: &str) -> Result<MultiHost<'_>, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| "missing \"://\"".to_owned())?;
    let (userinfo, rest) = match rest.rsplit_once('@') {
        Some((u, r)) => (Some(u), r),
        None => (None, rest),
    };
    if rest.contains('?') {
        return Err(
            "query parameters are not supported here: put credentials before the hosts (scheme://user:password@host:port,...)"
                .into(),
        );
    }
    let (rest, name) = match rest.split_once('#') {
        Some((r, n)) => (r, Some(n)),
        None => (rest, None),
    };
    let (authority, db) = match rest.split_once('/') {
        Some((a, d)) => (a, Some(d).filter(|d| !d.is_empty())),
        None => (rest, None),
    };
    let hosts: Vec<&str> = authority.split(',').map(str::trim).collect();
    if hosts.iter().any(|h| h.is_empty()) {
        return Err("expected host:port[,host:port...] after \"://\"".into());
    }
    Ok(MultiHost {
        tls: scheme.starts_with("rediss"),
        userinfo,
        hosts,
        db,
        name,
    })
}

/// True when `host` ends in an explicit `:port` (`h:6379`, `[::1]:6379`).
fn has_port(host: &str) -> bool {
    host.rsplit_once(':').is_some_and(|(h, port)| {
        !port.is_empty()
            && port.bytes().all(|b| b.is_ascii_digit())
            && (!h.starts_with('[') || h.ends_with(']'))
    })
}

impl MultiHost<'_> {
    /// `redis[s]://[userinfo@]host[/db]` for one host, which the `redis` crate parses
    /// (percent-decoding credentials, checking the port).
    fn node_url(&self, host: &str, with_db: bool) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let auth = self.userinfo.map(|u| format!("{u}@")).unwrap_or_default();
        let db = match (with_db, self.db) {
            (true, Some(db)) => format!("/{db}"),
            _ => String::new(),
        };
        format!("{scheme}://{auth}{host}{db}")
    }

    fn node_infos(&self, with_db: bool) -> Result<Vec<redis::ConnectionInfo>, String> {
        self.hosts
            .iter()
            .map(|h| {
                if !has_port(h) {
                    return Err(format!(
                        "{h:?} has no port (expected host:port, [ipv6]:port)"
                    ));
                }
                self.node_url(h, with_db).into_connection_info().map_err(|e| {
                    format!(
                        "{h:?}: {e} (a password holding '#', '/', '?' or '@' must be percent-encoded: %23, %2F, %3F, %40)"
                    )
                })
            })
            .collect()
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
    Cluster(ClusterConnection),
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
                    let parts = split_multi_host(url).map_err(|e| format!("invalid url: {e}"))?;
                    if parts.db.is_some_and(|d| d != "0") || parts.name.is_some() {
                        return Err(
                            "a cluster URL takes no /db (a cluster has only database 0) and no #name"
                                .into(),
                        );
                    }
                    let nodes = parts.node_infos(false)?;
                    let client = redis::cluster::ClusterClientBuilder::new(nodes)
                        .connection_timeout(timeout)
                        .response_timeout(timeout)
                        .retries(2)
                        .min_retry_wait(10)
                        .max_retry_wait(200)
                        .build()
                        .map_err(|e| format!("invalid cluster url: {e}"))?;
                    client
                        .get_async_connection()
                        .await
                        .map(Conn::Cluster)
                        .map_err(|e| format!("redis cluster: {e}"))
                }
            }
        };
        tokio::time::timeout(timeout * 2, connecting)
            .await
            .map_err(|_| format!("no answer from redis within {:?}", timeout * 2))?
    }

    /// Where the wake-up subscriber of a store on `url` connects (see `wake`).
    pub(super) fn wake_source(&self, url: &str) -> Result<super::wake::Source, String> {
        use super::wake::Source;
        match self {
            Conn::Single(_) => redis::Client::open(url)
                .map(|c| Source::Single(Box::new(c)))
                .map_err(|e| format!("invalid redis url ({e})")),
            Conn::Sentinel(s) => Ok(Source::Sentinel(s.clone())),
            Conn::Cluster(_) => {
                let parts = split_multi_host(url).map_err(|e| format!("invalid url: {e}"))?;
                parts
                    .node_infos(false)?
                    .into_iter()
                    .map(|info| {
                        redis::Client::open(info).map_err(|e| format!("invalid cluster url: {e}"))
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(Source::Cluster)
            }
        }
    }

    /// Runs a script invocation (EVALSHA, loading the script on NOSCRIPT) where its keys live.
    pub async fn invoke(&self, inv: &ScriptInvocation<'_>) -> RedisResult<Value> {
        match self {
            Conn::Single(c) => inv.invoke_async(&mut c.clone()).await,
            Conn::Cluster(c) => inv.invoke_async(&mut c.clone()).await,
            Conn::Sentinel(s) => {
                let mut c = s.primary().await?;
                let result = inv.invoke_async(&mut c).await;
                s.check(&result);
                result
            }
        }
    }

    /// Runs a plain command: on the server, the primary, or (cluster) the node its key is on.
    pub async fn query(&self, cmd: &Cmd) -> RedisResult<Value> {
        match self {
            Conn::Single(c) => cmd.query_async(&mut c.clone()).await,
            Conn::Cluster(c) => cmd.query_async(&mut c.clone()).await,
            Conn::Sentinel(s) => {
                let mut c = s.primary().await?;
                let result = cmd.query_async(&mut c).await;
                s.check(&result);
                result
            }
        }
    }

    /// `WAIT replicas timeout` on the connection that wrote `key`'s last change: how many
    /// replicas acknowledged every write this client sent so far.
    pub async fn wait_replicas(
        &self,
        key: &str,
        replicas: u32,
        timeout: Duration,
    ) -> RedisResult<i64> {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(replicas).arg(
            u64::try_from(timeout.as_millis())
                .unwrap_or(u64::MAX)
                .max(1),
        );
        let answer = match self {
            Conn::Cluster(c) => {
                let route = RoutingInfo::SingleNode(
                    redis::cluster_routing::SingleNodeRoutingInfo::SpecificNode(Route::with_key(
                        key,
                        SlotAddr::Master,
                    )),
                );
                c.clone().route_command(cmd, route).await?
            }
            other => other.query(&cmd).await?,
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
                c.clone().route_command(cmd, route).await.map(drop)
            }
            other => other.query(&cmd).await.map(drop),
        }
    }
}

/// The Sentinel topology's connection: the current primary's multiplexed connection, dropped
/// on failure and looked up again through the sentinels on the next call (module doc).
pub struct SentinelConn {
    sentinels: tokio::sync::Mutex<SentinelClient>,
    current: std::sync::Mutex<Option<MultiplexedConnection>>,
    config: AsyncConnectionConfig,
    timeout: Duration,
}

impl SentinelConn {
    async fn connect(url: &str, timeout: Duration) -> Result<Self, String> {
        let parts = split_multi_host(url).map_err(|e| format!("invalid url: {e}"))?;
        let master = parts
            .name
            .filter(|n| !n.is_empty())
            .ok_or("a sentinel URL ends in #<master-name>, e.g. redis-sentinel://s1:26379,s2:26379#mymaster")?;
        let db = match parts.db {
            Some(d) => d
                .parse::<i64>()
                .map_err(|_| format!("database {d:?} is not a number"))?,
            None => 0,
        };
        // Credentials are the data nodes'; sentinels are reached as the URL's hosts, without.
        let infos = parts.node_infos(false)?;
        let settings = infos
            .first()
            .map(|i| i.redis_settings().clone())
            .ok_or("no sentinel address")?;
        let addrs = infos.into_iter().map(|i| match i.addr().clone() {
            ConnectionAddr::TcpTls { host, port, .. } => ConnectionAddr::Tcp(host, port),
            other => other,
        });
        let mut builder = SentinelClientBuilder::new(addrs, master, SentinelServerType::Master)
            .map_err(|e| format!("invalid sentinel url: {e}"))?
            .set_client_to_redis_db(db);
        if let Some(user) = settings.username() {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = settings.password() {
            builder = builder.set_client_to_redis_password(password);
        }
        if parts.tls {
            builder = builder
                .set_client_to_redis_tls_mode(TlsMode::Secure)
                .set_client_to_sentinel_tls_mode(TlsMode::Secure);
        }
        let client = builder
            .build()
            .map_err(|e| format!("invalid sentinel url: {e}"))?;
        let conn = Self {
            sentinels: tokio::sync::Mutex::new(client),
            current: std::sync::Mutex::new(None),
            config: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout)),
            timeout,
        };
        conn.primary()
            .await
            .map_err(|e| format!("no primary {master:?} through the sentinels: {e}"))?;
        Ok(conn)
    }

    /// The current primary's connection, asking the sentinels when there is none.
    async fn primary(&self) -> RedisResult<MultiplexedConnection> {
        if let Some(c) = self.cached() {
            return Ok(c);
        }
        let mut sentinels = self.sentinels.lock().await;
        // Another call may have found it while this one waited for the lock.
        if let Some(c) = self.cached() {
            return Ok(c);
        }
        let found = tokio::time::timeout(
            self.timeout,
            sentinels.get_async_connection_with_config(&self.config),
        )
        .await
        .map_err(|_| {
            RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the sentinels named no reachable primary in time",
            ))
        })??;
        if let Ok(mut current) = self.current.lock() {
            *current = Some(found.clone());
        }
        Ok(found)
    }

    /// A client for the primary the sentinels name now (the wake-up subscriber's).
    pub(super) async fn primary_client(&self) -> RedisResult<redis::Client> {
        let mut sentinels = self.sentinels.lock().await;
        tokio::time::timeout(self.timeout, sentinels.async_get_client())
            .await
            .map_err(|_| {
                RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the sentinels named no reachable primary in time",
                ))
            })?
    }

    fn cached(&self) -> Option<MultiplexedConnection> {
        self.current.lock().ok().and_then(|c| c.clone())
    }

    /// Drops the connection after a failure that a failover explains (broken or refused
    /// connection, timeout, READONLY from a demoted primary), so the next call asks again.
    fn check<T>(&self, result: &RedisResult<T>) {
        if let Err(e) = result
            && (e.is_io_error()
                || e.is_timeout()
                || e.is_connection_dropped()
                || e.is_connection_refusal()
                || e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly))
            && let Ok(mut current) = self.current.lock()
        {
            *current = None;
        }
    }
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
    fn multi_host_urls_split_into_hosts_db_and_name() {
        let p = split_multi_host("redis-sentinel://u:p%40ss@a:1, b:2/3#mymaster").unwrap();
        assert_eq!(p.hosts, ["a:1", "b:2"]);
        assert_eq!(p.db, Some("3"));
        assert_eq!(p.name, Some("mymaster"));
        assert!(!p.tls);
        let infos = p.node_infos(false).unwrap();
        assert_eq!(infos[1].redis_settings().password(), Some("p@ss"));
        assert!(split_multi_host("redis-cluster://a:1,,b:2").is_err());
        let no_port = split_multi_host("redis-cluster://a").unwrap();
        assert!(no_port.node_infos(false).is_err());
        assert!(split_multi_host("rediss-cluster://a:1").unwrap().tls);
    }

    #[test]
    fn redaction_hides_credentials() {
        assert_eq!(
            redact("redis-sentinel://u:secret@a:1,b:2#m"),
            "redis-sentinel://***@a:1,b:2#m"
        );
        assert_eq!(redact("redis://a:1"), "redis://a:1");
        assert_eq!(
            redact("unix:///r.sock?db=0&pass=secret"),
            "unix:///r.sock?***"
        );
        for leaky in [
            "redis-sentinel://:se#cret@a:1#m",
            "redis-sentinel://:se/cret@a:1#m",
            "redis-cluster://a:1?password=secret",
        ] {
            assert!(
                !redact(leaky).contains("cret"),
                "{leaky} -> {}",
                redact(leaky)
            );
        }
    }

    #[test]
    fn passwords_with_url_characters_never_reach_a_host_or_a_message() {
        let p = split_multi_host("redis-sentinel://:se#c/r?et@a:1,b:2/1#m").unwrap();
        assert_eq!(p.userinfo, Some(":se#c/r?et"));
        assert_eq!(p.hosts, ["a:1", "b:2"]);
        assert_eq!((p.db, p.name), (Some("1"), Some("m")));
        let err = split_multi_host("redis-cluster://a:1?password=x")
            .err()
            .unwrap();
        assert!(err.contains("query parameters"), "{err}");
        assert!(!has_port("[::1]") && has_port("[::1]:6379") && !has_port("a") && has_port("a:1"));
    }
}
