//! The domain types of managed clones: a clone's state, the vendor step due on it, a clone
//! row, a claimed step and the outcomes a worker reports. No protobuf here (the edge converts).

use serde::{Deserialize, Serialize};

/// Where a pack's clone in one scope stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CloneState {
    /// Asked for; the vendor has not been called yet.
    Pending,
    /// The vendor trains it.
    Training,
    /// Usable in its scope.
    Ready,
    /// The vendor refused it, or the flow gave up.
    Failed,
    /// The vendor dropped it (unused too long, or reported gone).
    Expired,
    /// The vendor took the slot back.
    Reclaimed,
}

impl CloneState {
    /// Every state.
    pub const ALL: [CloneState; 6] = [
        CloneState::Pending,
        CloneState::Training,
        CloneState::Ready,
        CloneState::Failed,
        CloneState::Expired,
        CloneState::Reclaimed,
    ];

    /// The name stored and shown (`PENDING`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            CloneState::Pending => "PENDING",
            CloneState::Training => "TRAINING",
            CloneState::Ready => "READY",
            CloneState::Failed => "FAILED",
            CloneState::Expired => "EXPIRED",
            CloneState::Reclaimed => "RECLAIMED",
        }
    }

    /// The state a stored name names.
    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == raw)
    }

    /// Whether the clone holds (or is about to hold) a slot in its scope and needs no new
    /// clone: PENDING, TRAINING, READY.
    pub fn is_live(self) -> bool {
        matches!(
            self,
            CloneState::Pending | CloneState::Training | CloneState::Ready
        )
    }
}

/// The vendor step due on a clone row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Work {
    /// Nothing to do.
    None,
    /// Upload the clips and create the clone.
    Create,
    /// Ask whether training finished.
    Poll,
    /// Delete the vendor's copy, then the row.
    Delete,
    /// Use the clone once so the vendor keeps it.
    KeepAlive,
}

impl Work {
    /// Every kind of work.
    pub const ALL: [Work; 5] = [
        Work::None,
        Work::Create,
        Work::Poll,
        Work::Delete,
        Work::KeepAlive,
    ];

    /// The name stored (`NONE`, `CREATE`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Work::None => "NONE",
            Work::Create => "CREATE",
            Work::Poll => "POLL",
            Work::Delete => "DELETE",
            Work::KeepAlive => "KEEPALIVE",
        }
    }

    /// The work a stored name names.
    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.as_str() == raw)
    }
}

/// A pack's clone in one scope, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VoiceClone {
    /// The pack.
    pub pack_id: String,
    /// `upstream` or `upstream/key`.
    pub scope: String,
    /// The vendor's voice id, once known.
    pub vendor_voice_id: Option<String>,
    /// Where it stands.
    pub state: CloneState,
    /// Microseconds since the Unix epoch.
    pub created_at_us: i64,
    /// When synthesis last spoke with it.
    pub last_used_at_us: Option<i64>,
    /// When the vendor drops it unless used.
    pub expires_at_us: Option<i64>,
    /// Why it failed or expired (already escaped).
    pub error: Option<String>,
    /// The vendor step due.
    pub work: Work,
    /// When it is due.
    pub due_at_us: i64,
    /// Claims of the current step.
    pub attempts: u32,
}

/// The clip a worker clones from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// `sha256:<hex>`; the bytes are `references/<hex>` in the blob store.
    pub digest: String,
    /// `audio/wav`, `audio/mpeg` or `audio/flac`.
    pub content_type: String,
    /// What it says.
    pub transcript: String,
    /// BCP 47.
    pub language: String,
}

/// How to make a pack's clone: the pack's provider, model, target model and clips.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recipe {
    /// Provider id.
    pub provider: String,
    /// Vendor model id.
    pub model: String,
    /// `extra["target_model"]`, or empty.
    pub target_model: String,
    /// The pack's pool.
    pub pool: String,
    /// The clips, in the order added.
    pub samples: Vec<Sample>,
}

/// What a claimed step is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// One clone of a pack, and how to make it.
    Clone(VoiceClone, Recipe),
    /// Reading a scope's clones from the vendor's list.
    Import {
        /// The scope.
        scope: String,
        /// Its pool.
        pool: String,
        /// Its provider.
        provider: String,
    },
}

/// A step leased to a worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// What to do.
    pub target: Target,
    /// The token its report must carry.
    pub lease_token: String,
    /// When the lease ends.
    pub lease_until_us: i64,
    /// Claims of this step, this one included.
    pub attempt: u32,
}

/// One clone the vendor lists in a scope.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedVoice {
    /// The vendor's voice id.
    pub vendor_voice_id: String,
    /// The name it was created with.
    pub name: String,
}

/// What a worker reports about a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Accepted and training: poll again after `poll_after_ms`.
    Training {
        /// The vendor's voice id.
        vendor_voice_id: String,
        /// When to poll again.
        poll_after_ms: u64,
    },
    /// Usable.
    Ready {
        /// The vendor's voice id.
        vendor_voice_id: String,
        /// When the vendor drops it unless used (`None`: the scope's keep-alive rule).
        expires_at_us: Option<i64>,
    },
    /// Refused for good.
    Failed {
        /// Why (vendor text, escaped before it is stored).
        error: String,
    },
    /// A transient failure: the same step again later.
    Retry {
        /// The vendor's wait, ms (0 = the back-off alone).
        after_ms: u64,
        /// Why.
        error: String,
    },
    /// The vendor's copy is gone (deleted, or never made).
    Deleted,
    /// The vendor reports the clone gone.
    Expired {
        /// Why.
        error: String,
        /// The vendor took the slot back (`RECLAIMED` rather than `EXPIRED`).
        reclaimed: bool,
    },
    /// IMPORT: the scope's clones at the vendor.
    Imported(Vec<ListedVoice>),
}

/// A scope's import: the last run that finished, and the one queued (asked for, not yet
/// finished), either of which may be missing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Import {
    /// The scope.
    pub scope: String,
    /// The last run that finished.
    pub last: Option<FinishedImport>,
    /// A run asked for and not yet finished (waiting for a worker, running, or retrying).
    pub queued: Option<QueuedImport>,
}

/// An import run asked for and not yet finished.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuedImport {
    /// When it was asked for, µs.
    pub requested_at_us: i64,
    /// Why its last attempt failed (it is retried).
    pub error: Option<String>,
}

/// An import run that finished, as stored in the import's `result` column.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinishedImport {
    /// `DONE` or `FAILED`.
    pub state: String,
    /// When it was asked for, µs.
    pub requested_at_us: i64,
    /// When its worker reported it, µs.
    pub finished_at_us: i64,
    /// What it found (empty when it failed).
    #[serde(flatten)]
    pub result: ImportResult,
    /// Why it failed.
    #[serde(default)]
    pub error: Option<String>,
}

/// What an import found: vendor voice ids bound to packs (bound by it, or held by the catalog
/// already), and ids no pack of the scope holds or may be bound to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportResult {
    /// `(pack_id, vendor_voice_id)`: bound by the import as READY clones, or clones of the
    /// scope the catalog held already.
    pub bound: Vec<(String, String)>,
    /// Vendor voice ids left alone.
    pub unbound: Vec<String>,
}
