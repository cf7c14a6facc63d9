//! `voxctl job submit MANIFEST`: the manifest (read as `voxctl batch` reads it; card lines
//! resolved here into snapshot JSON, which the server cannot do) becomes one `CreateJob` with
//! inline items.
//!
//! The default request id makes a re-run idempotent: it is the hex SHA-256 of what the job
//! would produce (every item as sent, the tenant, the format and the sample rate), so the same
//! submit answers the job the first one created, and a changed card, text or format makes a
//! new job. A transient failure is retried only with a request id (without one a retry could
//! queue the job twice).

use std::path::Path;

use sha2::{Digest as _, Sha256};
use voxpool_proto::{
    jobs::v1::{CreateJobRequest, Job, JobItemSpec, job_item_spec},
    prost::Message as _,
};

use super::{Jobs, MAX_INLINE_ITEMS};
use crate::{
    format::Format,
    manifest::{Manifest, Voice},
    ops::OpError,
};

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

/// The `CreateJob` request for `manifest`. Errors (exit 2, nothing sent): invalid lines (each
/// printed first by the caller), no item, more than [`MAX_INLINE_ITEMS`].
pub fn build_request(
    manifest: &Manifest,
    path: &Path,
    options: &JobOptions,
) -> Result<CreateJobRequest, OpError> {
    if !manifest.problems.is_empty() {
        return Err(OpError::usage(format!(
            "{}: {} invalid manifest line(s); nothing was submitted (fix them and submit again)",
            path.display(),
            manifest.problems.len()
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

/// Reads the manifest, refuses it if any line is invalid (every problem printed), sends
/// `CreateJob` and answers the job.
pub async fn submit(jobs: &Jobs, path: &Path, options: &JobOptions) -> Result<Job, OpError> {
    let manifest = Manifest::load(path).map_err(|e| OpError::usage(e.to_string()))?;
    for problem in &manifest.problems {
        crate::say!("voxctl: {}: {problem}", path.display());
    }
    let request = build_request(&manifest, path, options)?;
    let answer = if request.request_id.is_empty() {
        let mut client = jobs.client.clone();
        client
            .create_job(request.clone())
            .await
            .map(tonic::Response::into_inner)
    } else {
        jobs.retrying(|mut c| {
            let request = request.clone();
            async move { c.create_job(request).await }
        })
        .await
    };
    answer.map_err(|status| {
        let error = jobs.error("CreateJob", "", &status);
        if status.code() == tonic::Code::OutOfRange {
            // What tonic answers for a message over the size limit of either side.
            return OpError::failed(format!(
                "{} (the request is over a message size limit: split the manifest)",
                error.message
            ));
        }
        error
    })
}
