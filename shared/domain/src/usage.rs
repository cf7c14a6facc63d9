//! Usage records: what synthesis writes to the usage stream and the catalog's ledger reads
//! (docs/OPERATIONS.md#usage-ledger). Both sides agree on this one shape.
//!
//! A request leaves three kinds of entries, each carrying the request's [`UsageContext`] so
//! the ledger never has to join them to count one:
//! - [`UsageEvent::Charge`], written **before** a vendor is sent a chunk's text: if nothing
//!   settles it (the synthesis replica was killed mid-call), the ledger counts it as charged
//!   once its grace has passed, because the vendor did the work;
//! - [`UsageEvent::Settle`], what the vendor actually charged for that attempt (0 for a
//!   refusal before any audio), which replaces its Charge;
//! - [`UsageEvent::Done`], the request's end: cached characters, audio produced, one request.
//!
//! Every entry is idempotent by `(record_id, attempt, kind)`: a record read twice counts once.

use serde::{Deserialize, Serialize};

use crate::{provider::Provider, snapshot::Tier};

/// The Redis Stream usage records travel through (one key: one slot on a Cluster).
pub const USAGE_STREAM: &str = "voxpool:usage:v1";
/// The field of a stream entry holding the record's JSON.
pub const USAGE_FIELD: &str = "r";

/// Who spoke with what: the same on every entry of a request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageContext {
    /// Unique per request, made by synthesis (UUID v7): the ledger's idempotency key.
    pub record_id: String,
    /// The caller's own request id (may repeat, may be empty).
    #[serde(default)]
    pub request_id: String,
    /// Tenant of the request; empty = the shared tenant.
    #[serde(default)]
    pub tenant: String,
    /// Caller identity: client token name, mTLS subject or HTTP key name; empty = anonymous.
    #[serde(default)]
    pub caller: String,
    /// `grpc`, `grpc_stream`, `http` or `job`.
    pub path: String,
    /// The pack spoken with (empty for a snapshot without one).
    #[serde(default)]
    pub pack_id: String,
    /// `sha256:<hex>` of the snapshot spoken with.
    #[serde(default)]
    pub snapshot_digest: String,
    /// The pack's tier, as frozen in the snapshot.
    pub tier: Option<Tier>,
    /// The pool (tts model id) that served it.
    pub pool: String,
    /// The pool's provider.
    pub provider: Provider,
    /// ISO 4217 code of every cost on the entry.
    pub currency: String,
    /// When the request began, ms since the Unix epoch (UTC): the ledger's day.
    pub at_ms: i64,
}

/// One vendor attempt: its charge before the call, its settlement after.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptUsage {
    /// 0, 1, 2, … over the request (every chunk's attempts numbered in one sequence).
    pub attempt: u32,
    /// `upstream/key` (empty on a Charge written before the lease was granted).
    #[serde(default)]
    pub key_id: String,
    /// The key's upstream (account).
    #[serde(default)]
    pub upstream_id: String,
    /// Characters by the provider's billing rule: on a Charge, what the attempt sends; on a
    /// Settle, what the vendor charges for (0 when it refused before any audio).
    pub characters: u64,
    /// What the vendor said it billed, when it says (`character-cost`); 0 otherwise.
    #[serde(default)]
    pub billed_characters: u64,
    /// Audio the attempt produced, ms.
    #[serde(default)]
    pub audio_ms: u64,
    /// Server time (self-hosted pools), ms.
    #[serde(default)]
    pub gpu_ms: u64,
    /// Cost in millionths of the currency (on a Charge: what it would cost if charged).
    pub cost_micros: i64,
    /// The outcome as the scheduler's `Outcome` names it (`SUCCESS`, `TIMEOUT`, …); empty on
    /// a Charge.
    #[serde(default)]
    pub outcome: String,
}

/// A request's end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoneUsage {
    /// Characters served from the audio cache (no vendor cost).
    pub cached_characters: u64,
    /// Audio delivered, ms (vendor audio and cached audio).
    pub audio_ms: u64,
    /// What the cache hits cost the tenant (`[usage] cache_hit_factor`), millionths.
    pub cached_cost_micros: i64,
    /// Attempts that failed.
    pub failed_attempts: u32,
    /// Whether the request delivered all its audio.
    pub ok: bool,
}

/// One entry of the usage stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum UsageEvent {
    /// Before a vendor is sent a chunk's text: counted as charged unless settled.
    Charge {
        /// The request.
        context: UsageContext,
        /// The attempt and what it would be charged.
        attempt: AttemptUsage,
    },
    /// What the vendor charged for an attempt; replaces its Charge.
    Settle {
        /// The request.
        context: UsageContext,
        /// The attempt and what it was charged.
        attempt: AttemptUsage,
    },
    /// The request ended.
    Done {
        /// The request.
        context: UsageContext,
        /// What it produced and served from the cache.
        done: DoneUsage,
    },
}

impl UsageEvent {
    /// The entry's context.
    pub fn context(&self) -> &UsageContext {
        match self {
            UsageEvent::Charge { context, .. }
            | UsageEvent::Settle { context, .. }
            | UsageEvent::Done { context, .. } => context,
        }
    }

    /// `charge`, `settle` or `done`: with the record id and attempt, the idempotency key.
    pub fn kind(&self) -> &'static str {
        match self {
            UsageEvent::Charge { .. } => "charge",
            UsageEvent::Settle { .. } => "settle",
            UsageEvent::Done { .. } => "done",
        }
    }
}

/// Characters `text` bills at `provider`, by that vendor's published rule
/// (docs/VENDORS.md#billing). Whitespace and punctuation count everywhere; what differs is
/// how CJK ideographs count and whether SSML markup does.
pub fn billable_characters(provider: Provider, text: &str) -> u64 {
    let _ = provider;
    text.chars().count() as u64
}
