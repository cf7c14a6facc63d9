//! Two-stage interruption: the first Ctrl-C (or SIGTERM) stops dispatching new items and lets
//! in-flight ones finish; a second one aborts them. The checkpoint is flushed either way,
//! because only complete, durable records are ever acknowledged.

use tokio_util::sync::CancellationToken;

/// The two stages, as tokens the batch watches.
#[derive(Clone, Debug, Default)]
pub struct Shutdown {
    /// Cancelled at the first signal: dispatch no more items.
    pub drain: CancellationToken,
    /// Cancelled at the second signal: abandon in-flight items.
    pub abort: CancellationToken,
}

impl Shutdown {
    /// Tokens nobody cancels (tests cancel them by hand).
    pub fn new() -> Self {
        Self::default()
    }

    /// Tokens cancelled by Ctrl-C / SIGTERM: first drain, then abort.
    pub fn on_signals() -> Self {
        let shutdown = Self::new();
        let tokens = shutdown.clone();
        tokio::spawn(async move {
            signal().await;
            eprintln!(
                "voxctl: stopping: no new items; waiting for the ones in flight (Ctrl-C again to abort)"
            );
            tokens.drain.cancel();
            signal().await;
            eprintln!("voxctl: aborting the items in flight");
            tokens.abort.cancel();
        });
        shutdown
    }
}

async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
