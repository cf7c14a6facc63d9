//! `voxctl job download JOB DIR`: the audio of every SUCCEEDED item, streamed with
//! `ReadJobItemAudio` into `DIR/<id>.<ext>` (written atomically, [`output::write_atomic`]),
//! and the report `voxctl batch` writes ([`Report`], default `DIR/report.json`).
//!
//! A file already in `DIR` with the item's `audio_bytes` size is kept, so a re-run resumes;
//! `DIR` is locked like a batch's output directory (one voxctl at a time), and temporary files
//! a killed run left are removed. In the report an item is `ok` (its file is in place;
//! `resumed` when an earlier run wrote it), `failed` (the item failed, with its `ItemError`'s
//! code and `REASON: message`, or its download failed), or `not_started` (queued, running or
//! cancelled); `line` is its position in the job, `manifest` the job's name. The summary's
//! times, calls and chunks are the job's (start to end, Synthesize calls of its items).
//!
//! Ctrl-C (or SIGTERM) stops it: the files being written are finished or removed (no
//! temporary file stays), it says how many files are in place and how to resume (the same
//! command), and exits 130 without a report.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use backon::BackoffBuilder as _;
use tokio::{sync::Semaphore, task::JoinSet};
use tonic::Status;
use voxpool_proto::jobs::v1::{Job, JobItem, ReadJobItemAudioRequest, job_item};

use super::{Jobs, is_over, item_name, transient, view};
use crate::{
    checkpoint::LOCK_NAME,
    console::human_bytes,
    format::Format,
    ops::OpError,
    output,
    report::{self, ItemReport, Report, Status as ItemStatus, Summary},
    retry::CallError,
};

/// What `voxctl job download` writes where.
#[derive(Clone, Debug)]
pub struct DownloadOptions {
    /// Output directory.
    pub dir: PathBuf,
    /// The report's path (default `DIR/report.json`).
    pub report: Option<PathBuf>,
    /// Items downloaded at once.
    pub concurrency: usize,
}

/// What became of a SUCCEEDED item's file here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fetched {
    /// Already in `DIR` with the right size (an earlier run).
    Present,
    /// Written by this run (bytes).
    Written(u64),
    /// Not written: code name and why.
    Failed(String, String),
}

/// The report entry of the `position`-th (1-based) item; `fetched` is what happened to its
/// file (`None` for an item that did not succeed).
pub fn item_report(
    position: usize,
    item: &JobItem,
    format: Format,
    fetched: Option<&Fetched>,
) -> ItemReport {
    let state = view::item_state(item);
    let mut report = ItemReport {
        id: Some(item.id.clone()),
        line: position,
        status: ItemStatus::NotStarted,
        resumed: false,
        attempts: u32::try_from(item.attempts).unwrap_or(0),
        keys: if item.key_id.is_empty() {
            vec![]
        } else {
            vec![item.key_id.clone()]
        },
        code: None,
        error: None,
        file: None,
        parts: 1,
        chars: usize::try_from(item.characters).unwrap_or(0),
        chunks: u64::try_from(item.chunks).unwrap_or(0),
        cached_chunks: u64::try_from(item.cached_chunks).unwrap_or(0),
    };
    match (state, fetched) {
        (job_item::State::Succeeded, Some(Fetched::Present | Fetched::Written(_))) => {
            report.status = ItemStatus::Ok;
            report.resumed = matches!(fetched, Some(Fetched::Present));
            report.file = Some(output::file_name(&item.id, format));
        }
        (job_item::State::Succeeded, Some(Fetched::Failed(code, error))) => {
            report.status = ItemStatus::Failed;
            report.code = Some(code.clone());
            report.error = Some(error.clone());
        }
        (job_item::State::Failed, _) => {
            report.status = ItemStatus::Failed;
            let error = item.error.clone().unwrap_or_default();
            report.code = Some(if error.code.is_empty() {
                "UNKNOWN".into()
            } else {
                error.code
            });
            report.error = Some(match error.reason.as_str() {
                "" => error.message,
                reason => format!("{reason}: {}", error.message),
            });
        }
        _ => {}
    }
    report
}

/// The summary of a job's report: counts from `items`, times and calls from the job.
pub fn summarize(job: &Job, items: &[ItemReport], now: SystemTime) -> Summary {
    let end = job.end_time.unwrap_or_else(|| now.into());
    let wall = view::seconds_between(job.start_time.as_ref(), Some(&end));
    let ended: Vec<&ItemReport> = items
        .iter()
        .filter(|r| r.status != ItemStatus::NotStarted)
        .collect();
    let calls: u64 = items.iter().map(|r| u64::from(r.attempts)).sum();
    let mut summary = Summary {
        calls,
        retries: items
            .iter()
            .map(|r| u64::from(r.attempts.saturating_sub(1)))
            .sum(),
        chunks: items.iter().map(|r| r.chunks).sum(),
        cached_chunks: items.iter().map(|r| r.cached_chunks).sum(),
        items_per_second: ended.len() as f64 / wall.max(1e-9),
        chars_per_second: u64::try_from(job.characters_succeeded).unwrap_or(0) as f64
            / wall.max(1e-9),
        ..Summary::default()
    };
    if wall == 0.0 {
        (summary.items_per_second, summary.chars_per_second) = (0.0, 0.0);
    }
    report::tally(items, Duration::from_secs_f64(wall), &mut summary);
    summary
}

/// The size of `item`'s file in `dir` under its final name, if there is one (files get that
/// name only once whole: [`output::write_atomic`]).
fn on_disk(dir: &std::path::Path, item: &JobItem, format: Format) -> Option<u64> {
    std::fs::metadata(dir.join(output::file_name(&item.id, format)))
        .ok()
        .filter(std::fs::Metadata::is_file)
        .map(|m| m.len())
}

/// Whether `item`'s audio is in `dir` with the size the job says: no need to fetch it again.
fn present(dir: &std::path::Path, item: &JobItem, format: Format) -> bool {
    on_disk(dir, item, format).is_some_and(|n| item.audio_bytes > 0 && n == item.audio_bytes as u64)
}

/// Downloads `name`'s audio into the directory (see the module doc); returns the exit code.
pub async fn download(jobs: &Jobs, name: &str, options: &DownloadOptions) -> Result<u8, OpError> {
    let started = Instant::now();
    // Listening from the start: a Ctrl-C never kills the process mid-write.
    let mut interrupted = Interrupt::listen();
    not_a_directory(&options.dir)?;
    let job = jobs.get(name).await?;
    let format = Format::from_pb(job.format).ok_or_else(|| {
        OpError::failed(format!(
            "{name} has an audio format this voxctl does not know: upgrade voxctl"
        ))
    })?;
    let items = jobs.items(name, None).await?;
    let dir = &options.dir;
    let io =
        |what: &str, e: std::io::Error| OpError::failed(format!("{what} {}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(|e| io("cannot create", e))?;
    let _lock = lock(dir)?;
    let stale = output::remove_stale_temps(dir).map_err(|e| io("cannot clean", e))?;
    if stale > 0 {
        crate::say!("voxctl: removed {stale} unfinished temporary file(s) of an interrupted run");
    }
    let mut tasks = JoinSet::new();
    let slots = Arc::new(Semaphore::new(options.concurrency.max(1)));
    let mut fetched: Vec<Option<Fetched>> = vec![None; items.len()];
    for (index, item) in items.iter().enumerate() {
        if view::item_state(item) != job_item::State::Succeeded {
            continue;
        }
        let file = output::file_name(&item.id, format);
        if present(dir, item, format) {
            fetched[index] = Some(Fetched::Present);
            continue;
        }
        let (jobs, slots, dir) = (jobs.clone(), Arc::clone(&slots), dir.clone());
        let (item_name, expected) = (item_name(name, &item.id), item.audio_bytes);
        tasks.spawn(async move {
            let _slot = slots.acquire_owned().await;
            (index, fetch(&jobs, &item_name, expected, &dir, &file).await)
        });
    }
    loop {
        let done = tokio::select! {
            done = tasks.join_next() => done,
            () = interrupted.wait() => {
                // A write under way runs to its end (the runtime waits for it at exit): its
                // file is then whole under its final name, or its temporary file is gone.
                // What counts as complete is what is on disk: a task aborted just after it
                // renamed its file into place has no result to say so.
                tasks.abort_all();
                while tasks.join_next().await.is_some() {}
                let complete = items
                    .iter()
                    .filter(|item| view::item_state(item) == job_item::State::Succeeded)
                    .filter(|item| {
                        on_disk(dir, item, format).is_some_and(|n| {
                            item.audio_bytes <= 0 || n == item.audio_bytes as u64
                        })
                    })
                    .count();
                crate::say!(
                    "voxctl: interrupted: {complete} file(s) complete in {}; run `voxctl job download {name} {}` again to resume (complete files are kept)",
                    dir.display(),
                    dir.display()
                );
                return Ok(130);
            }
        };
        match done {
            None => break,
            Some(Ok((index, outcome))) => fetched[index] = Some(outcome),
            Some(Err(e)) => crate::say!("voxctl: a download task failed: {e}"),
        }
    }
    let _ = output::sync_dir(dir);
    let reports: Vec<ItemReport> = items
        .iter()
        .enumerate()
        .map(|(i, item)| item_report(i + 1, item, format, fetched[i].as_ref()))
        .collect();
    let summary = summarize(&job, &reports, SystemTime::now());
    let path = options
        .report
        .clone()
        .unwrap_or_else(|| dir.join("report.json"));
    let doc = Report {
        manifest: name.to_owned(),
        manifest_digest: String::new(),
        out: dir.display().to_string(),
        summary: summary.clone(),
        items: reports,
    };
    let unwritten = doc.write(&path).err().map(|e| {
        OpError::failed(format!(
            "cannot write the report {}: {e}: give --report a file in a directory you can write to (the audio files are in {})",
            path.display(),
            dir.display()
        ))
    });
    crate::say!("{}", report::render(&summary));
    let written: Vec<u64> = fetched
        .iter()
        .filter_map(|f| match f {
            Some(Fetched::Written(n)) => Some(*n),
            _ => None,
        })
        .collect();
    let present = fetched
        .iter()
        .filter(|f| matches!(f, Some(Fetched::Present)))
        .count();
    crate::say!(
        "voxctl: downloaded {} file(s) ({}) into {} in {:.1}s, {present} already there{}",
        written.len(),
        human_bytes(written.iter().sum()),
        dir.display(),
        started.elapsed().as_secs_f64(),
        match unwritten {
            None => format!("; report {}", path.display()),
            Some(_) => "; no report".to_owned(),
        }
    );
    if !is_over(&job) {
        crate::say!(
            "voxctl: {name} is {}: the items not done yet are reported not_started; run the same command once it ends (voxctl job wait {name})",
            view::job_state(&job).as_str_name()
        );
    }
    match unwritten {
        Some(error) => Err(error),
        None => Ok(u8::from(!summary.all_ok())),
    }
}

/// Ctrl-C and SIGTERM, listened to from [`Interrupt::listen`] on.
struct Interrupt {
    #[cfg(unix)]
    signals: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl Interrupt {
    fn listen() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let signals = signal(SignalKind::interrupt())
                .and_then(|int| Ok((int, signal(SignalKind::terminate())?)))
                .ok();
            Self { signals }
        }
        #[cfg(not(unix))]
        {
            Self {}
        }
    }

    /// Returns at the next Ctrl-C or SIGTERM.
    async fn wait(&mut self) {
        #[cfg(unix)]
        if let Some((int, term)) = &mut self.signals {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Refuses a `dir` that exists but is no directory (a file, or a link to one), before anything
/// is asked for (exit 2).
fn not_a_directory(dir: &Path) -> Result<(), OpError> {
    match std::fs::metadata(dir) {
        Ok(meta) if !meta.is_dir() => Err(OpError::usage(format!(
            "{} is not a directory: give a directory to download into (it is created if missing)",
            dir.display()
        ))),
        _ => Ok(()),
    }
}

/// Takes `dir` like a batch run does (`.voxctl.lock`), so no other voxctl writes there.
fn lock(dir: &Path) -> Result<std::fs::File, OpError> {
    let path = dir.join(LOCK_NAME);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| OpError::failed(format!("cannot open {}: {e}", path.display())))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(OpError::failed(format!(
            "another voxctl run is writing to {}; wait for it or use another directory",
            dir.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(OpError::failed(format!(
            "cannot lock {}: {e}",
            path.display()
        ))),
    }
}

/// Reads one item's audio (retrying transient failures, the whole stream again) and writes it
/// to `dir/file`.
async fn fetch(jobs: &Jobs, name: &str, expected: i64, dir: &Path, file: &str) -> Fetched {
    let failed = |status: &Status| {
        Fetched::Failed(
            crate::retry::code_name(status.code()),
            jobs.error("ReadJobItemAudio", name, status).message,
        )
    };
    let mut ceilings = jobs.policy.ceilings().build();
    let audio = loop {
        match read(jobs, name).await {
            Ok(audio) => break audio,
            Err(status) if transient(&status) => match ceilings.next() {
                Some(c) => {
                    let delay = jobs.policy.delay(c, &CallError::from_status(&status));
                    tokio::time::sleep(delay).await;
                }
                None => return failed(&status),
            },
            Err(status) => return failed(&status),
        }
    };
    if expected > 0 && audio.len() as u64 != expected as u64 {
        return Fetched::Failed(
            "DATA_LOSS".into(),
            format!(
                "{name}: got {} bytes, the job says {expected}: run the download again",
                audio.len()
            ),
        );
    }
    let (dir, file_name, size) = (dir.to_owned(), file.to_owned(), audio.len() as u64);
    match tokio::task::spawn_blocking(move || output::write_atomic(&dir, &file_name, &audio)).await
    {
        Ok(Ok(())) => Fetched::Written(size),
        Ok(Err(e)) => Fetched::Failed("IO".into(), format!("cannot write {file}: {e}")),
        Err(e) => Fetched::Failed("IO".into(), format!("cannot write {file}: {e}")),
    }
}

/// The whole audio stream of one item.
async fn read(jobs: &Jobs, name: &str) -> Result<Vec<u8>, Status> {
    let mut client = jobs.client.clone();
    let mut stream = client
        .read_job_item_audio(ReadJobItemAudioRequest {
            name: name.to_owned(),
        })
        .await?
        .into_inner();
    let mut audio = Vec::new();
    while let Some(chunk) = stream.message().await? {
        audio.extend_from_slice(&chunk.data);
    }
    Ok(audio)
}
