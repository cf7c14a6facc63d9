//! The one exhaustive mapping of [`SynthesisError`] to `tonic::Status` (the parent module's
//! doc): the code, the message, and an `ErrorInfo` whose reason is a typed
//! [`SynthesisReason`] with metadata naming the pool, key, URL and every attempt. Code,
//! reason, field and retry time are the error's own classification (`class.rs`, which the
//! HTTP front reads too); this file adds only what each failure names.

use std::collections::HashMap;

use tonic::Status;
use tonic_types::{ErrorDetails, StatusExt};
use voxpool_domain::contract::SynthesisReason;
use voxpool_domain::status::{ERROR_DOMAIN, invalid_argument, not_found, with_info};

use super::SynthesisError;
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

impl From<SynthesisError> for Status {
    fn from(e: SynthesisError) -> Self {
        log_answered(&e);
        let message = e.to_string();
        let code = e.code();
        let retry_after = e.retry_after();
        let Some(reason) = e.reason() else {
            // A malformed request field: `BadRequest` names it.
            return match e {
                SynthesisError::InvalidArgument { field, message } => {
                    invalid_argument(&field, message)
                }
                SynthesisError::Param(p) => invalid_argument(
                    &p.param,
                    format!(
                        "{} cannot apply {} = {}: {}",
                        p.provider, p.param, p.value, p.reason
                    ),
                ),
                SynthesisError::CatalogInvalid { message } => invalid_argument("pack_id", message),
                e => Status::with_error_details(
                    code,
                    message.clone(),
                    ErrorDetails::with_bad_request_violation(
                        e.field().unwrap_or("request"),
                        message,
                    ),
                ),
            };
        };
        match e {
            SynthesisError::UnknownPool { tts_model_id, .. } => {
                not_found("voxpool.dev/Pool", &tts_model_id, reason.as_str(), message)
            }
            SynthesisError::CatalogNotFound { pack_id, .. } => {
                not_found("voxpool.dev/VoicePack", &pack_id, reason.as_str(), message)
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
            e => with_info(code, message, reason.as_str(), metadata(e), retry_after),
        }
    }
}

/// What an operator must see of a failure that is the service's, not the caller's.
fn log_answered(e: &SynthesisError) {
    match e {
        SynthesisError::ReferenceCorrupt { digest, location } => {
            tracing::error!(%digest, blob_store = %location, "a reference clip's bytes do not match its digest");
        }
        SynthesisError::BlobUnavailable { location, cause } => {
            tracing::warn!(blob_store = %location, error = %voxpool_domain::untrusted::quote(cause), "reference clips: the blob store failed");
        }
        _ => {}
    }
}

/// The `ErrorInfo` metadata of a failure with a reason: what it names (pool, key, URL,
/// attempts, figures).
fn metadata(e: SynthesisError) -> HashMap<String, String> {
    let pairs = |pairs: &[(&str, String)]| -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    };
    match e {
        SynthesisError::ProviderMismatch {
            pool,
            pool_provider,
            provider,
        } => pairs(&[
            ("pool", pool),
            ("pool_provider", pool_provider),
            ("provider", provider),
        ]),
        SynthesisError::NoAdapter { pool, provider } => {
            pairs(&[("pool", pool), ("provider", provider)])
        }
        SynthesisError::NoCredentials { pool, .. } | SynthesisError::Audio { pool, .. } => {
            pairs(&[("pool", pool)])
        }
        SynthesisError::UnknownUpstream { pool, upstream, .. } => {
            pairs(&[("pool", pool), ("upstream", upstream)])
        }
        SynthesisError::CatalogRefused { pack_id, .. } => pairs(&[("pack_id", pack_id)]),
        SynthesisError::ReferenceMissing { digest, location }
        | SynthesisError::ReferenceCorrupt { digest, location } => {
            pairs(&[("digest", digest), ("blob_store", location)])
        }
        SynthesisError::BlobUnavailable { location, .. } => pairs(&[("blob_store", location)]),
        SynthesisError::CatalogUnavailable { url, .. }
        | SynthesisError::CatalogFailed { url, .. } => pairs(&[("catalog", url)]),
        SynthesisError::SchedulerUnavailable { url, .. }
        | SynthesisError::SchedulerMismatch { url, .. } => pairs(&[("scheduler", url)]),
        SynthesisError::BudgetExhausted { pool, details, .. } => {
            let mut md: HashMap<String, String> = details
                .into_iter()
                .filter(|(k, _)| {
                    matches!(
                        k.as_str(),
                        "budget"
                            | "subject"
                            | "used"
                            | "reserved"
                            | "limit"
                            | "resets_at_ms"
                            | "unit"
                    )
                })
                .collect();
            md.insert("pool".into(), pool);
            md
        }
        SynthesisError::PoolFull { pool, attempts, .. }
        | SynthesisError::Exhausted { pool, attempts, .. } => attempt_metadata(&pool, &attempts),
        SynthesisError::VendorRejected { pool, attempt } => {
            attempt_metadata(&pool, std::slice::from_ref(attempt.as_ref()))
        }
        SynthesisError::DeadlineExceeded { pool, attempts, .. } => {
            attempt_metadata(pool.as_deref().unwrap_or(""), &attempts)
        }
        SynthesisError::ResponseTooLarge { bytes, limit } => {
            pairs(&[("bytes", bytes.to_string()), ("limit", limit.to_string())])
        }
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
            md
        }
        SynthesisError::DeadlineUnreachable {
            pool,
            characters,
            estimate_ms,
            deadline_ms,
            backlog_characters,
            endangers_admitted,
            ..
        } => pairs(&[
            ("pool", pool),
            ("characters", characters.to_string()),
            ("estimate_ms", estimate_ms.to_string()),
            ("deadline_ms", deadline_ms.to_string()),
            ("backlog_characters", backlog_characters.to_string()),
            ("endangers_admitted", endangers_admitted.to_string()),
        ]),
        SynthesisError::ReaderStalled {
            pool,
            stalled_ms,
            delivered_bytes,
        } => pairs(&[
            ("pool", pool),
            ("stalled_ms", stalled_ms.to_string()),
            ("delivered_bytes", delivered_bytes.to_string()),
        ]),
        SynthesisError::AdapterPanicked { provider } => pairs(&[("provider", provider)]),
        SynthesisError::ClonePending {
            pack_id, scopes, ..
        } => pairs(&[("pack_id", pack_id), ("scopes", scopes.join(","))]),
        SynthesisError::UsageStoreUnavailable { store, .. } => pairs(&[("store", store)]),
        SynthesisError::CloneFailed { pack_id, scope, .. } => {
            pairs(&[("pack_id", pack_id), ("scope", scope)])
        }
        // Answered above (no reason, a resource, or the cause's own metadata).
        SynthesisError::InvalidArgument { .. }
        | SynthesisError::Param(_)
        | SynthesisError::UnknownProvider { .. }
        | SynthesisError::CatalogInvalid { .. }
        | SynthesisError::UnknownPool { .. }
        | SynthesisError::CatalogNotFound { .. }
        | SynthesisError::Interrupted { .. } => HashMap::new(),
    }
}
