//! A pool's pace as a function of how many of its calls run at once on this replica.
//!
//! A vendor that serves each key's calls independently answers as fast with eight calls in
//! flight as with one; an engine that shares a machine (espeak-ng on two cores, a GPU server)
//! slows every call as more run at once. So each successful call is filed under the number of
//! calls that ran beside it (its time-weighted average, itself included), and the pool's
//! throughput at a concurrency `n` — characters per second over all its calls — is read from
//! those observations:
//! - at a concurrency that was observed: what was observed there; between two observed ones,
//!   the straight line between them; below the lowest, that level's pace per call;
//! - above the highest one observed: growing in proportion only while every added call has
//!   added a whole call's throughput so far (a cloud of independent keys, or a pool seen at one
//!   level only: the optimistic side, until it has run busier); once added calls were seen to
//!   add less, no more than at the highest level (an engine that saturates is not assumed to
//!   recover past what it was seen to do).

use std::{collections::BTreeMap, time::Duration};

use tokio::time::Instant;

/// Weight of a new observation in a level's moving averages.
const WEIGHT: f64 = 0.3;
/// Share of a linear gain from the lowest level to the highest above which the pool is taken
/// to keep scaling past the highest (measurement noise stays under the rest).
const LINEAR: f64 = 0.9;

/// Successful calls observed at one concurrency level.
#[derive(Debug, Clone, Copy)]
struct Level {
    /// Moving average of a call's duration, seconds.
    call_secs: f64,
    /// Moving average of a call's characters.
    call_chars: f64,
}

impl Level {
    /// Characters per second of one call at this level.
    fn call_rate(self) -> f64 {
        self.call_chars / self.call_secs
    }
}

/// The pool's calls in flight and what their successes showed (module doc).
#[derive(Debug)]
pub(super) struct Pace {
    /// Calls that can gain throughput at once, when known ahead (a local engine: this
    /// machine's cores); levels observed above it still count.
    cap: Option<u32>,
    levels: BTreeMap<u32, Level>,
    observed: u32,
    in_flight: u32,
    /// Calls in flight integrated over time (call-seconds) up to `at`.
    integral: f64,
    at: Instant,
}

impl Default for Pace {
    fn default() -> Self {
        Self {
            cap: None,
            levels: BTreeMap::new(),
            observed: 0,
            in_flight: 0,
            integral: 0.0,
            at: Instant::now(),
        }
    }
}

/// Where a call started: to compute the concurrency it ran at.
#[derive(Debug, Clone, Copy)]
pub(super) struct Start {
    at: Instant,
    integral: f64,
}

impl Pace {
    /// A pool whose throughput stops growing past `cap` calls at once.
    pub(super) fn capped(cap: u32) -> Self {
        Self {
            cap: Some(cap.max(1)),
            ..Self::default()
        }
    }

    fn advance(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.integral += f64::from(self.in_flight) * elapsed;
        self.at = self.at.max(now);
    }

    /// Successful calls observed so far.
    pub(super) fn observed(&self) -> u32 {
        self.observed
    }

    /// Calls in flight now.
    pub(super) fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// A call starts at `now`.
    pub(super) fn start(&mut self, now: Instant) -> Start {
        self.advance(now);
        self.in_flight = self.in_flight.saturating_add(1);
        Start {
            at: now,
            integral: self.integral,
        }
    }

    /// The call that started at `start` ends at `now`; `Some(chars)` when it succeeded with
    /// that many characters.
    pub(super) fn end(&mut self, start: Start, now: Instant, chars: Option<u64>) {
        self.advance(now);
        self.in_flight = self.in_flight.saturating_sub(1);
        let secs = now.saturating_duration_since(start.at).as_secs_f64();
        let Some(chars) = chars.filter(|&c| c > 0) else {
            return;
        };
        if secs <= 0.0 {
            return;
        }
        // Time-weighted calls in flight over this call's life, itself included.
        let beside = (self.integral - start.integral) / secs;
        let level = beside.round().max(1.0) as u32;
        self.observe_at(level, chars, Duration::from_secs_f64(secs));
    }

    /// A call of `chars` characters at `level` calls in flight took `took`.
    pub(super) fn observe_at(&mut self, level: u32, chars: u64, took: Duration) {
        let (secs, chars) = (took.as_secs_f64(), chars as f64);
        if secs <= 0.0 || chars <= 0.0 {
            return;
        }
        self.levels
            .entry(level.max(1))
            .and_modify(|l| {
                l.call_secs += WEIGHT * (secs - l.call_secs);
                l.call_chars += WEIGHT * (chars - l.call_chars);
            })
            .or_insert(Level {
                call_secs: secs,
                call_chars: chars,
            });
        self.observed = self.observed.saturating_add(1);
    }

    /// What the pool's calls deliver per second with `n` of them in flight (module doc);
    /// `None` before any call succeeded.
    pub(super) fn throughput(&self, n: u32) -> Option<Rate> {
        Some(Rate {
            chars: self.throughput_by(n, Level::call_rate)?,
            calls: self.throughput_by(n, |l| 1.0 / l.call_secs)?,
        })
    }

    /// Throughput at `n` of what one call delivers `per_call` per second (module doc).
    fn throughput_by(&self, n: u32, per_call: impl Fn(Level) -> f64) -> Option<f64> {
        let throughput = |level: u32, l: Level| f64::from(level) * per_call(l);
        let (&low, &lowest) = self.levels.first_key_value()?;
        let (&high, &highest) = self.levels.last_key_value()?;
        // Past the cap, more calls add nothing, unless the pool was seen gaining there.
        let n = self.cap.map_or(n, |cap| n.min(cap.max(high))).max(1);
        if n <= low {
            // No more calls than the fewest observed: each no faster than those were.
            return Some(f64::from(n) * per_call(lowest));
        }
        if n > high {
            let seen = throughput(high, highest);
            let linear = throughput(low, lowest) * f64::from(high) / f64::from(low);
            return Some(if seen >= LINEAR * linear {
                seen * f64::from(n) / f64::from(high)
            } else {
                seen
            });
        }
        let (&below, &under) = self.levels.range(..=n).next_back()?;
        let (&above, &over) = self.levels.range(n..).next()?;
        if below == above {
            return Some(throughput(n, under));
        }
        let (t0, t1) = (throughput(below, under), throughput(above, over));
        let along = f64::from(n - below) / f64::from(above - below);
        Some(t0 + (t1 - t0) * along)
    }

    /// Seconds one call of `chars` characters takes with `n` calls in flight.
    pub(super) fn call_secs(&self, n: u32, chars: u64) -> Option<f64> {
        let rate = self.throughput(n)?;
        let n = f64::from(n.max(1));
        Some((chars as f64 * n / rate.chars).max(n / rate.calls))
    }
}

/// What a pool's calls deliver per second at some concurrency. Both count: a vendor with a
/// cost per call (a short last chunk takes as long as a full one) is bound by calls, an engine
/// whose time grows with the text by characters.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rate {
    /// Characters per second.
    pub chars: f64,
    /// Calls per second.
    pub calls: f64,
}

impl Rate {
    /// Seconds to get through `chars` characters in `calls` calls at this rate.
    pub(super) fn secs(self, chars: u64, calls: u64) -> f64 {
        (chars as f64 / self.chars).max(calls as f64 / self.calls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A machine with `cores` cores, each call of 1,000 characters taking 1 s alone.
    fn machine(cores: u32, levels: &[u32]) -> Pace {
        let mut pace = Pace::default();
        for &n in levels {
            let slowdown = (f64::from(n) / f64::from(cores)).max(1.0);
            for _ in 0..3 {
                pace.observe_at(n, 1000, Duration::from_secs_f64(slowdown));
            }
        }
        pace
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6 * b.abs().max(1.0)
    }

    #[test]
    fn an_independent_vendor_scales_with_its_slots() {
        let pace = machine(u32::MAX, &[1, 4]);
        assert!(close(pace.throughput(8).unwrap().chars, 8000.0));
        assert!(close(pace.call_secs(8, 1000).unwrap(), 1.0));
    }

    #[test]
    fn a_two_core_engine_seen_to_saturate_is_not_credited_more_than_it_was_seen_to_do() {
        let pace = machine(2, &[1, 4]);
        // Alone: 1,000 chars/s; at 4: 2,000 (each call takes 2 s); 2 and 3 on the line
        // between; 8 no more than 4.
        assert!(close(pace.throughput(4).unwrap().chars, 2000.0));
        assert!(close(
            pace.throughput(2).unwrap().chars,
            1000.0 + 1000.0 / 3.0
        ));
        assert!(close(pace.throughput(8).unwrap().chars, 2000.0));
        assert!(close(pace.call_secs(8, 1000).unwrap(), 4.0));
    }

    #[test]
    fn with_one_level_seen_the_pool_is_read_as_linear() {
        let pace = machine(2, &[1]);
        assert!(close(pace.throughput(8).unwrap().chars, 8000.0));
        assert!(close(pace.throughput(1).unwrap().chars, 1000.0));
        assert!(Pace::default().throughput(8).is_none());
    }

    #[test]
    fn a_local_engine_gains_nothing_past_its_cores_until_seen_to() {
        let mut pace = Pace::capped(2);
        for _ in 0..3 {
            pace.observe_at(1, 1000, Duration::from_secs(1));
        }
        assert!(close(pace.throughput(8).unwrap().chars, 2000.0));
        for _ in 0..3 {
            pace.observe_at(8, 1000, Duration::from_secs_f64(8.0 / 3.0));
        }
        assert!(close(pace.throughput(8).unwrap().chars, 3000.0));
    }

    #[test]
    fn a_vendor_with_a_cost_per_call_is_bound_by_calls_not_characters() {
        // Every call takes 1 s: four of 1,000 characters at once, then one of 100 alone.
        let mut pace = Pace::default();
        for _ in 0..3 {
            pace.observe_at(4, 1000, Duration::from_secs(1));
            pace.observe_at(1, 100, Duration::from_secs(1));
        }
        let four = pace.throughput(4).unwrap();
        assert!(close(four.calls, 4.0));
        // Five calls of 4,100 characters take 1.25 s at 4 calls a second, not the 1.025 s
        // that 4,000 characters a second would say.
        assert!(close(four.secs(4100, 5), 1.25));
        assert!(close(pace.call_secs(4, 100).unwrap(), 1.0));
    }

    #[test]
    fn fewer_calls_than_ever_seen_are_no_faster_each() {
        let pace = machine(2, &[4]);
        assert!(close(pace.throughput(2).unwrap().chars, 1000.0));
    }

    #[test]
    fn a_call_is_filed_under_the_calls_that_ran_beside_it() {
        let mut pace = Pace::default();
        let t0 = Instant::now();
        // Four calls start together; each takes 2 s.
        let starts: Vec<_> = (0..4).map(|_| pace.start(t0)).collect();
        for start in starts {
            pace.end(start, t0 + Duration::from_secs(2), Some(1000));
        }
        assert_eq!(pace.levels.keys().copied().collect::<Vec<_>>(), [4]);
        // Then one alone, and one that failed (not filed).
        let alone = pace.start(t0 + Duration::from_secs(3));
        pace.end(alone, t0 + Duration::from_secs(4), Some(1000));
        let failed = pace.start(t0 + Duration::from_secs(5));
        pace.end(failed, t0 + Duration::from_secs(6), None);
        assert_eq!(pace.levels.keys().copied().collect::<Vec<_>>(), [1, 4]);
        assert_eq!(pace.observed(), 5);
        assert_eq!(pace.in_flight, 0);
    }
}
