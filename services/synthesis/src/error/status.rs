//! The one exhaustive mapping of [`SynthesisError`] to `tonic::Status` (the parent module's
//! doc): the code, the message, and an `ErrorInfo` whose reason is a typed
//! [`SynthesisReason`] with metadata naming the pool, key, URL and every attempt. Code,
//! reason, field and retry time are the error's own classification (`class.rs`, which the
//! HTTP front reads too); the unit tests hold the two together.

use std::collections::HashMap;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};
use voxpool_domain::contract::SynthesisReason;
use voxpool_domain::status::{ERROR_DOMAIN, invalid_argument, not_found, with_info};

use super::{SynthesisError, class::UNREACHABLE_RETRY};
use crate::record::AttemptRecord;

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
        let code = e.code();
        match e {
            SynthesisError::InvalidArgument { field, message } => invalid_argument(&field, message),
            SynthesisError::Param(p) => {
                let description = format!(
                    "{} cannot apply {} = {}: {}",
                    p.provider, p.param, p.value, p.reason
                );
                invalid_argument(&p.param, description)
            }
            SynthesisError::UnknownPool { tts_model_id, .. } => not_found(
                "voxpool.dev/Pool",
                &tts_model_id,
                SynthesisReason::PoolNotFound.as_str(),
                message,
            ),
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
                SynthesisReason::ProviderMismatch.as_str(),
                HashMap::from([
                    ("pool".into(), pool),
                    ("pool_provider".into(), pool_provider),
                    ("provider".into(), provider),
                ]),
            ),
            SynthesisError::NoAdapter { pool, provider } => info(
                Code::FailedPrecondition,
                message,
                SynthesisReason::NoAdapter.as_str(),
                HashMap::from([("pool".into(), pool), ("provider".into(), provider)]),
            ),
            SynthesisError::NoCredentials { pool, .. } => info(
                Code::FailedPrecondition,
                message,
                SynthesisReason::CredentialsMissing.as_str(),
                HashMap::from([("pool".into(), pool)]),
            ),
            SynthesisError::UnknownUpstream { pool, upstream, .. } => info(
                Code::FailedPrecondition,
                message,
                SynthesisReason::UnknownUpstream.as_str(),
                HashMap::from([("pool".into(), pool), ("upstream".into(), upstream)]),
            ),
            SynthesisError::CatalogNotFound { pack_id, .. } => not_found(
                "voxpool.dev/VoicePack",
                &pack_id,
                SynthesisReason::PackNotFound.as_str(),
                message,
            ),
            SynthesisError::CatalogRefused { pack_id, .. } => info(
                Code::FailedPrecondition,
                message,
                SynthesisReason::PackUnusable.as_str(),
                HashMap::from([("pack_id".into(), pack_id)]),
            ),
            SynthesisError::CatalogInvalid { message } => invalid_argument("pack_id", message),
            SynthesisError::ReferenceMissing { digest, location } => info(
                Code::FailedPrecondition,
                message,
                SynthesisReason::ReferenceMissing.as_str(),
                HashMap::from([("digest".into(), digest), ("blob_store".into(), location)]),
            ),
            SynthesisError::ReferenceCorrupt { digest, location } => {
                tracing::error!(%digest, blob_store = %location, "a reference clip's bytes do not match its digest");
                info(
                    Code::FailedPrecondition,
                    message,
                    SynthesisReason::ReferenceCorrupt.as_str(),
                    HashMap::from([("digest".into(), digest), ("blob_store".into(), location)]),
                )
            }
            SynthesisError::BlobUnavailable { location, cause } => {
                tracing::warn!(blob_store = %location, error = %voxpool_domain::untrusted::quote(&cause), "reference clips: the blob store failed");
                info(
                    Code::Unavailable,
                    message,
                    SynthesisReason::BlobStoreUnavailable.as_str(),
                    HashMap::from([("blob_store".into(), location)]),
                )
            }
            // The same pause as the scheduler's: long enough for a restarted catalog to listen.
            SynthesisError::CatalogUnavailable { url, .. } => with_info(
                Code::Unavailable,
                message,
                SynthesisReason::CatalogUnavailable.as_str(),
                HashMap::from([("catalog".into(), url)]),
                Some(UNREACHABLE_RETRY),
            ),
            SynthesisError::CatalogFailed { url, .. } => info(
                Code::Internal,
                message,
                SynthesisReason::CatalogFailed.as_str(),
                HashMap::from([("catalog".into(), url)]),
            ),
            SynthesisError::SchedulerUnavailable { url, .. } => with_info(
                Code::Unavailable,
                message,
                SynthesisReason::SchedulerUnavailable.as_str(),
                HashMap::from([("scheduler".into(), url)]),
                Some(UNREACHABLE_RETRY),
            ),
            SynthesisError::SchedulerMismatch { url, .. } => info(
                Code::FailedPrecondition,
                message,
                SynthesisReason::SchedulerConfigMismatch.as_str(),
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
                SynthesisReason::PoolFull.as_str(),
                attempt_metadata(&pool, &attempts),
                retry_after,
            ),
            SynthesisError::Exhausted {
                pool,
                attempts,
                retry_after,
                ..
            } => {
                // Every key throttled is RESOURCE_EXHAUSTED, anything else UNAVAILABLE.
                with_info(
                    code,
                    message,
                    SynthesisReason::KeysExhausted.as_str(),
                    attempt_metadata(&pool, &attempts),
                    retry_after,
                )
            }
            SynthesisError::VendorRejected { pool, attempt } => info(
                Code::InvalidArgument,
                message,
                SynthesisReason::VendorRejected.as_str(),
                attempt_metadata(&pool, std::slice::from_ref(attempt.as_ref())),
            ),
            SynthesisError::DeadlineExceeded { pool, attempts, .. } => info(
                Code::DeadlineExceeded,
                message,
                SynthesisReason::DeadlineExceeded.as_str(),
                attempt_metadata(pool.as_deref().unwrap_or(""), &attempts),
            ),
            SynthesisError::Audio { pool, .. } => info(
                Code::Internal,
                message,
                SynthesisReason::AudioJoinFailed.as_str(),
                HashMap::from([("pool".into(), pool)]),
            ),
            SynthesisError::ResponseTooLarge { bytes, limit } => info(
                Code::ResourceExhausted,
                message,
                SynthesisReason::ResponseTooLarge.as_str(),
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
                info(
                    Code::Aborted,
                    message,
                    SynthesisReason::VendorStreamBroken.as_str(),
                    md,
                )
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
                    tonic_types::ErrorInfo::new(
                        SynthesisReason::StreamInterrupted.as_str(),
                        ERROR_DOMAIN,
                        HashMap::new(),
                    )
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
            SynthesisError::DeadlineUnreachable {
                pool,
                characters,
                estimate_ms,
                deadline_ms,
                backlog_characters,
                retry_after,
                endangers_admitted,
            } => with_info(
                Code::ResourceExhausted,
                message,
                SynthesisReason::DeadlineUnreachable.as_str(),
                HashMap::from([
                    ("pool".into(), pool),
                    ("characters".into(), characters.to_string()),
                    ("estimate_ms".into(), estimate_ms.to_string()),
                    ("deadline_ms".into(), deadline_ms.to_string()),
                    ("backlog_characters".into(), backlog_characters.to_string()),
                    ("endangers_admitted".into(), endangers_admitted.to_string()),
                ]),
                retry_after,
            ),
            SynthesisError::ReaderStalled {
                pool,
                stalled_ms,
                delivered_bytes,
            } => {
                let mut details = ErrorDetails::new();
                details.set_error_info(
                    SynthesisReason::ReaderStalled.as_str(),
                    ERROR_DOMAIN,
                    HashMap::from([
                        ("pool".into(), pool),
                        ("stalled_ms".into(), stalled_ms.to_string()),
                        ("delivered_bytes".into(), delivered_bytes.to_string()),
                    ]),
                );
                Status::with_error_details(Code::Aborted, message, details)
            }
            SynthesisError::AdapterPanicked { provider } => {
                let mut details = ErrorDetails::new();
                details.set_error_info(
                    SynthesisReason::AdapterFailed.as_str(),
                    ERROR_DOMAIN,
                    HashMap::from([("provider".into(), provider)]),
                );
                Status::with_error_details(Code::Internal, message, details)
            }
        }
    }
}
