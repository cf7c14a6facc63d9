//! The usage stream consumer every catalog replica started with `--usage-store` runs: one
//! consumer (its own name) in the group [`GROUP`] on [`USAGE_STREAM`].
//!
//! Each round reads up to [`ConsumerConfig::batch`] entries (`XREADGROUP … BLOCK`), applies
//! them in one database transaction ([`UsageStore::apply`]) and acknowledges them after the
//! commit (`XACK`). Entries a dead consumer left pending longer than
//! [`ConsumerConfig::claim_idle`] are taken over (`XAUTOCLAIM`) and applied the same way;
//! exactly once comes from the ledger's primary keys, not from single delivery, so an entry
//! delivered twice (a claim racing a slow consumer, an `XACK` lost in a failover) counts once.
//! A batch the database refused stays pending and is read again from this consumer's own
//! pending list. A malformed entry is acknowledged, logged (escaped) and counted, never
//! retried. Beside the reads: the sweep of unsettled charges older than the grace, trimming
//! the stream below what the group still needs (`XTRIM MINID`), forgetting the names of
//! consumers silent past the claim idle time that own no pending entry (replicas that died or
//! were replaced: `XGROUP DELCONSUMER`, [`forget_idle`]), and retention of raw records.
//! Redis down or failing over: the round fails, is counted and retried after the poll
//! interval; the connection follows the new primary by itself (`voxpool_redis`), and a
//! group lost with its data (Redis restarted empty) is created again.
//!
//! Replies are typed by the redis crate (`redis::streams`). A read it cannot type holds an
//! entry with a field name that is not UTF-8 (no synthesis writes one); those entries are in
//! this consumer's pending list by then, so they are read again one by one (`XPENDING`,
//! `XRANGE`) and the one that cannot be typed is acknowledged as malformed, so it never stalls
//! the ledger.

use std::{sync::LazyLock, time::Duration};

use redis::{
    Cmd, FromRedisValue, RedisError, Script, Value,
    streams::{
        StreamAutoClaimOptions, StreamAutoClaimReply, StreamId, StreamInfoGroupsReply,
        StreamPendingCountReply, StreamPendingReply, StreamRangeReply, StreamReadOptions,
        StreamReadReply, StreamTrimOptions, StreamTrimmingMode,
    },
};
use tokio_util::sync::CancellationToken;
use voxpool_domain::{untrusted, usage::USAGE_STREAM};
use voxpool_redis::Conn;

use super::{
    Ledger, UsageStore,
    entry::{Entry, parse_id},
    metrics,
};

/// The consumer group every catalog replica's consumer joins.
pub const GROUP: &str = "voxpool-catalog";

/// Timings and sizes of the consumer (flags of `voxpool-catalog`).
#[derive(Clone, Debug)]
pub struct ConsumerConfig {
    /// This consumer's name in the group (unique per process).
    pub name: String,
    /// Most entries per read and per transaction.
    pub batch: usize,
    /// How long a read waits for new entries.
    pub poll: Duration,
    /// Entries pending longer than this with another consumer are taken over.
    pub claim_idle: Duration,
    /// A Charge no Settle followed within this is counted as charged.
    pub grace: Duration,
    /// Raw records older than this are deleted (daily totals stay).
    pub retention: Duration,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            name: consumer_name(),
            batch: 500,
            poll: Duration::from_secs(1),
            claim_idle: Duration::from_secs(30),
            grace: Duration::from_secs(120),
            retention: Duration::from_secs(90 * 86_400),
        }
    }
}

/// A name no other process uses: host, process id, random suffix.
pub fn consumer_name() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "catalog".to_owned());
    format!(
        "{}-{}-{:08x}",
        host.chars().take(64).collect::<String>(),
        std::process::id(),
        rand::random::<u32>()
    )
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Runs the consumer on the Redis of `url` until `shutdown`: waits for the ledger's database,
/// then reads, applies, acknowledges, sweeps, trims and expires (module doc).
pub async fn run(url: String, ledger: Ledger, config: ConsumerConfig, shutdown: CancellationToken) {
    let timeout = (config.poll * 2).max(Duration::from_secs(5));
    let conn = loop {
        match Conn::connect(&url, timeout).await {
            Ok(c) => break c,
            Err(why) => {
                metrics::error("redis");
                tracing::warn!(store = %voxpool_redis::redact(&url), reason = %why, "usage store not reachable yet; retrying");
            }
        }
        if pause(&shutdown, config.poll).await {
            return;
        }
    };
    let mut consumer = Consumer {
        conn,
        config,
        group_ready: false,
        own_pending: true,
        last_sweep: 0,
        last_trim: 0,
        last_expire: 0,
    };
    tracing::info!(consumer = %consumer.config.name, group = GROUP, stream = USAGE_STREAM, "usage consumer started");
    while !shutdown.is_cancelled() {
        let Some(store) = ledger.store_ready() else {
            if pause(&shutdown, consumer.config.poll).await {
                return;
            }
            continue;
        };
        let round = tokio::select! {
            () = shutdown.cancelled() => return,
            r = consumer.round(&store) => r,
        };
        if let Err(why) = round {
            tracing::warn!(reason = %why, "usage consumer round failed; retrying");
            if pause(&shutdown, consumer.config.poll).await {
                return;
            }
        }
    }
}

/// Sleeps `d`; true when `shutdown` came first.
async fn pause(shutdown: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        () = shutdown.cancelled() => true,
        () = tokio::time::sleep(d) => false,
    }
}

struct Consumer {
    conn: Conn,
    config: ConsumerConfig,
    group_ready: bool,
    /// Read this consumer's own pending entries (a batch not applied) before new ones.
    own_pending: bool,
    last_sweep: i64,
    last_trim: i64,
    last_expire: i64,
}

impl Consumer {
    /// One read-apply-acknowledge, plus whatever periodic work is due.
    async fn round(&mut self, store: &UsageStore) -> Result<(), String> {
        self.ensure_group().await?;
        let now = now_ms();
        let claim_every = millis(self.config.claim_idle / 2).max(1);
        if now - self.last_trim >= claim_every {
            let claimed = self.claim().await?;
            self.apply(store, claimed).await?;
            self.trim().await?;
            let forgotten = forget_idle(&self.conn, self.config.claim_idle, &self.config.name)
                .await
                .map_err(|e| {
                    metrics::error("redis");
                    format!("usage store: forgetting idle consumers: {e}")
                })?;
            for name in forgotten {
                tracing::info!(consumer = %untrusted::quote(&name), "usage consumer silent past the claim idle time, owning no entry, removed from the group");
            }
            self.last_trim = now;
        }
        if now - self.last_sweep >= millis(self.config.grace / 4).max(1) {
            let swept = store
                .sweep(now - millis(self.config.grace), now)
                .await
                .map_err(|e| db_failed(&e))?;
            metrics::swept(swept);
            self.last_sweep = now;
        }
        if now - self.last_expire >= 3_600_000 {
            let expired = store
                .expire(now - millis(self.config.retention))
                .await
                .map_err(|e| db_failed(&e))?;
            metrics::expired(expired);
            self.last_expire = now;
        }
        let from = if self.own_pending { "0" } else { ">" };
        let mut options = StreamReadOptions::default()
            .group(GROUP, &self.config.name)
            .count(self.config.batch);
        if !self.own_pending {
            let poll = usize::try_from(millis(self.config.poll)).unwrap_or(usize::MAX);
            options = options.block(poll.max(1));
        }
        let reply = self
            .query(&Cmd::xread_options(&[USAGE_STREAM], &[from], &options))
            .await?;
        let entries: Vec<Entry> = match Option::<StreamReadReply>::from_redis_value(reply) {
            Ok(read) => read
                .into_iter()
                .flat_map(|r| r.keys)
                .flat_map(|k| k.ids)
                .map(|s| Entry::of(&s))
                .collect(),
            Err(_) if self.own_pending => self.one_by_one().await?,
            Err(_) => {
                // Delivered, so pending with this consumer: read from there (module doc).
                self.own_pending = true;
                return Ok(());
            }
        };
        if self.own_pending && entries.is_empty() {
            self.own_pending = false;
        }
        self.apply(store, entries).await
    }

    /// This consumer's pending entries, each read on its own: one the redis crate cannot type
    /// is malformed (module doc).
    async fn one_by_one(&mut self) -> Result<Vec<Entry>, String> {
        let pending: StreamPendingCountReply = self
            .typed(&Cmd::xpending_consumer_count(
                USAGE_STREAM,
                GROUP,
                "-",
                "+",
                self.config.batch,
                &self.config.name,
            ))
            .await?;
        let mut entries = Vec::with_capacity(pending.ids.len());
        for p in pending.ids {
            let reply = self.query(&Cmd::xrange(USAGE_STREAM, &p.id, &p.id)).await?;
            entries.push(match StreamRangeReply::from_redis_value(reply) {
                Ok(range) => Entry::of(&range.ids.into_iter().next().unwrap_or(StreamId {
                    id: p.id,
                    ..StreamId::default()
                })),
                Err(_) => Entry::untyped(p.id),
            });
        }
        Ok(entries)
    }

    async fn typed<T: FromRedisValue>(&mut self, cmd: &Cmd) -> Result<T, String> {
        let reply = self.query(cmd).await?;
        T::from_redis_value(reply).map_err(|e| {
            metrics::error("redis");
            format!("usage store: an unexpected reply: {e}")
        })
    }

    async fn query(&mut self, cmd: &redis::Cmd) -> Result<Value, String> {
        self.conn.query(cmd).await.map_err(|e| {
            metrics::error("redis");
            if e.code() == Some("NOGROUP") {
                self.group_ready = false;
            }
            format!("usage store: {e}")
        })
    }

    async fn ensure_group(&mut self) -> Result<(), String> {
        if self.group_ready {
            return Ok(());
        }
        let cmd = Cmd::xgroup_create_mkstream(USAGE_STREAM, GROUP, "0");
        match self.conn.query(&cmd).await {
            Ok(_) => {}
            Err(e) if e.code() == Some("BUSYGROUP") => {}
            Err(e) => {
                metrics::error("redis");
                return Err(format!("usage store: creating the consumer group: {e}"));
            }
        }
        self.group_ready = true;
        self.own_pending = true;
        Ok(())
    }

    /// Entries other consumers left pending longer than the claim idle time.
    async fn claim(&mut self) -> Result<Vec<Entry>, String> {
        let options = StreamAutoClaimOptions::default().count(self.config.batch);
        let cmd = Cmd::xautoclaim_options(
            USAGE_STREAM,
            GROUP,
            &self.config.name,
            millis(self.config.claim_idle),
            "0-0",
            options,
        );
        let reply = self.query(&cmd).await?;
        let claimed: Vec<Entry> = match StreamAutoClaimReply::from_redis_value(reply) {
            Ok(reply) => reply.claimed.iter().map(Entry::of).collect(),
            Err(_) => {
                // Claimed, so pending with this consumer: read from there (module doc).
                self.own_pending = true;
                Vec::new()
            }
        };
        if !claimed.is_empty() {
            tracing::info!(
                entries = claimed.len(),
                "usage entries taken over from a silent consumer"
            );
        }
        Ok(claimed)
    }

    /// Applies `entries` in one transaction, then acknowledges them (malformed ones too).
    async fn apply(&mut self, store: &UsageStore, entries: Vec<Entry>) -> Result<(), String> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut events = Vec::with_capacity(entries.len());
        let mut malformed = 0;
        for e in &entries {
            match &e.event {
                Some(event) => events.push(event.clone()),
                None => malformed += 1,
            }
        }
        match store.apply(&events, now_ms()).await {
            Ok(applied) => {
                metrics::records("applied", applied.new);
                metrics::records("repeated", applied.repeated);
                metrics::records("malformed", malformed);
            }
            Err(e) => {
                self.own_pending = true;
                return Err(db_failed(&e));
            }
        }
        let ids: Vec<&str> = entries.iter().map(|e| e.id.as_str()).collect();
        self.query(&Cmd::xack(USAGE_STREAM, GROUP, &ids))
            .await
            .map(drop)
    }

    /// Deletes the entries every group has acknowledged (below the oldest pending entry and
    /// the last delivered one), and records the lag.
    async fn trim(&mut self) -> Result<(), String> {
        let groups: StreamInfoGroupsReply = self.typed(&Cmd::xinfo_groups(USAGE_STREAM)).await?;
        let mut floor: Option<(u64, u64)> = None;
        let mut lag = 0u64;
        for g in &groups.groups {
            lag += (g.pending + g.lag.unwrap_or(0)) as u64;
            let mut lowest = parse_id(&g.last_delivered_id);
            if g.pending > 0 {
                let p: StreamPendingReply =
                    self.typed(&Cmd::xpending(USAGE_STREAM, &g.name)).await?;
                if let StreamPendingReply::Data(p) = p {
                    lowest = lowest.min(parse_id(&p.start_id)).or(lowest);
                }
            }
            floor = match (floor, lowest) {
                (Some(f), Some(l)) => Some(f.min(l)),
                (None, l) => l,
                (f, None) => f,
            };
        }
        metrics::lag(lag);
        if let Some((ms, seq)) = floor {
            let options =
                StreamTrimOptions::minid(StreamTrimmingMode::Exact, format!("{ms}-{seq}"));
            self.query(&Cmd::xtrim_options(USAGE_STREAM, &options))
                .await?;
        }
        Ok(())
    }
}

static FORGET: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("forget.lua")));

/// Removes from the group the consumers silent longer than `idle` that own no pending entry,
/// except `keep` (this consumer), in one script: a consumer that reads meanwhile keeps its
/// name and its entries. Returns the names removed.
pub async fn forget_idle(
    conn: &Conn,
    idle: Duration,
    keep: &str,
) -> Result<Vec<String>, RedisError> {
    let mut invocation = FORGET.key(USAGE_STREAM);
    invocation.arg(GROUP).arg(millis(idle)).arg(keep);
    let removed = conn.invoke(&invocation).await?;
    Ok(Vec::<String>::from_redis_value(removed).unwrap_or_default())
}

fn db_failed(e: &sea_orm::DbErr) -> String {
    metrics::error("database");
    format!("usage ledger database: {e}")
}
