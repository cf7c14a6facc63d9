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
//! Fill-lock releases (`store::fill`) ride the same connection: it also follows
//! `<prefix>:fills:released` (one channel for every fill key, whose message is the key), so a
//! caller waiting for a fill lock on any replica is woken when it is released.
//!
//! Invariant: an announcement is only ever a hint. A lost message (subscriber reconnecting)
//! costs one poll of the line (`scheduler.wait_poll_ms`), which claims the slot instead; an
//! unclaimed slot returns to the pool when its claim ttl ends. Correctness never depends on
//! delivery.

use std::{collections::BTreeSet, time::Duration};

use futures::StreamExt as _;
use tokio::sync::{mpsc, watch};

use crate::{model::FillKey, store::Handover};

/// Where the subscriber connects.
pub(super) type Source = voxpool_redis::SubscriberSource;

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
    /// Fill keys released (`super::fill`), also fed by [`Wake::fill_released`].
    fills_out: mpsc::UnboundedSender<FillKey>,
    fills: std::sync::Mutex<Option<mpsc::UnboundedReceiver<FillKey>>>,
}

impl Wake {
    /// Starts the subscriber task (it ends when this is dropped).
    pub(super) fn start(source: Source, prefix: String, timeout: Duration) -> Self {
        let (pools, pools_rx) = watch::channel(BTreeSet::new());
        let (tx, rx) = mpsc::unbounded_channel();
        let (fills_tx, fills_rx) = mpsc::unbounded_channel();
        let out = Out {
            freed: tx.clone(),
            fills: fills_tx.clone(),
        };
        tokio::spawn(run(source, prefix, pools_rx, out, timeout));
        Self {
            fills_out: fills_tx,
            fills: std::sync::Mutex::new(Some(fills_rx)),
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

    /// Passes on a fill lock this replica released.
    pub(super) fn fill_released(&self, key: FillKey) {
        // Nobody listening yet: waiters poll.
        let _ = self.fills_out.send(key);
    }

    /// The fill releases (once; later calls get `None`).
    pub(super) fn take_fills(&self) -> Option<mpsc::UnboundedReceiver<FillKey>> {
        self.fills.lock().ok().and_then(|mut r| r.take())
    }

    /// The hand-overs (once; later calls get `None`).
    pub(super) fn take(&self) -> Option<mpsc::UnboundedReceiver<Handover>> {
        self.handovers.lock().ok().and_then(|mut r| r.take())
    }
}

/// Where the subscriber's messages go.
struct Out {
    freed: mpsc::UnboundedSender<Handover>,
    fills: mpsc::UnboundedSender<FillKey>,
}

async fn run(
    source: Source,
    prefix: String,
    mut pools: watch::Receiver<BTreeSet<String>>,
    out: Out,
    timeout: Duration,
) {
    let fills = super::fill::channel(&prefix);
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
        let sub = pubsub.subscribe(&fills);
        if !matches!(tokio::time::timeout(timeout, sub).await, Ok(Ok(()))) {
            continue;
        }
        attempt = 1;
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
                    let Ok(payload) = msg.get_payload::<String>() else { continue };
                    let channel = msg.get_channel_name();
                    let sent = if channel == fills {
                        // A key that does not parse is no release of ours: dropped.
                        FillKey::parse(&payload).map_or(Ok(()), |key| out.fills.send(key).map_err(drop))
                    } else if let Some(pool) = pool_of(channel) {
                        out.freed.send(Handover { pool: pool.to_owned(), token: payload }).map_err(drop)
                    } else {
                        Ok(())
                    };
                    if sent.is_err() {
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
