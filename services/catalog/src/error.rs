//! The catalog's error enum and its one exhaustive mapping to `tonic::Status`.
//!
//! No catch-all arm: a new variant must be classified. Messages are lowercase, name the pack
//! or field involved and say what to do; details carry `google.rpc` BadRequest (every field
//! violation), ResourceInfo (the pack) with ErrorInfo, ErrorInfo (reason + metadata) or
//! PreconditionFailure.
//! Database errors never reach `grpc-message`: they are logged with their cause and the
//! caller gets a generic message.

use std::collections::HashMap;

use sea_orm::{DbErr, RuntimeErr};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, FieldViolation, StatusExt};
use voxpool_domain::contract::CatalogReason;
use voxpool_domain::status::{ERROR_DOMAIN, invalid_argument, not_found, with_info};

/// The `ResourceInfo.resource_type` of a voice pack.
pub const PACK_RESOURCE: &str = "voxpool.dev/VoicePack";

/// One invalid request field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Proto field path, e.g. `voice_pack.params.pitch_pct` or `update_mask.paths[1]`.
    pub field: String,
    /// What is wrong and what is accepted.
    pub description: String,
}

/// Every way a catalog operation can fail.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// One or more request fields are malformed or out of range (never empty).
    #[error("{}", violations_message(violations))]
    InvalidArgument {
        /// The violations, in field order.
        violations: Vec<Violation>,
    },
    /// No pack has this id.
    #[error("voice pack {id:?} not found")]
    NotFound {
        /// The requested id.
        id: String,
    },
    /// Another pack has the same identity (provider, model, voice_id, params, extra, clips).
    #[error(
        "voice pack {existing_id:?} already has this provider, model, voice_id, params, extra \
         and reference clips; change params, extra or the clips to make a different pack"
    )]
    AlreadyExists {
        /// The pack that holds the identity.
        existing_id: String,
    },
    /// `expected_version` is not the pack's current version.
    #[error(
        "voice pack {id:?} is at version {current}, not the expected {expected}; read it again and retry"
    )]
    VersionConflict {
        /// The pack.
        id: String,
        /// The version the caller read.
        expected: i64,
        /// The version in the database.
        current: i64,
    },
    /// Without `expected_version`, concurrent writers kept winning the race.
    #[error("voice pack {id:?} changed {attempts} times while this update was applied; retry")]
    Contention {
        /// The pack.
        id: String,
        /// Attempts made.
        attempts: u32,
    },
    /// FreezeSnapshot / BindVoicePack on a disabled pack.
    #[error("voice pack {id:?} is disabled; an admin must EnableVoicePack before it can be frozen")]
    PackDisabled {
        /// The pack.
        id: String,
    },
    /// No clip of the pack has this digest.
    #[error("voice pack {id:?} has no reference clip {digest:?}; ListReferences shows its clips")]
    ReferenceNotFound {
        /// The pack.
        id: String,
        /// The digest asked for.
        digest: String,
    },
    /// AddReference on a pack whose provider does not speak from reference audio.
    #[error(
        "voice pack {id:?} has provider {provider}, which speaks no reference audio; reference \
         clips belong to selfhosted packs (zero-shot servers) and to managed clones (kind CLONED \
         with no voice_id and no upstream_ids, cloned at the vendor from the clips)"
    )]
    ReferencesNotAccepted {
        /// The pack.
        id: String,
        /// Its provider.
        provider: String,
    },
    /// AddReference on a pack that holds the most clips.
    #[error(
        "voice pack {id:?} already holds {limit} reference clips, the most a pack may; remove one \
         (RemoveReference) first"
    )]
    TooManyReferences {
        /// The pack.
        id: String,
        /// The limit.
        limit: usize,
    },
    /// AddReference of a clip the pack already has.
    #[error("voice pack {id:?} already has the reference clip {digest}")]
    ReferenceExists {
        /// The pack.
        id: String,
        /// The clip.
        digest: String,
    },
    /// The blob store that keeps clips failed.
    #[error("the blob store that keeps reference clips does not answer; retry later")]
    BlobUnavailable {
        /// The store's error (logged, never sent to callers: it may name paths or buckets).
        cause: String,
    },
    /// AddReference while the most clips the catalog decodes at once are being decoded, for
    /// longer than an upload waits for its turn.
    #[error(
        "{limit} reference clips are being checked already (the catalog decodes at most {limit} \
         at once, to bound its memory) and this one waited {waited_ms} ms for its turn; retry \
         after the RetryInfo delay"
    )]
    ClipUploadsBusy {
        /// Clips decoded at once.
        limit: usize,
        /// How long the upload waited.
        waited_ms: u64,
    },
    /// A stored row cannot be decoded (someone edited the database by hand).
    #[error("stored voice pack {id:?} is unreadable: {message}")]
    CorruptRow {
        /// The pack.
        id: String,
        /// What could not be decoded.
        message: String,
    },
    /// The usage ledger is not served here (no `--usage-store`) or not open yet.
    #[error("{why}")]
    UsageUnavailable {
        /// What is missing and what to do.
        why: String,
    },
    /// GetUsage matched more rows than it answers.
    #[error(
        "the query matches more than {limit} usage rows; page through them with ListUsage, or \
         narrow the days or group by fewer dimensions"
    )]
    UsageTooManyRows {
        /// The most rows GetUsage answers.
        limit: u64,
    },
    /// A clone operation was refused ([`crate::clones::error::CloneError`]).
    #[error(transparent)]
    Clone(#[from] crate::clones::error::CloneError),
    /// The database cannot be reached (connection refused, pool timeout, I/O).
    #[error("the catalog database is unreachable; retry later")]
    Unavailable {
        /// The driver error (logged, never sent to callers).
        source: DbErr,
    },
    /// Any other database failure.
    #[error("the catalog database failed (details are in the catalog log)")]
    Database {
        /// The driver error (logged, never sent to callers).
        source: DbErr,
    },
}

fn violations_message(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| format!("invalid {}: {}", v.field, v.description))
        .collect::<Vec<_>>()
        .join("; ")
}

impl CatalogError {
    /// INVALID_ARGUMENT for one field.
    pub fn invalid(field: impl Into<String>, description: impl Into<String>) -> Self {
        CatalogError::InvalidArgument {
            violations: vec![Violation {
                field: field.into(),
                description: description.into(),
            }],
        }
    }
}

impl From<DbErr> for CatalogError {
    fn from(source: DbErr) -> Self {
        if is_unreachable(&source) {
            CatalogError::Unavailable { source }
        } else {
            CatalogError::Database { source }
        }
    }
}

/// True for errors that mean "the database is not there" rather than "the statement failed".
fn is_unreachable(e: &DbErr) -> bool {
    match e {
        DbErr::ConnectionAcquire(_) | DbErr::Conn(_) => true,
        DbErr::Exec(RuntimeErr::SqlxError(e)) | DbErr::Query(RuntimeErr::SqlxError(e)) => matches!(
            **e,
            sea_orm::sqlx::Error::Io(_)
                | sea_orm::sqlx::Error::PoolTimedOut
                | sea_orm::sqlx::Error::PoolClosed
                | sea_orm::sqlx::Error::Tls(_)
                | sea_orm::sqlx::Error::WorkerCrashed
        ),
        _ => false,
    }
}

fn metadata(pairs: &[(&str, String)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

impl From<CatalogError> for Status {
    fn from(e: CatalogError) -> Self {
        let message = e.to_string();
        match e {
            CatalogError::InvalidArgument { violations } => match violations.as_slice() {
                [one] => invalid_argument(&one.field, one.description.clone()),
                _ => Status::with_error_details(
                    Code::InvalidArgument,
                    message,
                    ErrorDetails::with_bad_request(
                        violations
                            .into_iter()
                            .map(|v| FieldViolation::new(v.field, v.description))
                            .collect::<Vec<_>>(),
                    ),
                ),
            },
            CatalogError::NotFound { id } => not_found(
                PACK_RESOURCE,
                &id,
                CatalogReason::PackNotFound.as_str(),
                message,
            ),
            CatalogError::AlreadyExists { existing_id } => {
                let mut details = ErrorDetails::new();
                details.set_resource_info(PACK_RESOURCE, existing_id.clone(), "", "");
                details.set_error_info(
                    CatalogReason::PackIdentityExists.as_str(),
                    ERROR_DOMAIN,
                    metadata(&[("existing_pack_id", existing_id)]),
                );
                Status::with_error_details(Code::AlreadyExists, message, details)
            }
            CatalogError::VersionConflict {
                id,
                expected,
                current,
            } => with_info(
                Code::Aborted,
                message,
                CatalogReason::VersionConflict.as_str(),
                metadata(&[
                    ("pack_id", id),
                    ("expected_version", expected.to_string()),
                    ("current_version", current.to_string()),
                ]),
                None,
            ),
            CatalogError::Contention { id, attempts } => with_info(
                Code::Aborted,
                message,
                CatalogReason::WriteContention.as_str(),
                metadata(&[("pack_id", id), ("attempts", attempts.to_string())]),
                None,
            ),
            CatalogError::PackDisabled { id } => {
                let mut details = ErrorDetails::with_precondition_failure_violation(
                    CatalogReason::PackDisabled.as_str(),
                    format!("{PACK_RESOURCE}/{id}"),
                    "the voice pack is disabled",
                );
                details.set_error_info(
                    CatalogReason::PackDisabled.as_str(),
                    ERROR_DOMAIN,
                    metadata(&[("pack_id", id)]),
                );
                Status::with_error_details(Code::FailedPrecondition, message, details)
            }
            CatalogError::ReferenceNotFound { id, digest } => with_info(
                Code::NotFound,
                message,
                CatalogReason::ReferenceNotFound.as_str(),
                metadata(&[("pack_id", id), ("digest", digest)]),
                None,
            ),
            CatalogError::ReferencesNotAccepted { id, provider } => {
                let mut details = ErrorDetails::with_precondition_failure_violation(
                    CatalogReason::ReferencesNotAccepted.as_str(),
                    format!("{PACK_RESOURCE}/{id}"),
                    "the pack's provider speaks no reference audio",
                );
                details.set_error_info(
                    CatalogReason::ReferencesNotAccepted.as_str(),
                    ERROR_DOMAIN,
                    metadata(&[("pack_id", id), ("provider", provider)]),
                );
                Status::with_error_details(Code::FailedPrecondition, message, details)
            }
            CatalogError::TooManyReferences { id, limit } => with_info(
                Code::FailedPrecondition,
                message,
                CatalogReason::TooManyReferences.as_str(),
                metadata(&[("pack_id", id), ("limit", limit.to_string())]),
                None,
            ),
            CatalogError::ReferenceExists { id, digest } => with_info(
                Code::AlreadyExists,
                message,
                CatalogReason::ReferenceExists.as_str(),
                metadata(&[("pack_id", id), ("digest", digest)]),
                None,
            ),
            CatalogError::BlobUnavailable { cause } => {
                tracing::warn!(error = %voxpool_domain::untrusted::quote(&cause), "blob store failed");
                with_info(
                    Code::Unavailable,
                    message,
                    CatalogReason::BlobStoreUnavailable.as_str(),
                    HashMap::new(),
                    Some(std::time::Duration::from_secs(1)),
                )
            }
            CatalogError::ClipUploadsBusy { limit, .. } => with_info(
                Code::ResourceExhausted,
                message,
                CatalogReason::ClipUploadsBusy.as_str(),
                metadata(&[("limit", limit.to_string())]),
                Some(std::time::Duration::from_secs(1)),
            ),
            CatalogError::CorruptRow { id, message: cause } => {
                tracing::error!(pack_id = %id, cause = %cause, "stored voice pack is unreadable");
                Status::internal(message)
            }
            CatalogError::UsageUnavailable { .. } => with_info(
                Code::Unavailable,
                message,
                CatalogReason::UsageUnavailable.as_str(),
                HashMap::new(),
                Some(std::time::Duration::from_secs(1)),
            ),
            CatalogError::UsageTooManyRows { limit } => {
                let reason = CatalogReason::UsageTooManyRows.as_str();
                let mut details = ErrorDetails::with_precondition_failure_violation(
                    reason,
                    "voxpool.catalog.v1.Usage/GetUsage",
                    format!("GetUsage answers at most {limit} rows; use ListUsage"),
                );
                details.set_error_info(
                    reason,
                    ERROR_DOMAIN,
                    metadata(&[("limit", limit.to_string())]),
                );
                Status::with_error_details(Code::FailedPrecondition, message, details)
            }
            CatalogError::Clone(e) => e.into(),
            CatalogError::Unavailable { source } => {
                tracing::warn!(error = %source, "catalog database unreachable");
                with_info(
                    Code::Unavailable,
                    message,
                    CatalogReason::DatabaseUnavailable.as_str(),
                    HashMap::new(),
                    Some(std::time::Duration::from_secs(1)),
                )
            }
            CatalogError::Database { source } => {
                tracing::error!(error = %source, "catalog database error");
                Status::internal(message)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_violation_is_listed_in_bad_request_details() {
        let e = CatalogError::InvalidArgument {
            violations: vec![
                Violation {
                    field: "voice_pack.tier".into(),
                    description: "required".into(),
                },
                Violation {
                    field: "voice_pack.model".into(),
                    description: "required".into(),
                },
            ],
        };
        let s = Status::from(e);
        assert_eq!(s.code(), Code::InvalidArgument);
        assert!(
            s.message().contains("invalid voice_pack.tier: required"),
            "{}",
            s.message()
        );
        let details = s.get_error_details();
        let fields: Vec<_> = details
            .bad_request()
            .expect("bad request")
            .field_violations
            .iter()
            .map(|v| v.field.clone())
            .collect();
        assert_eq!(fields, ["voice_pack.tier", "voice_pack.model"]);
    }

    #[test]
    fn already_exists_names_the_existing_pack_in_message_and_details() {
        let s = Status::from(CatalogError::AlreadyExists {
            existing_id: "vp_abc".into(),
        });
        assert_eq!(s.code(), Code::AlreadyExists);
        assert!(s.message().contains("vp_abc"));
        let d = s.get_error_details();
        assert_eq!(
            d.resource_info().expect("resource info").resource_name,
            "vp_abc"
        );
        assert_eq!(
            d.error_info().expect("error info").metadata["existing_pack_id"],
            "vp_abc"
        );
    }

    #[test]
    fn database_errors_do_not_leak_into_the_message() {
        let s = Status::from(CatalogError::from(DbErr::Custom(
            "SELECT secret_column".into(),
        )));
        assert_eq!(s.code(), Code::Internal);
        assert!(!s.message().contains("secret_column"));
        let s = Status::from(CatalogError::from(DbErr::ConnectionAcquire(
            sea_orm::ConnAcquireErr::Timeout,
        )));
        assert_eq!(s.code(), Code::Unavailable);
    }

    #[test]
    fn too_many_usage_rows_is_typed_and_says_to_page_or_narrow() {
        let s = Status::from(CatalogError::UsageTooManyRows { limit: 10_000 });
        assert_eq!(s.code(), Code::FailedPrecondition);
        assert!(
            s.message().contains("ListUsage") && s.message().contains("narrow"),
            "{}",
            s.message()
        );
        let details = s.get_error_details();
        let info = details.error_info().expect("error info");
        assert_eq!(info.reason, CatalogReason::UsageTooManyRows.as_str());
        assert_eq!(info.reason, "USAGE_TOO_MANY_ROWS");
        assert_eq!(
            info.metadata.get("limit").map(String::as_str),
            Some("10000")
        );
        let retry = voxpool_domain::contract::retry_of::<CatalogReason>(&s);
        assert_eq!(retry, voxpool_domain::contract::Retry::Never);
    }
}
