//! Live counters of a batch run, shared by the workers and the progress display.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counters updated as items and calls finish.
#[derive(Debug, Default)]
pub struct Stats {
    /// Items this run will try (excludes items skipped from the checkpoint).
    pub total: AtomicU64,
    /// Items finished successfully in this run.
    pub done: AtomicU64,
    /// Items failed in this run.
    pub failed: AtomicU64,
    /// Items being worked on.
    pub in_flight: AtomicU64,
    /// Characters of the items done in this run.
    pub chars_done: AtomicU64,
    /// Characters of every item this run will try (the ETA's denominator).
    pub chars_total: AtomicU64,
    /// Characters of the parts that came back with audio in this run, items not finished yet
    /// included: what moves while one long item runs.
    pub chars_spoken: AtomicU64,
    /// Parts that came back with audio in this run.
    pub parts_spoken: AtomicU64,
    /// Synthesize calls made.
    pub calls: AtomicU64,
    /// Calls that were retries.
    pub retries: AtomicU64,
    /// Text chunks of the responses that came back, as synthesis split them
    /// ([`crate::call::chunks_of`]).
    pub chunks: AtomicU64,
    /// Of `chunks`, those served from synthesis's audio cache.
    pub cached_chunks: AtomicU64,
}

/// A consistent-enough copy of [`Stats`] for display.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsView {
    /// See [`Stats::total`].
    pub total: u64,
    /// See [`Stats::done`].
    pub done: u64,
    /// See [`Stats::failed`].
    pub failed: u64,
    /// See [`Stats::in_flight`].
    pub in_flight: u64,
    /// See [`Stats::chars_done`].
    pub chars_done: u64,
    /// See [`Stats::chars_total`].
    pub chars_total: u64,
    /// See [`Stats::chars_spoken`].
    pub chars_spoken: u64,
    /// See [`Stats::parts_spoken`].
    pub parts_spoken: u64,
    /// See [`Stats::calls`].
    pub calls: u64,
    /// See [`Stats::retries`].
    pub retries: u64,
    /// See [`Stats::chunks`].
    pub chunks: u64,
    /// See [`Stats::cached_chunks`].
    pub cached_chunks: u64,
}

impl Stats {
    /// Reads every counter.
    pub fn view(&self) -> StatsView {
        StatsView {
            total: self.total.load(Relaxed),
            done: self.done.load(Relaxed),
            failed: self.failed.load(Relaxed),
            in_flight: self.in_flight.load(Relaxed),
            chars_done: self.chars_done.load(Relaxed),
            chars_total: self.chars_total.load(Relaxed),
            chars_spoken: self.chars_spoken.load(Relaxed),
            parts_spoken: self.parts_spoken.load(Relaxed),
            calls: self.calls.load(Relaxed),
            retries: self.retries.load(Relaxed),
            chunks: self.chunks.load(Relaxed),
            cached_chunks: self.cached_chunks.load(Relaxed),
        }
    }

    /// What has to move for the run to count as progressing (`--give-up-after`): items
    /// settled (done or failed) and parts spoken.
    pub fn progress_mark(&self) -> (u64, u64, u64) {
        (
            self.done.load(Relaxed),
            self.failed.load(Relaxed),
            self.parts_spoken.load(Relaxed),
        )
    }

    /// Adds one to a counter.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    /// Marks an item in flight until the guard drops.
    pub fn in_flight_guard(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Relaxed);
        InFlight(self)
    }
}

/// Decrements [`Stats::in_flight`] on drop (also when the item's task is aborted).
#[derive(Debug)]
pub struct InFlight<'a>(&'a Stats);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}
