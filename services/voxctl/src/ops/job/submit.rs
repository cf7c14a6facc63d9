//! `voxctl job submit MANIFEST`: the manifest (read as `voxctl batch` reads it; card lines
//! resolved here into snapshot JSON, which the server cannot do) becomes one `CreateJob` with
//! inline items.
//!
//! The default request id makes a re-run idempotent: it is the hex SHA-256 of what the job
//! would produce (every item as sent, the tenant, the format and the sample rate), so the same
//! submit answers the job the first one created, and a changed card, text or format makes a
//! new job. A transient failure is retried only with a request id (without one a retry could
//! queue the job twice), for up to `--timeout` (30 s: a Redis failover answers UNAVAILABLE for
//! several seconds). A repeated request id answers the earlier job as it is now:
//! [`earlier_job`] says so when that job already ran.

use std::{path::Path, time::Duration};

use sha2::{Digest as _, Sha256};
use voxpool_proto::{
    jobs::v1::{CreateJobRequest, Job, JobItemSpec, job, job_item_spec},
    prost::Message as _,
};

use super::{Jobs, MAX_INLINE_ITEMS, view};
use crate::{
    format::Format,
    manifest::{Manifest, Problem, Voice},
    ops::OpError,
};

/// Longest text of one item a job takes, in characters (the jobs service's limit; `voxctl
/// batch` splits longer texts itself, a job does not).
pub const MAX_TEXT_CHARS: usize = 20_000;

/// Every line of `manifest` a job would refuse, in line order: its invalid lines and, checked
/// here rather than by the server (which would name them only once the others are fixed), the
/// items whose text is over [`MAX_TEXT_CHARS`].
pub fn problems(manifest: &Manifest) -> Vec<Problem> {
    let mut all = manifest.problems.clone();
    for item in &manifest.items {
        let chars = item.chars();
        if chars > MAX_TEXT_CHARS {
            all.push(Problem {
                line: item.line,
                id: Some(item.id.clone()),
                message: format!(
                    "text: {chars} characters: at most {MAX_TEXT_CHARS} per item in a job; split it into several items"
                ),
            });
        }
    }
    all.sort_by_key(|p| p.line);
    all
}

/// What `voxctl job submit` sends besides the items.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobOptions {
    /// Audio format of every item.
    pub format: Format,
    /// Sample rate, Hz (0 = the vendor's default).
    pub sample_rate_hz: i32,
    /// Traffic class of the items' synthesis.
    pub priority: voxpool_proto::scheduler::v1::Priority,
    /// Tenant of the job.
    pub tenant: String,
    /// Webhook POSTed when the job ends; empty = none.
    pub webhook_url: String,
    /// Idempotency key; `None` = derived ([`request_id`]), `Some("")` = none.
    pub request_id: Option<String>,
}

/// The `CreateJob` request for `manifest`. Errors (exit 2, nothing sent): invalid lines and
/// over-long texts ([`problems`], each printed first by the caller), no item, more than
/// [`MAX_INLINE_ITEMS`].
pub fn build_request(
    manifest: &Manifest,
    path: &Path,
    options: &JobOptions,
) -> Result<CreateJobRequest, OpError> {
    let bad = problems(manifest).len();
    if bad > 0 {
        return Err(OpError::usage(format!(
            "{}: {bad} invalid manifest line(s); nothing was submitted (fix them and submit again)",
            path.display(),
        )));
    }
    if manifest.items.is_empty() {
        return Err(OpError::usage(format!(
            "{}: no items; nothing was submitted",
            path.display()
        )));
    }
    if manifest.items.len() > MAX_INLINE_ITEMS {
        return Err(OpError::usage(format!(
            "{}: {} items, more than the {MAX_INLINE_ITEMS} a job takes: split the manifest into several jobs (docs/JOBS.md, Limits)",
            path.display(),
            manifest.items.len()
        )));
    }
    let items: Vec<JobItemSpec> = manifest
        .items
        .iter()
        .map(|item| JobItemSpec {
            id: item.id.clone(),
            text: item.text.clone(),
            voice: Some(match &item.voice {
                Voice::PackId(pack) => job_item_spec::Voice::PackId(pack.clone()),
                Voice::Snapshot { json, .. } => job_item_spec::Voice::SnapshotJson(json.clone()),
            }),
            emotion: item.emotion.clone(),
            // Unset: the server derives it from the id, as voxctl batch does.
            seed: item.seed,
        })
        .collect();
    let request_id = match &options.request_id {
        Some(given) => given.clone(),
        None => request_id(&items, options),
    };
    Ok(CreateJobRequest {
        request_id,
        items,
        manifest_uri: String::new(),
        format: options.format.to_pb() as i32,
        sample_rate_hz: options.sample_rate_hz,
        priority: options.priority as i32,
        tenant: options.tenant.clone(),
        webhook_url: options.webhook_url.clone(),
    })
}

/// The default request id: hex SHA-256 over the items as sent (voices resolved, so a card
/// bound to another voice counts as a change), the tenant, the format and the sample rate,
/// each length-prefixed. The priority and webhook change no audio and are left out.
pub fn request_id(items: &[JobItemSpec], options: &JobOptions) -> String {
    let mut hash = Sha256::new();
    let mut field = |bytes: &[u8]| {
        hash.update((bytes.len() as u64).to_be_bytes());
        hash.update(bytes);
    };
    field(b"voxctl job submit v1");
    field(options.tenant.as_bytes());
    field(options.format.as_str().as_bytes());
    field(&options.sample_rate_hz.to_be_bytes());
    for item in items {
        // JobItemSpec has no map field: its encoding is the same for the same values.
        field(&item.encode_to_vec());
    }
    hex::encode(hash.finalize())
}

/// What `submit` answered.
#[derive(Clone, Debug)]
pub struct Submitted {
    /// The job, as the server answered it.
    pub job: Job,
    /// The request id sent (empty: none).
    pub request_id: String,
    /// CreateJob calls made (more than 1 after transient failures).
    pub tries: u32,
}

/// Reads the manifest, refuses it if any line is invalid (every problem printed), sends
/// `CreateJob` and answers the job. With a request id, transient failures are said and tried
/// again with backoff for up to `budget` (the same id answers the same job, so nothing is
/// queued twice). Field errors of the server are printed in the manifest's terms
/// ([`super::fields`]) and refused with exit 2, like invalid lines.
pub async fn submit(
    jobs: &Jobs,
    path: &Path,
    options: &JobOptions,
    budget: Duration,
) -> Result<Submitted, OpError> {
    let manifest = Manifest::load(path).map_err(|e| OpError::usage(e.to_string()))?;
    for problem in problems(&manifest) {
        crate::say!("voxctl: {}: {problem}", path.display());
    }
    let request = build_request(&manifest, path, options)?;
    let started = tokio::time::Instant::now();
    let answer = if request.request_id.is_empty() {
        let mut client = jobs.client.clone();
        client
            .create_job(request.clone())
            .await
            .map(|response| (response.into_inner(), 1))
            .map_err(|status| (status, 1))
    } else {
        let said = |status: &tonic::Status, pause: Duration| {
            crate::say!(
                "voxctl: {}; trying again in {:.1}s with the same request id (it answers one job, never two)",
                transient_failure(jobs, status),
                pause.as_secs_f64()
            );
        };
        jobs.retrying_for(budget, said, |mut c| {
            let request = request.clone();
            async move { c.create_job(request).await }
        })
        .await
    };
    let (status, tries) = match answer {
        Ok((job, tries)) => {
            return Ok(Submitted {
                job,
                request_id: request.request_id,
                tries,
            });
        }
        Err(failed) => failed,
    };
    let fields = super::fields::problems(&status, &manifest.items);
    if status.code() == tonic::Code::InvalidArgument && !fields.is_empty() {
        for problem in &fields {
            crate::say!("voxctl: {}: {problem}", path.display());
        }
        return Err(OpError::usage(format!(
            "{}: the jobs server refused {} field(s), listed above; nothing was queued (fix them and submit again)",
            path.display(),
            fields.len()
        )));
    }
    if tries > 1 && super::transient(&status) {
        return Err(OpError::failed(format!(
            "{}; gave up after {tries} tries in {:.1}s (--timeout {}): run the same command again later, or with a longer --timeout (the same request id never queues the job twice)",
            transient_failure(jobs, &status),
            started.elapsed().as_secs_f64(),
            humantime::format_duration(budget)
        )));
    }
    let error = jobs.error("CreateJob", "", &status);
    if status.code() == tonic::Code::OutOfRange {
        // What tonic answers for a message over the size limit of either side.
        return Err(OpError::failed(format!(
            "{} (the request is over a message size limit: split the manifest)",
            error.message
        )));
    }
    Err(error)
}

/// A transient CreateJob failure in one line (`CreateJob (jobs at URL): UNAVAILABLE
/// STORE_UNAVAILABLE: message`), without [`Jobs::error`]'s "run the same command again",
/// which submit is doing itself; a failure to connect keeps its hint about `--jobs`.
fn transient_failure(jobs: &Jobs, status: &tonic::Status) -> String {
    if std::error::Error::source(status).is_some() {
        return jobs.error("CreateJob", "", status).message;
    }
    let reason = voxpool_domain::contract::JobsReason::of(status)
        .map(|r| format!(" {}", r.as_str()))
        .unwrap_or_default();
    format!(
        "CreateJob ({}): {}{reason}: {}",
        jobs.service,
        crate::retry::code_name(status.code()),
        view::printable(status.message())
    )
}

/// When `submitted` is not a freshly queued job (it ended, or items already moved past
/// QUEUED), the lines that say so: the manifest at `path` was submitted before (the request
/// id answered the earlier job, as it is now) and how to run it again. `None` for a new job,
/// when no request id was sent, and for a job still going answered after retries (a try whose
/// answer was lost may have queued it, and it may have started since).
pub fn earlier_job(submitted: &Submitted, path: &Path) -> Option<String> {
    let job = &submitted.job;
    let c = job.item_counts.unwrap_or_default();
    let state = view::job_state(job);
    let ended = matches!(
        state,
        job::State::Succeeded | job::State::Failed | job::State::Cancelled
    );
    let moved = c.running + c.succeeded + c.failed + c.cancelled > 0;
    if submitted.request_id.is_empty()
        || !(ended || moved || state == job::State::Running)
        || (!ended && submitted.tries > 1)
    {
        return None;
    }
    let next = if ended {
        format!("voxctl job status {} shows it", job.name)
    } else {
        format!("voxctl job wait {} follows it", job.name)
    };
    Some(format!(
        "voxctl: {path} was submitted before (request id {id}): {name} is that earlier job as it is now, {state} ({progress}); nothing new was queued ({next})\n\
         voxctl: to run the manifest again as a new job, add a new request id to the same command: voxctl job submit {path} --request-id <new id>",
        path = path.display(),
        id = view::printable(&submitted.request_id),
        name = job.name,
        state = state.as_str_name(),
        progress = view::progress_line(job),
    ))
}
