//! A processor-sharing engine for [`Latency::Shared`](crate::knobs::Latency::Shared): calls in
//! flight share `cores` processors equally (each gets at most a whole one), so a call's time
//! depends on every call that runs during its life, not only on those it started beside.
//!
//! Work is counted in virtual seconds: each call in flight receives `min(1, cores / calls)`
//! of them per real second; a call needing `alone` ends when the virtual clock has advanced
//! by `alone` since it started. A call whose caller leaves stops using the engine.

use std::{sync::Mutex, time::Duration};

use tokio::{sync::watch, time::Instant};

use crate::lock::lock;

/// The engine's clock (module doc).
#[derive(Debug)]
pub(crate) struct Engine {
    state: Mutex<State>,
    /// Bumped whenever the number of calls changes (each call's end moves).
    changed: watch::Sender<u64>,
}

#[derive(Debug)]
struct State {
    calls: u32,
    /// Virtual seconds each call in flight has received since the engine started.
    virtual_secs: f64,
    at: Instant,
}

impl State {
    fn rate(&self, cores: u32) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            (f64::from(cores.max(1)) / f64::from(self.calls)).min(1.0)
        }
    }

    fn advance(&mut self, now: Instant, cores: u32) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.virtual_secs += elapsed * self.rate(cores);
        self.at = self.at.max(now);
    }
}

impl Default for Engine {
    fn default() -> Self {
        Self {
            state: Mutex::new(State {
                calls: 0,
                virtual_secs: 0.0,
                at: Instant::now(),
            }),
            changed: watch::channel(0).0,
        }
    }
}

/// One call's share of the engine; leaves it when dropped.
struct Running<'a> {
    engine: &'a Engine,
    cores: u32,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.engine.shift(-1, self.cores);
    }
}

impl Engine {
    /// Adds `delta` calls now; the virtual clock when it happened.
    fn shift(&self, delta: i32, cores: u32) -> f64 {
        let mut state = lock(&self.state);
        state.advance(Instant::now(), cores);
        state.calls = state.calls.saturating_add_signed(delta);
        let at = state.virtual_secs;
        drop(state);
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
        at
    }

    /// Runs one call needing `alone` of a processor on an engine of `cores` processors.
    pub(crate) async fn run(&self, alone: Duration, cores: u32) {
        let mut changed = self.changed.subscribe();
        let done = self.shift(1, cores) + alone.as_secs_f64();
        let _running = Running {
            engine: self,
            cores,
        };
        loop {
            let until = {
                let mut state = lock(&self.state);
                let now = Instant::now();
                state.advance(now, cores);
                let left = done - state.virtual_secs;
                if left <= 1e-6 {
                    return;
                }
                now + Duration::from_secs_f64(left / state.rate(cores))
            };
            tokio::select! {
                () = tokio::time::sleep_until(until) => {}
                _ = changed.changed() => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn calls_beyond_the_cores_share_them() {
        let engine = std::sync::Arc::new(Engine::default());
        let started = Instant::now();
        // Four calls of 1 s on 2 cores: each gets half a core, all end at 2 s.
        let calls: Vec<_> = (0..4)
            .map(|_| {
                let engine = engine.clone();
                tokio::spawn(async move {
                    engine.run(Duration::from_secs(1), 2).await;
                    started.elapsed()
                })
            })
            .collect();
        for call in calls {
            let took = call.await.unwrap();
            assert!((took.as_secs_f64() - 2.0).abs() < 0.01, "{took:?}");
        }
        // Alone again: 1 s.
        let started = Instant::now();
        engine.run(Duration::from_secs(1), 2).await;
        assert!((started.elapsed().as_secs_f64() - 1.0).abs() < 0.01);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_speeds_up_when_the_others_end() {
        let engine = std::sync::Arc::new(Engine::default());
        let started = Instant::now();
        // A 3 s call beside a 1 s call on 1 core: both at half speed until the short one ends
        // at 2 s (1 s of work each), then the long one alone for its last 2 s: ends at 4 s.
        let short = tokio::spawn({
            let engine = engine.clone();
            async move { engine.run(Duration::from_secs(1), 1).await }
        });
        engine.run(Duration::from_secs(3), 1).await;
        short.await.unwrap();
        assert!(
            (started.elapsed().as_secs_f64() - 4.0).abs() < 0.01,
            "{:?}",
            started.elapsed()
        );
    }
}
