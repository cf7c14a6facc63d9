//! The gRPC edge of `voxpool.jobs.v1.Jobs`: requests checked and turned into store calls,
//! records turned into messages, every failure into the code and typed reason the proto
//! documents (`voxpool_domain::contract::JobsReason`, built in [`crate::status`]). A caller
//! whose token is bound to tenants (`voxpool_runtime::auth::TenantBinding`) creates and lists
//! only for those and acts on their jobs only, on every RPC (PERMISSION_DENIED otherwise).

use std::{pin::Pin, sync::Arc};

use futures::{Stream, StreamExt as _};
use prost::Message as _;
use tonic::{Code, Request, Response, Status};
use voxpool_domain::{contract::JobsReason, secret::Secret};
use voxpool_proto::jobs::v1::{
    self as pb,
    jobs_server::{Jobs, JobsServer},
};
use voxpool_runtime::auth::{TenantBinding, resolve_tenant, tenant_binding};

use crate::{
    convert,
    egress::Policy,
    model::{ItemState, new_job_id, parse_job_name},
    results::{BlobError, Results},
    status::{blob_status, job_not_found, reason, store_status},
    store::{Created, JobStore, NewJob, NotDeletable},
    validate,
    worker::Workers,
};

/// How long DeleteJob waits for a job that has just ended to be summarized.
const SUMMARY_WAIT: std::time::Duration = std::time::Duration::from_secs(3);
/// Fully-qualified service name (health, reflection).
pub const SERVICE_NAME: &str = "voxpool.jobs.v1.Jobs";
/// Largest message of ReadJobItemAudio.
const AUDIO_CHUNK: usize = 1024 * 1024;

/// The Jobs service.
pub struct JobsService {
    store: JobStore,
    results: Results,
    workers: Arc<Workers>,
    webhook_secret: bool,
    webhooks: Arc<Policy>,
}

impl JobsService {
    /// The service over `store` and `results`; `workers` are woken by each new job; a
    /// `webhook_url` needs `secret` and what `webhooks` allows.
    pub fn new(
        store: JobStore,
        results: Results,
        workers: Arc<Workers>,
        secret: Option<&Secret>,
        webhooks: Arc<Policy>,
    ) -> Self {
        Self {
            store,
            results,
            workers,
            webhook_secret: secret.is_some(),
            webhooks,
        }
    }

    /// As a tonic server accepting and sending messages of up to `max_message_bytes`.
    pub fn into_server(self, max_message_bytes: usize) -> JobsServer<Self> {
        JobsServer::new(self)
            .max_decoding_message_size(max_message_bytes)
            .max_encoding_message_size(max_message_bytes)
    }

    /// The record of job `name`, when `binding` (the caller's, if bound) allows its tenant.
    async fn record(
        &self,
        name: &str,
        binding: Option<&TenantBinding>,
    ) -> Result<crate::model::JobRecord, Status> {
        let id = parse_job_name(name)
            .map_err(|e| voxpool_domain::status::invalid_argument("name", e))?;
        let record = (self.store.record(id).await)
            .map_err(store_status)?
            .ok_or_else(|| job_not_found(id))?;
        if let Some(binding) = binding {
            binding.check(&format!("jobs/{id}"), &record.tenant)?;
        }
        Ok(record)
    }
}

fn page(size: i32, token: &str) -> Result<(usize, usize), Status> {
    let size = match size {
        0 => 100,
        1..=1000 => usize::try_from(size).unwrap_or(100),
        _ => {
            return Err(voxpool_domain::status::invalid_argument(
                "page_size",
                format!("{size}: use 1..=1000, or 0 for 100"),
            ));
        }
    };
    let offset = if token.is_empty() {
        0
    } else {
        token.parse().map_err(|_| {
            voxpool_domain::status::invalid_argument(
                "page_token",
                "not a token this service gave: pass next_page_token as it came",
            )
        })?
    };
    Ok((offset, size))
}

#[tonic::async_trait]
impl Jobs for JobsService {
    async fn create_job(
        &self,
        request: Request<pb::CreateJobRequest>,
    ) -> Result<Response<pb::Job>, Status> {
        let binding = tenant_binding(&request).cloned();
        let mut req = request.into_inner();
        req.tenant = resolve_tenant(binding.as_ref(), std::mem::take(&mut req.tenant))?;
        let (items, field, problems) = match (req.items.is_empty(), req.manifest_uri.is_empty()) {
            (false, false) => {
                return Err(voxpool_domain::status::invalid_argument(
                    "manifest_uri",
                    "give either items or manifest_uri, not both",
                ));
            }
            (true, false) => crate::manifest::read(&self.results, &req.manifest_uri)
                .await
                .map_err(|e| match e {
                    BlobError::NotFound => reason(
                        Code::NotFound,
                        JobsReason::ManifestNotFound,
                        format!(
                            "manifest_uri {}: no such object in the blob store {}",
                            voxpool_domain::untrusted::quote(&req.manifest_uri),
                            self.results.location()
                        ),
                        None,
                    ),
                    other => blob_status(other, "manifest_uri"),
                })?,
            _ => (
                std::mem::take(&mut req.items),
                validate::Source::Items,
                validate::Problems::default(),
            ),
        };
        let checked = validate::check(&req, items, &field, problems, &self.webhooks)?;
        if !req.webhook_url.is_empty() && !self.webhook_secret {
            return Err(reason(
                Code::FailedPrecondition,
                JobsReason::WebhookSecretMissing,
                "webhook_url: this server has no webhook secret to sign deliveries with; start it with VOXPOOL_JOBS_WEBHOOK_SECRET or --webhook-secret-file, or submit without a webhook",
                None,
            ));
        }
        let priority = checked.priority;
        let job = NewJob {
            id: new_job_id(),
            tenant: req.tenant.clone(),
            priority: checked.priority as i32,
            format: if req.format == 0 {
                pb_wav()
            } else {
                req.format
            },
            sample_rate_hz: req.sample_rate_hz,
            request_id: req.request_id.clone(),
            webhook_url: req.webhook_url.clone(),
            blob_store: self.results.location().to_owned(),
            characters: checked.characters,
            items: checked
                .items
                .into_iter()
                .map(|(id, spec)| (id, spec.encode_to_vec()))
                .collect(),
        };
        let id = match self.store.create(job).await.map_err(store_status)? {
            Created::New(id) => {
                tracing::info!(job = %id, "job created");
                crate::metrics::created(priority.as_str_name());
                self.workers.wake();
                id
            }
            Created::Existing(id) => id,
            Created::Reused(id) => return Err(validate::request_id_reused(&req.request_id, &id)),
        };
        let record = self
            .store
            .record(&id)
            .await
            .map_err(store_status)?
            .ok_or_else(|| job_not_found(&id))?;
        Ok(Response::new(convert::job(&record, &self.results)))
    }

    async fn get_job(
        &self,
        request: Request<pb::GetJobRequest>,
    ) -> Result<Response<pb::Job>, Status> {
        let binding = tenant_binding(&request);
        let record = self.record(&request.get_ref().name, binding).await?;
        Ok(Response::new(convert::job(&record, &self.results)))
    }

    async fn list_jobs(
        &self,
        request: Request<pb::ListJobsRequest>,
    ) -> Result<Response<pb::ListJobsResponse>, Status> {
        let binding = tenant_binding(&request).cloned();
        let mut req = request.into_inner();
        req.tenant = resolve_tenant(binding.as_ref(), std::mem::take(&mut req.tenant))?;
        voxpool_domain::contract::check_tenant(&req.tenant)
            .map_err(|e| voxpool_domain::status::invalid_argument("tenant", e.to_string()))?;
        let (_, size) = page(req.page_size, "")?;
        let after = validate::jobs_page_token(&req.page_token)?;
        let (jobs, next) = self
            .store
            .list_jobs(&req.tenant, after.as_ref(), size)
            .await
            .map_err(store_status)?;
        Ok(Response::new(pb::ListJobsResponse {
            next_page_token: next.map(|c| c.token()).unwrap_or_default(),
            jobs: jobs
                .iter()
                .map(|r| convert::job(r, &self.results))
                .collect(),
        }))
    }

    async fn list_job_items(
        &self,
        request: Request<pb::ListJobItemsRequest>,
    ) -> Result<Response<pb::ListJobItemsResponse>, Status> {
        let binding = tenant_binding(&request).cloned();
        let req = request.into_inner();
        let record = self.record(&req.name, binding.as_ref()).await?;
        let (offset, size) = page(req.page_size, &req.page_token)?;
        let state = parse_filter(&req.filter)?;
        let (rows, next) = self
            .store
            .list_items(&record.id, offset, size, state)
            .await
            .map_err(store_status)?;
        Ok(Response::new(pb::ListJobItemsResponse {
            items: rows
                .iter()
                .map(|r| convert::item(r, &self.results))
                .collect(),
            next_page_token: next.map(|n| n.to_string()).unwrap_or_default(),
        }))
    }

    async fn cancel_job(
        &self,
        request: Request<pb::CancelJobRequest>,
    ) -> Result<Response<pb::Job>, Status> {
        let id = parse_job_name(&request.get_ref().name)
            .map_err(|e| voxpool_domain::status::invalid_argument("name", e))?;
        if let Some(binding) = tenant_binding(&request) {
            self.record(&request.get_ref().name, Some(binding)).await?;
        }
        match self.store.cancel(id).await.map_err(store_status)? {
            None => return Err(job_not_found(id)),
            Some(Err(state)) => {
                return Err(reason(
                    Code::FailedPrecondition,
                    JobsReason::JobFinished,
                    format!("jobs/{id} already {}: nothing to cancel", state.as_str()),
                    None,
                ));
            }
            Some(Ok(_)) => tracing::info!(job = %id, "job cancelled"),
        }
        let record = self
            .store
            .record(id)
            .await
            .map_err(store_status)?
            .ok_or_else(|| job_not_found(id))?;
        Ok(Response::new(convert::job(&record, &self.results)))
    }

    async fn delete_job(
        &self,
        request: Request<pb::DeleteJobRequest>,
    ) -> Result<Response<()>, Status> {
        let id = parse_job_name(&request.get_ref().name)
            .map_err(|e| voxpool_domain::status::invalid_argument("name", e))?;
        if let Some(binding) = tenant_binding(&request) {
            self.record(&request.get_ref().name, Some(binding)).await?;
        }
        // A job that has just ended is deletable once its summary is written (a moment): wait
        // for that rather than hand the caller a retry.
        let summarized_by = tokio::time::Instant::now() + SUMMARY_WAIT;
        loop {
            match self.store.delete(id).await.map_err(store_status)? {
                Ok(true) => break,
                Ok(false) => return Err(job_not_found(id)),
                Err(NotDeletable::Finishing) if tokio::time::Instant::now() < summarized_by => {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(why) => return Err(crate::status::not_deletable(id, why)),
            }
        }
        let removed = self
            .results
            .delete_job(id)
            .await
            .map_err(|e| blob_status(e, "deleting the job's results"))?;
        tracing::info!(job = %id, objects = removed, "job deleted");
        Ok(Response::new(()))
    }

    type ReadJobItemAudioStream =
        Pin<Box<dyn Stream<Item = Result<pb::ReadJobItemAudioResponse, Status>> + Send>>;

    async fn read_job_item_audio(
        &self,
        request: Request<pb::ReadJobItemAudioRequest>,
    ) -> Result<Response<Self::ReadJobItemAudioStream>, Status> {
        let name = &request.get_ref().name;
        let bad = || {
            voxpool_domain::status::invalid_argument(
                "name",
                format!(
                    "expected jobs/{{job}}/items/{{item}}, got {}",
                    voxpool_domain::untrusted::quote(name)
                ),
            )
        };
        let (job, item) = name
            .strip_prefix("jobs/")
            .and_then(|rest| rest.split_once("/items/"))
            .ok_or_else(bad)?;
        let job = parse_job_name(&format!("jobs/{job}"))
            .map_err(|_| bad())?
            .to_owned();
        voxpool_domain::item::check_item_id(item)
            .map_err(|e| voxpool_domain::status::invalid_argument("name", e))?;
        let binding = tenant_binding(&request);
        let record = self.record(&format!("jobs/{job}"), binding).await?; // unknown: JOB_NOT_FOUND
        if !record.blob_store.is_empty() && record.blob_store != self.results.location() {
            return Err(reason(
                Code::FailedPrecondition,
                JobsReason::OtherBlobStore,
                format!(
                    "the results of jobs/{job} are in the blob store {}, this replica's is {}: ask a replica on that store, or give every replica the same --blob-store",
                    record.blob_store,
                    self.results.location()
                ),
                None,
            ));
        }
        let (state, result) = self
            .store
            .item(&job, item)
            .await
            .map_err(store_status)?
            .ok_or_else(|| {
                reason(
                    Code::NotFound,
                    JobsReason::ItemNotFound,
                    format!(
                        "jobs/{job} has no item {}",
                        voxpool_domain::untrusted::quote(item)
                    ),
                    None,
                )
            })?;
        if state != ItemState::Succeeded {
            return Err(reason(
                Code::FailedPrecondition,
                JobsReason::ItemNotSucceeded,
                format!(
                    "item {} of jobs/{job} has not succeeded: ListJobItems shows its state",
                    voxpool_domain::untrusted::quote(item)
                ),
                None,
            ));
        }
        let output = result.map(|r| r.output).unwrap_or_default();
        let body = self.results.read(&output).await.map_err(|e| match e {
            BlobError::NotFound => reason(
                Code::NotFound,
                JobsReason::AudioGone,
                format!("the audio of jobs/{job} item {item} is no longer in the blob store"),
                None,
            ),
            other => blob_status(other, "reading the item's audio"),
        })?;
        let stream = body.flat_map(|chunk| {
            let messages: Vec<Result<pb::ReadJobItemAudioResponse, Status>> = match chunk {
                Ok(bytes) => bytes
                    .chunks(AUDIO_CHUNK)
                    .map(|c| Ok(pb::ReadJobItemAudioResponse { data: c.to_vec() }))
                    .collect(),
                Err(e) => vec![Err(blob_status(e, "reading the item's audio"))],
            };
            futures::stream::iter(messages)
        });
        Ok(Response::new(Box::pin(stream)))
    }
}

fn pb_wav() -> i32 {
    voxpool_proto::synthesis::v1::AudioFormat::Wav as i32
}

/// `""` or `state = <STATE>` (spaces optional).
fn parse_filter(filter: &str) -> Result<Option<ItemState>, Status> {
    let filter = filter.trim();
    if filter.is_empty() {
        return Ok(None);
    }
    filter
        .split_once('=')
        .filter(|(k, _)| k.trim() == "state")
        .and_then(|(_, v)| ItemState::parse_name(v.trim()))
        .map(Some)
        .ok_or_else(|| {
            voxpool_domain::status::invalid_argument(
                "filter",
                format!(
                    "{}: use state = QUEUED, RUNNING, SUCCEEDED, FAILED or CANCELLED",
                    voxpool_domain::untrusted::quote(filter)
                ),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_name_one_state_or_none() {
        assert_eq!(parse_filter("").ok(), Some(None));
        assert_eq!(
            parse_filter("state = FAILED").ok(),
            Some(Some(ItemState::Failed))
        );
        assert_eq!(
            parse_filter("state=succeeded").ok(),
            Some(Some(ItemState::Succeeded))
        );
        for bad in ["state", "id = x", "state = DONE"] {
            let e = parse_filter(bad).expect_err(bad);
            assert_eq!(e.code(), Code::InvalidArgument);
            assert!(e.message().contains("filter"), "{}", e.message());
        }
    }

    #[test]
    fn pages_are_bounded_and_tokens_are_ours() {
        assert_eq!(page(0, "").ok(), Some((0, 100)));
        assert_eq!(page(5, "10").ok(), Some((10, 5)));
        assert!(page(1001, "").is_err());
        assert!(page(-1, "").is_err());
        assert!(page(5, "abc").is_err());
    }
}
