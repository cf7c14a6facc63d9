//! The resume checkpoint: an append-only JSON Lines journal (`.voxctl-checkpoint.jsonl`) in the
//! output directory.
//!
//! # Invariants
//! - An item is done only when its file was renamed into place **and** its `done` record is on
//!   disk (`fsync`): the record is appended after the rename and acknowledged after the sync.
//! - A torn last line (a kill in the middle of a write) is ignored and cut off before the next
//!   append, so it can never glue onto a later record.
//! - The first `run` record names the manifest digest and output format; a resume with another
//!   identity is refused unless forced. Every record carries the item's fingerprint, so even a
//!   forced resume redoes an item whose text or voice changed.
//! - One run at a time per directory: an advisory lock on `.voxctl.lock`, released by the OS
//!   when the process dies (also on `kill -9`).

mod record;
mod writer;

use std::{
    collections::HashMap,
    fs::{File, OpenOptions, TryLockError},
    io,
    path::{Path, PathBuf},
};

pub use record::{DoneRecord, FailedRecord, Record, RunIdentity};
pub use writer::Journal;

/// The journal's file name in the output directory.
pub const JOURNAL_NAME: &str = ".voxctl-checkpoint.jsonl";
/// The lock file's name in the output directory.
pub const LOCK_NAME: &str = ".voxctl.lock";

/// Why the checkpoint cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// File system error.
    #[error("checkpoint {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// Another process holds the directory.
    #[error("another voxctl run is writing to {0}; wait for it or use another --out directory")]
    Locked(PathBuf),
    /// The directory was produced from another manifest or format.
    #[error(
        "{dir} holds a run of another manifest or format (checkpoint: manifest {old_manifest}, {old_format}; now: manifest {new_manifest}, {new_format}); use the original manifest, another --out directory, or --force to resume anyway (items whose text, voice or format changed are redone)"
    )]
    Mismatch {
        /// The output directory.
        dir: PathBuf,
        /// Manifest digest in the checkpoint.
        old_manifest: String,
        /// Format in the checkpoint.
        old_format: String,
        /// Manifest digest now.
        new_manifest: String,
        /// Format now.
        new_format: String,
    },
}

/// What a previous run left: the latest record of each item.
#[derive(Debug, Default)]
pub struct Replayed {
    /// The latest `run` record's identity, if any.
    pub identity: Option<RunIdentity>,
    /// Items whose latest record is `done`.
    pub done: HashMap<String, DoneRecord>,
    /// Items whose latest record is `failed`.
    pub failed: HashMap<String, FailedRecord>,
    /// Lines that could not be read (excluding a torn last line).
    pub corrupt_lines: Vec<usize>,
    /// Whether the file ends with a torn (unterminated) line.
    pub torn_tail: bool,
    /// Length of the file up to its last complete line.
    pub valid_len: u64,
}

/// An opened checkpoint: the directory lock, what previous runs left, and the journal.
pub struct Checkpoint {
    /// Previous runs' records.
    pub replayed: Replayed,
    /// Appends new records.
    pub journal: Journal,
    _lock: File,
}

impl Checkpoint {
    /// Locks `dir`, replays the journal, checks `identity` (unless `force`) and appends a `run`
    /// record.
    pub fn open(dir: &Path, identity: RunIdentity, force: bool) -> Result<Self, CheckpointError> {
        let io_err = |path: &Path| {
            let path = path.to_owned();
            move |source| CheckpointError::Io { path, source }
        };
        let lock_path = dir.join(LOCK_NAME);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_err(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(CheckpointError::Locked(dir.to_owned())),
            Err(TryLockError::Error(e)) => return Err(io_err(&lock_path)(e)),
        }
        let path = dir.join(JOURNAL_NAME);
        let existed = path.exists();
        let replayed = read(&path).map_err(io_err(&path))?;
        if replayed.torn_tail {
            // The tail after the last newline was being written when a process died.
            OpenOptions::new()
                .write(true)
                .open(&path)
                .and_then(|f| f.set_len(replayed.valid_len))
                .map_err(io_err(&path))?;
        }
        let mut forced = false;
        if let Some(old) = &replayed.identity
            && *old != identity
        {
            if !force {
                return Err(CheckpointError::Mismatch {
                    dir: dir.to_owned(),
                    old_manifest: old.manifest.clone(),
                    old_format: old.format.clone(),
                    new_manifest: identity.manifest,
                    new_format: identity.format,
                });
            }
            forced = true;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io_err(&path))?;
        if !existed {
            crate::output::sync_dir(dir).map_err(io_err(dir))?;
        }
        let journal = Journal::start(file, path.clone());
        let run = Record::Run {
            identity,
            started: chrono::Utc::now().to_rfc3339(),
            forced,
        };
        journal.append_blocking(run).map_err(io_err(&path))?;
        Ok(Self {
            replayed,
            journal,
            _lock: lock,
        })
    }
}

/// Reads the journal at `path` (missing = empty) without changing it; a torn last line is
/// ignored.
pub fn read(path: &Path) -> io::Result<Replayed> {
    let mut out = Replayed::default();
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    out.torn_tail = complete < bytes.len();
    out.valid_len = complete as u64;
    for (index, line) in bytes[..complete].split(|b| *b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<Record>(line) {
            Ok(Record::Run { identity, .. }) => out.identity = Some(identity),
            Ok(Record::Done(d)) => {
                out.failed.remove(&d.id);
                out.done.insert(d.id.clone(), d);
            }
            Ok(Record::Failed(f)) => {
                out.done.remove(&f.id);
                out.failed.insert(f.id.clone(), f);
            }
            Err(_) => out.corrupt_lines.push(index + 1),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
