//! The Sentinel topology's connection: the current primary's multiplexed connection, dropped
//! on failure and looked up again through the sentinels on the next call, and the sentinel
//! client itself rebuilt when lookups keep failing.
//!
//! Why the rebuild: the `redis` crate's `SentinelClient` keeps one connection per sentinel and
//! asks them in the URL's order, each with the crate's default response timeout (500 ms),
//! reconnecting once before moving on. A first sentinel that stalls (paused, or its host
//! black-holed) costs every lookup that wait before the next sentinel is asked, up to the
//! whole store timeout (the lookup is then cancelled, the next sentinel never asked), for as
//! long as the stalled one stays first. After [`super::heal::REBUILD_AFTER`] connection-class
//! failures in a row (primary calls or lookups), the next lookup builds a new client, with
//! fresh sentinel connections, starting at the next sentinel of the list.
//!
//! Each primary connection has a generation, so a replica acknowledgement is never checked on
//! a connection other than the one that wrote (`super::Conn::wait_replicas`).

use std::{
    sync::{
        Mutex,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use redis::{
    AsyncConnectionConfig, ConnectionAddr, RedisError, RedisResult, TlsMode,
    aio::MultiplexedConnection,
    sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType},
};

use super::{
    heal::{Streak, timed_out},
    url::split_multi_host,
};

/// What a sentinel client is built from: everything in the URL but the credentials'
/// printable form.
pub(super) struct Recipe {
    addrs: Vec<ConnectionAddr>,
    master: String,
    db: i64,
    username: Option<String>,
    password: Option<String>,
    tls: bool,
}

impl Recipe {
    /// What `url` (`redis-sentinel://…#master`) says. Errors: one line, no password.
    pub(super) fn parse(url: &str) -> Result<Self, String> {
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
        let addrs = infos
            .into_iter()
            .map(|i| match i.addr().clone() {
                ConnectionAddr::TcpTls { host, port, .. } => ConnectionAddr::Tcp(host, port),
                other => other,
            })
            .collect();
        Ok(Self {
            addrs,
            master: master.to_owned(),
            db,
            username: settings.username().map(str::to_owned),
            password: settings.password().map(str::to_owned),
            tls: parts.tls,
        })
    }

    /// A client asking the sentinels in the URL's order, rotated left by `start`.
    pub(super) fn build(&self, start: usize) -> RedisResult<SentinelClient> {
        let mut addrs = self.addrs.clone();
        let len = addrs.len().max(1);
        addrs.rotate_left(start % len);
        let mut builder =
            SentinelClientBuilder::new(addrs, self.master.clone(), SentinelServerType::Master)?
                .set_client_to_redis_db(self.db);
        if let Some(user) = &self.username {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = &self.password {
            builder = builder.set_client_to_redis_password(password);
        }
        if self.tls {
            builder = builder
                .set_client_to_redis_tls_mode(TlsMode::Secure)
                .set_client_to_sentinel_tls_mode(TlsMode::Secure);
        }
        builder.build()
    }
}

/// The current primary, found through the sentinels (module doc).
pub struct SentinelConn {
    recipe: Recipe,
    sentinels: tokio::sync::Mutex<SentinelClient>,
    /// `(generation, connection)` of the primary in use, if any.
    current: Mutex<Option<(u64, MultiplexedConnection)>>,
    /// The next primary connection's generation (the first is 1; 0 means none).
    connections: AtomicU64,
    /// Sentinel clients built so far: where the next one starts in the list.
    clients: AtomicUsize,
    streak: Streak,
    /// Set when primary calls handed out a rebuild: the next lookup does it.
    rebuild_due: AtomicBool,
    config: AsyncConnectionConfig,
    timeout: Duration,
}

impl SentinelConn {
    /// Parses a `redis-sentinel://` URL and finds the primary. Errors: one line, no password.
    pub(super) async fn connect(url: &str, timeout: Duration) -> Result<Self, String> {
        let recipe = Recipe::parse(url)?;
        let client = recipe
            .build(0)
            .map_err(|e| format!("invalid sentinel url: {e}"))?;
        let master = recipe.master.clone();
        let conn = Self {
            recipe,
            sentinels: tokio::sync::Mutex::new(client),
            current: Mutex::new(None),
            connections: AtomicU64::new(1),
            clients: AtomicUsize::new(1),
            streak: Streak::new(timeout),
            rebuild_due: AtomicBool::new(false),
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

    /// The generation of the primary connection in use (0 when there is none, which no
    /// connection has).
    pub(super) fn generation(&self) -> u64 {
        self.cached().map_or(0, |(generation, _)| generation)
    }

    /// The current primary's connection and its generation, asking the sentinels when there
    /// is none (with a new sentinel client first when [`SentinelConn::check`] asked for one).
    /// Callers pass the outcome of their call, lookup included, to [`SentinelConn::check`].
    pub(super) async fn primary(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        if let Some(c) = self.cached() {
            return Ok(c);
        }
        let mut sentinels = self.sentinels.lock().await;
        // Another call may have found it while this one waited for the lock.
        if let Some(c) = self.cached() {
            return Ok(c);
        }
        if self.rebuild_due.swap(false, Ordering::AcqRel) {
            self.rebuild(&mut sentinels);
        }
        let found = tokio::time::timeout(
            self.timeout,
            sentinels.get_async_connection_with_config(&self.config),
        )
        .await
        .unwrap_or_else(|_| {
            Err(timed_out(
                "the sentinels named no reachable primary",
                self.timeout,
            ))
        });
        // A failed lookup is counted by the caller's [`SentinelConn::check`].
        let found = found?;
        let generation = self.connections.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut current) = self.current.lock() {
            *current = Some((generation, found.clone()));
        }
        Ok((generation, found))
    }

    /// Replaces the sentinel client with a fresh one starting at the next sentinel.
    fn rebuild(&self, sentinels: &mut SentinelClient) {
        let start = self.clients.fetch_add(1, Ordering::Relaxed);
        let ok = match self.recipe.build(start) {
            Ok(client) => {
                *sentinels = client;
                tracing::warn!(
                    first_sentinel = start % self.recipe.addrs.len().max(1),
                    "calls to the primary or lookups through the sentinels keep failing (a failover under way, or a sentinel that stalls); the sentinel client was rebuilt with fresh connections"
                );
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "rebuilding the sentinel client failed; the old one stays");
                false
            }
        };
        self.streak.rebuilt(ok);
    }

    /// A client for the primary the sentinels name now (the wake-up subscriber's).
    pub async fn primary_client(&self) -> RedisResult<redis::Client> {
        let mut sentinels = self.sentinels.lock().await;
        tokio::time::timeout(self.timeout, sentinels.async_get_client())
            .await
            .unwrap_or_else(|_| {
                Err(timed_out(
                    "the sentinels named no reachable primary",
                    self.timeout,
                ))
            })
    }

    fn cached(&self) -> Option<(u64, MultiplexedConnection)> {
        self.current.lock().ok().and_then(|c| c.clone())
    }

    /// Counts `result`; drops the connection after a failure that a failover explains
    /// (broken or refused connection, timeout, READONLY from a demoted primary), so the next
    /// call asks the sentinels again. A long enough run of them rebuilds the sentinel client
    /// at the next lookup.
    pub(super) fn check<T>(&self, result: &RedisResult<T>) {
        if let Err(e) = result
            && super::heal::is_connection_class(e)
        {
            if let Ok(mut current) = self.current.lock() {
                *current = None;
            }
            // The lookup that follows rebuilds (it holds the client).
            if self.streak.failed().is_some() {
                self.rebuild_due.store(true, Ordering::Release);
            }
        } else {
            self.streak.record(result);
        }
    }

    /// Bounds `call` by the store timeout (a hung primary counts as a failure).
    pub(super) async fn bounded<T>(
        &self,
        what: &str,
        call: impl Future<Output = RedisResult<T>>,
    ) -> RedisResult<T> {
        tokio::time::timeout(self.timeout, call)
            .await
            .unwrap_or_else(|_| Err::<T, RedisError>(timed_out(what, self.timeout)))
    }
}
