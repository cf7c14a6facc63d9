//! The jobs service's error enum and its one exhaustive mapping to `tonic::Status`.
//!
//! No catch-all arm: a new variant must be classified. Every answer a client may act on
//! carries its typed [`JobsReason`] in an `ErrorInfo` (and a `RetryInfo` when a retry helps),
//! as the proto documents; messages name the job, item or field and say what to do.

use std::{collections::HashMap, time::Duration};

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt as _};
use voxpool_domain::{
    contract::JobsReason,
    status::{invalid_argument, with_info},
    untrusted::quote,
};

use crate::{model::JobState, results::BlobError, store::StoreError};

/// How long a caller should wait before retrying an unavailable store or blob store.
const RETRY: Duration = Duration::from_secs(1);

/// Every way a jobs RPC can fail.
#[derive(Debug, thiserror::Error)]
pub enum JobsError {
    /// A request field is malformed or out of range.
    #[error("invalid {field}: {message}")]
    InvalidArgument {
        /// Proto field path, e.g. `page_size`.
        field: String,
        /// What is wrong and what is accepted.
        message: String,
    },
    /// CreateJob's input has problems (each a field and why), answered together: nothing was
    /// queued.
    #[error("{message}")]
    BadRequest {
        /// (field, why) of each problem listed.
        violations: Vec<(String, String)>,
        /// The whole message: the first problem and how many more.
        message: String,
    },
    /// No such job.
    #[error("no job jobs/{id}: never created, deleted, or past its retention")]
    JobNotFound {
        /// The job id.
        id: String,
    },
    /// The job has no such item.
    #[error("jobs/{job} has no item {}", quote(item))]
    ItemNotFound {
        /// The job id.
        job: String,
        /// The item id asked for (untrusted).
        item: String,
    },
    /// CancelJob of a job that already SUCCEEDED or FAILED.
    #[error("jobs/{id} already {}: nothing to cancel", state.as_str())]
    JobFinished {
        /// The job id.
        id: String,
        /// Its terminal state.
        state: JobState,
    },
    /// The tenant's request id names a job created from another request.
    #[error(
        "request_id {} already created jobs/{job} with other items, format or sample rate: give this request a new request_id, or GetJob jobs/{job}",
        quote(request_id)
    )]
    RequestIdReused {
        /// The request id (untrusted).
        request_id: String,
        /// The job it names.
        job: String,
    },
    /// DeleteJob of a job whose items are queued or running.
    #[error(
        "jobs/{id} is {} with items not ended: {}",
        state.as_str(),
        if *state == JobState::Cancelled { "wait for its items in flight to end" } else { "cancel it first" }
    )]
    JobRunning {
        /// The job id.
        id: String,
        /// Its state.
        state: JobState,
    },
    /// DeleteJob of a job that has ended and whose summary is not written yet.
    #[error("jobs/{id} has ended and its summary is not written yet: retry in a moment")]
    JobFinishing {
        /// The job id.
        id: String,
    },
    /// ReadJobItemAudio of an item that has not succeeded.
    #[error(
        "item {} of jobs/{job} has not succeeded: ListJobItems shows its state",
        quote(item)
    )]
    ItemNotSucceeded {
        /// The job id.
        job: String,
        /// The item id.
        item: String,
    },
    /// The job's results are in another blob store than this replica's.
    #[error(
        "the results of jobs/{job} are in the blob store {theirs}, this replica's is {ours}: ask a replica on that store, or give every replica the same --blob-store"
    )]
    OtherBlobStore {
        /// The job id.
        job: String,
        /// The job's blob store.
        theirs: String,
        /// This replica's.
        ours: String,
    },
    /// The item succeeded but its audio is no longer in the blob store.
    #[error("the audio of jobs/{job} item {item} is no longer in the blob store")]
    AudioGone {
        /// The job id.
        job: String,
        /// The item id.
        item: String,
    },
    /// A `webhook_url` while this replica has no webhook secret.
    #[error(
        "webhook_url: this server has no webhook secret to sign deliveries with; start it with VOXPOOL_JOBS_WEBHOOK_SECRET or --webhook-secret-file, or submit without a webhook"
    )]
    WebhookSecretMissing,
    /// `manifest_uri` names no object of the blob store.
    #[error(
        "manifest_uri {}: no such object in the blob store {location}",
        quote(uri)
    )]
    ManifestNotFound {
        /// The URI given (untrusted).
        uri: String,
        /// This replica's blob store.
        location: String,
    },
    /// The blob store failed while doing `what` (a request field or an object).
    #[error("{what}: {error}")]
    Blob {
        /// What was being read or written.
        what: &'static str,
        /// The blob store's failure.
        error: BlobError,
    },
    /// The job store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl JobsError {
    /// INVALID_ARGUMENT naming `field`.
    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        Self::InvalidArgument {
            field: field.to_owned(),
            message: message.into(),
        }
    }

    /// A blob-store failure while doing `what`.
    pub fn blob(what: &'static str) -> impl FnOnce(BlobError) -> Self {
        move |error| Self::Blob { what, error }
    }
}

fn reason(code: Code, reason: JobsReason, message: String, retry: Option<Duration>) -> Status {
    with_info(code, message, reason.as_str(), HashMap::new(), retry)
}

impl From<JobsError> for Status {
    fn from(e: JobsError) -> Self {
        let message = e.to_string();
        match e {
            JobsError::InvalidArgument { field, message } => invalid_argument(&field, message),
            JobsError::BadRequest {
                violations,
                message,
            } => {
                let mut details = ErrorDetails::new();
                for (field, why) in violations {
                    details.add_bad_request_violation(field, why);
                }
                Status::with_error_details(Code::InvalidArgument, message, details)
            }
            JobsError::JobNotFound { .. } => {
                reason(Code::NotFound, JobsReason::JobNotFound, message, None)
            }
            JobsError::ItemNotFound { .. } => {
                reason(Code::NotFound, JobsReason::ItemNotFound, message, None)
            }
            JobsError::JobFinished { .. } => reason(
                Code::FailedPrecondition,
                JobsReason::JobFinished,
                message,
                None,
            ),
            JobsError::RequestIdReused { job, .. } => with_info(
                Code::AlreadyExists,
                message,
                JobsReason::RequestIdReused.as_str(),
                HashMap::from([("job".to_owned(), format!("jobs/{job}"))]),
                None,
            ),
            JobsError::JobRunning { .. } => reason(
                Code::FailedPrecondition,
                JobsReason::JobNotFinished,
                message,
                None,
            ),
            JobsError::JobFinishing { .. } => reason(
                Code::FailedPrecondition,
                JobsReason::JobNotFinished,
                message,
                Some(RETRY),
            ),
            JobsError::ItemNotSucceeded { .. } => reason(
                Code::FailedPrecondition,
                JobsReason::ItemNotSucceeded,
                message,
                None,
            ),
            JobsError::OtherBlobStore { .. } => reason(
                Code::FailedPrecondition,
                JobsReason::OtherBlobStore,
                message,
                None,
            ),
            JobsError::AudioGone { .. } => {
                reason(Code::NotFound, JobsReason::AudioGone, message, None)
            }
            JobsError::WebhookSecretMissing => reason(
                Code::FailedPrecondition,
                JobsReason::WebhookSecretMissing,
                message,
                None,
            ),
            JobsError::ManifestNotFound { .. } => {
                reason(Code::NotFound, JobsReason::ManifestNotFound, message, None)
            }
            JobsError::Blob { what, error } => match error {
                BlobError::NotFound => Status::not_found(format!("{what}: not in the blob store")),
                BlobError::NotAPath(why) => invalid_argument(what, why),
                BlobError::Failed(why) => reason(
                    Code::Unavailable,
                    JobsReason::BlobStoreUnavailable,
                    format!("{what}: {why}; retry"),
                    Some(RETRY),
                ),
            },
            JobsError::Store(store) => match store {
                StoreError::NotReplicated { .. } => reason(
                    Code::Unavailable,
                    JobsReason::NotReplicated,
                    format!(
                        "{store}; it runs, but a failover now could lose it: retry with the same request_id (it answers the same job), or follow the job named"
                    ),
                    Some(RETRY),
                ),
                StoreError::Unavailable(why) => reason(
                    Code::Unavailable,
                    JobsReason::StoreUnavailable,
                    format!("the job store does not answer ({why}); retry"),
                    Some(RETRY),
                ),
                StoreError::Protocol(why) => Status::internal(format!("job store: {why}")),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(e: JobsError) -> (Code, Option<JobsReason>, String, Option<Duration>) {
        let status = Status::from(e);
        let retry = status.get_details_retry_info().and_then(|r| r.retry_delay);
        (
            status.code(),
            JobsReason::of(&status),
            status.message().to_owned(),
            retry,
        )
    }

    #[test]
    fn an_unreplicated_job_is_not_replicated_from_its_counts_not_its_words() {
        let (code, reason, message, retry) = answer(
            StoreError::NotReplicated {
                job: "j1".into(),
                acked: 0,
                wanted: 1,
                waited: Duration::from_secs(1),
            }
            .into(),
        );
        assert_eq!(code, Code::Unavailable);
        assert_eq!(reason, Some(JobsReason::NotReplicated));
        assert!(
            message.starts_with(
                "job jobs/j1 written but 0 of 1 replicas acknowledged it within 1s; it runs"
            ),
            "{message}"
        );
        assert_eq!(retry, Some(RETRY));
        // A store that is down with a message that happens to use the word is still down.
        let (_, reason, message, _) = answer(
            StoreError::Unavailable("redis: write not acknowledged by the server".into()).into(),
        );
        assert_eq!(reason, Some(JobsReason::StoreUnavailable));
        assert!(
            message.starts_with("the job store does not answer ("),
            "{message}"
        );
    }

    #[test]
    fn every_variant_answers_its_code_and_reason() {
        let job = || "j1".to_owned();
        let cases = [
            (
                JobsError::JobNotFound { id: job() },
                Code::NotFound,
                Some(JobsReason::JobNotFound),
            ),
            (
                JobsError::ItemNotFound {
                    job: job(),
                    item: "a".into(),
                },
                Code::NotFound,
                Some(JobsReason::ItemNotFound),
            ),
            (
                JobsError::JobFinished {
                    id: job(),
                    state: JobState::Succeeded,
                },
                Code::FailedPrecondition,
                Some(JobsReason::JobFinished),
            ),
            (
                JobsError::RequestIdReused {
                    request_id: "r".into(),
                    job: job(),
                },
                Code::AlreadyExists,
                Some(JobsReason::RequestIdReused),
            ),
            (
                JobsError::JobRunning {
                    id: job(),
                    state: JobState::Running,
                },
                Code::FailedPrecondition,
                Some(JobsReason::JobNotFinished),
            ),
            (
                JobsError::JobFinishing { id: job() },
                Code::FailedPrecondition,
                Some(JobsReason::JobNotFinished),
            ),
            (
                JobsError::ItemNotSucceeded {
                    job: job(),
                    item: "a".into(),
                },
                Code::FailedPrecondition,
                Some(JobsReason::ItemNotSucceeded),
            ),
            (
                JobsError::OtherBlobStore {
                    job: job(),
                    theirs: "a".into(),
                    ours: "b".into(),
                },
                Code::FailedPrecondition,
                Some(JobsReason::OtherBlobStore),
            ),
            (
                JobsError::AudioGone {
                    job: job(),
                    item: "a".into(),
                },
                Code::NotFound,
                Some(JobsReason::AudioGone),
            ),
            (
                JobsError::WebhookSecretMissing,
                Code::FailedPrecondition,
                Some(JobsReason::WebhookSecretMissing),
            ),
            (
                JobsError::ManifestNotFound {
                    uri: "m".into(),
                    location: "file:///b".into(),
                },
                Code::NotFound,
                Some(JobsReason::ManifestNotFound),
            ),
            (
                JobsError::blob("reading the item's audio")(BlobError::Failed("down".into())),
                Code::Unavailable,
                Some(JobsReason::BlobStoreUnavailable),
            ),
            (
                JobsError::blob("manifest_uri")(BlobError::NotAPath("no".into())),
                Code::InvalidArgument,
                None,
            ),
            (
                StoreError::Unavailable("down".into()).into(),
                Code::Unavailable,
                Some(JobsReason::StoreUnavailable),
            ),
            (
                StoreError::Protocol("odd".into()).into(),
                Code::Internal,
                None,
            ),
            (
                JobsError::invalid("page_size", "-1"),
                Code::InvalidArgument,
                None,
            ),
        ];
        for (e, code, want) in cases {
            let shown = format!("{e:?}");
            let (got, reason, _, _) = answer(e);
            assert_eq!((got, reason), (code, want), "{shown}");
        }
    }

    #[test]
    fn a_cancelled_job_not_yet_drained_says_to_wait_a_running_one_to_cancel() {
        let wait = JobsError::JobRunning {
            id: "j1".into(),
            state: JobState::Cancelled,
        };
        assert_eq!(
            wait.to_string(),
            "jobs/j1 is CANCELLED with items not ended: wait for its items in flight to end"
        );
        let cancel = JobsError::JobRunning {
            id: "j1".into(),
            state: JobState::Queued,
        };
        assert_eq!(
            cancel.to_string(),
            "jobs/j1 is QUEUED with items not ended: cancel it first"
        );
    }
}
