//! The checkpoint's records: one JSON object per line, tagged by `kind`.

use serde::{Deserialize, Serialize};

/// The identity of a batch run: what the output directory was produced from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunIdentity {
    /// `sha256:` of the manifest bytes.
    pub manifest: String,
    /// Output format (`WAV`, ...).
    pub format: String,
    /// Requested sample rate (0 = vendor default).
    pub sample_rate_hz: i32,
}

/// A finished item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DoneRecord {
    /// Item id.
    pub id: String,
    /// Item fingerprint (text, voice, format): a changed item is not "done".
    pub fp: String,
    /// File name in the output directory.
    pub file: String,
    /// File size in bytes.
    pub bytes: u64,
    /// Synthesize calls made (all parts, all retries).
    pub attempts: u32,
    /// Vendor keys that served or were tried (`upstream/key`), in first-use order.
    pub keys: Vec<String>,
    /// Parts the text was split into.
    pub parts: usize,
    /// Characters of text.
    pub chars: usize,
    /// Text chunks synthesis split the parts into (0 in records written before it was kept).
    #[serde(default)]
    pub chunks: u64,
    /// Of `chunks`, those served from the audio cache.
    #[serde(default)]
    pub cached_chunks: u64,
}

/// An item that failed for good in some run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailedRecord {
    /// Item id.
    pub id: String,
    /// Item fingerprint.
    pub fp: String,
    /// gRPC code name or a local error class (`INVALID_ARGUMENT`, `LOCAL`).
    pub code: String,
    /// The error message (the server's message for gRPC errors).
    pub error: String,
    /// Synthesize calls made.
    pub attempts: u32,
    /// Vendor keys tried.
    pub keys: Vec<String>,
}

/// One line of the checkpoint journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Record {
    /// A run started (first line, and again at each resume).
    Run {
        /// What the run produces.
        #[serde(flatten)]
        identity: RunIdentity,
        /// Wall-clock start, RFC 3339.
        started: String,
        /// Whether `--force` accepted a different identity.
        forced: bool,
    },
    /// An item's file is in place.
    Done(DoneRecord),
    /// An item failed.
    Failed(FailedRecord),
}
