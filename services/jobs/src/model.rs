//! What a job and its items are, apart from where they are kept: job and item states, the
//! class and audio format a job runs with, the one record of a job (what its creator chose,
//! [`JobSpec`], with the counts and times the store keeps), an item's result document, and job
//! names. No protobuf here: the edge (`crate::convert`) maps these to and from the wire.
//!
//! Invariant: the five item counts of a [`JobRecord`] always add up to its `total` (the
//! store's scripts move an item between counts in the same step that changes its state).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::usage::{BUDGET_WAIT_FIELD, BudgetWait, Usage};

/// Longest job id (the `{job}` of `jobs/{job}`).
pub const MAX_JOB_ID_CHARS: usize = 63;

/// A job's state (the proto's `Job.State`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JobState {
    /// No item started yet.
    Queued,
    /// Items are running.
    Running,
    /// Every item succeeded.
    Succeeded,
    /// Every item ended, at least one failed.
    Failed,
    /// Cancelled (ended once its in-flight items ended).
    Cancelled,
}

impl JobState {
    /// The name the store keeps (and the proto spells).
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "QUEUED",
            JobState::Running => "RUNNING",
            JobState::Succeeded => "SUCCEEDED",
            JobState::Failed => "FAILED",
            JobState::Cancelled => "CANCELLED",
        }
    }

    /// The state the store's name means.
    pub fn parse(raw: &str) -> Option<Self> {
        [
            JobState::Queued,
            JobState::Running,
            JobState::Succeeded,
            JobState::Failed,
            JobState::Cancelled,
        ]
        .into_iter()
        .find(|s| s.as_str() == raw)
    }
}

/// An item's state; the store keeps its one-letter code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ItemState {
    /// Waiting in the stream.
    Queued,
    /// Taken by a worker.
    Running,
    /// Its audio is in the blob store.
    Succeeded,
    /// Ended with an error.
    Failed,
    /// Cancelled before it ran (or before its next attempt).
    Cancelled,
}

impl ItemState {
    /// The one-letter code the store keeps (`Q R S F C`).
    pub fn code(self) -> &'static str {
        match self {
            ItemState::Queued => "Q",
            ItemState::Running => "R",
            ItemState::Succeeded => "S",
            ItemState::Failed => "F",
            ItemState::Cancelled => "C",
        }
    }

    /// The name the proto spells (`SUCCEEDED`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ItemState::Queued => "QUEUED",
            ItemState::Running => "RUNNING",
            ItemState::Succeeded => "SUCCEEDED",
            ItemState::Failed => "FAILED",
            ItemState::Cancelled => "CANCELLED",
        }
    }

    /// The state of a code.
    pub fn from_code(code: &str) -> Option<Self> {
        match code {
            "Q" => Some(ItemState::Queued),
            "R" => Some(ItemState::Running),
            "S" => Some(ItemState::Succeeded),
            "F" => Some(ItemState::Failed),
            "C" => Some(ItemState::Cancelled),
            _ => None,
        }
    }

    /// The name the proto spells (`QUEUED`, ...), as filters and voxctl write it.
    pub fn parse_name(raw: &str) -> Option<Self> {
        match raw.to_ascii_uppercase().as_str() {
            "QUEUED" => Some(ItemState::Queued),
            "RUNNING" => Some(ItemState::Running),
            "SUCCEEDED" => Some(ItemState::Succeeded),
            "FAILED" => Some(ItemState::Failed),
            "CANCELLED" => Some(ItemState::Cancelled),
            _ => None,
        }
    }
}

/// Why an item failed (the proto's `ItemError`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemError {
    /// gRPC code name.
    pub code: String,
    /// `ErrorInfo.reason`, empty when none.
    #[serde(default)]
    pub reason: String,
    /// The message.
    pub message: String,
    /// `ErrorInfo.metadata`.
    #[serde(default)]
    pub metadata: HashMap<String, String>,
}

/// What an ended item left: kept as JSON in the job's results hash.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemResult {
    /// Blob path of its audio (`jobs/{job}/<id>.<ext>`), when it succeeded.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output: String,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ItemError>,
    /// Text chunks synthesis split it into, and those served from the audio cache.
    #[serde(default)]
    pub chunks: i32,
    /// Of `chunks`, those served from the audio cache.
    #[serde(default)]
    pub cached_chunks: i32,
    /// The key that produced the audio.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key_id: String,
    /// The reference clip spoken with.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reference_digest: String,
    /// Size of the audio, bytes.
    #[serde(default)]
    pub audio_bytes: i64,
    /// What its Synthesize calls spent, added up (absent in results written before usage
    /// was kept, and when no call reported any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// The class a job's items run in (`voxpool.scheduler.v1.Priority`, of which jobs take two).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Priority {
    /// Live-like traffic: not held to the pool's batch share.
    Standard,
    /// Bulk work (the default): never more than the pool's `batch_max_share`.
    Batch,
}

impl Priority {
    /// The number the store keeps: the wire enum's (STANDARD 2, BATCH 3), so records written
    /// before this type existed read back.
    pub fn code(self) -> i32 {
        match self {
            Priority::Standard => 2,
            Priority::Batch => 3,
        }
    }

    /// The class a stored number means.
    pub fn from_code(code: i32) -> Option<Self> {
        [Priority::Standard, Priority::Batch]
            .into_iter()
            .find(|p| p.code() == code)
    }

    /// The name the wire spells (`BATCH`), as metrics label it.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Standard => "STANDARD",
            Priority::Batch => "BATCH",
        }
    }
}

/// The audio format of a job's items (`voxpool.synthesis.v1.AudioFormat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// RIFF/WAVE, 16-bit PCM (the default).
    Wav,
    /// MP3.
    Mp3,
    /// Ogg Opus.
    OggOpus,
    /// Raw signed 16-bit little-endian mono.
    Pcm,
}

impl Format {
    /// The number the store keeps: the wire enum's (WAV 1, MP3 2, OGG_OPUS 3, PCM 4), so
    /// records written before this type existed read back.
    pub fn code(self) -> i32 {
        match self {
            Format::Wav => 1,
            Format::Mp3 => 2,
            Format::OggOpus => 3,
            Format::Pcm => 4,
        }
    }

    /// The format a stored number means.
    pub fn from_code(code: i32) -> Option<Self> {
        [Format::Wav, Format::Mp3, Format::OggOpus, Format::Pcm]
            .into_iter()
            .find(|f| f.code() == code)
    }

    /// The file extension of its objects (`voxctl batch`'s).
    pub fn extension(self) -> &'static str {
        match self {
            Format::Wav => "wav",
            Format::Mp3 => "mp3",
            Format::OggOpus => "ogg",
            Format::Pcm => "pcm",
        }
    }

    /// The audio format the shared joiner speaks.
    pub fn audio(self) -> voxpool_domain::audio::AudioFormat {
        use voxpool_domain::audio::AudioFormat;
        match self {
            Format::Wav => AudioFormat::Wav,
            Format::Mp3 => AudioFormat::Mp3,
            Format::OggOpus => AudioFormat::OggOpus,
            Format::Pcm => AudioFormat::Pcm,
        }
    }
}

/// What a job's creator chose: kept in the job's record as it was created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobSpec {
    /// Tenant.
    pub tenant: String,
    /// The class its items run in.
    pub priority: Priority,
    /// The audio format of its items.
    pub format: Format,
    /// Sample rate, Hz (0 = the vendor's).
    pub sample_rate_hz: i32,
    /// The caller's idempotency key (empty: none).
    pub request_id: String,
    /// Webhook URL (empty: none; never shown whole: it may hold a token).
    pub webhook_url: String,
    /// The blob store its results go to (the creating replica's; empty for jobs created
    /// before it was recorded): only replicas on that store run it.
    pub blob_store: String,
    /// Characters of text (Unicode scalar values).
    pub characters: i64,
}

/// A job as its Redis hash holds it (field names are the hash's): what its creator chose,
/// then the counts and times the store's scripts keep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRecord {
    /// The job id (`{job}` of `jobs/{job}`).
    pub id: String,
    /// Current state.
    pub state: JobState,
    /// What its creator chose.
    pub spec: JobSpec,
    /// Items of the job.
    pub total: i32,
    /// Items waiting.
    pub queued: i32,
    /// Items in flight.
    pub running: i32,
    /// Items that succeeded.
    pub succeeded: i32,
    /// Items that failed.
    pub failed: i32,
    /// Items cancelled.
    pub cancelled: i32,
    /// Characters of the items that succeeded.
    pub characters_succeeded: i64,
    /// Items served wholly from the audio cache.
    pub cached_items: i32,
    /// What the ended items spent, added up.
    pub usage: Usage,
    /// Set while the job's items wait for a spent budget (cleared when an item ends).
    pub budget_wait: Option<BudgetWait>,
    /// Times, Unix ms (Redis `TIME`).
    pub create_ms: i64,
    /// When the first item started.
    pub start_ms: Option<i64>,
    /// When the job ended.
    pub end_ms: Option<i64>,
    /// When the job and its results are deleted.
    pub expire_ms: Option<i64>,
}

impl JobRecord {
    /// Reads the hash's fields; `None` when a field every job has is missing or malformed
    /// (a hash this code did not write).
    pub fn from_hash(id: &str, h: &HashMap<String, String>) -> Option<Self> {
        let text = |k: &str| h.get(k).cloned().unwrap_or_default();
        let int = |k: &str| h.get(k).and_then(|v| v.parse::<i64>().ok());
        let count = |k: &str| int(k).and_then(|v| i32::try_from(v).ok());
        Some(Self {
            id: id.to_owned(),
            state: JobState::parse(h.get("state")?)?,
            spec: JobSpec {
                tenant: text("tenant"),
                priority: Priority::from_code(count("priority")?)?,
                format: Format::from_code(count("format")?)?,
                sample_rate_hz: count("sample_rate_hz")?,
                request_id: text("request_id"),
                webhook_url: text("webhook_url"),
                blob_store: text("blob_store"),
                characters: int("characters")?,
            },
            total: count("total")?,
            queued: count("queued")?,
            running: count("running")?,
            succeeded: count("succeeded")?,
            failed: count("failed")?,
            cancelled: count("cancelled")?,
            characters_succeeded: int("characters_succeeded")?,
            cached_items: count("cached_items")?,
            usage: Usage::from_hash(h),
            budget_wait: h
                .get(BUDGET_WAIT_FIELD)
                .and_then(|w| serde_json::from_str(w).ok()),
            create_ms: int("create_ms")?,
            start_ms: int("start_ms"),
            end_ms: int("end_ms"),
            expire_ms: int("expire_ms"),
        })
    }

    /// True once the job reached its terminal state and no item runs any more.
    pub fn has_ended(&self) -> bool {
        self.end_ms.is_some()
    }

    /// The resource name.
    pub fn name(&self) -> String {
        job_name(&self.id)
    }
}

/// `jobs/{id}`.
pub fn job_name(id: &str) -> String {
    format!("jobs/{id}")
}

/// A job id as this service makes them: `j` and 20 lowercase hex digits.
pub fn new_job_id() -> String {
    format!("j{}", hex::encode(rand::random::<[u8; 10]>()))
}

/// The id of a `jobs/{job}` name: 1 to [`MAX_JOB_ID_CHARS`] of `a-z 0-9 -`, starting with a
/// letter. Errors: what a well-formed name looks like.
pub fn parse_job_name(name: &str) -> Result<&str, String> {
    let id = name.strip_prefix("jobs/").unwrap_or_default();
    let ok = !id.is_empty()
        && id.len() <= MAX_JOB_ID_CHARS
        && id.starts_with(|c: char| c.is_ascii_lowercase())
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(id)
    } else {
        Err(format!(
            "expected jobs/{{job}} (the name CreateJob answered, e.g. jobs/j0123456789abcdef0123), got {}",
            voxpool_domain::untrusted::quote(name)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_names_parse_back_and_malformed_ones_are_refused() {
        let id = new_job_id();
        assert_eq!(parse_job_name(&job_name(&id)), Ok(id.as_str()));
        for bad in [
            "", "jobs/", "j1", "jobs/J1", "jobs/1a", "jobs/a/b", "other/a",
        ] {
            assert!(parse_job_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn states_round_trip_through_their_store_forms() {
        for s in [
            ItemState::Queued,
            ItemState::Running,
            ItemState::Succeeded,
            ItemState::Failed,
            ItemState::Cancelled,
        ] {
            assert_eq!(ItemState::from_code(s.code()), Some(s));
        }
        assert_eq!(ItemState::parse_name("failed"), Some(ItemState::Failed));
        assert_eq!(JobState::parse("CANCELLED"), Some(JobState::Cancelled));
        assert_eq!(JobState::parse("cancelled"), None);
        for p in [Priority::Standard, Priority::Batch] {
            assert_eq!(Priority::from_code(p.code()), Some(p));
        }
        for f in [Format::Wav, Format::Mp3, Format::OggOpus, Format::Pcm] {
            assert_eq!(Format::from_code(f.code()), Some(f));
        }
        assert_eq!(
            Priority::from_code(1),
            None,
            "INTERACTIVE is no job's class"
        );
        assert_eq!(Format::from_code(0), None);
    }
}
