//! The synthesis error enum: every way a request can fail, with messages that say what to do;
//! its classification (code, typed reason, field, retry time) in `class.rs`, read by both
//! fronts, and its one exhaustive mapping to `tonic::Status` in `status.rs` (reasons: the
//! shared contract's `SynthesisReason`, never a string typed here).
//!
//! No catch-all arm: a new variant must be classified. Messages are lowercase, name the field,
//! pool, key or URL involved and never carry a credential or a panic payload. Failover errors
//! carry every attempt in the message and in `ErrorInfo` metadata (`attempt_1`, …,
//! `keys_tried`, `upstreams_tried`), plus `RetryInfo` when a retry time is known.

use std::time::Duration;

use crate::{
    adapters::ParamError,
    audio::AudioError,
    record::{AttemptRecord, summary},
};

/// Every way a synthesis RPC can fail.
#[derive(Debug, thiserror::Error)]
pub enum SynthesisError {
    /// A budget covering the request (`[[budgets]]`) cannot hold it until its period resets:
    /// never failed over to another key or pool.
    #[error("{}", budget_text(message, details))]
    BudgetExhausted {
        /// Pool id.
        pool: String,
        /// The scheduler's message.
        message: String,
        /// The scheduler's `ErrorInfo` metadata: `budget`, `subject`, `used`, `limit`,
        /// `resets_at_ms`.
        details: std::collections::HashMap<String, String>,
        /// Until the reset.
        retry_after: Option<Duration>,
    },
    /// A request field is missing, malformed or out of range.
    #[error("invalid {field}: {message}")]
    InvalidArgument {
        /// Proto field path (`text`, `snapshot_json`, `digest`, `format`, …).
        field: String,
        /// What is wrong and what is accepted.
        message: String,
    },
    /// The vendor cannot apply a param, format or sample rate (invariant 8 of docs/ARCHITECTURE.md).
    #[error("invalid {param}: {error}", param = .0.param, error = .0)]
    Param(ParamError),
    /// No pool serves the snapshot's tts model id.
    #[error("no pool serves tts model id {tts_model_id:?} (known pools: {known})")]
    UnknownPool {
        /// The snapshot's `ttsModelId`.
        tts_model_id: String,
        /// Configured pool ids.
        known: String,
    },
    /// The snapshot names a provider voxpool does not know.
    #[error("invalid snapshot.provider: unknown provider {provider:?}: expected one of {known}")]
    UnknownProvider {
        /// The snapshot's provider.
        provider: String,
        /// Known provider ids.
        known: String,
    },
    /// The snapshot's provider is not the provider of the pool it pins.
    #[error(
        "snapshot provider {provider:?} does not match pool {pool:?} (provider {pool_provider:?}): the voice would change; re-create the voice pack for a pool of its provider"
    )]
    ProviderMismatch {
        /// Pool id.
        pool: String,
        /// The pool's provider.
        pool_provider: String,
        /// The snapshot's provider.
        provider: String,
    },
    /// This server has no adapter for the pool's provider.
    #[error("pool {pool:?} needs the {provider:?} adapter, which this server does not include")]
    NoAdapter {
        /// Pool id.
        pool: String,
        /// Provider id.
        provider: String,
    },
    /// No key of the pool has a usable credential.
    #[error("pool {pool:?} has no key with a credential: {}", problems.join("; "))]
    NoCredentials {
        /// Pool id.
        pool: String,
        /// One line per key: `upstream/key: environment variable X is not set`.
        problems: Vec<String>,
    },
    /// The snapshot lists an upstream the pool does not have.
    #[error(
        "pool {pool:?} has no upstream {upstream:?} (upstreams: {known}); the voice exists only on the listed accounts"
    )]
    UnknownUpstream {
        /// Pool id.
        pool: String,
        /// The snapshot's upstream id.
        upstream: String,
        /// The pool's upstream ids.
        known: String,
    },
    /// The catalog has no such pack.
    #[error(
        "{}",
        not_found_text(
            pack_id,
            message,
            "check the packId (ListVoicePacks lists the enabled packs)"
        )
    )]
    CatalogNotFound {
        /// Requested pack id.
        pack_id: String,
        /// The catalog's message.
        message: String,
    },
    /// The catalog refused to freeze the pack (e.g. disabled).
    #[error("voice pack {pack_id:?} cannot be used: {message}")]
    CatalogRefused {
        /// Requested pack id.
        pack_id: String,
        /// The catalog's message.
        message: String,
    },
    /// The catalog found the pack id malformed.
    #[error("invalid pack_id: {message}")]
    CatalogInvalid {
        /// The catalog's message.
        message: String,
    },
    /// The blob store has no clip under the snapshot's digest.
    #[error(
        "reference clip {digest} is not in the blob store at {location}: synthesis must use the catalog's blob store (--blob-store / VOXPOOL_BLOB_STORE)"
    )]
    ReferenceMissing {
        /// The clip's digest.
        digest: String,
        /// The store's URL without credentials.
        location: String,
    },
    /// The blob under a clip's digest holds other bytes.
    #[error(
        "reference clip {digest} in the blob store at {location} does not match its digest (edited or corrupted); an operator must restore it"
    )]
    ReferenceCorrupt {
        /// The clip's digest.
        digest: String,
        /// The store's URL without credentials.
        location: String,
    },
    /// The blob store failed.
    #[error("the blob store at {location} does not answer; retry later")]
    BlobUnavailable {
        /// The store's URL without credentials.
        location: String,
        /// Its error (logged, never sent: it may name buckets or paths).
        cause: String,
    },
    /// The catalog could not be reached.
    #[error("the catalog at {url} is unavailable: {message}")]
    CatalogUnavailable {
        /// Catalog URL.
        url: String,
        /// Transport or status message.
        message: String,
    },
    /// The catalog answered something unusable.
    #[error("the catalog at {url} failed: {message}")]
    CatalogFailed {
        /// Catalog URL.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// A managed clone pack has no READY clone in a scope of its pool yet: one is being made.
    #[error(
        "voice pack {pack_id:?} is a cloned voice that is being made in clone scope {}; retry shortly",
        scopes.join(", ")
    )]
    ClonePending {
        /// The pack.
        pack_id: String,
        /// Where the clone is being made.
        scopes: Vec<String>,
        /// When to ask again.
        retry_after: Duration,
    },
    /// A managed clone pack cannot be cloned where it would be served.
    #[error("voice pack {pack_id:?} cannot be cloned: {message}")]
    CloneFailed {
        /// The pack.
        pack_id: String,
        /// The scope concerned, when one is.
        scope: String,
        /// Why, and what an operator does about it.
        message: String,
    },
    /// The usage store did not take an attempt's Charge in time (`[usage] on_store_down =
    /// "refuse"`): the vendor was sent nothing.
    #[error(
        "the usage store {store} did not take the call's usage record ({message}), so the vendor was sent nothing (usage.on_store_down = \"refuse\"); retry once the store answers"
    )]
    UsageStoreUnavailable {
        /// The store, as logs show it (no password).
        store: String,
        /// Why the record was not written.
        message: String,
    },
    /// The scheduler could not be reached (or its store is down).
    #[error("the scheduler at {url} is unavailable: {message}")]
    SchedulerUnavailable {
        /// Scheduler URL.
        url: String,
        /// Transport or status message.
        message: String,
    },
    /// The scheduler's pools disagree with this server's config.
    #[error(
        "the scheduler at {url} disagrees with this server's config: {message}; both must load the same pools file"
    )]
    SchedulerMismatch {
        /// Scheduler URL.
        url: String,
        /// The scheduler's message.
        message: String,
    },
    /// Every eligible key was full until the deadline.
    #[error("{message}{}", attempts_suffix(attempts))]
    PoolFull {
        /// Pool id.
        pool: String,
        /// The scheduler's message.
        message: String,
        /// The scheduler's retry hint.
        retry_after: Option<Duration>,
        /// Attempts made before the pool filled up.
        attempts: Vec<AttemptRecord>,
    },
    /// Failover ran out of keys or attempts (invariant 9).
    #[error("pool {pool:?}: {why}: {}", summary(attempts))]
    Exhausted {
        /// Pool id.
        pool: String,
        /// `all 3 keys failed`, `4 attempts failed (max_attempts)`, `every other key is cooling …`.
        why: String,
        /// Every attempt of the request.
        attempts: Vec<AttemptRecord>,
        /// When a key is expected back, if known.
        retry_after: Option<Duration>,
    },
    /// The vendor refused the request itself (CLIENT_ERROR): not retried.
    #[error("pool {pool:?}: the vendor refused the request ({attempt})")]
    VendorRejected {
        /// Pool id.
        pool: String,
        /// The refusing attempt.
        attempt: Box<AttemptRecord>,
    },
    /// The caller's deadline (or the server default) passed.
    #[error("deadline of {budget_ms}ms exceeded{}{}", pool.as_ref().map(|p| format!(" on pool {p:?}")).unwrap_or_default(), deadline_suffix(pool.is_some(), *in_call, attempts))]
    DeadlineExceeded {
        /// Pool id, once known.
        pool: Option<String>,
        /// The request's whole budget (ms).
        budget_ms: u64,
        /// Attempts finished.
        attempts: Vec<AttemptRecord>,
        /// The deadline passed while vendor calls were under way (they finish, or are cut at
        /// their first byte, in the background), not while waiting for a slot.
        in_call: bool,
    },
    /// Audio pieces could not be joined.
    #[error("pool {pool:?}: cannot join the audio pieces: {message}")]
    Audio {
        /// Pool id.
        pool: String,
        /// Why.
        message: String,
    },
    /// The joined audio is larger than one response message may be.
    #[error(
        "the audio is {bytes} bytes, over the {limit}-byte message limit (--max-message-bytes); use SynthesizeStream for long text"
    )]
    ResponseTooLarge {
        /// Audio size.
        bytes: usize,
        /// The server's message limit.
        limit: usize,
    },
    /// A vendor call broke after part of its chunk's audio had gone out (a stream that
    /// failed mid-way): not failed over, since the chunk would be spliced from two calls.
    #[error(
        "pool {pool:?}: the vendor stream broke during chunk {chunk} of {chunks} after {delivered} bytes of it were sent{}; synthesize the text again",
        attempt.as_ref().map(|a| format!(" ({a})")).unwrap_or_default()
    )]
    StreamBroken {
        /// Pool id.
        pool: String,
        /// 1-based chunk index.
        chunk: usize,
        /// Chunks of the request.
        chunks: usize,
        /// Bytes of the chunk's vendor audio sent before the break.
        delivered: u64,
        /// The broken attempt.
        attempt: Option<Box<AttemptRecord>>,
    },
    /// A stream that had sent audio failed: `cause` says why, the rest what the caller holds.
    #[error(
        "stream interrupted after {delivered_bytes} bytes in {delivered_messages} messages ({complete_chunks} of {chunks} text chunks complete): {cause}"
    )]
    Interrupted {
        /// Audio bytes sent to the caller.
        delivered_bytes: u64,
        /// Messages sent to the caller.
        delivered_messages: u64,
        /// Text chunks whose audio was sent whole.
        complete_chunks: usize,
        /// Chunks of the request.
        chunks: usize,
        /// What failed.
        cause: Box<SynthesisError>,
    },
    /// Admission (`crate::job::admission`): at the pool's pace the request would end after its
    /// deadline.
    #[error(
        "pool {pool:?}: {}: refused before any vendor call; {}",
        if *endangers_admitted {
            format!("{characters} more characters would make a request admitted earlier end in about {estimate_ms}ms, past its deadline in {deadline_ms}ms ({backlog_characters} characters ahead at the pool's current pace)")
        } else {
            format!("{characters} characters would take about {estimate_ms}ms at the pool's current pace ({backlog_characters} characters of other requests ahead), past the deadline in {deadline_ms}ms")
        },
        if retry_after.is_some() { "retry when the pool has caught up (RetryInfo), send a longer deadline, or submit it as a job" } else { "send a longer deadline, a shorter text, or submit it as a job" }
    )]
    DeadlineUnreachable {
        /// Pool id.
        pool: String,
        /// The request's characters.
        characters: u64,
        /// When it would end.
        estimate_ms: u64,
        /// Time left before its deadline.
        deadline_ms: u64,
        /// Characters of requests admitted before it in its class or a class served first.
        backlog_characters: u64,
        /// When the work ahead should be done; `None` when the request alone cannot fit.
        retry_after: Option<Duration>,
        /// Refused because it would make a request admitted before it miss its deadline
        /// (then `estimate_ms` and `deadline_ms` are that request's).
        endangers_admitted: bool,
    },
    /// The caller took no audio for `synthesis.stalled_reader_timeout_ms`: the stream was cut
    /// off and its calls and leases released.
    #[error(
        "pool {pool:?}: the caller read nothing for {stalled_ms}ms (synthesis.stalled_reader_timeout_ms) after {delivered_bytes} bytes; the stream was cut off: read the stream as it arrives, or use Synthesize"
    )]
    ReaderStalled {
        /// Pool id.
        pool: String,
        /// How long the caller took nothing.
        stalled_ms: u64,
        /// Audio bytes the caller had been sent.
        delivered_bytes: u64,
    },
    /// An adapter panicked (a bug); the lease was released.
    #[error("the {provider} adapter failed unexpectedly; the request was not completed")]
    AdapterPanicked {
        /// Provider id.
        provider: String,
    },
}

impl SynthesisError {
    /// INVALID_ARGUMENT naming `field` (the request's field path, e.g. `params.rate`).
    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        Self::InvalidArgument {
            field: field.to_owned(),
            message: message.into(),
        }
    }

    /// A join failure of `pool`'s audio pieces.
    pub fn audio(pool: &str, e: &AudioError) -> Self {
        SynthesisError::Audio {
            pool: pool.to_owned(),
            message: e.to_string(),
        }
    }
}

/// "voice pack \"x\" not found in the catalog" once, then `what_to_do` (each front names its
/// own listing); the catalog's own message only when it adds something (it usually says the
/// same: "voice pack \"x\" not found").
pub(crate) fn not_found_text(pack_id: &str, message: &str, what_to_do: &str) -> String {
    let extra = if message.contains(pack_id) || message.is_empty() {
        String::new()
    } else {
        format!(" ({message})")
    };
    format!("voice pack {pack_id:?} not found in the catalog{extra}: {what_to_do}")
}

/// What a deadline ran into: vendor calls under way, the attempts made, or (a known pool, none
/// made) the wait for a slot.
fn deadline_suffix(pool_known: bool, in_call: bool, attempts: &[AttemptRecord]) -> String {
    if in_call {
        format!(
            " while vendor calls were still answering (send a longer deadline for this text){}",
            attempts_suffix(attempts)
        )
    } else if pool_known && attempts.is_empty() {
        " while waiting for a free key slot (every eligible key stayed at capacity or cooling): send a longer deadline or retry later".to_owned()
    } else {
        attempts_suffix(attempts)
    }
}

fn attempts_suffix(attempts: &[AttemptRecord]) -> String {
    if attempts.is_empty() {
        String::new()
    } else {
        format!(" (attempts: {})", summary(attempts))
    }
}

mod class;
mod status;

#[cfg(test)]
mod tests;

/// The scheduler's own refusal, which names the budget, what is used and reserved by calls in
/// flight, what this call asked, the reset and what to do; marked as a budget's when the
/// scheduler's answer carried no budget (an older scheduler).
fn budget_text(message: &str, details: &std::collections::HashMap<String, String>) -> String {
    if details.get("budget").is_some_and(|b| !b.is_empty()) {
        message.to_owned()
    } else {
        format!("budget exhausted: {message}")
    }
}
