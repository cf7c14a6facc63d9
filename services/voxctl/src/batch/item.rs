//! One item, start to finish: split the text, synthesize every part (with retries), join the
//! audio, write the file atomically, then record the outcome durably in the checkpoint.
//!
//! The `done` record is appended only after the file's rename, and the item counts as done only
//! once the record is acknowledged (on disk), so a kill between the two redoes the item and
//! never leaves a "done" item without its file.

use std::{path::PathBuf, sync::Arc};

use super::plan::Todo;
use crate::{
    call::{Caller, PartLimit},
    checkpoint::{DoneRecord, FailedRecord, Journal, Record},
    join::join,
    output,
    report::{ItemReport, Status},
    request::CallSettings,
    retry::CallError,
    stats::Stats,
};

/// What every item of a run shares.
pub struct ItemContext {
    /// Makes the calls.
    pub caller: Caller,
    /// The checkpoint journal.
    pub journal: Arc<Journal>,
    /// Output directory.
    pub out: PathBuf,
    /// What every call sends (format, sample rate, class, tenant, cache policy).
    pub request: CallSettings,
    /// Longest text per request (`--max-chars`, shrunk when a part's audio is too large).
    pub max_chars: PartLimit,
    /// Counters.
    pub stats: Arc<Stats>,
}

/// The item's report, and whether its checkpoint record could not be written (the batch then
/// stops dispatching).
pub struct Processed {
    /// The report.
    pub report: ItemReport,
    /// The checkpoint write failed.
    pub journal_failed: bool,
}

pub use voxpool_domain::item::item_seed;

/// Runs one item (see the module doc).
pub async fn process(todo: Todo, ctx: Arc<ItemContext>) -> Processed {
    let _in_flight = ctx.stats.in_flight_guard();
    let Todo { item, fp } = todo;
    // Every part of the item, on every run of the batch, picks the same reference clip.
    let seed = item.seed.unwrap_or_else(|| item_seed(&item.id));
    let template = ctx.request.template(&item.voice, &item.emotion, seed);
    let spoken = ctx
        .caller
        .speak(&template, &item.text, &ctx.max_chars, &item.id)
        .await;
    let progress = Progress {
        calls: spoken.calls,
        keys: spoken.keys,
        parts: spoken.parts,
        chunks: spoken.chunks,
        cached_chunks: spoken.cached_chunks,
    };
    let failure = spoken
        .error
        .map(|(error, part, parts)| describe(&error, part, parts));
    let audio = spoken.audio;
    let file = output::file_name(&item.id, ctx.request.format);
    let written = match failure {
        Some(f) => Err(f),
        None => write(&ctx, &file, audio).await,
    };
    let mut report = ItemReport {
        id: Some(item.id.clone()),
        line: item.line,
        status: Status::Ok,
        resumed: false,
        attempts: progress.calls,
        keys: progress.keys.clone(),
        code: None,
        error: None,
        file: None,
        parts: progress.parts,
        chars: item.chars(),
        chunks: progress.chunks,
        cached_chunks: progress.cached_chunks,
    };
    let record = match written {
        Ok(bytes) => Record::Done(DoneRecord {
            id: item.id.clone(),
            fp,
            file: file.clone(),
            bytes,
            attempts: progress.calls,
            keys: progress.keys,
            parts: progress.parts,
            chars: item.chars(),
            chunks: progress.chunks,
            cached_chunks: progress.cached_chunks,
        }),
        Err((code, error)) => {
            report.status = Status::Failed;
            report.code = Some(code.clone());
            report.error = Some(error.clone());
            Record::Failed(FailedRecord {
                id: item.id.clone(),
                fp,
                code,
                error,
                attempts: progress.calls,
                keys: progress.keys,
            })
        }
    };
    let journal_failed = match ctx.journal.append(record).await {
        Ok(()) => false,
        Err(e) => {
            report.status = Status::Failed;
            report.code = Some("CHECKPOINT".into());
            report.error = Some(format!("cannot record the item in the checkpoint: {e}"));
            true
        }
    };
    match report.status {
        Status::Ok => {
            report.file = Some(file);
            Stats::bump(&ctx.stats.done);
            ctx.stats
                .chars_done
                .fetch_add(report.chars as u64, std::sync::atomic::Ordering::Relaxed);
        }
        _ => Stats::bump(&ctx.stats.failed),
    }
    Processed {
        report,
        journal_failed,
    }
}

struct Progress {
    calls: u32,
    keys: Vec<String>,
    parts: usize,
    chunks: u64,
    cached_chunks: u64,
}

fn describe(error: &CallError, part: usize, parts: usize) -> (String, String) {
    let message = if parts > 1 {
        format!("part {part} of {parts}: {}", error.message)
    } else {
        error.message.clone()
    };
    (error.code_name(), message)
}

/// Joins and writes the audio; returns the file size.
async fn write(
    ctx: &ItemContext,
    file: &str,
    audio: Vec<Vec<u8>>,
) -> Result<u64, (String, String)> {
    let local = |e: String| ("LOCAL".to_owned(), e);
    let bytes = join(ctx.request.format, audio).map_err(|e| local(e.to_string()))?;
    if bytes.is_empty() {
        return Err(local("the server returned no audio".into()));
    }
    let (dir, name, size) = (ctx.out.clone(), file.to_owned(), bytes.len() as u64);
    tokio::task::spawn_blocking(move || output::write_atomic(&dir, &name, &bytes))
        .await
        .map_err(|e| local(format!("writing {file} stopped: {e}")))?
        .map_err(|e| local(format!("cannot write {file}: {e}")))?;
    Ok(size)
}
