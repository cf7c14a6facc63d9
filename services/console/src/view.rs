//! The console's own types: what a page shows, converted from the services' protobuf at the
//! backend's edge (`crate::backend`). Templates and the live feed read only these.

use serde::Serialize;

/// One pool's status, as the pools page shows it.
#[derive(Clone, Debug, Serialize)]
pub struct PoolView {
    /// Pool id.
    pub pool: String,
    /// Sum of the capacities of available keys.
    pub capacity: i32,
    /// Leases held on available keys.
    pub in_flight: i32,
    /// Acquires waiting in the pool's line (every replica), all classes.
    pub waiting: i32,
    /// The line per class: (class, waiters, oldest wait in ms).
    pub line: Vec<(String, i32, i64)>,
    /// BATCH leases held and the most allowed.
    pub batch: (i32, i32),
    /// Milliseconds until grants resume after a store recovery; 0 when not recovering.
    pub recovering_ms: i64,
    /// Why the store did not answer for this pool; empty when it did.
    pub store_error: String,
    /// Its keys.
    pub keys: Vec<KeyView>,
}

/// One key's status.
#[derive(Clone, Debug, Serialize)]
pub struct KeyView {
    /// Its pool.
    pub pool: String,
    /// `upstream/key`.
    pub key: String,
    /// Configured (or set) capacity.
    pub capacity: i32,
    /// What leases are granted against (learned from concurrency refusals).
    pub effective: i32,
    /// Leases held now.
    pub in_flight: i32,
    /// `available`, `cooling`, `disabled`, `over quota`.
    pub state: &'static str,
    /// Milliseconds of cooldown left; 0 when not cooling.
    pub cooling_ms: i64,
    /// Consecutive failures.
    pub failures: i32,
    /// Characters used this period and the period's limit (0 = no quota).
    pub quota: (i64, i64),
    /// Milliseconds until the quota resets; 0 without a quota.
    pub quota_resets_ms: i64,
}

impl KeyView {
    /// True when the effective capacity was learned below the configured one.
    pub fn learned(&self) -> bool {
        self.effective < self.capacity
    }

    /// `cooling` with its countdown, or the state.
    pub fn state_text(&self) -> String {
        if self.cooling_ms > 0 {
            format!("cooling, {} s left", (self.cooling_ms + 999) / 1000)
        } else {
            self.state.to_owned()
        }
    }

    /// True for a key an admin can enable.
    pub fn disabled(&self) -> bool {
        self.state == "disabled"
    }
}

/// A voice pack, as a market card and its page show it.
#[derive(Clone, Debug, Default)]
pub struct PackView {
    /// Pack id.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Provider id.
    pub provider: String,
    /// Vendor model id.
    pub model: String,
    /// Vendor voice id.
    pub voice_id: String,
    /// The pool it runs on.
    pub tts_model_id: String,
    /// `STANDARD` or `CLONED`.
    pub kind: String,
    /// `LITE`, `STANDARD`, `PRO`, `PREMIUM`.
    pub tier: String,
    /// BCP 47 locales.
    pub locales: Vec<String>,
    /// Upstream ids holding the voice.
    pub upstream_ids: Vec<String>,
    /// Prosody overrides as text (`pitch_pct=5`), empty when none.
    pub params: Vec<(String, String)>,
    /// Vendor options.
    pub extra: Vec<(String, String)>,
    /// False once disabled.
    pub enabled: bool,
    /// Version.
    pub version: i64,
    /// Reference clips, in the order added.
    pub clips: Vec<ClipView>,
}

impl PackView {
    /// Locales joined for display.
    pub fn locales_text(&self) -> String {
        self.locales.join(", ")
    }

    /// The tier in lower case, for the badge's class.
    pub fn tier_class(&self) -> String {
        self.tier.to_ascii_lowercase()
    }
}

/// One reference clip of a pack.
#[derive(Clone, Debug, Default)]
pub struct ClipView {
    /// `sha256:<hex>`.
    pub digest: String,
    /// What it says.
    pub transcript: String,
    /// Its language.
    pub language: String,
    /// Its tag, if any.
    pub emotion: String,
    /// Weight.
    pub weight: u32,
    /// Duration, ms.
    pub duration_ms: u32,
    /// Media type.
    pub media_type: String,
    /// Set once removed.
    pub removed: bool,
}

/// One revision of a pack.
#[derive(Clone, Debug)]
pub struct RevisionView {
    /// Version.
    pub version: i64,
    /// create | update | disable | …
    pub action: String,
    /// When, RFC 3339.
    pub time: String,
}

/// A job, as the jobs page shows it.
#[derive(Clone, Debug, Default)]
pub struct JobView {
    /// `jobs/{job}`.
    pub name: String,
    /// The id part of the name.
    pub id: String,
    /// QUEUED, RUNNING, …
    pub state: String,
    /// Items in total and per state: queued, running, succeeded, failed, cancelled.
    pub total: i32,
    /// (queued, running, succeeded, failed, cancelled).
    pub counts: (i32, i32, i32, i32, i32),
    /// Items served wholly from the audio cache.
    pub cached: i32,
    /// Created, RFC 3339.
    pub created: String,
    /// Failed items: id and why.
    pub failures: Vec<(String, String)>,
}

impl JobView {
    /// Items ended (succeeded, failed or cancelled).
    pub fn done(&self) -> i32 {
        self.counts.2 + self.counts.3 + self.counts.4
    }

    /// True while cancel applies.
    pub fn cancellable(&self) -> bool {
        matches!(self.state.as_str(), "QUEUED" | "RUNNING")
    }

    /// True once delete applies.
    pub fn deletable(&self) -> bool {
        matches!(self.state.as_str(), "SUCCEEDED" | "FAILED" | "CANCELLED")
    }
}

/// The audio cache, as the cache page shows it.
#[derive(Clone, Debug, Default)]
pub struct CacheView {
    /// False with `--cache off`.
    pub enabled: bool,
    /// Where it lives.
    pub location: String,
    /// Entries and bytes stored.
    pub entries: i64,
    /// Bytes stored.
    pub bytes: i64,
    /// The size bound, 0 = none.
    pub max_bytes: i64,
    /// Evictions since start.
    pub evictions: i64,
    /// Per pool: pool, hits, misses, fills, coalesced, characters saved.
    pub pools: Vec<(String, i64, i64, i64, i64, i64)>,
}
