//! The operator subcommands: `voxctl pool`, `voxctl packs`, `voxctl cache`, and the admin token
//! they share.

use std::time::Duration;

use clap::{Args, Subcommand};

use super::{
    DEFAULT_CATALOG, DEFAULT_SCHEDULER, DEFAULT_SYNTHESIS, non_empty, positive_duration,
    snapshot_digest,
};

/// `--admin-token` (env `VOXPOOL_ADMIN_TOKEN`), the bearer token of the admin RPCs: one
/// definition for every subcommand that sends it.
#[derive(Debug, Args)]
pub struct AdminToken {
    /// Admin bearer token. Prefer the environment variable: a value given on the command line
    /// shows in `ps`.
    #[arg(
        long = "admin-token",
        env = "VOXPOOL_ADMIN_TOKEN",
        hide_env_values = true,
        global = true
    )]
    pub admin_token: Option<String>,
}

/// `voxctl pool ...` (also `voxctl pools`; without a subcommand: `status`).
#[derive(Debug, Subcommand)]
pub enum PoolCommand {
    /// Per-key in-flight/capacity bars, state and cooldowns of POOL (default: every pool), and
    /// every budget's use, limit and reset.
    Status(PoolStatusArgs),
}

/// `voxctl pool status`'s arguments.
#[derive(Debug, Args)]
pub struct PoolStatusArgs {
    /// Pool id; every pool when omitted.
    pub pool: Option<String>,
    /// Redraw every --interval until Ctrl-C.
    #[arg(long)]
    pub watch: bool,
    /// Redraw period of --watch.
    #[arg(long, default_value = "1s", value_parser = positive_duration, requires = "watch")]
    pub interval: Duration,
    /// Scheduler URL, a list `URL,URL,...`, or a DNS name of several replicas.
    #[arg(long, env = "VOXPOOL_SCHEDULER", default_value = DEFAULT_SCHEDULER)]
    pub scheduler: String,
    /// Synthesis URL, asked which keys hold a usable credential there (the scheduler never
    /// sees credentials); keys without one show NO_CREDENTIAL.
    #[arg(long, env = "VOXPOOL_SYNTHESIS", default_value = DEFAULT_SYNTHESIS)]
    pub synthesis: String,
}

/// `voxctl packs ...`.
#[derive(Debug, Args)]
pub struct PacksArgs {
    /// Catalog URL.
    #[arg(long, global = true, env = "VOXPOOL_CATALOG", default_value = DEFAULT_CATALOG)]
    pub catalog: String,
    /// Admin bearer token (for create, disable, enable, list --all).
    #[command(flatten)]
    pub admin: AdminToken,
    /// Packs subcommand.
    #[command(subcommand)]
    pub command: PacksCommand,
}

/// The packs subcommands.
#[derive(Debug, Subcommand)]
// Parsed once per process: the size difference between variants does not matter.
#[allow(clippy::large_enum_variant)]
pub enum PacksCommand {
    /// List packs (enabled ones; --all includes disabled, needs the admin token).
    List {
        /// Filter, e.g. `tier=PRO AND locale=en-US`.
        #[arg(long, default_value = "")]
        filter: String,
        /// Include disabled packs.
        #[arg(long)]
        all: bool,
    },
    /// Every field of one pack.
    Show {
        /// Pack id.
        id: String,
    },
    /// Create a pack (admin).
    Create(CreatePackArgs),
    /// Disable a pack (admin): hidden from listings, refused for new snapshots.
    Disable {
        /// Pack id.
        id: String,
    },
    /// Enable a disabled pack (admin).
    Enable {
        /// Pack id.
        id: String,
    },
    /// Add a reference clip (WAV, MP3 or FLAC, 1..30 s, at most 10 MiB) to a selfhosted pack or
    /// a managed clone (admin): the pack moves to a new version; snapshots frozen before keep
    /// their clips.
    AddReference {
        /// Pack id.
        pack: String,
        /// The clip file.
        file: std::path::PathBuf,
        /// What the clip says (zero-shot servers read it with the audio).
        #[arg(long, value_parser = non_empty)]
        transcript: String,
        /// BCP 47 language of the clip; default the pack's first locale.
        #[arg(long, default_value = "")]
        language: String,
        /// Tag a request can pick the clip by (`emotion`), [a-z0-9_-]{1,32}.
        #[arg(long, default_value = "")]
        emotion: String,
        /// Weight in the random roll among the pack's clips, 1..1000.
        #[arg(long, default_value_t = 1)]
        weight: u32,
    },
    /// A pack's reference clips (admin).
    References {
        /// Pack id.
        pack: String,
        /// Also clips taken out with remove-reference.
        #[arg(long)]
        removed: bool,
    },
    /// Take a clip out of a pack (admin); its bytes stay for the snapshots that use it.
    RemoveReference {
        /// Pack id.
        pack: String,
        /// The clip's digest (`sha256:...`, as add-reference printed it).
        digest: String,
    },
    /// Clone a managed clone pack at the vendor, once per clone scope (admin): the clones start
    /// PENDING and a synthesis replica runs the vendor's flow; prints every clone of the pack.
    #[command(name = "clone")]
    CloneVoice(super::CloneArgs),
    /// A pack's clones per scope (admin); `--delete SCOPE` deletes one.
    Clones(super::ClonesArgs),
    /// Read a pool's clone scopes from the vendor's list API and bind the clones the catalog
    /// made to their packs (admin); prints what the last import of each scope found.
    Import(super::ImportArgs),
}

/// `voxctl packs create`.
#[derive(Debug, Args)]
pub struct CreatePackArgs {
    /// Display name (1..200 characters).
    #[arg(long)]
    pub display_name: String,
    /// Description.
    #[arg(long, default_value = "")]
    pub description: String,
    /// Provider id: openai, azure, volcengine, elevenlabs, minimax, dashscope, espeak.
    #[arg(long)]
    pub provider: String,
    /// Vendor model id.
    #[arg(long, default_value = "")]
    pub model: String,
    /// Vendor voice id; leave it out (with --upstream-id) for a managed clone, a CLONED pack
    /// the catalog clones from its reference clips (`voxctl pack clone`).
    #[arg(long, default_value = "")]
    pub voice_id: String,
    /// TTS model id (the scheduler pool) the pack pins.
    #[arg(long)]
    pub tts_model_id: String,
    /// STANDARD or CLONED.
    #[arg(long, default_value = "STANDARD")]
    pub kind: String,
    /// LITE, STANDARD, PRO or PREMIUM.
    #[arg(long, default_value = "STANDARD")]
    pub tier: String,
    /// An account (upstream id) holding the voice; repeatable; required for a CLONED pack that
    /// names its --voice-id.
    #[arg(long = "upstream-id")]
    pub upstream_ids: Vec<String>,
    /// A BCP 47 locale; repeatable.
    #[arg(long = "locale")]
    pub locales: Vec<String>,
    /// Relative pitch in percent (-50..50).
    #[arg(long, allow_negative_numbers = true)]
    pub pitch_pct: Option<f64>,
    /// Speaking-rate multiplier (0.25..4).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Relative volume in percent (-100..100).
    #[arg(long, allow_negative_numbers = true)]
    pub volume_pct: Option<f64>,
    /// A vendor option `key=value`; repeatable.
    #[arg(long)]
    pub extra: Vec<String>,
}

/// `voxctl cache ...`.
#[derive(Debug, Args)]
pub struct CacheArgs {
    /// Synthesis URL, a list `URL,URL,...`, or a DNS name of several replicas (one of them
    /// answers: the entries are every replica's, the per-pool counts that replica's).
    #[arg(long, global = true, env = "VOXPOOL_SYNTHESIS", default_value = DEFAULT_SYNTHESIS)]
    pub synthesis: String,
    /// Admin bearer token (every cache command needs it).
    #[command(flatten)]
    pub admin: AdminToken,
    /// Cache subcommand.
    #[command(subcommand)]
    pub command: CacheCommand,
}

/// The cache subcommands.
#[derive(Debug, Subcommand)]
pub enum CacheCommand {
    /// Whether the cache is on, where it lives, what it holds, and per pool the hits, misses,
    /// fills and savings the answering replica counted since it started.
    Stats,
    /// Delete the cache entries of a pack (every snapshot of it), of one snapshot digest, or
    /// of that snapshot of that pack. At least one of --pack, --snapshot-digest.
    #[command(group(
        clap::ArgGroup::new("entries")
            .required(true)
            .multiple(true)
            .args(["pack", "snapshot_digest"])
    ))]
    Purge {
        /// The pack whose entries go.
        #[arg(long, value_name = "PACK_ID", value_parser = non_empty)]
        pack: Option<String>,
        /// The snapshot whose entries go, `sha256:<64 hex digits>` (a snapshot's `digest`).
        #[arg(long, value_name = "sha256:HEX", value_parser = snapshot_digest)]
        snapshot_digest: Option<String>,
    },
}
