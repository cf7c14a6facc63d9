//! Admission: a request that cannot finish within its deadline at the pool's current pace is
//! refused before any vendor call, instead of taking slots, billing characters and ending cut
//! at its deadline (docs/SYNTHESIS.md, "Admission").
//!
//! Each pool keeps, on this replica ([`Load`]):
//! - its **pace** ([`pace`]): how many characters per second its calls deliver with a given
//!   number of them in flight, learned from the calls that succeeded here, each filed under
//!   the calls that ran beside it — so an engine that shares a machine's cores is not credited
//!   with slots it cannot run at once;
//! - its **backlog**: characters and calls (chunks) of the requests admitted here and not yet
//!   synthesized, by traffic class.
//!
//! A request of `c` characters in class `k` is estimated to end after
//! `max((backlog of k and the classes served before it + c) / throughput at slots, its own
//! chain)` — the backlog's characters at the pool's characters per second or its calls at its
//! calls per second, whichever takes longer — where `slots` is the capacity of the pool's usable keys and its own chain is its
//! chunks run `max_parallel_chunks` at a time, each at the pace of the calls in flight then. When that is later than its deadline it is refused with
//! RESOURCE_EXHAUSTED `DEADLINE_UNREACHABLE`, naming the estimate; when other work is what
//! stands in the way, `RetryInfo` says when that work should be done.
//!
//! **Admitted requests keep their promise.** A request's chunks share the pool's line with
//! every request admitted after it, so a later arrival delays it. A newcomer is therefore also
//! refused when, with its characters added, a request admitted before it (in a class it
//! competes with) would be estimated to end past that request's own deadline: once admitted, a
//! request is not starved by later arrivals.
//!
//! **Before the pool has a pace** (fewer than [`MIN_OBSERVED`] calls succeeded here, as after
//! a start) nothing can be estimated. A request of one chunk is admitted (it costs one call
//! and teaches the pace); of longer ones, one at a time goes ahead as the probe and the others
//! wait ([`Load::admit_paced`]) until the pace is known or the probe ends, then are judged
//! like any request. Admitting every long text blind let a burst after a start share the pool
//! so thinly that none of them finished in time. The backlog is this replica's own: replicas do not see each other's, so each
//! admits as if it had the pool to itself (an estimate on the optimistic side).

mod pace;

use std::{sync::Mutex, time::Duration};

use pace::{Pace, Rate, Start};
use tokio::time::Instant;

use crate::{deadline::Deadline, error::SynthesisError, lease::Priority};

/// Successful calls seen before the pace is trusted.
pub const MIN_OBSERVED: u32 = 3;

/// One pool's pace and backlog on this replica (module doc).
#[derive(Debug, Default)]
pub struct Load {
    state: Mutex<State>,
    /// Told when the pace becomes known or a probe ends (module doc).
    changed: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct State {
    pace: Pace,
    /// Characters and calls admitted and not yet done, by class (INTERACTIVE, STANDARD,
    /// BATCH).
    backlog: [Work; 3],
    /// The requests admitted and not yet done: id, class, deadline.
    admitted: Vec<(u64, usize, tokio::time::Instant)>,
    next_id: u64,
    /// The request admitted without a pace to learn it (module doc), while it runs.
    probe: Option<u64>,
}

fn class(priority: Priority) -> usize {
    match priority {
        Priority::Interactive => 0,
        Priority::Standard => 1,
        Priority::Batch => 2,
    }
}

/// What a request to admit asks of its pool.
#[derive(Debug)]
pub struct Ask<'a> {
    /// The pool's id (messages).
    pub pool: &'a str,
    /// Capacity of the pool's usable keys.
    pub slots: u32,
    /// `synthesis.max_parallel_chunks`.
    pub parallel: u32,
    /// Characters of each chunk.
    pub chunks: &'a [u64],
    /// The request's class.
    pub priority: Priority,
    /// When it must be answered.
    pub deadline: &'a Deadline,
}

impl Load {
    /// The load of a pool whose calls share this machine's `cores` (a local engine): its
    /// throughput is not expected to grow past that many calls at once until it is seen to.
    #[must_use]
    pub fn local(cores: u32) -> Self {
        Self {
            state: Mutex::new(State {
                pace: Pace::capped(cores),
                ..State::default()
            }),
            changed: tokio::sync::Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A vendor call starts now; tell the returned [`Call`] when it succeeds.
    pub fn call(&self) -> Call<'_> {
        let start = self.lock().pace.start(Instant::now());
        Call {
            load: self,
            start,
            chars: None,
        }
    }

    /// [`Load::admit`], except that before the pool has a pace a request of several chunks
    /// waits while another one probes it (module doc): until the pace is known, the probe
    /// ends, or its own deadline passes (then it is admitted and judged by what it meets).
    pub async fn admit_paced<'a>(&'a self, ask: &Ask<'_>) -> Result<Admitted<'a>, SynthesisError> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut state = self.lock();
                let paced = state.pace.observed() >= MIN_OBSERVED;
                if paced || ask.chunks.len() <= 1 || state.probe.is_none() {
                    let admitted = self.admit_in(&mut state, ask)?;
                    if !paced && ask.chunks.len() > 1 {
                        state.probe = Some(admitted.id);
                    }
                    return Ok(admitted);
                }
            }
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep_until(ask.deadline.at()) => return self.admit(ask),
            }
        }
    }

    /// Admits `ask` (module doc) and counts its characters in the backlog until the returned
    /// [`Admitted`] is done or dropped. Errors: DEADLINE_UNREACHABLE.
    pub fn admit<'a>(&'a self, ask: &Ask<'_>) -> Result<Admitted<'a>, SynthesisError> {
        let mut state = self.lock();
        self.admit_in(&mut state, ask)
    }

    /// [`Load::admit`] with the state already locked.
    fn admit_in<'a>(
        &'a self,
        state: &mut State,
        ask: &Ask<'_>,
    ) -> Result<Admitted<'a>, SynthesisError> {
        let total: u64 = ask.chunks.iter().sum();
        let own = Work {
            chars: total,
            calls: ask.chunks.len() as u64,
        };
        let class = class(ask.priority);
        let full = state.pace.throughput(ask.slots);
        if let Some(full) = full.filter(|_| state.pace.observed() >= MIN_OBSERVED && ask.slots > 0)
        {
            let ahead = Work::sum(&state.backlog[..=class]);
            let shared = ahead.plus(own).secs(full);
            let waves = ask.chunks.len().div_ceil(ask.parallel.max(1) as usize);
            let longest = ask.chunks.iter().copied().max().unwrap_or(0);
            // Its own chunks run beside what runs already, or in a full pool behind others.
            let beside = if ahead.calls > 0 {
                ask.slots
            } else {
                let parallel = u32::try_from(ask.chunks.len())
                    .unwrap_or(u32::MAX)
                    .min(ask.parallel);
                state
                    .pace
                    .in_flight()
                    .saturating_add(parallel)
                    .min(ask.slots)
            };
            let chain = waves as f64 * state.pace.call_secs(beside, longest).unwrap_or(0.0);
            let estimate = Duration::from_secs_f64(shared.max(chain));
            tracing::debug!(
                pool = ask.pool,
                chars_per_s = full.chars,
                calls_per_s = full.calls,
                ahead_chars = ahead.chars,
                ahead_calls = ahead.calls,
                levels = ?state.pace,
                estimate_ms = millis(estimate),
                "admission estimate"
            );
            let left = ask.deadline.remaining();
            // The first request admitted before it that it would push past its deadline.
            let now = Instant::now();
            let endangered = state
                .admitted
                .iter()
                .filter(|(_, their_class, _)| class <= *their_class)
                .map(|(_, their_class, due)| {
                    let theirs = Work::sum(&state.backlog[..=*their_class]);
                    (
                        Duration::from_secs_f64(theirs.plus(own).secs(full)),
                        due.saturating_duration_since(now),
                    )
                })
                .find(|(end, their_left)| end > their_left);
            if let Some((end, their_left)) = endangered {
                return Err(SynthesisError::DeadlineUnreachable {
                    pool: ask.pool.to_owned(),
                    characters: total,
                    estimate_ms: millis(end),
                    deadline_ms: millis(their_left),
                    backlog_characters: ahead.chars,
                    retry_after: Some(
                        Duration::from_secs_f64(ahead.secs(full)).max(Duration::from_secs(1)),
                    ),
                    endangers_admitted: true,
                });
            }
            if estimate > left {
                let behind_others = ahead.calls > 0 && chain <= left.as_secs_f64();
                return Err(SynthesisError::DeadlineUnreachable {
                    pool: ask.pool.to_owned(),
                    characters: total,
                    estimate_ms: millis(estimate),
                    deadline_ms: millis(left),
                    backlog_characters: ahead.chars,
                    retry_after: behind_others
                        .then(|| (estimate - left).max(Duration::from_secs(1))),
                    endangers_admitted: false,
                });
            }
        }
        state.backlog[class] = state.backlog[class].plus(own);
        let id = state.next_id;
        state.next_id += 1;
        state.admitted.push((id, class, ask.deadline.at()));
        Ok(Admitted {
            load: self,
            id,
            class,
            left: own,
        })
    }
}

/// Characters and calls still to synthesize.
#[derive(Debug, Default, Clone, Copy)]
struct Work {
    chars: u64,
    calls: u64,
}

impl Work {
    fn sum(all: &[Work]) -> Work {
        all.iter().fold(Work::default(), |a, &b| a.plus(b))
    }

    fn plus(self, other: Work) -> Work {
        Work {
            chars: self.chars + other.chars,
            calls: self.calls + other.calls,
        }
    }

    fn minus(self, other: Work) -> Work {
        Work {
            chars: self.chars.saturating_sub(other.chars),
            calls: self.calls.saturating_sub(other.calls),
        }
    }

    fn secs(self, rate: Rate) -> f64 {
        rate.secs(self.chars, self.calls)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A vendor call in flight on its pool (counted in the pool's concurrency until dropped).
#[derive(Debug)]
pub struct Call<'a> {
    load: &'a Load,
    start: Start,
    chars: Option<u64>,
}

impl Call<'_> {
    /// The call delivered `chars` characters' audio: its pace counts.
    pub fn succeeded(mut self, chars: u64) {
        self.chars = Some(chars);
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        let now = Instant::now();
        let mut state = self.load.lock();
        let was = state.pace.observed();
        state.pace.end(self.start, now, self.chars);
        let learned = was < MIN_OBSERVED && state.pace.observed() >= MIN_OBSERVED;
        drop(state);
        if learned {
            self.load.changed.notify_waiters();
        }
    }
}

/// An admitted request's characters and calls still counted in its pool's backlog.
#[derive(Debug)]
pub struct Admitted<'a> {
    load: &'a Load,
    id: u64,
    class: usize,
    left: Work,
}

impl Admitted<'_> {
    /// One chunk of `chars` characters of the request is done (synthesized, served from the
    /// cache, or failed).
    pub fn done(&mut self, chars: u64) {
        self.take(Work { chars, calls: 1 });
    }

    fn take(&mut self, work: Work) {
        let work = Work {
            chars: work.chars.min(self.left.chars),
            calls: work.calls.min(self.left.calls),
        };
        self.left = self.left.minus(work);
        let mut state = self.load.lock();
        state.backlog[self.class] = state.backlog[self.class].minus(work);
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        let left = self.left;
        self.take(left);
        let id = self.id;
        let mut state = self.load.lock();
        state.admitted.retain(|(admitted, _, _)| *admitted != id);
        let probe_ended = state.probe == Some(id);
        if probe_ended {
            state.probe = None;
        }
        drop(state);
        if probe_ended {
            self.load.changed.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask<'a>(chunks: &'a [u64], priority: Priority, deadline: &'a Deadline) -> Ask<'a> {
        Ask {
            pool: "p",
            slots: 4,
            parallel: 4,
            chunks,
            priority,
            deadline,
        }
    }

    /// A pool whose calls each take `secs_per_char` whatever runs beside them, seen at 1 and
    /// at its 4 slots.
    fn paced(secs_per_char: f64) -> Load {
        let load = Load::default();
        for level in [1, 4] {
            for _ in 0..MIN_OBSERVED {
                load.lock().pace.observe_at(
                    level,
                    1000,
                    Duration::from_secs_f64(1000.0 * secs_per_char),
                );
            }
        }
        load
    }

    #[test]
    fn without_a_pace_every_request_is_admitted() {
        let load = Load::default();
        let deadline = Deadline::after(Duration::from_millis(1));
        let chunks = [4000; 5];
        assert!(
            load.admit(&ask(&chunks, Priority::Standard, &deadline))
                .is_ok()
        );
    }

    #[test]
    fn a_request_that_fits_is_admitted_and_the_next_that_does_not_is_refused_with_a_retry() {
        // 1 ms per character, 4 slots: 20,000 characters take 5 s of the pool.
        let load = paced(0.001);
        let deadline = Deadline::after(Duration::from_secs(12));
        let chunks = [4000; 5];
        let first = load
            .admit(&ask(&chunks, Priority::Standard, &deadline))
            .unwrap();
        let Err(SynthesisError::DeadlineUnreachable {
            estimate_ms,
            backlog_characters,
            retry_after,
            ..
        }) = load
            .admit(&ask(&[4000; 5], Priority::Standard, &deadline))
            .and_then(|_| load.admit(&ask(&[4000; 5], Priority::Standard, &deadline)))
        else {
            panic!(
                "a third 20,000-character request cannot end within 12 s on 4 slots at 1 ms/char"
            );
        };
        assert_eq!(estimate_ms, 15_000);
        assert_eq!(backlog_characters, 40_000);
        assert!(retry_after.is_some());
        drop(first);
    }

    #[test]
    fn done_work_leaves_the_backlog_and_a_dropped_request_takes_the_rest() {
        let load = paced(0.001);
        let deadline = Deadline::after(Duration::from_secs(10));
        let mut first = load
            .admit(&ask(&[4000; 5], Priority::Standard, &deadline))
            .unwrap();
        first.done(4000);
        assert_eq!(load.lock().backlog[1].chars, 16_000);
        assert_eq!(load.lock().backlog[1].calls, 4);
        drop(first);
        assert_eq!(load.lock().backlog[1].chars, 0);
        assert_eq!(load.lock().backlog[1].calls, 0);
    }

    #[test]
    fn batch_backlog_does_not_stand_before_interactive_requests() {
        let load = paced(0.001);
        let long = Deadline::after(Duration::from_secs(600));
        let _batch: Vec<_> = (0..10)
            .map(|_| {
                load.admit(&ask(&[4000; 5], Priority::Batch, &long))
                    .unwrap()
            })
            .collect();
        let short = Deadline::after(Duration::from_secs(2));
        assert!(
            load.admit(&ask(&[200], Priority::Interactive, &short))
                .is_ok()
        );
        assert!(load.admit(&ask(&[200], Priority::Batch, &short)).is_err());
    }

    #[test]
    fn a_newcomer_that_would_make_an_admitted_request_miss_its_deadline_waits_its_turn() {
        let load = paced(0.001);
        // 20,000 characters in 4,000-character chunks on 4 slots at 1 ms/char: 8 s (two waves
        // of chunks); due in 9 s.
        let soon = Deadline::after(Duration::from_secs(9));
        let first = load
            .admit(&ask(&[4000; 5], Priority::Standard, &soon))
            .unwrap();
        // Alone it would fit its own 60 s easily, but it would push the first to 10 s.
        let later = Deadline::after(Duration::from_secs(60));
        let Err(SynthesisError::DeadlineUnreachable {
            endangers_admitted,
            retry_after,
            ..
        }) = load.admit(&ask(&[4000; 5], Priority::Standard, &later))
        else {
            panic!("admitted although it makes the first miss its deadline");
        };
        assert!(endangers_admitted);
        assert!(retry_after.is_some());
        // A BATCH newcomer is served after the first: it delays nothing.
        assert!(
            load.admit(&ask(&[4000; 5], Priority::Batch, &later))
                .is_ok()
        );
        drop(first);
        assert!(
            load.admit(&ask(&[4000; 5], Priority::Standard, &later))
                .is_ok()
        );
    }

    #[test]
    fn a_request_too_long_for_its_own_deadline_gets_no_retry_hint() {
        let load = paced(0.001);
        let deadline = Deadline::after(Duration::from_secs(1));
        let Err(SynthesisError::DeadlineUnreachable { retry_after, .. }) =
            load.admit(&ask(&[4000; 5], Priority::Standard, &deadline))
        else {
            panic!("4 s of chunks cannot fit 1 s");
        };
        assert_eq!(retry_after, None, "waiting does not help");
    }

    #[tokio::test(start_paused = true)]
    async fn before_a_pace_one_long_request_probes_and_the_others_wait_for_what_it_teaches() {
        use futures::FutureExt;
        let load = Load::default();
        let deadline = Deadline::after(Duration::from_secs(600));
        let long = [1000; 5];
        let probe = load
            .admit_paced(&ask(&long, Priority::Standard, &deadline))
            .now_or_never()
            .expect("the first long request goes ahead at once")
            .expect("admitted");
        // A one-chunk request is never held: it teaches the pace itself.
        let short = load
            .admit_paced(&ask(&[200], Priority::Standard, &deadline))
            .now_or_never()
            .expect("a one-chunk request is not held")
            .expect("admitted");
        drop(short);
        let second = ask(&long, Priority::Standard, &deadline);
        let waiting = load.admit_paced(&second);
        tokio::pin!(waiting);
        assert!(
            futures::poll!(waiting.as_mut()).is_pending(),
            "a second long request waits while the probe runs"
        );
        // The probe's calls teach the pace: the waiting request is judged then.
        for _ in 0..MIN_OBSERVED {
            let mut call = load.call();
            call.chars = Some(1000);
            tokio::time::advance(Duration::from_millis(10)).await;
            drop(call);
        }
        let admitted = waiting.await;
        assert!(admitted.is_ok(), "{admitted:?}");
        drop(probe);
    }

    #[tokio::test]
    async fn a_request_waiting_for_a_pace_goes_ahead_when_the_probe_ends() {
        use futures::FutureExt;
        let load = Load::default();
        let deadline = Deadline::after(Duration::from_secs(600));
        let long = [1000; 5];
        let probe = load
            .admit_paced(&ask(&long, Priority::Standard, &deadline))
            .now_or_never()
            .expect("at once")
            .expect("admitted");
        let second = ask(&long, Priority::Standard, &deadline);
        let waiting = load.admit_paced(&second);
        tokio::pin!(waiting);
        assert!(futures::poll!(waiting.as_mut()).is_pending());
        // The probe failed without teaching anything: the next request probes in its place.
        drop(probe);
        let next = waiting.await.expect("admitted as the next probe");
        assert_eq!(load.lock().probe, Some(next.id));
    }
}
