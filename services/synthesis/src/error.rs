//! The synthesis error enum and its one exhaustive mapping to `tonic::Status`.
//!
//! No catch-all arm: a new variant must be classified. Messages are lowercase, name the field,
//! pool, key or URL involved and never carry a credential or a panic payload. Failover errors
//! carry every attempt in the message and in `ErrorInfo` metadata (`attempt_1`, …,
//! `keys_tried`, `upstreams_tried`), plus `RetryInfo` when a retry time is known.

use std::{collections::HashMap, time::Duration};

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};
use voxpool_shared::contract::Outcome;
use voxpool_shared::status::{ERROR_DOMAIN, invalid_argument, not_found, with_info};

use crate::{
    adapters::ParamError,
    record::{AttemptRecord, summary},
};

/// Every way a synthesis RPC can fail.
#[derive(Debug, thiserror::Error)]
pub enum SynthesisError {
    /// A request field is missing, malformed or out of range.
    #[error("invalid {field}: {message}")]
    InvalidArgument {
        /// Proto field path (`text`, `snapshot_json`, `digest`, `format`, …).
        field: String,
        /// What is wrong and what is accepted.
        message: String,
    },
    /// The vendor cannot apply a param, format or sample rate (invariant 8).
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
    #[error("{}", not_found_text(pack_id, message))]
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
    /// An adapter panicked (a bug); the lease was released.
    #[error("the {provider} adapter failed unexpectedly; the request was not completed")]
    AdapterPanicked {
        /// Provider id.
        provider: String,
    },
}

/// "voice pack \"x\" not found in the catalog" once, with what to do; the catalog's own message
/// only when it adds something (it usually says the same: "voice pack \"x\" not found").
fn not_found_text(pack_id: &str, message: &str) -> String {
    let extra = if message.contains(pack_id) || message.is_empty() {
        String::new()
    } else {
        format!(" ({message})")
    };
    format!(
        "voice pack {pack_id:?} not found in the catalog{extra}: check the packId (ListVoicePacks lists the enabled packs)"
    )
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

/// `ErrorInfo` metadata listing every attempt (module doc).
fn attempt_metadata(pool: &str, attempts: &[AttemptRecord]) -> HashMap<String, String> {
    let mut md = HashMap::from([
        ("pool".to_owned(), pool.to_owned()),
        ("attempts".to_owned(), attempts.len().to_string()),
    ]);
    let mut keys: Vec<&str> = Vec::new();
    for a in attempts {
        if !keys.contains(&a.key_id.as_str()) {
            keys.push(&a.key_id);
        }
    }
    let mut upstreams: Vec<&str> = attempts.iter().map(|a| a.upstream_id.as_str()).collect();
    upstreams.sort_unstable();
    upstreams.dedup();
    md.insert("keys_tried".into(), keys.join(","));
    md.insert("upstreams_tried".into(), upstreams.join(","));
    for (i, a) in attempts.iter().enumerate() {
        md.insert(format!("attempt_{}", i + 1), a.to_string());
    }
    md
}

fn info(code: Code, message: String, reason: &str, md: HashMap<String, String>) -> Status {
    with_info(code, message, reason, md, None)
}

impl From<SynthesisError> for Status {
    fn from(e: SynthesisError) -> Self {
        let message = e.to_string();
        match e {
            SynthesisError::InvalidArgument { field, message } => invalid_argument(&field, message),
            SynthesisError::Param(p) => {
                let description = format!(
                    "{} cannot apply {} = {}: {}",
                    p.provider, p.param, p.value, p.reason
                );
                invalid_argument(&p.param, description)
            }
            SynthesisError::UnknownPool { tts_model_id, .. } => {
                not_found("voxpool.dev/Pool", &tts_model_id, message)
            }
            SynthesisError::UnknownProvider { .. } => Status::with_error_details(
                Code::InvalidArgument,
                message.clone(),
                ErrorDetails::with_bad_request_violation("snapshot.provider", message),
            ),
            SynthesisError::ProviderMismatch {
                pool,
                pool_provider,
                provider,
            } => info(
                Code::FailedPrecondition,
                message,
                "PROVIDER_MISMATCH",
                HashMap::from([
                    ("pool".into(), pool),
                    ("pool_provider".into(), pool_provider),
                    ("provider".into(), provider),
                ]),
            ),
            SynthesisError::NoAdapter { pool, provider } => info(
                Code::FailedPrecondition,
                message,
                "NO_ADAPTER",
                HashMap::from([("pool".into(), pool), ("provider".into(), provider)]),
            ),
            SynthesisError::NoCredentials { pool, .. } => info(
                Code::FailedPrecondition,
                message,
                "CREDENTIALS_MISSING",
                HashMap::from([("pool".into(), pool)]),
            ),
            SynthesisError::UnknownUpstream { pool, upstream, .. } => info(
                Code::FailedPrecondition,
                message,
                "UNKNOWN_UPSTREAM",
                HashMap::from([("pool".into(), pool), ("upstream".into(), upstream)]),
            ),
            SynthesisError::CatalogNotFound { pack_id, .. } => {
                not_found("voxpool.dev/VoicePack", &pack_id, message)
            }
            SynthesisError::CatalogRefused { pack_id, .. } => info(
                Code::FailedPrecondition,
                message,
                "PACK_UNUSABLE",
                HashMap::from([("pack_id".into(), pack_id)]),
            ),
            SynthesisError::CatalogInvalid { message } => invalid_argument("pack_id", message),
            SynthesisError::CatalogUnavailable { url, .. } => info(
                Code::Unavailable,
                message,
                "CATALOG_UNAVAILABLE",
                HashMap::from([("catalog".into(), url)]),
            ),
            SynthesisError::CatalogFailed { url, .. } => info(
                Code::Internal,
                message,
                "CATALOG_FAILED",
                HashMap::from([("catalog".into(), url)]),
            ),
            SynthesisError::SchedulerUnavailable { url, .. } => with_info(
                Code::Unavailable,
                message,
                "SCHEDULER_UNAVAILABLE",
                HashMap::from([("scheduler".into(), url)]),
                Some(Duration::from_millis(500)),
            ),
            SynthesisError::SchedulerMismatch { url, .. } => info(
                Code::FailedPrecondition,
                message,
                "SCHEDULER_CONFIG_MISMATCH",
                HashMap::from([("scheduler".into(), url)]),
            ),
            SynthesisError::PoolFull {
                pool,
                retry_after,
                attempts,
                ..
            } => with_info(
                Code::ResourceExhausted,
                message,
                "POOL_FULL",
                attempt_metadata(&pool, &attempts),
                retry_after,
            ),
            SynthesisError::Exhausted {
                pool,
                attempts,
                retry_after,
                ..
            } => {
                let throttled = !attempts.is_empty()
                    && attempts.iter().all(|a| {
                        matches!(
                            a.outcome,
                            Outcome::RateLimited
                                | Outcome::QuotaExhausted
                                | Outcome::ConcurrencyLimited
                        )
                    });
                let code = if throttled {
                    Code::ResourceExhausted
                } else {
                    Code::Unavailable
                };
                with_info(
                    code,
                    message,
                    "KEYS_EXHAUSTED",
                    attempt_metadata(&pool, &attempts),
                    retry_after,
                )
            }
            SynthesisError::VendorRejected { pool, attempt } => info(
                Code::InvalidArgument,
                message,
                "VENDOR_REJECTED",
                attempt_metadata(&pool, std::slice::from_ref(attempt.as_ref())),
            ),
            SynthesisError::DeadlineExceeded { pool, attempts, .. } => {
                let md = attempt_metadata(pool.as_deref().unwrap_or(""), &attempts);
                info(Code::DeadlineExceeded, message, "DEADLINE_EXCEEDED", md)
            }
            SynthesisError::Audio { pool, .. } => info(
                Code::Internal,
                message,
                "AUDIO_JOIN_FAILED",
                HashMap::from([("pool".into(), pool)]),
            ),
            SynthesisError::ResponseTooLarge { bytes, limit } => info(
                Code::ResourceExhausted,
                message,
                "RESPONSE_TOO_LARGE",
                HashMap::from([
                    ("bytes".into(), bytes.to_string()),
                    ("limit".into(), limit.to_string()),
                ]),
            ),
            SynthesisError::StreamBroken {
                pool,
                chunk,
                chunks,
                delivered,
                attempt,
            } => {
                let mut md =
                    attempt_metadata(&pool, attempt.as_deref().map_or(&[], std::slice::from_ref));
                md.insert("failed_chunk".into(), chunk.to_string());
                md.insert("chunks".into(), chunks.to_string());
                md.insert("chunk_bytes_delivered".into(), delivered.to_string());
                info(Code::Aborted, message, "VENDOR_STREAM_BROKEN", md)
            }
            SynthesisError::Interrupted {
                delivered_bytes,
                delivered_messages,
                complete_chunks,
                chunks,
                cause,
            } => {
                let failed_chunk = match cause.as_ref() {
                    SynthesisError::StreamBroken { chunk, .. } => *chunk,
                    _ => complete_chunks + 1,
                };
                let inner = Status::from(*cause);
                let mut details = inner.get_error_details();
                let mut info = details.error_info().cloned().unwrap_or_else(|| {
                    tonic_types::ErrorInfo::new("STREAM_INTERRUPTED", ERROR_DOMAIN, HashMap::new())
                });
                for (k, v) in [
                    ("delivered_bytes", delivered_bytes.to_string()),
                    ("delivered_messages", delivered_messages.to_string()),
                    ("complete_chunks", complete_chunks.to_string()),
                    ("failed_chunk", failed_chunk.to_string()),
                    ("chunks", chunks.to_string()),
                ] {
                    info.metadata.insert(k.to_owned(), v);
                }
                details.set_error_info(info.reason, info.domain, info.metadata);
                Status::with_error_details(inner.code(), message, details)
            }
            SynthesisError::AdapterPanicked { provider } => {
                let mut details = ErrorDetails::new();
                details.set_error_info(
                    "ADAPTER_FAILED",
                    ERROR_DOMAIN,
                    HashMap::from([("provider".into(), provider)]),
                );
                Status::with_error_details(Code::Internal, message, details)
            }
        }
    }
}

#[cfg(test)]
#[path = "error_tests.rs"]
mod tests;
