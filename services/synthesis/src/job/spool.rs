//! Where a request's audio waits for its reader, with memory bounded per request.
//!
//! Audio waits in two places: a call's checked audio held while its chunk is not live
//! (`attempt::relay`), and a chunk's channel to the request's emitter ([`pipe`]) while the
//! emitter is busy with an earlier chunk or blocked on a caller that reads slowly. Both are a
//! [`Spool`]: up to [`MEMORY_BYTES`] in memory, the rest appended to an anonymous temporary file
//! (created unlinked in the system temp dir, `TMPDIR`, so nothing is left behind even after a
//! crash) and read back in order.
//!
//! Why spill rather than stop reading the vendor: a vendor slot is the scarce thing a pool
//! shares, and a call that waits for a slow reader holds its lease (and the vendor's work) all
//! that time, so a handful of stalled readers would take a pool's capacity from everyone. A
//! spilled call ends at the vendor's pace and releases its key; the reader's backlog costs
//! disk, bounded by the request's audio (`synthesis.max_text_chars`) and by
//! `synthesis.stalled_reader_timeout_ms`, after which the request is cut off (`super::delivery`).
//! When the temp dir cannot be written, audio stays in memory and a warning says so.

use std::{collections::VecDeque, fs::File, os::unix::fs::FileExt as _, sync::Arc};

use bytes::Bytes;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

/// Audio one spool keeps in memory before it spills to its file.
pub const MEMORY_BYTES: usize = 64 * 1024;
/// The most one read from the file returns.
const READ_PIECE: usize = 64 * 1024;

/// A FIFO of audio bytes, in memory up to [`MEMORY_BYTES`], then in a temp file (module doc).
#[derive(Debug, Default)]
pub struct Spool {
    memory: VecDeque<Bytes>,
    memory_bytes: usize,
    file: Option<Spilled>,
}

#[derive(Debug)]
struct Spilled {
    file: File,
    written: u64,
    read: u64,
}

impl Spool {
    /// Appends `bytes`.
    pub fn push(&mut self, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        if self.file.is_none() && self.memory_bytes + bytes.len() <= MEMORY_BYTES {
            self.memory_bytes += bytes.len();
            self.memory.push_back(bytes);
            return;
        }
        if self.file.is_none() {
            match tempfile::tempfile() {
                Ok(file) => {
                    self.file = Some(Spilled {
                        file,
                        written: 0,
                        read: 0,
                    });
                }
                Err(e) => return self.keep(bytes, &e),
            }
        }
        if let Some(spilled) = &mut self.file {
            match spilled.file.write_all_at(&bytes, spilled.written) {
                Ok(()) => spilled.written += bytes.len() as u64,
                Err(e) => self.keep(bytes, &e),
            }
        }
    }

    /// Keeps `bytes` in memory after the file failed, after everything already spilled.
    fn keep(&mut self, bytes: Bytes, e: &std::io::Error) {
        tracing::warn!(error = %e, "cannot spill audio to the temp dir (TMPDIR): it waits for its reader in memory");
        match self.drain_file() {
            Ok(()) => {}
            Err(e) => tracing::error!(error = %e, "spilled audio unreadable; it is lost"),
        }
        self.memory_bytes += bytes.len();
        self.memory.push_back(bytes);
    }

    /// Moves what the file holds into memory (the file failing).
    fn drain_file(&mut self) -> std::io::Result<()> {
        let Some(spilled) = self.file.take() else {
            return Ok(());
        };
        let mut rest = vec![0; usize::try_from(spilled.written - spilled.read).unwrap_or(0)];
        spilled.file.read_exact_at(&mut rest, spilled.read)?;
        self.memory_bytes += rest.len();
        self.memory.push_back(Bytes::from(rest));
        Ok(())
    }

    /// Takes the next bytes, oldest first; `None` when empty.
    pub fn pop(&mut self) -> Option<Bytes> {
        if let Some(bytes) = self.memory.pop_front() {
            self.memory_bytes -= bytes.len();
            return Some(bytes);
        }
        let spilled = self.file.as_mut()?;
        let want = usize::try_from(spilled.written - spilled.read)
            .unwrap_or(READ_PIECE)
            .min(READ_PIECE);
        let mut piece = vec![0; want];
        if let Err(e) = spilled.file.read_exact_at(&mut piece, spilled.read) {
            tracing::error!(error = %e, "spilled audio unreadable; it is lost");
            self.file = None;
            return None;
        }
        spilled.read += want as u64;
        if spilled.read == spilled.written {
            self.file = None;
        }
        Some(Bytes::from(piece))
    }

    /// Bytes waiting, in memory and on disk.
    pub fn len(&self) -> u64 {
        self.memory_bytes as u64
            + self
                .file
                .as_ref()
                .map_or(0, |spilled| spilled.written - spilled.read)
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes waiting in memory.
    pub fn in_memory(&self) -> usize {
        self.memory_bytes
    }
}

/// What a chunk's receiver gets: audio in order, then how the chunk ended.
#[derive(Debug)]
pub enum ChunkMsg<T> {
    /// The next bytes of the chunk's vendor audio (as the vendor sent them).
    Audio(Bytes),
    /// The chunk's audio comes from the audio cache (sent before its audio; see
    /// `crate::job::cached`).
    Cached,
    /// The chunk is done; nothing follows.
    Done(T),
}

/// Where an attempt hands its audio over (module doc): the chunk's channel and whether the
/// chunk is live. Cloned into each attempt of the chunk.
#[derive(Debug)]
pub struct ChunkOut<T> {
    /// The chunk's channel (its audio spools).
    pub tx: PipeTx<T>,
    /// True once the chunk's audio is forwarded as it arrives.
    pub live: watch::Receiver<bool>,
}

impl<T> Clone for ChunkOut<T> {
    fn clone(&self) -> Self {
        Self {
            tx: self.tx.clone(),
            live: self.live.clone(),
        }
    }
}

/// A chunk's channel to its emitter, with its audio in a [`Spool`]: messages come out as they
/// went in (`Cached` before the audio it announces, `Done` after all of it).
pub fn pipe<T>() -> (PipeTx<T>, PipeRx<T>) {
    let shared = Arc::new(Shared {
        state: std::sync::Mutex::new(State {
            cached: 0,
            audio: Spool::default(),
            done: None,
            senders: 1,
        }),
        wake: Notify::new(),
        gone: CancellationToken::new(),
    });
    (PipeTx(shared.clone()), PipeRx(shared))
}

#[derive(Debug)]
struct Shared<T> {
    state: std::sync::Mutex<State<T>>,
    /// Wakes the receiver.
    wake: Notify,
    /// Cancelled when the receiver is dropped.
    gone: CancellationToken,
}

#[derive(Debug)]
struct State<T> {
    cached: u32,
    audio: Spool,
    done: Option<T>,
    senders: usize,
}

impl<T> Shared<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The sending side of a [`pipe`]; clones share it.
#[derive(Debug)]
pub struct PipeTx<T>(Arc<Shared<T>>);

impl<T> Clone for PipeTx<T> {
    fn clone(&self) -> Self {
        self.0.lock().senders += 1;
        Self(self.0.clone())
    }
}

impl<T> Drop for PipeTx<T> {
    fn drop(&mut self) {
        self.0.lock().senders -= 1;
        self.0.wake.notify_one();
    }
}

impl<T> PipeTx<T> {
    /// Sends `msg` (never waits); dropped when the receiver is gone.
    pub fn send(&self, msg: ChunkMsg<T>) {
        if self.is_closed() {
            return;
        }
        {
            let mut state = self.0.lock();
            match msg {
                ChunkMsg::Audio(bytes) => state.audio.push(bytes),
                ChunkMsg::Cached => state.cached += 1,
                ChunkMsg::Done(done) => state.done = Some(done),
            }
        }
        self.0.wake.notify_one();
    }

    /// Whether the receiver is gone (nobody wants the audio any more).
    pub fn is_closed(&self) -> bool {
        self.0.gone.is_cancelled()
    }

    /// Resolves once the receiver is gone.
    pub async fn closed(&self) {
        self.0.gone.cancelled().await;
    }
}

/// The receiving side of a [`pipe`]. Dropping it frees what waits and tells the senders.
#[derive(Debug)]
pub struct PipeRx<T>(Arc<Shared<T>>);

impl<T> Drop for PipeRx<T> {
    fn drop(&mut self) {
        self.0.gone.cancel();
        let mut state = self.0.lock();
        state.audio = Spool::default();
        state.done = None;
    }
}

impl<T> PipeRx<T> {
    /// The next message, if one waits now.
    pub fn try_recv(&mut self) -> Option<ChunkMsg<T>> {
        let mut state = self.0.lock();
        if state.cached > 0 {
            state.cached -= 1;
            return Some(ChunkMsg::Cached);
        }
        if let Some(bytes) = state.audio.pop() {
            return Some(ChunkMsg::Audio(bytes));
        }
        state.done.take().map(ChunkMsg::Done)
    }

    /// The next message; `None` once every sender is gone and nothing waits.
    pub async fn recv(&mut self) -> Option<ChunkMsg<T>> {
        loop {
            if let Some(msg) = self.try_recv() {
                return Some(msg);
            }
            if self.0.lock().senders == 0 {
                return None;
            }
            // A wake-up sent since the check above is kept for this wait (`notify_one`).
            self.0.wake.notified().await;
        }
    }
}

#[cfg(test)]
mod tests;
