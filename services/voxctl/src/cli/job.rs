//! `voxctl job ...`: the command line of durable batch jobs on `voxpool-jobs` (submit, status,
//! wait, items, cancel, download, list, delete). What the commands do is in [`crate::ops::job`].

use std::{path::PathBuf, time::Duration};

use clap::{Args, Subcommand, ValueEnum};

use super::{DEFAULT_JOBS, ProgressArg, positive_duration, tenant};
use crate::format::Format;

/// `voxctl job ...`.
#[derive(Debug, Args)]
pub struct JobArgs {
    /// Jobs service URL, a list `URL,URL,...`, or a DNS name of several replicas.
    #[arg(long, global = true, env = "VOXPOOL_JOBS", default_value = DEFAULT_JOBS)]
    pub jobs: String,
    /// Job subcommand.
    #[command(subcommand)]
    pub command: JobCommand,
}

/// The job subcommands. JOB is `jobs/<id>` or `<id>`.
#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Queue every item of a manifest (voxctl batch's JSON Lines) as one job and print its
    /// name (`jobs/...`). Exit 2, sending nothing, if any line is invalid.
    ///
    /// Card lines are resolved here (the server cannot read local files). Submitting the same
    /// manifest again (same items, tenant, format and sample rate) answers the job the first
    /// submit created, as it is now (said on stderr when it already ran): the default
    /// --request-id is derived from them; give another to run the manifest again.
    Submit(SubmitArgs),
    /// State, item counts, characters, times and, once it ended, the summary location of a job.
    Status {
        /// The job (`jobs/<id>` or `<id>`).
        #[arg(value_parser = job)]
        job: String,
        /// Print the job as JSON (camelCase field names, as the proto JSON mapping).
        #[arg(long)]
        json: bool,
    },
    /// Wait until the job ends, showing its progress. Exit 0 SUCCEEDED, 1 FAILED or
    /// CANCELLED, 124 --timeout passed, 130 interrupted (the job goes on).
    Wait {
        /// The job (`jobs/<id>` or `<id>`).
        #[arg(value_parser = job)]
        job: String,
        /// How often the job is asked for.
        #[arg(long, default_value = "1s", value_parser = positive_duration)]
        interval: Duration,
        /// Stop waiting after this long (exit 124; the job goes on). Default: no limit.
        #[arg(long, value_parser = positive_duration)]
        timeout: Option<Duration>,
        /// How progress is shown on stderr.
        #[arg(long, value_enum, default_value = "auto")]
        progress: ProgressArg,
        /// Period of the plain progress lines.
        #[arg(long, default_value = "10s", value_parser = positive_duration)]
        progress_interval: Duration,
    },
    /// The job's items in submission order: id, state, and the output or the error.
    Items {
        /// The job (`jobs/<id>` or `<id>`).
        #[arg(value_parser = job)]
        job: String,
        /// Only the items in this state (any case: `failed`, `FAILED`).
        #[arg(long, value_enum, ignore_case = true)]
        state: Option<ItemStateArg>,
    },
    /// Cancel the job: queued items end at once, items in flight at their next boundary.
    /// Prints the job's resulting state.
    Cancel {
        /// The job (`jobs/<id>` or `<id>`).
        #[arg(value_parser = job)]
        job: String,
    },
    /// Write the audio of every succeeded item to DIR/<id>.<ext> and a report like voxctl
    /// batch's. Files already there with the item's size are kept, so a re-run resumes.
    /// Exit 0 when every item is ok, 1 otherwise.
    Download {
        /// The job (`jobs/<id>` or `<id>`).
        #[arg(value_parser = job)]
        job: String,
        /// Output directory (created if missing).
        dir: PathBuf,
        /// Where the JSON report goes (default DIR/report.json).
        #[arg(long, value_name = "FILE")]
        report: Option<PathBuf>,
        /// Items downloaded at once.
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
        concurrency: u32,
    },
    /// A tenant's jobs, newest first (every page): name, state, creation time and item counts.
    List {
        /// Whose jobs (default the shared tenant).
        #[arg(long, default_value = "", value_parser = tenant)]
        tenant: String,
    },
    /// Delete a job that has ended: its record, items and audio. A job with items queued or
    /// running is refused: cancel it first.
    Delete {
        /// The job (`jobs/<id>` or `<id>`).
        #[arg(value_parser = job)]
        job: String,
    },
}

/// `voxctl job submit`.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The manifest (JSON Lines, as voxctl batch reads it).
    pub manifest: PathBuf,
    /// Audio format of every item.
    #[arg(long, value_enum, default_value = "wav")]
    pub format: Format,
    /// Sample rate of every item in Hz (0 = the vendor's default).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(i32).range(0..))]
    pub sample_rate: i32,
    /// Traffic class of the items' synthesis (a job never runs as interactive).
    #[arg(long, value_enum, default_value_t = JobPriorityArg::Batch)]
    pub priority: JobPriorityArg,
    /// Tenant of the job and its items (at most 64 characters; default the shared tenant).
    #[arg(long, default_value = "", value_parser = tenant)]
    pub tenant: String,
    /// `http://` or `https://` URL the server POSTs the job to once it ends (signed with the
    /// server's webhook secret).
    #[arg(long, default_value = "", value_parser = webhook_url)]
    pub webhook_url: String,
    /// Idempotency key: the same key and tenant answer the job the first submit created.
    /// Default: derived from the items, tenant, format and sample rate. `""` = none.
    #[arg(long, value_parser = request_id)]
    pub request_id: Option<String>,
    /// How long transient failures (UNAVAILABLE, e.g. during a Redis failover) are retried
    /// with the same request id before giving up (exit 1; the same command later answers the
    /// same job).
    #[arg(long, default_value = "30s", value_parser = positive_duration)]
    pub timeout: Duration,
}

/// `--priority` of a job: the classes a job may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum JobPriorityArg {
    /// The service default class.
    Standard,
    /// Bulk work: served last, within the pool's batch share.
    Batch,
}

impl JobPriorityArg {
    /// The wire value.
    pub fn to_pb(self) -> voxpool_proto::scheduler::v1::Priority {
        use voxpool_proto::scheduler::v1::Priority;
        match self {
            JobPriorityArg::Standard => Priority::Standard,
            JobPriorityArg::Batch => Priority::Batch,
        }
    }
}

/// `voxctl job items --state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ItemStateArg {
    /// Not started yet.
    Queued,
    /// Being synthesized.
    Running,
    /// Audio written.
    Succeeded,
    /// Failed (the error says why).
    Failed,
    /// Cancelled with the job.
    Cancelled,
}

impl ItemStateArg {
    /// The wire value.
    pub fn to_pb(self) -> voxpool_proto::jobs::v1::job_item::State {
        use voxpool_proto::jobs::v1::job_item::State;
        match self {
            ItemStateArg::Queued => State::Queued,
            ItemStateArg::Running => State::Running,
            ItemStateArg::Succeeded => State::Succeeded,
            ItemStateArg::Failed => State::Failed,
            ItemStateArg::Cancelled => State::Cancelled,
        }
    }
}

/// A job name, normalised to `jobs/<id>` ([`crate::ops::job::job_name`]).
fn job(raw: &str) -> Result<String, String> {
    crate::ops::job::job_name(raw)
}

/// Empty, or an `http://` / `https://` URL with a host.
fn webhook_url(raw: &str) -> Result<String, String> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Ok(String::new());
    }
    let rest = raw
        .strip_prefix("https://")
        .or_else(|| raw.strip_prefix("http://"));
    match rest {
        Some(rest)
            if !rest.is_empty() && !rest.starts_with('/') && !raw.contains(char::is_whitespace) =>
        {
            Ok(raw.to_owned())
        }
        _ => Err(
            "use an http:// or https:// URL with a host, e.g. https://hooks.example.com/voxpool"
                .into(),
        ),
    }
}

/// At most 128 characters, none of them control characters (the server's rule).
fn request_id(raw: &str) -> Result<String, String> {
    let chars = raw.chars().count();
    if chars > 128 {
        return Err(format!("at most 128 characters, got {chars}"));
    }
    if raw.chars().any(char::is_control) {
        return Err("no control characters".into());
    }
    Ok(raw.to_owned())
}
