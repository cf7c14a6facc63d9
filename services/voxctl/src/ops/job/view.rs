//! What `voxctl job` prints: a job's readable block (`status`), its JSON form (`status
//! --json`: the proto JSON mapping's camelCase names, every field present, enums by name,
//! timestamps in RFC 3339 UTC, numbers as numbers), the item table (`items`) and the one-line
//! progress and outcome of a job.

use std::{collections::BTreeMap, fmt::Write as _};

use serde::Serialize;
use voxpool_proto::{
    jobs::v1::{ItemCounts, ItemError, Job, JobItem, job, job_item},
    prost_types::Timestamp,
    scheduler::v1::Priority,
    synthesis::v1::AudioFormat,
};

use crate::console::{pad, table};

/// The job's state (UNSPECIFIED for a value this voxctl does not know).
pub fn job_state(job: &Job) -> job::State {
    job::State::try_from(job.state).unwrap_or(job::State::Unspecified)
}

/// The item's state (UNSPECIFIED for a value this voxctl does not know).
pub fn item_state(item: &JobItem) -> job_item::State {
    job_item::State::try_from(item.state).unwrap_or(job_item::State::Unspecified)
}

/// RFC 3339 in UTC (`2026-12-03T10:00:00Z`), or `None` for an unset or invalid time.
pub fn time(ts: Option<&Timestamp>) -> Option<String> {
    let ts = ts?;
    let nanos = u32::try_from(ts.nanos).ok()?;
    chrono::DateTime::from_timestamp(ts.seconds, nanos)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
}

/// Seconds from `from` to `to` (0 when either is unset or `to` is earlier).
pub fn seconds_between(from: Option<&Timestamp>, to: Option<&Timestamp>) -> f64 {
    match (from, to) {
        (Some(a), Some(b)) => {
            let secs = (b.seconds - a.seconds) as f64 + f64::from(b.nanos - a.nanos) / 1e9;
            secs.max(0.0)
        }
        _ => 0.0,
    }
}

/// Text from a server (an item's error message) made safe to print: control characters
/// escaped, so a message cannot move the cursor or rewrite the terminal.
pub fn printable(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

/// `CODE REASON: message`, or `CODE: message` without a reason.
pub fn describe_error(error: &ItemError) -> String {
    let head = match error.reason.as_str() {
        "" => error.code.clone(),
        reason => format!("{} {reason}", error.code),
    };
    format!("{}: {}", printable(&head), printable(&error.message))
}

fn counts(job: &Job) -> ItemCounts {
    job.item_counts.unwrap_or_default()
}

/// `80/120 ended · ok 80 · failed 0 · cancelled 0 · running 4 · queued 36`.
pub fn progress_line(job: &Job) -> String {
    let c = counts(job);
    format!(
        "{}/{} ended · ok {} · failed {} · cancelled {} · running {} · queued {}",
        c.succeeded + c.failed + c.cancelled,
        job.total_items,
        c.succeeded,
        c.failed,
        c.cancelled,
        c.running,
        c.queued
    )
}

/// The readable block of `voxctl job status`.
pub fn render_status(job: &Job) -> String {
    let c = counts(job);
    let none = || "-".to_owned();
    let format = AudioFormat::try_from(job.format).map_or("?", |f| f.as_str_name());
    let rate = match job.sample_rate_hz {
        0 => "the vendor's sample rate".to_owned(),
        hz => format!("{hz} Hz"),
    };
    let cached = match job.cached_items {
        0 => String::new(),
        n => format!("; {n} served from the audio cache"),
    };
    let mut fields = vec![
        ("job", job.name.clone()),
        ("state", job_state(job).as_str_name().to_owned()),
        (
            "items",
            format!(
                "{} total: {} queued, {} running, {} succeeded, {} failed, {} cancelled{cached}",
                job.total_items, c.queued, c.running, c.succeeded, c.failed, c.cancelled,
            ),
        ),
        (
            "characters",
            format!(
                "{} ({} of succeeded items)",
                job.characters, job.characters_succeeded
            ),
        ),
        (
            "created",
            time(job.create_time.as_ref()).unwrap_or_else(none),
        ),
        (
            "started",
            time(job.start_time.as_ref()).unwrap_or_else(none),
        ),
        ("ended", time(job.end_time.as_ref()).unwrap_or_else(none)),
        (
            "expires",
            time(job.expire_time.as_ref()).unwrap_or_else(none),
        ),
        (
            "tenant",
            match job.tenant.as_str() {
                "" => "(shared)".to_owned(),
                t => t.to_owned(),
            },
        ),
        (
            "priority",
            Priority::try_from(job.priority)
                .map_or("?", |p| p.as_str_name())
                .to_owned(),
        ),
        ("audio", format!("{format}, {rate}")),
        (
            "request id",
            if job.request_id.is_empty() {
                none()
            } else {
                job.request_id.clone()
            },
        ),
        (
            "webhook",
            if job.webhook_host.is_empty() {
                none()
            } else {
                job.webhook_host.clone()
            },
        ),
    ];
    // summary.json is written once the job has ended; before, its URI names nothing.
    if has_ended(job) && !job.summary_uri.is_empty() {
        fields.push(("summary", job.summary_uri.clone()));
    }
    let mut out = String::new();
    for (name, value) in &fields {
        let _ = writeln!(out, "{} {}", pad(name, 11), printable(value));
    }
    out.truncate(out.trim_end().len());
    out
}

/// Whether the job reached its terminal state (SUCCEEDED, FAILED, or CANCELLED with its items
/// in flight ended: `end_time` set).
pub fn has_ended(job: &Job) -> bool {
    matches!(
        job_state(job),
        job::State::Succeeded | job::State::Failed | job::State::Cancelled
    ) && job.end_time.is_some()
}

/// The `voxctl job list` table: JOB, STATE, CREATED (UTC), ITEMS and the count of each item
/// state.
pub fn render_jobs(jobs: &[Job]) -> String {
    let rows: Vec<[String; 9]> = jobs
        .iter()
        .map(|job| {
            let c = counts(job);
            [
                printable(&job.name),
                job_state(job).as_str_name().to_owned(),
                time(job.create_time.as_ref()).unwrap_or_else(|| "-".to_owned()),
                job.total_items.to_string(),
                c.succeeded.to_string(),
                c.failed.to_string(),
                c.cancelled.to_string(),
                c.running.to_string(),
                c.queued.to_string(),
            ]
        })
        .collect();
    table(
        &[
            "JOB",
            "STATE",
            "CREATED",
            "ITEMS",
            "OK",
            "FAILED",
            "CANCELLED",
            "RUNNING",
            "QUEUED",
        ],
        &rows,
    )
}

/// `voxctl job status --json`: the job with the proto JSON mapping's field names.
#[derive(Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobJson {
    name: String,
    state: &'static str,
    item_counts: CountsJson,
    characters: i64,
    characters_succeeded: i64,
    create_time: Option<String>,
    start_time: Option<String>,
    end_time: Option<String>,
    expire_time: Option<String>,
    tenant: String,
    priority: &'static str,
    format: &'static str,
    sample_rate_hz: i32,
    request_id: String,
    webhook_host: String,
    summary_uri: String,
    total_items: i32,
    cached_items: i32,
}

/// `itemCounts`.
#[derive(Debug, PartialEq, Serialize)]
struct CountsJson {
    queued: i32,
    running: i32,
    succeeded: i32,
    failed: i32,
    cancelled: i32,
}

impl JobJson {
    /// The JSON form of `job`.
    pub fn new(job: &Job) -> Self {
        let c = counts(job);
        Self {
            name: job.name.clone(),
            state: job_state(job).as_str_name(),
            item_counts: CountsJson {
                queued: c.queued,
                running: c.running,
                succeeded: c.succeeded,
                failed: c.failed,
                cancelled: c.cancelled,
            },
            characters: job.characters,
            characters_succeeded: job.characters_succeeded,
            create_time: time(job.create_time.as_ref()),
            start_time: time(job.start_time.as_ref()),
            end_time: time(job.end_time.as_ref()),
            expire_time: time(job.expire_time.as_ref()),
            tenant: job.tenant.clone(),
            priority: Priority::try_from(job.priority)
                .unwrap_or(Priority::Unspecified)
                .as_str_name(),
            format: AudioFormat::try_from(job.format)
                .unwrap_or(AudioFormat::Unspecified)
                .as_str_name(),
            sample_rate_hz: job.sample_rate_hz,
            request_id: job.request_id.clone(),
            webhook_host: job.webhook_host.clone(),
            summary_uri: job.summary_uri.clone(),
            total_items: job.total_items,
            cached_items: job.cached_items,
        }
    }
}

/// The `voxctl job items` table: ID, STATE, and the output (SUCCEEDED), the error (FAILED) or
/// the attempts so far (RUNNING).
pub fn render_items(items: &[JobItem]) -> String {
    let rows: Vec<[String; 3]> = items
        .iter()
        .map(|item| {
            let state = item_state(item);
            let detail = match (state, &item.error) {
                (job_item::State::Succeeded, _) => printable(&item.output_uri),
                (_, Some(error)) => describe_error(error),
                (job_item::State::Running, None) if item.attempts > 0 => {
                    format!("{} attempt(s) so far", item.attempts)
                }
                _ => String::new(),
            };
            [printable(&item.id), state.as_str_name().to_owned(), detail]
        })
        .collect();
    table(&["ID", "STATE", "OUTPUT / ERROR"], &rows)
}

/// `N queued, N running, …` of the items listed (zero counts left out), for stderr.
pub fn tally_states(items: &[JobItem]) -> String {
    let mut by_state: BTreeMap<i32, usize> = BTreeMap::new();
    for item in items {
        *by_state.entry(item_state(item) as i32).or_default() += 1;
    }
    by_state
        .into_iter()
        .map(|(state, n)| {
            let name = job_item::State::try_from(state).unwrap_or(job_item::State::Unspecified);
            format!("{n} {}", name.as_str_name().to_ascii_lowercase())
        })
        .collect::<Vec<_>>()
        .join(", ")
}
