//! A client-side circuit breaker shared by every request of a batch.
//!
//! No maintained crate fits: `failsafe` lets every caller through while half-open and does not
//! expose its state, and the batch needs exactly one probe plus a visible state for the
//! progress display. So this is a small state machine:
//!
//! - **Closed**: every call passes; the last `window` results that say something about
//!   availability are kept ([`Health::Up`] / [`Health::Down`]; RESOURCE_EXHAUSTED is neutral).
//!   Once at least `min_calls` are kept and the share of `Down` reaches `failure_ratio`, the
//!   breaker opens.
//! - **Open** until a deadline: callers wait (the whole batch pauses) instead of hammering a
//!   down service. The first open lasts `open_base`; each failed probe doubles it, up to
//!   `open_max`.
//! - **HalfOpen**: exactly one caller gets a probe permit; the others keep waiting. A probe
//!   that finds the service up closes the breaker (and clears the window); one that finds it
//!   down opens it again. A probe permit dropped unused frees the slot for another caller.
//!
//! Results of calls let through before the breaker opened are ignored once it is open, so
//! stragglers cannot flip the state. Time is `tokio::time`, so tests run on a paused clock.

use std::{collections::VecDeque, sync::Mutex, time::Duration};

use tokio::{sync::watch, time::Instant};

pub use crate::retry::Health;

/// Tuning of the breaker.
#[derive(Clone, Copy, Debug)]
pub struct BreakerConfig {
    /// How many recent results are considered.
    pub window: usize,
    /// Fewest results before the breaker may open.
    pub min_calls: usize,
    /// Share of `Down` results (0..1) that opens the breaker.
    pub failure_ratio: f64,
    /// First open period.
    pub open_base: Duration,
    /// Longest open period.
    pub open_max: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            window: 20,
            min_calls: 10,
            failure_ratio: 0.5,
            open_base: Duration::from_secs(1),
            open_max: Duration::from_secs(30),
        }
    }
}

/// The breaker's state as shown to people.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Calls pass.
    Closed,
    /// Calls wait.
    Open,
    /// One probe is allowed.
    HalfOpen,
}

impl Phase {
    /// `closed`, `open` or `half-open`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Closed => "closed",
            Phase::Open => "open",
            Phase::HalfOpen => "half-open",
        }
    }
}

#[derive(Debug)]
enum State {
    Closed,
    Open { until: Instant },
    HalfOpen { probe_out: bool },
}

#[derive(Debug)]
struct Inner {
    state: State,
    recent: VecDeque<bool>,
    downs: usize,
    consecutive_opens: u32,
    trips: u64,
    generation: u64,
    /// Whether the last open came from closed (a trip) rather than from a failed probe.
    opened_from_closed: bool,
}

/// The shared breaker; see the module doc.
#[derive(Debug)]
pub struct Breaker {
    config: BreakerConfig,
    inner: Mutex<Inner>,
    phase: watch::Sender<Phase>,
    /// The last failure that said the service is down (names the service and its URL).
    last_failure: Mutex<Option<String>>,
}

/// The right to make one call; report its result with [`Permit::record`].
#[derive(Debug)]
pub struct Permit<'a> {
    breaker: &'a Breaker,
    probe: bool,
    generation: u64,
    recorded: bool,
}

impl Breaker {
    /// A closed breaker.
    pub fn new(config: BreakerConfig) -> Self {
        Self {
            config,
            inner: Mutex::new(Inner {
                state: State::Closed,
                recent: VecDeque::with_capacity(config.window),
                downs: 0,
                consecutive_opens: 0,
                trips: 0,
                generation: 0,
                opened_from_closed: false,
            }),
            phase: watch::channel(Phase::Closed).0,
            last_failure: Mutex::new(None),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    /// Follows phase changes.
    pub fn subscribe(&self) -> watch::Receiver<Phase> {
        self.phase.subscribe()
    }

    /// How many times the breaker opened from closed.
    pub fn trips(&self) -> u64 {
        self.lock().trips
    }

    /// Whether the breaker's current (or last) open was a trip from closed, counted by
    /// [`Breaker::trips`], rather than a failed probe extending the pause.
    pub fn opened_from_closed(&self) -> bool {
        self.lock().opened_from_closed
    }

    /// Keeps `failure` (a call result that counted as down; it names the service and URL) for
    /// the pause and give-up lines.
    pub fn note_failure(&self, failure: String) {
        *self
            .last_failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(failure);
    }

    /// The last failure given to [`Breaker::note_failure`].
    pub fn last_failure(&self) -> Option<String> {
        self.last_failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Time until an open breaker lets a probe through (`None` unless open).
    pub fn retry_in(&self) -> Option<Duration> {
        match self.lock().state {
            State::Open { until } => Some(until.saturating_duration_since(Instant::now())),
            _ => None,
        }
    }

    /// Waits until a call may be made.
    pub async fn permit(&self) -> Permit<'_> {
        loop {
            let mut changed = self.phase.subscribe();
            let wait_until = {
                let mut inner = self.lock();
                match inner.state {
                    State::Closed => return self.grant(false, inner.generation),
                    State::Open { until } if Instant::now() >= until => {
                        inner.state = State::HalfOpen { probe_out: true };
                        self.phase.send_replace(Phase::HalfOpen);
                        return self.grant(true, inner.generation);
                    }
                    State::Open { until } => Some(until),
                    State::HalfOpen { probe_out: false } => {
                        inner.state = State::HalfOpen { probe_out: true };
                        return self.grant(true, inner.generation);
                    }
                    State::HalfOpen { probe_out: true } => None,
                }
            };
            match wait_until {
                Some(until) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(until) => {}
                        _ = changed.changed() => {}
                    }
                }
                None => {
                    let _ = changed.changed().await;
                }
            }
        }
    }

    fn grant(&self, probe: bool, generation: u64) -> Permit<'_> {
        Permit {
            breaker: self,
            probe,
            generation,
            recorded: false,
        }
    }

    fn open(&self, inner: &mut Inner) {
        inner.consecutive_opens = inner.consecutive_opens.saturating_add(1);
        let doublings = inner.consecutive_opens.saturating_sub(1).min(16);
        let period = self
            .config
            .open_base
            .saturating_mul(1 << doublings)
            .min(self.config.open_max);
        inner.state = State::Open {
            until: Instant::now() + period,
        };
        inner.recent.clear();
        inner.downs = 0;
        inner.generation += 1;
        self.phase.send_replace(Phase::Open);
    }

    fn on_result(&self, probe: bool, generation: u64, health: Health) {
        let mut inner = self.lock();
        if probe {
            match health {
                Health::Down => {
                    inner.opened_from_closed = false;
                    self.open(&mut inner);
                }
                Health::Up | Health::Neutral => {
                    inner.state = State::Closed;
                    inner.consecutive_opens = 0;
                    inner.recent.clear();
                    inner.downs = 0;
                    inner.generation += 1;
                    self.phase.send_replace(Phase::Closed);
                }
            }
            return;
        }
        if !matches!(inner.state, State::Closed) || generation != inner.generation {
            return;
        }
        let down = match health {
            Health::Neutral => return,
            Health::Down => true,
            Health::Up => false,
        };
        if inner.recent.len() == self.config.window.max(1) && inner.recent.pop_front() == Some(true)
        {
            inner.downs -= 1;
        }
        inner.recent.push_back(down);
        inner.downs += usize::from(down);
        let n = inner.recent.len();
        if n >= self.config.min_calls.max(1)
            && inner.downs as f64 >= self.config.failure_ratio * n as f64
        {
            inner.trips += 1;
            inner.opened_from_closed = true;
            self.open(&mut inner);
        }
    }

    fn release_probe(&self) {
        let mut inner = self.lock();
        if let State::HalfOpen { probe_out: true } = inner.state {
            inner.state = State::HalfOpen { probe_out: false };
            self.phase.send_replace(Phase::HalfOpen);
        }
    }
}

impl Permit<'_> {
    /// Whether this permit is the half-open probe.
    pub fn is_probe(&self) -> bool {
        self.probe
    }

    /// Reports the call's result.
    pub fn record(mut self, health: Health) {
        self.recorded = true;
        self.breaker.on_result(self.probe, self.generation, health);
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if self.probe && !self.recorded {
            self.breaker.release_probe();
        }
    }
}

#[cfg(test)]
mod tests;
