//! Interruption: the first Ctrl-C (or SIGTERM) stops dispatching new items at once and gives
//! the ones in flight [`DRAIN_GRACE`] to finish; then, or at a second signal, they are
//! cancelled (their temporary files go, nothing is recorded for them, so a resumed run redoes
//! them). The checkpoint is consistent either way, because only complete, durable records are
//! ever acknowledged. The handler prints through [`crate::say!`], which cannot fail, so a
//! closed stderr never stops it from acting on the signal.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How long items in flight at the first signal may take to finish before they are cancelled:
/// short enough that voxctl ends within 2 s of a Ctrl-C, long enough for calls about to answer.
pub const DRAIN_GRACE: Duration = Duration::from_millis(1500);

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

    /// Tokens cancelled by Ctrl-C / SIGTERM: drain at the first, abort [`DRAIN_GRACE`] later
    /// or at the second, whichever comes first.
    pub fn on_signals() -> Self {
        let shutdown = Self::new();
        let tokens = shutdown.clone();
        tokio::spawn(async move {
            signal().await;
            crate::say!(
                "voxctl: stopping: no new items; the ones in flight get {}ms to finish, then are cancelled and redone on resume (Ctrl-C again to cancel them now)",
                DRAIN_GRACE.as_millis()
            );
            tokens.drain.cancel();
            tokio::select! {
                () = signal() => crate::say!("voxctl: cancelling the items in flight"),
                () = tokio::time::sleep(DRAIN_GRACE) => {}
            }
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
