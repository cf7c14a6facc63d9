//! `voxctl job ...`: durable batch jobs on `voxpool-jobs` (`voxpool.jobs.v1.Jobs`), called with
//! the client token like synthesis.
//!
//! This module owns the client ([`Jobs`]): job and item names, the one-line errors (typed
//! reasons and codes, never message text), the retry of transient failures
//! ([`retry_of`] over [`JobsReason`]: STORE_UNAVAILABLE, UNAVAILABLE, RESOURCE_EXHAUSTED,
//! DEADLINE_EXCEEDED and transport failures are tried again with backoff), and the small
//! commands (`status`, `items`, `cancel`, `list`, `delete`). The rest: [`submit`] (manifest →
//! `CreateJob`, with [`fields`] for the server's field errors), [`view`] (what is printed),
//! [`wait`] (polling with progress), [`download`] (audio files and the report).

pub mod download;
pub mod fields;
pub mod submit;
pub mod view;
pub mod wait;

use std::{future::Future, time::Duration};

use backon::BackoffBuilder as _;
use tonic::{Code, Status};
use voxpool_domain::contract::{JobsReason, Retry, retry_of};
use voxpool_proto::jobs::v1::{
    CancelJobRequest, DeleteJobRequest, GetJobRequest, Job, JobItem, ListJobItemsRequest,
    ListJobsRequest, job, jobs_client::JobsClient,
};

use super::OpError;
use crate::{
    connect,
    retry::{CallError, RetryPolicy},
};

/// Most items one `CreateJob` takes inline (the server's limit); more go by `manifest_uri`.
pub const MAX_INLINE_ITEMS: usize = 10_000;

/// Items (or jobs) asked for per `ListJobItems` (`ListJobs`) page (the server's largest page).
const PAGE_SIZE: i32 = 1000;

/// Highest backoff ceiling of [`Jobs::retrying_for`]: a store failing over is tried again at
/// least this often.
const BUDGET_BACKOFF_CAP: Duration = Duration::from_secs(5);

/// `jobs/<id>` from `jobs/<id>` or `<id>`. Errors (for clap): an empty id, or one with `/`,
/// whitespace or control characters.
pub fn job_name(raw: &str) -> Result<String, String> {
    let raw = raw.trim();
    let id = raw.strip_prefix("jobs/").unwrap_or(raw);
    if id.is_empty() {
        return Err("give a job name, jobs/<id> or <id> (as voxctl job submit printed it)".into());
    }
    if id.contains('/') || id.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "{} is not a job name: use jobs/<id> or <id> (as voxctl job submit printed it)",
            voxpool_domain::untrusted::quote(raw)
        ));
    }
    Ok(format!("jobs/{id}"))
}

/// `jobs/<job>/items/<item>`, the name `ReadJobItemAudio` takes.
pub fn item_name(job: &str, item: &str) -> String {
    format!("{job}/items/{item}")
}

/// Whether a failed call is worth another try: [`retry_of`] the jobs service's reasons
/// (without one: UNAVAILABLE, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED, transport failures).
pub fn transient(status: &Status) -> bool {
    retry_of::<JobsReason>(status) == Retry::Again
}

/// The Jobs client of a `job` command, and the service it names in errors.
#[derive(Clone)]
pub struct Jobs {
    /// The gRPC client (carries the client token).
    pub client: JobsClient<connect::Authed>,
    /// `jobs at URL`.
    pub service: String,
    /// Retries of transient failures.
    pub policy: RetryPolicy,
}

impl Jobs {
    /// A client for voxpool-jobs at `url` (lazy: nothing is dialled until the first call).
    pub fn new(url: &str, token: &voxpool_runtime::auth::ClientToken) -> Result<Self, OpError> {
        let client = JobsClient::new(connect::authed(url, token)?)
            .max_decoding_message_size(connect::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(connect::MAX_MESSAGE_BYTES);
        Ok(Self {
            client,
            service: format!("jobs at {url}"),
            policy: RetryPolicy::default(),
        })
    }

    /// The one-line error of `what` (an RPC name) about `job` (a job or item name; empty for
    /// CreateJob) that failed with `status`. The hint comes from the typed reason
    /// ([`JobsReason`]) or the code, never from the message.
    pub fn error(&self, what: &str, job: &str, status: &Status) -> OpError {
        let says = format!(
            "{what} ({}): {}: {}",
            self.service,
            crate::retry::code_name(status.code()),
            status.message()
        );
        let hint = match (JobsReason::of(status), status.code()) {
            (Some(JobsReason::JobNotFound), _) | (None, Code::NotFound) if !job.is_empty() => {
                let job = job.split("/items/").next().unwrap_or(job);
                return OpError::failed(format!(
                    "no job {job} at {} (deleted or past its retention?)",
                    self.service
                ));
            }
            (Some(JobsReason::AudioGone), _) => {
                " (the audio is gone: job deleted or past its retention?)"
            }
            (Some(JobsReason::WebhookSecretMissing), _) => {
                " (the jobs server has no webhook secret, --webhook-secret-file or VOXPOOL_JOBS_WEBHOOK_SECRET: submit without --webhook-url, or give the server one)"
            }
            (Some(JobsReason::StoreUnavailable | JobsReason::NotReplicated), _) => {
                " (the jobs server's store did not answer in time: run the same command again)"
            }
            (Some(JobsReason::RequestIdReused), _) => {
                " (--request-id already named a job with other items, format or sample rate: give a new --request-id, or leave it out to derive one from the manifest)"
            }
            _ if std::error::Error::source(status).is_some() => {
                " (voxpool-jobs did not answer: check --jobs / VOXPOOL_JOBS and that it runs)"
            }
            _ => return OpError::status(what, &self.service, status),
        };
        OpError::failed(format!("{says}{hint}"))
    }

    /// `call` until it answers, fails for good, or [`Jobs::policy`]'s attempts are spent; waits
    /// between attempts with backoff (at least the server's `RetryInfo`).
    pub async fn retrying<T, F, Fut>(&self, call: F) -> Result<T, Status>
    where
        F: FnMut(JobsClient<connect::Authed>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        self.retry_loop(&self.policy, None, |_, _| {}, call)
            .await
            .map(|(answer, _)| answer)
            .map_err(|(status, _)| status)
    }

    /// `call` until it answers, fails for good, or `budget` has passed since the first try (no
    /// try starts after it). Waits between tries with backoff (full jitter under a ceiling
    /// doubling from [`Jobs::policy`]'s base up to [`BUDGET_BACKOFF_CAP`], at least the
    /// server's `RetryInfo`) and tells `retrying` of each transient failure and the wait before
    /// the next try. Answers the answer and how many tries were made; errors: the last failure,
    /// and how many tries were made.
    pub async fn retrying_for<T, F, Fut>(
        &self,
        budget: Duration,
        retrying: impl FnMut(&Status, Duration),
        call: F,
    ) -> Result<(T, u32), (Status, u32)>
    where
        F: FnMut(JobsClient<connect::Authed>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let policy = RetryPolicy {
            max_attempts: u32::MAX,
            cap: BUDGET_BACKOFF_CAP.max(self.policy.base),
            ..self.policy
        };
        let deadline = tokio::time::Instant::now() + budget;
        self.retry_loop(&policy, Some(deadline), retrying, call)
            .await
    }

    /// The one retry loop of [`Jobs::retrying`] and [`Jobs::retrying_for`]: `call` until it
    /// answers, fails for good, `policy`'s attempts are spent or `deadline` (when given) has
    /// passed; `retrying` hears of each transient failure and the wait after it.
    async fn retry_loop<T, F, Fut>(
        &self,
        policy: &RetryPolicy,
        deadline: Option<tokio::time::Instant>,
        mut retrying: impl FnMut(&Status, Duration),
        mut call: F,
    ) -> Result<(T, u32), (Status, u32)>
    where
        F: FnMut(JobsClient<connect::Authed>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let mut ceilings = policy.ceilings().build();
        let mut tries = 0u32;
        loop {
            tries = tries.saturating_add(1);
            let status = match call(self.client.clone()).await {
                Ok(response) => return Ok((response.into_inner(), tries)),
                Err(status) if transient(&status) => status,
                Err(status) => return Err((status, tries)),
            };
            let left = deadline.map(|d| d.saturating_duration_since(tokio::time::Instant::now()));
            let Some(ceiling) = ceilings.next().filter(|_| left != Some(Duration::ZERO)) else {
                return Err((status, tries));
            };
            let delay = policy.delay(ceiling, &CallError::from_status(&status));
            let pause = left.map_or(delay, |left| delay.min(left));
            retrying(&status, pause);
            tokio::time::sleep(pause).await;
        }
    }

    /// `GetJob`, retried while transient.
    pub async fn get(&self, job: &str) -> Result<Job, OpError> {
        let name = job.to_owned();
        self.retrying(|mut c| {
            let name = name.clone();
            async move { c.get_job(GetJobRequest { name }).await }
        })
        .await
        .map_err(|s| self.error("GetJob", job, &s))
    }

    /// Every item of `job` (every page), optionally those in `state` only.
    pub async fn items(
        &self,
        job: &str,
        state: Option<voxpool_proto::jobs::v1::job_item::State>,
    ) -> Result<Vec<JobItem>, OpError> {
        let filter = state
            .map(|s| format!("state = {}", s.as_str_name()))
            .unwrap_or_default();
        let mut items = Vec::new();
        let mut page_token = String::new();
        loop {
            let request = ListJobItemsRequest {
                name: job.to_owned(),
                page_size: PAGE_SIZE,
                page_token: page_token.clone(),
                filter: filter.clone(),
            };
            let page = self
                .retrying(|mut c| {
                    let request = request.clone();
                    async move { c.list_job_items(request).await }
                })
                .await
                .map_err(|s| self.error("ListJobItems", job, &s))?;
            items.extend(page.items);
            if page.next_page_token.is_empty() || page.next_page_token == page_token {
                return Ok(items);
            }
            page_token = page.next_page_token;
        }
    }

    /// `CancelJob` (cancelling again answers the job unchanged, so it is retried). A job that
    /// already ended is named with the state it ended in.
    pub async fn cancel(&self, job: &str) -> Result<Job, OpError> {
        let name = job.to_owned();
        let answer = self
            .retrying(|mut c| {
                let name = name.clone();
                async move { c.cancel_job(CancelJobRequest { name }).await }
            })
            .await;
        match answer {
            Ok(job) => Ok(job),
            Err(status)
                if JobsReason::of(&status) == Some(JobsReason::JobFinished)
                    || (JobsReason::of(&status).is_none()
                        && status.code() == Code::FailedPrecondition) =>
            {
                let ended = self.get(job).await?;
                Err(OpError::failed(format!(
                    "{job} has already ended ({}): nothing to cancel",
                    view::job_state(&ended).as_str_name()
                )))
            }
            Err(status) => Err(self.error("CancelJob", job, &status)),
        }
    }
}

impl Jobs {
    /// Every job of `tenant` (every page), newest first.
    pub async fn list(&self, tenant: &str) -> Result<Vec<Job>, OpError> {
        let mut jobs = Vec::new();
        let mut page_token = String::new();
        loop {
            let request = ListJobsRequest {
                tenant: tenant.to_owned(),
                page_size: PAGE_SIZE,
                page_token: page_token.clone(),
            };
            let page = self
                .retrying(|mut c| {
                    let request = request.clone();
                    async move { c.list_jobs(request).await }
                })
                .await
                .map_err(|s| self.error("ListJobs", "", &s))?;
            jobs.extend(page.jobs);
            if page.next_page_token.is_empty() || page.next_page_token == page_token {
                return Ok(jobs);
            }
            page_token = page.next_page_token;
        }
    }

    /// `DeleteJob`. A job with items queued or running is refused, naming its state and
    /// saying to cancel it first. Answers [`Deleted::AlreadyGone`] when a retry (after a
    /// failure whose answer was lost) finds the job gone.
    pub async fn delete(&self, job: &str) -> Result<Deleted, OpError> {
        let mut tries = 0u32;
        let answer = self
            .retrying(|mut c| {
                tries += 1;
                let name = job.to_owned();
                async move { c.delete_job(DeleteJobRequest { name }).await }
            })
            .await;
        let reason = answer.as_ref().err().and_then(JobsReason::of);
        match answer {
            Ok(()) => Ok(Deleted::Now),
            Err(status)
                if tries > 1
                    && status.code() == Code::NotFound
                    && reason.is_none_or(|r| r == JobsReason::JobNotFound) =>
            {
                Ok(Deleted::AlreadyGone)
            }
            Err(status)
                if reason == Some(JobsReason::JobNotFinished)
                    || (reason.is_none() && status.code() == Code::FailedPrecondition) =>
            {
                let state = match self.get(job).await {
                    Ok(now) => format!(
                        "{} ({})",
                        view::job_state(&now).as_str_name(),
                        view::progress_line(&now)
                    ),
                    Err(_) => "not finished".to_owned(),
                };
                Err(OpError::failed(format!(
                    "{job} is {state}: a job with items queued or running cannot be deleted: cancel it first (voxctl job cancel {job}), then delete it once its items in flight have ended (voxctl job wait {job})"
                )))
            }
            Err(status) => Err(self.error("DeleteJob", job, &status)),
        }
    }
}

/// What `voxctl job delete` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deleted {
    /// This call deleted the job.
    Now,
    /// A retried call found it gone: an earlier try (whose answer was lost) deleted it.
    AlreadyGone,
}

/// Whether the job is over: SUCCEEDED, FAILED, or CANCELLED with no item left in flight.
pub fn is_over(job: &Job) -> bool {
    match view::job_state(job) {
        job::State::Succeeded | job::State::Failed => true,
        job::State::Cancelled => {
            job.end_time.is_some() || job.item_counts.is_none_or(|c| c.running == 0)
        }
        job::State::Unspecified | job::State::Queued | job::State::Running => false,
    }
}

#[cfg(test)]
mod tests;
