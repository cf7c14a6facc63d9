//! The command line (clap derive). Service addresses and the tokens also come from the
//! environment (`VOXPOOL_SYNTHESIS`, `VOXPOOL_CATALOG`, `VOXPOOL_SCHEDULER`, `VOXPOOL_JOBS`,
//! `VOXPOOL_CLIENT_TOKEN`, `VOXPOOL_ADMIN_TOKEN`), and so does `--cache-policy`
//! (`VOXPOOL_CACHE_POLICY`). `voxctl job`'s arguments are in [`job`].

use std::{path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::format::Format;

mod clones;
mod job;
mod ops;
mod usage;
pub use clones::{CloneArgs, ClonesArgs, ImportArgs};
pub use job::{ItemStateArg, JobArgs, JobCommand, JobPriorityArg, SubmitArgs};
pub use ops::{
    AdminToken, CacheArgs, CacheCommand, CreatePackArgs, PacksArgs, PacksCommand, PoolCommand,
    PoolStatusArgs,
};
pub use usage::{UsageArgs, UsageByArg};

/// Default Synthesis address.
pub const DEFAULT_SYNTHESIS: &str = "http://127.0.0.1:50053";
/// Default VoiceCatalog address.
pub const DEFAULT_CATALOG: &str = "http://127.0.0.1:50052";
/// Default PoolScheduler address.
pub const DEFAULT_SCHEDULER: &str = "http://127.0.0.1:50051";
/// Default Jobs address (`voxpool-jobs`).
pub const DEFAULT_JOBS: &str = "http://127.0.0.1:50054";

/// voxpool's command-line client: batch synthesis with resume, and operator commands.
#[derive(Debug, Parser)]
#[command(name = "voxctl", version)]
pub struct Cli {
    /// Client token sent to synthesis, the scheduler and jobs (one of their `[[client_tokens]]`),
    /// needed when they authenticate callers. Prefer the environment variable: a value given
    /// on the command line shows in `ps`.
    #[arg(
        long,
        global = true,
        env = "VOXPOOL_CLIENT_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Synthesize every item of a JSON Lines manifest into DIR/<id>.<ext>, resumably.
    ///
    /// Each manifest line is {"id", "text"} plus one of "packId", "snapshot" (a frozen snapshot
    /// object) or "card" (a card file whose data.extensions.airi.modules.speech.voicePack holds
    /// one; relative to the manifest). Re-running the same command resumes: finished items are
    /// skipped. Exit code: 0 every item ok, 1 some item failed or is invalid, 2 usage /
    /// manifest refused (--strict, --dry-run with problems, checkpoint of another manifest),
    /// 130 interrupted.
    Batch(BatchArgs),
    /// Scheduler pools and budgets (also `voxctl pools`; without a subcommand: `status`).
    #[command(visible_alias = "pools", args_conflicts_with_subcommands = true)]
    Pool {
        /// Pool subcommand.
        #[command(subcommand)]
        command: Option<PoolCommand>,
        /// `status`'s arguments, when no subcommand is given.
        #[command(flatten)]
        status: PoolStatusArgs,
    },
    /// Voice packs in the catalog (also `voxctl pack`).
    #[command(visible_alias = "pack")]
    Packs(PacksArgs),
    /// Synthesize one text into one file.
    Synth(SynthArgs),
    /// Synthesis's audio cache (admin): what it holds, and purging a pack or snapshot.
    Cache(CacheArgs),
    /// Durable batch jobs on voxpool-jobs: submit a manifest, watch it, download the audio.
    Job(JobArgs),
    /// The usage ledger (admin): requests, characters, cached characters, audio and cost per
    /// tenant, optionally split by tier, pack, pool or day.
    Usage(UsageArgs),
}

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProgressArg {
    /// A bar on a terminal, plain lines otherwise.
    Auto,
    /// Always the bar.
    Bar,
    /// Plain lines every --progress-interval.
    Lines,
    /// Only breaker changes and the summary.
    Quiet,
}

/// `voxctl batch`.
#[derive(Debug, Args)]
pub struct BatchArgs {
    /// The manifest (JSON Lines).
    pub manifest: PathBuf,
    /// Output directory (created if missing); also holds the checkpoint.
    #[arg(long)]
    pub out: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "wav")]
    pub format: Format,
    /// Output sample rate in Hz (0 = the vendor's default).
    #[arg(long, default_value_t = 0)]
    pub sample_rate: i32,
    /// Items synthesized at once.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub concurrency: u32,
    /// Client-side limit of Synthesize calls per second (retries included; fractions allowed).
    #[arg(long)]
    pub qps: Option<f64>,
    /// Synthesis service URL, a list `URL,URL,...`, or a DNS name of several replicas.
    #[arg(long, env = "VOXPOOL_SYNTHESIS", default_value = DEFAULT_SYNTHESIS)]
    pub synthesis: String,
    /// Catalog URL, used to check the manifest's pack ids before running.
    #[arg(long, env = "VOXPOOL_CATALOG", default_value = DEFAULT_CATALOG)]
    pub catalog: String,
    /// Scheduler URL, used to check that a pool serves each pack's ttsModelId before running.
    /// Without it the pools are the ones synthesis (--synthesis) lists as serving.
    #[arg(long, env = "VOXPOOL_SCHEDULER")]
    pub scheduler: Option<String>,
    /// Do not check pack ids against the catalog, nor their pools against the scheduler
    /// (synthesis still refuses unknown packs).
    #[arg(long)]
    pub no_pack_check: bool,
    /// Deadline of one Synthesize call (e.g. 30s, 2m).
    #[arg(long, default_value = "60s", value_parser = positive_duration)]
    pub deadline: Duration,
    /// End the run by itself when for this long no item finished and no part came back (a
    /// service that stays down): exit 1, the items not done reported as not started, and the
    /// same command resumes them.
    #[arg(long, default_value = "5m", value_parser = positive_duration)]
    pub give_up_after: Duration,
    /// Most calls per request, first included (a split item makes one request per part).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_attempts: u32,
    /// First backoff ceiling between retries (full jitter below it; RetryInfo is a floor).
    #[arg(long, default_value = "200ms", value_parser = positive_duration)]
    pub backoff_base: Duration,
    /// Highest backoff ceiling.
    #[arg(long, default_value = "20s", value_parser = positive_duration)]
    pub backoff_max: Duration,
    /// Longest text per request; longer items are split at paragraphs, then sentences, and
    /// joined into one file. Match the server's max_text_chars.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_chars: u32,
    /// Traffic class of every call: bulk work waits behind live traffic and holds at most the
    /// pool's batch_max_share of its capacity.
    #[arg(long, value_enum, default_value_t = PriorityArg::Batch)]
    pub priority: PriorityArg,
    /// Tenant the calls are for (fairness inside the class; at most 64 characters).
    #[arg(long, default_value = "", value_parser = tenant)]
    pub tenant: String,
    /// How the calls use synthesis's audio cache.
    #[arg(long, value_enum, env = "VOXPOOL_CACHE_POLICY", default_value_t = CachePolicyArg::Use)]
    pub cache_policy: CachePolicyArg,
    /// Write a JSON report (every item: status, attempts, keys, error) to FILE.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Validate the manifest only (cards, snapshots, pack ids); synthesize nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Stop before synthesizing anything if any manifest line is invalid.
    #[arg(long)]
    pub strict: bool,
    /// Also redo items that failed in earlier runs (they are skipped by default).
    #[arg(long)]
    pub retry_failed: bool,
    /// Resume even if DIR was produced from another manifest or format (changed items are
    /// redone, unchanged finished ones skipped).
    #[arg(long)]
    pub force: bool,
    /// How progress is shown on stderr.
    #[arg(long, value_enum, default_value = "auto")]
    pub progress: ProgressArg,
    /// Period of the plain progress lines.
    #[arg(long, default_value = "10s", value_parser = positive_duration)]
    pub progress_interval: Duration,
    /// Circuit breaker: recent calls considered.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub breaker_window: u32,
    /// Circuit breaker: share (0..1) of UNAVAILABLE among recent calls that pauses the batch.
    #[arg(long, default_value_t = 0.5, value_parser = share, allow_hyphen_values = true)]
    pub breaker_ratio: f64,
    /// Circuit breaker: first pause before a probe (doubles per failed probe, up to 30s).
    #[arg(long, default_value = "1s", value_parser = positive_duration)]
    pub breaker_pause: Duration,
}

/// `voxctl synth`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("voice").required(true).args(["pack", "snapshot", "card"])))]
pub struct SynthArgs {
    /// The text (`-` reads standard input).
    pub text: String,
    /// Voice pack id.
    #[arg(long)]
    pub pack: Option<String>,
    /// A snapshot JSON file.
    #[arg(long)]
    pub snapshot: Option<PathBuf>,
    /// A card JSON file with a bound voice pack.
    #[arg(long)]
    pub card: Option<PathBuf>,
    /// Output file.
    #[arg(short = 'o', long = "out")]
    pub out: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "wav")]
    pub format: Format,
    /// Output sample rate in Hz (0 = the vendor's default).
    #[arg(long, default_value_t = 0)]
    pub sample_rate: i32,
    /// Synthesis service URL, a list `URL,URL,...`, or a DNS name of several replicas.
    #[arg(long, env = "VOXPOOL_SYNTHESIS", default_value = DEFAULT_SYNTHESIS)]
    pub synthesis: String,
    /// Deadline of one call.
    #[arg(long, default_value = "60s", value_parser = positive_duration)]
    pub deadline: Duration,
    /// Most calls, first included.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_attempts: u32,
    /// Longest text per request.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_chars: u32,
    /// Traffic class of the calls.
    #[arg(long, value_enum, default_value_t = PriorityArg::Standard)]
    pub priority: PriorityArg,
    /// Tenant the calls are for (at most 64 characters).
    #[arg(long, default_value = "", value_parser = tenant)]
    pub tenant: String,
    /// How the calls use synthesis's audio cache.
    #[arg(long, value_enum, env = "VOXPOOL_CACHE_POLICY", default_value_t = CachePolicyArg::Use)]
    pub cache_policy: CachePolicyArg,
    /// How progress is shown on stderr while a text of several parts is spoken.
    #[arg(long, value_enum, default_value = "auto")]
    pub progress: ProgressArg,
    /// Period of the plain progress lines.
    #[arg(long, default_value = "10s", value_parser = positive_duration)]
    pub progress_interval: Duration,
    /// Go on past 1 GiB of audio (held in memory until the file is written); the format's
    /// own limit (WAV: 4 GiB) still holds.
    #[arg(long)]
    pub force: bool,
    /// Voices with reference clips: speak with the clip tagged this emotion.
    #[arg(long, default_value = "")]
    pub emotion: String,
    /// Voices with reference clips: seeds the pick among them (and the server's sampling);
    /// default a random seed, the same for every part of the text.
    #[arg(long)]
    pub seed: Option<u64>,
}

/// A duration above zero (`200ms`, `30s`, `2m`): a zero period or deadline would spin or fail
/// every call.
fn positive_duration(raw: &str) -> Result<Duration, String> {
    match humantime::parse_duration(raw) {
        Ok(d) if d.is_zero() => Err("must be above zero (e.g. 500ms, 30s, 2m)".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(format!("{e} (e.g. 500ms, 30s, 2m)")),
    }
}

/// A tenant as the scheduler accepts it ([`voxpool_domain::contract::check_tenant`]).
fn tenant(raw: &str) -> Result<String, String> {
    voxpool_domain::contract::check_tenant(raw)
        .map(|()| raw.to_owned())
        .map_err(|p| p.to_string())
}

/// A value that is not blank.
fn non_empty(raw: &str) -> Result<String, String> {
    let value = raw.trim();
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    Ok(value.to_owned())
}

/// `sha256:` and 64 hex digits, as a snapshot's digest is written (hex lowercased).
fn snapshot_digest(raw: &str) -> Result<String, String> {
    let hex = raw.trim().strip_prefix("sha256:").unwrap_or_default();
    if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(format!("sha256:{}", hex.to_ascii_lowercase()))
    } else {
        Err("use sha256:<64 hex digits>, a snapshot's digest".into())
    }
}

/// A share above 0 and at most 1.
fn share(raw: &str) -> Result<f64, String> {
    match raw.parse::<f64>() {
        Ok(r) if r > 0.0 && r <= 1.0 => Ok(r),
        Ok(r) => Err(format!("must be above 0 and at most 1, got {r}")),
        Err(e) => Err(format!("{e}: a number above 0 and at most 1, e.g. 0.5")),
    }
}

/// `--priority`: the scheduler's traffic classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PriorityArg {
    /// Live traffic: served first.
    Interactive,
    /// The service default.
    Standard,
    /// Bulk work: served last, within the pool's batch share.
    Batch,
}

impl PriorityArg {
    /// The wire value.
    pub fn to_pb(self) -> voxpool_proto::scheduler::v1::Priority {
        use voxpool_proto::scheduler::v1::Priority;
        match self {
            PriorityArg::Interactive => Priority::Interactive,
            PriorityArg::Standard => Priority::Standard,
            PriorityArg::Batch => Priority::Batch,
        }
    }
}

/// `--cache-policy`: how a call uses synthesis's audio cache (per text chunk). A pool whose
/// config turns the cache off never uses it, whatever the call asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CachePolicyArg {
    /// Serve chunks found in the cache; synthesize and store the others.
    Use,
    /// Synthesize every chunk anew and replace what the cache holds.
    Refresh,
    /// Neither read nor write the cache.
    Bypass,
}

impl CachePolicyArg {
    /// The wire value.
    pub fn to_pb(self) -> voxpool_proto::synthesis::v1::CachePolicy {
        use voxpool_proto::synthesis::v1::CachePolicy;
        match self {
            CachePolicyArg::Use => CachePolicy::Use,
            CachePolicyArg::Refresh => CachePolicy::Refresh,
            CachePolicyArg::Bypass => CachePolicy::Bypass,
        }
    }
}

#[cfg(test)]
mod tests;
