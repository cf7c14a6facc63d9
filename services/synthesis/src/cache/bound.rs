//! A local store's size bound (`synthesis.cache_max_bytes`), kept under concurrent fills.
//!
//! Each write adds its size to a running estimate; a write that takes the estimate past the
//! bound asks for a sweep. A sweep lists the store, deletes the oldest-written entries until
//! at most 90% of the bound remains, and sets the estimate to what it left plus every byte
//! written since it began (writes its listing may have missed: counted twice at worst). So
//! the estimate is never below what the store holds, and every write that takes the store
//! past its bound is followed by a sweep that lists it.
//!
//! One sweep runs at a time. A write that asks while one runs sets `pending` and returns; the
//! sweeper runs again while `pending` is set, and checks it once more after letting go of the
//! lock, so no request is lost between its last pass and its release (the lost-wake-up race).
//! At rest, then, the store holds at most the bound. While fills run it can hold more: the
//! entries written after a sweep's listing began, until the next pass (one per such write at
//! most) deletes them.

use std::sync::{
    Mutex,
    atomic::{AtomicBool, Ordering},
};

/// The accounting of one local cache (module doc).
#[derive(Debug)]
pub(super) struct Bound {
    /// The bound, bytes.
    pub(super) max: u64,
    tally: Mutex<Tally>,
    /// A write found the estimate past the bound since the last pass began.
    pending: AtomicBool,
    /// One sweep at a time.
    pub(super) sweeping: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct Tally {
    /// Bytes believed stored (never below the truth once `measured`).
    estimate: u64,
    /// Bytes written since the process started (only grows).
    written: u64,
    /// A listing has set `estimate` (until then every write asks for a sweep).
    measured: bool,
}

/// A pass's start: what was written before its listing.
#[derive(Clone, Copy, Debug)]
pub(super) struct Mark(u64);

impl Bound {
    pub(super) fn new(max: u64) -> Self {
        Self {
            max,
            tally: Mutex::new(Tally::default()),
            pending: AtomicBool::new(false),
            sweeping: tokio::sync::Mutex::new(()),
        }
    }

    /// Counts a write of `size` bytes (after it completed); `true` when a sweep is needed.
    pub(super) fn wrote(&self, size: u64) -> bool {
        let Ok(mut t) = self.tally.lock() else {
            return true;
        };
        t.estimate = t.estimate.saturating_add(size);
        t.written = t.written.saturating_add(size);
        !t.measured || t.estimate > self.max
    }

    /// Counts `size` bytes deleted by a purge.
    pub(super) fn deleted(&self, size: u64) {
        if let Ok(mut t) = self.tally.lock() {
            t.estimate = t.estimate.saturating_sub(size);
        }
    }

    /// Asks for a sweep (the caller then tries `sweeping`: whoever holds it runs the pass).
    pub(super) fn request(&self) {
        self.pending.store(true, Ordering::SeqCst);
    }

    /// Takes the request flag: `true` when a pass is due.
    pub(super) fn take_pending(&self) -> bool {
        self.pending.swap(false, Ordering::SeqCst)
    }

    /// Whether a request came in after the last pass (checked after releasing `sweeping`).
    pub(super) fn is_pending(&self) -> bool {
        self.pending.load(Ordering::SeqCst)
    }

    /// Marks a pass's start, before its listing.
    pub(super) fn mark(&self) -> Mark {
        Mark(self.tally.lock().map_or(0, |t| t.written))
    }

    /// Ends a pass begun at `mark` whose listing, less what it deleted, held `left` bytes.
    pub(super) fn settle(&self, mark: Mark, left: u64) {
        if let Ok(mut t) = self.tally.lock() {
            t.estimate = left.saturating_add(t.written.saturating_sub(mark.0));
            t.measured = true;
        }
    }
}
