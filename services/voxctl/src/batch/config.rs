//! The options of a batch run, why a run cannot start, and what a finished run returns.

use std::{path::PathBuf, time::Duration};

use crate::{
    breaker::BreakerConfig,
    checkpoint::CheckpointError,
    connect,
    format::Format,
    manifest::ReadError,
    progress::ProgressMode,
    report::{ItemReport, Summary},
    retry::RetryPolicy,
};

/// Everything `voxctl batch` needs.
#[derive(Clone, Debug)]
pub struct BatchConfig {
    /// The JSON Lines manifest.
    pub manifest: PathBuf,
    /// Output directory (created if missing).
    pub out: PathBuf,
    /// Output format.
    pub format: Format,
    /// Output sample rate (0 = vendor default).
    pub sample_rate_hz: i32,
    /// Items in flight at once.
    pub concurrency: usize,
    /// Client-side calls per second (`None` = unlimited).
    pub qps: Option<f64>,
    /// Synthesis URL.
    pub synthesis: String,
    /// Catalog URL used to check pack ids (`None` = no check).
    pub catalog: Option<String>,
    /// Scheduler URL used to check that a pool serves each pack's `ttsModelId` (`None` = no
    /// check; needs `catalog`).
    pub scheduler: Option<String>,
    /// Per-call deadline.
    pub deadline: Duration,
    /// How long the run may go without an item settling or a part coming back before it
    /// ends by itself (exit 1, the rest not started and resumable).
    pub give_up_after: Duration,
    /// Retries.
    pub retry: RetryPolicy,
    /// Circuit breaker tuning.
    pub breaker: BreakerConfig,
    /// Longest text per request; longer items are split.
    pub max_chars: usize,
    /// Traffic class of every call (BATCH by default).
    pub priority: voxpool_proto::scheduler::v1::Priority,
    /// Tenant of every call (empty = the shared tenant).
    pub tenant: String,
    /// How every call uses synthesis's audio cache (USE by default).
    pub cache_policy: voxpool_proto::synthesis::v1::CachePolicy,
    /// Where to write the JSON report.
    pub report: Option<PathBuf>,
    /// Validate the manifest only.
    pub dry_run: bool,
    /// Stop before synthesizing when any manifest line is invalid.
    pub strict: bool,
    /// Redo items that failed in earlier runs.
    pub retry_failed: bool,
    /// Resume even if the checkpoint was made from another manifest or format.
    pub force: bool,
    /// How progress is shown.
    pub progress: ProgressMode,
    /// Client token sent to synthesis and the scheduler (`--token`).
    pub token: voxpool_runtime::auth::ClientToken,
}

impl BatchConfig {
    /// A configuration with the CLI defaults for `manifest` into `out`.
    pub fn new(manifest: impl Into<PathBuf>, out: impl Into<PathBuf>) -> Self {
        Self {
            manifest: manifest.into(),
            out: out.into(),
            format: Format::Wav,
            sample_rate_hz: 0,
            concurrency: 16,
            qps: None,
            synthesis: "http://127.0.0.1:50053".into(),
            catalog: None,
            scheduler: None,
            deadline: Duration::from_secs(60),
            give_up_after: Duration::from_secs(300),
            retry: RetryPolicy::default(),
            breaker: BreakerConfig::default(),
            max_chars: 20_000,
            priority: voxpool_proto::scheduler::v1::Priority::Batch,
            tenant: String::new(),
            cache_policy: voxpool_proto::synthesis::v1::CachePolicy::Use,
            report: None,
            dry_run: false,
            strict: false,
            retry_failed: false,
            force: false,
            progress: ProgressMode::Auto,
            token: voxpool_runtime::auth::ClientToken::none(),
        }
    }
}

/// Why a batch could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// The manifest file is unreadable.
    #[error(transparent)]
    Manifest(#[from] ReadError),
    /// `--strict` and invalid lines.
    #[error("{0} invalid manifest line(s); nothing was synthesized (--strict)")]
    Strict(usize),
    /// The checkpoint refused the run.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The output directory is unusable.
    #[error("output directory {path}: {source}")]
    OutDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A bad service URL.
    #[error(transparent)]
    Url(#[from] connect::UrlError),
    /// A bad option value.
    #[error("{0}")]
    Usage(String),
}

impl BatchError {
    /// The process exit code for this error (2: usage, manifest or checkpoint refusal).
    pub fn exit_code(&self) -> u8 {
        2
    }
}

/// What a finished batch reports.
#[derive(Debug)]
pub struct BatchOutcome {
    /// Totals.
    pub summary: Summary,
    /// Every item.
    pub items: Vec<ItemReport>,
    /// Process exit code: 0 all ok, 1 some item not ok (or the run gave up, see
    /// [`BatchConfig::give_up_after`]), 2 invalid manifest in a dry run, 130 interrupted.
    pub exit_code: u8,
}
