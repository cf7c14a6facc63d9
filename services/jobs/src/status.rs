//! The Jobs service's failures as gRPC statuses: every one carries its typed
//! [`JobsReason`] in an `ErrorInfo` (and `RetryInfo` when a retry helps), as the proto documents.

use std::{collections::HashMap, time::Duration};

use tonic::{Code, Status};
use voxpool_domain::{contract::JobsReason, status::with_info};

use crate::{
    model::JobState,
    results::BlobError,
    store::{NotDeletable, StoreError},
};

/// `code` with `reason` (no metadata) and, when given, a `RetryInfo` of `retry`.
pub fn reason(
    code: Code,
    reason: JobsReason,
    message: impl Into<String>,
    retry: Option<Duration>,
) -> Status {
    with_info(code, message, reason.as_str(), HashMap::new(), retry)
}

/// FAILED_PRECONDITION `JOB_NOT_FINISHED`: job `id` cannot be deleted yet (`why`).
pub fn not_deletable(id: &str, why: NotDeletable) -> Status {
    match why {
        NotDeletable::Running(state) => {
            let hint = if state == JobState::Cancelled {
                "wait for its items in flight to end"
            } else {
                "cancel it first"
            };
            reason(
                Code::FailedPrecondition,
                JobsReason::JobNotFinished,
                format!(
                    "jobs/{id} is {} with items not ended: {hint}",
                    state.as_str()
                ),
                None,
            )
        }
        NotDeletable::Finishing => reason(
            Code::FailedPrecondition,
            JobsReason::JobNotFinished,
            format!("jobs/{id} has ended and its summary is not written yet: retry in a moment"),
            Some(Duration::from_secs(1)),
        ),
    }
}

/// NOT_FOUND `JOB_NOT_FOUND` for job `id`.
pub fn job_not_found(id: &str) -> Status {
    reason(
        Code::NotFound,
        JobsReason::JobNotFound,
        format!("no job jobs/{id}: never created, deleted, or past its retention"),
        None,
    )
}

/// A job-store failure: UNAVAILABLE (`NOT_REPLICATED` or `STORE_UNAVAILABLE`, retry in 1 s),
/// or INTERNAL for a reply the store should not give.
pub fn store_status(e: StoreError) -> Status {
    match e {
        StoreError::Unavailable(why) if why.contains("acknowledged") => reason(
            Code::Unavailable,
            JobsReason::NotReplicated,
            format!(
                "{why}; it runs, but a failover now could lose it: retry with the same request_id (it answers the same job), or follow the job named"
            ),
            Some(Duration::from_secs(1)),
        ),
        StoreError::Unavailable(why) => reason(
            Code::Unavailable,
            JobsReason::StoreUnavailable,
            format!("the job store does not answer ({why}); retry"),
            Some(Duration::from_secs(1)),
        ),
        StoreError::Protocol(why) => Status::internal(format!("job store: {why}")),
    }
}

/// A blob-store failure about `what` (a request field or object).
pub fn blob_status(e: BlobError, what: &str) -> Status {
    match e {
        BlobError::NotFound => Status::not_found(format!("{what}: not in the blob store")),
        BlobError::NotAPath(why) => voxpool_domain::status::invalid_argument(what, why),
        BlobError::Failed(why) => reason(
            Code::Unavailable,
            JobsReason::BlobStoreUnavailable,
            format!("{what}: {why}; retry"),
            Some(Duration::from_secs(1)),
        ),
    }
}
