//! Hand-over announcements across replicas: a slot handed to a waiting request (`super::super`
//! doc, "The line") reaches the replica it waits on at once, instead of at its next poll.
//!
//! The scripts that hand slots over (`prelude.lua` `serve`, run by release, report, admin,
//! seed, status, acquire and the line's claim) PUBLISH the waiter's token on the pool's
//! channel `<prefix>:{P}:freed`. Each replica keeps one subscriber connection, subscribed to
//! the channels of every seeded pool: on a single node to the server; under Sentinel to the
//! current primary (a published message also reaches replicas through replication, so a
//! demoted primary still delivers); in a Cluster to any node (PUBLISH reaches every node).
//! The connection is re-opened after a failure (on the next cluster node, through the
//! sentinels again).
//!
//! Invariant: an announcement is only ever a hint. A lost message (subscriber reconnecting)
//! costs one poll of the line (`scheduler.wait_poll_ms`), which claims the slot instead; an
//! unclaimed slot returns to the pool when its claim ttl ends. Correctness never depends on
//! delivery.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use futures::StreamExt as _;
use redis::Client;
use tokio::sync::{mpsc, watch};

use super::conn::SentinelConn;
use crate::store::Handover;

/// Where the subscriber connects.
pub(super) enum Source {
    /// One server.
    Single(Box<Client>),
    /// The primary the sentinels name.
    Sentinel(Arc<SentinelConn>),
    /// Any node of the cluster, tried in turn.
    Cluster(Vec<Client>),
}

impl Source {
    async fn client(&self, attempt: usize) -> redis::RedisResult<Client> {
        match self {
            Source::Single(c) => Ok((**c).clone()),
            Source::Sentinel(s) => s.primary_client().await,
            Source::Cluster(nodes) => {
                nodes
                    .get(attempt % nodes.len().max(1))
                    .cloned()
                    .ok_or_else(|| {
                        redis::RedisError::from((redis::ErrorKind::Client, "no cluster node"))
                    })
            }
        }
    }
}

/// The channel of `pool` under `prefix`.
pub(super) fn channel(prefix: &str, pool: &str) -> String {
    format!("{prefix}:{{{pool}}}:freed")
}

/// The pool a channel name is for.
fn pool_of(channel: &str) -> Option<&str> {
    let start = channel.find('{')? + 1;
    let end = channel.rfind("}:freed")?;
    (start <= end).then(|| &channel[start..end])
}

/// A running subscriber: pools to follow in, hand-overs out.
pub(super) struct Wake {
    pools: watch::Sender<BTreeSet<String>>,
    /// The subscriber's output, also fed by [`Wake::announce`].
    out: mpsc::UnboundedSender<Handover>,
    handovers: std::sync::Mutex<Option<mpsc::UnboundedReceiver<Handover>>>,
}

impl Wake {
    /// Starts the subscriber task (it ends when this is dropped).
    pub(super) fn start(source: Source, prefix: String, timeout: Duration) -> Self {
        let (pools, pools_rx) = watch::channel(BTreeSet::new());
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(source, prefix, pools_rx, tx.clone(), timeout));
        Self {
            pools,
            out: tx,
            handovers: std::sync::Mutex::new(Some(rx)),
        }
    }

    /// Follows `pool` from now on.
    pub(super) fn follow(&self, pool: &str) {
        self.pools
            .send_if_modified(|set| set.insert(pool.to_owned()));
    }

    /// Passes on a hand-over this replica learnt from a script's reply.
    pub(super) fn announce(&self, handover: Handover) {
        // Nobody listening yet: the waiter's poll claims it.
        let _ = self.out.send(handover);
    }

    /// The hand-overs (once; later calls get `None`).
    pub(super) fn take(&self) -> Option<mpsc::UnboundedReceiver<Handover>> {
        self.handovers.lock().ok().and_then(|mut r| r.take())
    }
}

async fn run(
    source: Source,
    prefix: String,
    mut pools: watch::Receiver<BTreeSet<String>>,
    freed: mpsc::UnboundedSender<Handover>,
    timeout: Duration,
) {
    let mut attempt = 0usize;
    loop {
        if attempt > 0 {
            let pause = Duration::from_millis(100 * (attempt.min(10) as u64));
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                gone = pools.changed() => if gone.is_err() { return },
            }
        }
        attempt += 1;
        let Ok(client) = source.client(attempt).await else {
            continue;
        };
        let Ok(Ok(mut pubsub)) = tokio::time::timeout(timeout, client.get_async_pubsub()).await
        else {
            continue;
        };
        let mut subscribed = BTreeSet::new();
        'connected: loop {
            let want = pools.borrow_and_update().clone();
            for pool in want.difference(&subscribed) {
                let sub = pubsub.subscribe(channel(&prefix, pool));
                if !matches!(tokio::time::timeout(timeout, sub).await, Ok(Ok(()))) {
                    break 'connected;
                }
            }
            subscribed = want;
            if !subscribed.is_empty() {
                // Subscribed: later failures restart the pause from its shortest.
                attempt = 1;
            }
            let mut messages = pubsub.on_message();
            tokio::select! {
                msg = messages.next() => {
                    let Some(msg) = msg else { break 'connected };
                    if let Some(pool) = pool_of(msg.get_channel_name())
                        && let Ok(token) = msg.get_payload::<String>()
                        && freed.send(Handover { pool: pool.to_owned(), token }).is_err()
                    {
                        return;
                    }
                }
                gone = pools.changed() => if gone.is_err() { return },
            }
        }
        tracing::debug!("lease-store wake-up subscription lost; waiters poll until it is back");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_name_their_pool_and_parse_back() {
        let c = channel("vp", "volc-standard");
        assert_eq!(c, "vp:{volc-standard}:freed");
        assert_eq!(pool_of(&c), Some("volc-standard"));
        assert_eq!(pool_of("other"), None);
    }
}
