//! How a [`SynthesisError`] is classified, read by both fronts: its gRPC code, its typed
//! [`SynthesisReason`], the request field at fault, when a retry may succeed, and whether the
//! whole deadline went on waiting for a key slot. The gRPC status is built from these
//! (`status.rs`), and the HTTP front maps them to OpenAI's shape (`crate::front::error`)
//! without reading a status back.

use std::time::Duration;

use tonic::Code;
use voxpool_domain::contract::{Outcome, SynthesisReason};

use super::SynthesisError;
use crate::record::AttemptRecord;

/// How long a caller waits before trying an unreachable catalog or scheduler again: long
/// enough for a restarted one to listen.
pub(super) const UNREACHABLE_RETRY: Duration = Duration::from_millis(500);

impl SynthesisError {
    /// The gRPC code the failure is answered with (the HTTP front's status follows from it).
    pub fn code(&self) -> Code {
        match self {
            Self::InvalidArgument { .. }
            | Self::Param(_)
            | Self::UnknownProvider { .. }
            | Self::CatalogInvalid { .. }
            | Self::VendorRejected { .. } => Code::InvalidArgument,
            Self::UnknownPool { .. } | Self::CatalogNotFound { .. } => Code::NotFound,
            Self::ProviderMismatch { .. }
            | Self::NoAdapter { .. }
            | Self::NoCredentials { .. }
            | Self::UnknownUpstream { .. }
            | Self::CatalogRefused { .. }
            | Self::ReferenceMissing { .. }
            | Self::ReferenceCorrupt { .. }
            | Self::SchedulerMismatch { .. }
            | Self::CloneFailed { .. } => Code::FailedPrecondition,
            Self::BlobUnavailable { .. }
            | Self::ClonePending { .. }
            | Self::UsageStoreUnavailable { .. }
            | Self::CatalogUnavailable { .. }
            | Self::SchedulerUnavailable { .. } => Code::Unavailable,
            Self::CatalogFailed { .. } | Self::Audio { .. } | Self::AdapterPanicked { .. } => {
                Code::Internal
            }
            Self::PoolFull { .. }
            | Self::BudgetExhausted { .. }
            | Self::ResponseTooLarge { .. }
            | Self::DeadlineUnreachable { .. } => Code::ResourceExhausted,
            // Every key throttled: a full pool by another name; anything else: unavailable.
            Self::Exhausted { attempts, .. } if throttled(attempts) => Code::ResourceExhausted,
            Self::Exhausted { .. } => Code::Unavailable,
            Self::DeadlineExceeded { .. } => Code::DeadlineExceeded,
            Self::StreamBroken { .. } | Self::ReaderStalled { .. } => Code::Aborted,
            Self::Interrupted { cause, .. } => cause.code(),
        }
    }

    /// The typed reason (`ErrorInfo.reason`); `None` for a malformed request field, which
    /// names its field instead ([`SynthesisError::field`]).
    pub fn reason(&self) -> Option<SynthesisReason> {
        Some(match self {
            Self::InvalidArgument { .. }
            | Self::Param(_)
            | Self::UnknownProvider { .. }
            | Self::CatalogInvalid { .. } => return None,
            Self::UnknownPool { .. } => SynthesisReason::PoolNotFound,
            Self::CatalogNotFound { .. } => SynthesisReason::PackNotFound,
            Self::ProviderMismatch { .. } => SynthesisReason::ProviderMismatch,
            Self::NoAdapter { .. } => SynthesisReason::NoAdapter,
            Self::NoCredentials { .. } => SynthesisReason::CredentialsMissing,
            Self::UnknownUpstream { .. } => SynthesisReason::UnknownUpstream,
            Self::CatalogRefused { .. } => SynthesisReason::PackUnusable,
            Self::ReferenceMissing { .. } => SynthesisReason::ReferenceMissing,
            Self::ReferenceCorrupt { .. } => SynthesisReason::ReferenceCorrupt,
            Self::BlobUnavailable { .. } => SynthesisReason::BlobStoreUnavailable,
            Self::CatalogUnavailable { .. } => SynthesisReason::CatalogUnavailable,
            Self::CatalogFailed { .. } => SynthesisReason::CatalogFailed,
            Self::ClonePending { .. } => SynthesisReason::ClonePending,
            Self::CloneFailed { .. } => SynthesisReason::CloneFailed,
            Self::UsageStoreUnavailable { .. } => SynthesisReason::UsageStoreUnavailable,
            Self::SchedulerUnavailable { .. } => SynthesisReason::SchedulerUnavailable,
            Self::SchedulerMismatch { .. } => SynthesisReason::SchedulerConfigMismatch,
            Self::PoolFull { .. } => SynthesisReason::PoolFull,
            Self::BudgetExhausted { .. } => SynthesisReason::BudgetExhausted,
            Self::Exhausted { .. } => SynthesisReason::KeysExhausted,
            Self::VendorRejected { .. } => SynthesisReason::VendorRejected,
            Self::DeadlineExceeded { .. } => SynthesisReason::DeadlineExceeded,
            Self::Audio { .. } => SynthesisReason::AudioJoinFailed,
            Self::ResponseTooLarge { .. } => SynthesisReason::ResponseTooLarge,
            Self::StreamBroken { .. } => SynthesisReason::VendorStreamBroken,
            Self::Interrupted { cause, .. } => {
                cause.reason().unwrap_or(SynthesisReason::StreamInterrupted)
            }
            Self::DeadlineUnreachable { .. } => SynthesisReason::DeadlineUnreachable,
            Self::ReaderStalled { .. } => SynthesisReason::ReaderStalled,
            Self::AdapterPanicked { .. } => SynthesisReason::AdapterFailed,
        })
    }

    /// The request field at fault (`BadRequest`), as the gRPC request names it (`text`,
    /// `params.rate`, `pack_id`, …).
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::InvalidArgument { field, .. } => Some(field),
            Self::Param(p) => Some(&p.param),
            Self::UnknownProvider { .. } => Some("snapshot.provider"),
            Self::CatalogInvalid { .. } => Some("pack_id"),
            Self::Interrupted { cause, .. } => cause.field(),
            _ => None,
        }
    }

    /// When another try may succeed (`RetryInfo`), if known.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::CatalogUnavailable { .. }
            | Self::SchedulerUnavailable { .. }
            | Self::UsageStoreUnavailable { .. } => Some(UNREACHABLE_RETRY),
            Self::PoolFull { retry_after, .. }
            | Self::BudgetExhausted { retry_after, .. }
            | Self::Exhausted { retry_after, .. }
            | Self::DeadlineUnreachable { retry_after, .. } => *retry_after,
            Self::ClonePending { retry_after, .. } => Some(*retry_after),
            Self::Interrupted { cause, .. } => cause.retry_after(),
            _ => None,
        }
    }

    /// Whether the whole deadline went on waiting for a free key slot: the pool was known,
    /// no vendor call was made or under way, every eligible key stayed full. An HTTP caller,
    /// which sends no deadline of its own, is told the pool is full (429).
    pub fn waited_for_slot(&self) -> bool {
        match self {
            Self::DeadlineExceeded {
                pool,
                attempts,
                in_call,
                ..
            } => pool.is_some() && !in_call && attempts.is_empty(),
            Self::Interrupted { cause, .. } => cause.waited_for_slot(),
            _ => false,
        }
    }
}

/// Whether every attempt was refused for load (429s, quotas, concurrency), none for a fault.
fn throttled(attempts: &[AttemptRecord]) -> bool {
    !attempts.is_empty()
        && attempts.iter().all(|a| {
            matches!(
                a.outcome,
                Outcome::RateLimited | Outcome::QuotaExhausted | Outcome::ConcurrencyLimited
            )
        })
}
