//! The gRPC edge of `voxpool.jobs.v1.Jobs`: thin handlers that decode a request
//! ([`validate`], [`manifest`], [`crate::convert`]), call the domain
//! ([`crate::domain::Jobs`], for every RPC), and encode the answer ([`crate::convert`]); every
//! failure becomes the code and typed reason the proto documents through
//! [`crate::error::JobsError`]. A caller whose token is bound to tenants
//! (`voxpool_runtime::auth::TenantBinding`) creates and lists only for those and acts on their
//! jobs only, on every RPC (PERMISSION_DENIED otherwise): checked here, before the domain acts.

pub mod manifest;
pub mod validate;

use std::pin::Pin;

use futures::{Stream, StreamExt as _};
use tonic::{Request, Response, Status};
use voxpool_proto::jobs::v1::{
    self as pb,
    jobs_server::{Jobs as JobsApi, JobsServer},
};
use voxpool_runtime::auth::{TenantBinding, resolve_tenant, tenant_binding};

use crate::{
    convert, domain::Jobs, egress::Policy, error::JobsError, model::JobRecord, results::BlobError,
};

/// Fully-qualified service name (health, reflection).
pub const SERVICE_NAME: &str = "voxpool.jobs.v1.Jobs";
/// Largest message of ReadJobItemAudio.
const AUDIO_CHUNK: usize = 1024 * 1024;

/// The Jobs service.
pub struct JobsService {
    jobs: Jobs,
    webhooks: std::sync::Arc<Policy>,
}

impl JobsService {
    /// The service over the domain `jobs`; a `webhook_url` must be one `webhooks` allows.
    pub fn new(jobs: Jobs, webhooks: std::sync::Arc<Policy>) -> Self {
        Self { jobs, webhooks }
    }

    /// As a tonic server accepting and sending messages of up to `max_message_bytes`.
    pub fn into_server(self, max_message_bytes: usize) -> JobsServer<Self> {
        JobsServer::new(self)
            .max_decoding_message_size(max_message_bytes)
            .max_encoding_message_size(max_message_bytes)
    }

    /// The record of job `id`, when `binding` (the caller's, if bound) allows its tenant.
    async fn record(&self, id: &str, binding: Option<&TenantBinding>) -> Result<JobRecord, Status> {
        let record = self.jobs.job(id).await?;
        if let Some(binding) = binding {
            binding.check(&format!("jobs/{id}"), &record.spec.tenant)?;
        }
        Ok(record)
    }

    /// Job `id` may be acted on by a caller with `binding` (one not bound may act on any).
    async fn authorize(&self, id: &str, binding: Option<&TenantBinding>) -> Result<(), Status> {
        if binding.is_some() {
            self.record(id, binding).await?;
        }
        Ok(())
    }

    /// CreateJob's items, inline or read from its `manifest_uri`, checked.
    async fn checked(
        &self,
        req: &mut pb::CreateJobRequest,
    ) -> Result<validate::Checked, JobsError> {
        let (items, source, problems) = match (req.items.is_empty(), req.manifest_uri.is_empty()) {
            (false, false) => {
                return Err(JobsError::invalid(
                    "manifest_uri",
                    "give either items or manifest_uri, not both",
                ));
            }
            (true, false) => manifest::read(self.jobs.results(), &req.manifest_uri)
                .await
                .map_err(|e| match e {
                    BlobError::NotFound => JobsError::ManifestNotFound {
                        uri: req.manifest_uri.clone(),
                        location: self.jobs.results().location().to_owned(),
                    },
                    other => JobsError::blob("manifest_uri")(other),
                })?,
            _ => (
                std::mem::take(&mut req.items),
                validate::Source::Items,
                validate::Problems::default(),
            ),
        };
        validate::check(req, items, &source, problems, &self.webhooks)
    }
}

#[tonic::async_trait]
impl JobsApi for JobsService {
    async fn create_job(
        &self,
        request: Request<pb::CreateJobRequest>,
    ) -> Result<Response<pb::Job>, Status> {
        let binding = tenant_binding(&request).cloned();
        let mut req = request.into_inner();
        req.tenant = resolve_tenant(binding.as_ref(), std::mem::take(&mut req.tenant))?;
        let checked = self.checked(&mut req).await?;
        let record = self.jobs.create(convert::new_job(&req, checked)).await?;
        Ok(Response::new(convert::job(&record, self.jobs.results())))
    }

    async fn get_job(
        &self,
        request: Request<pb::GetJobRequest>,
    ) -> Result<Response<pb::Job>, Status> {
        let id = validate::job_id(&request.get_ref().name)?;
        let record = self.record(id, tenant_binding(&request)).await?;
        Ok(Response::new(convert::job(&record, self.jobs.results())))
    }

    async fn list_jobs(
        &self,
        request: Request<pb::ListJobsRequest>,
    ) -> Result<Response<pb::ListJobsResponse>, Status> {
        let binding = tenant_binding(&request).cloned();
        let mut req = request.into_inner();
        req.tenant = resolve_tenant(binding.as_ref(), std::mem::take(&mut req.tenant))?;
        voxpool_domain::contract::check_tenant(&req.tenant)
            .map_err(|e| JobsError::invalid("tenant", e.to_string()))?;
        let (_, size) = validate::page(req.page_size, "")?;
        let after = validate::jobs_page_token(&req.page_token)?;
        let (jobs, next) = self.jobs.list(&req.tenant, after.as_ref(), size).await?;
        Ok(Response::new(pb::ListJobsResponse {
            next_page_token: next.map(|c| c.token()).unwrap_or_default(),
            jobs: jobs
                .iter()
                .map(|r| convert::job(r, self.jobs.results()))
                .collect(),
        }))
    }

    async fn list_job_items(
        &self,
        request: Request<pb::ListJobItemsRequest>,
    ) -> Result<Response<pb::ListJobItemsResponse>, Status> {
        let binding = tenant_binding(&request).cloned();
        let req = request.into_inner();
        let record = self
            .record(validate::job_id(&req.name)?, binding.as_ref())
            .await?;
        let (offset, size) = validate::page(req.page_size, &req.page_token)?;
        let state = validate::item_filter(&req.filter)?;
        let (rows, next) = self.jobs.items(&record, offset, size, state).await?;
        Ok(Response::new(pb::ListJobItemsResponse {
            items: rows
                .iter()
                .map(|r| convert::item(r, self.jobs.results()))
                .collect(),
            next_page_token: next.map(|n| n.to_string()).unwrap_or_default(),
        }))
    }

    async fn cancel_job(
        &self,
        request: Request<pb::CancelJobRequest>,
    ) -> Result<Response<pb::Job>, Status> {
        let id = validate::job_id(&request.get_ref().name)?;
        self.authorize(id, tenant_binding(&request)).await?;
        let record = self.jobs.cancel(id).await?;
        Ok(Response::new(convert::job(&record, self.jobs.results())))
    }

    async fn delete_job(
        &self,
        request: Request<pb::DeleteJobRequest>,
    ) -> Result<Response<()>, Status> {
        let id = validate::job_id(&request.get_ref().name)?;
        self.authorize(id, tenant_binding(&request)).await?;
        self.jobs.delete(id).await?;
        Ok(Response::new(()))
    }

    type ReadJobItemAudioStream =
        Pin<Box<dyn Stream<Item = Result<pb::ReadJobItemAudioResponse, Status>> + Send>>;

    async fn read_job_item_audio(
        &self,
        request: Request<pb::ReadJobItemAudioRequest>,
    ) -> Result<Response<Self::ReadJobItemAudioStream>, Status> {
        let (job, item) = validate::item_name(&request.get_ref().name)?;
        let record = self.record(job, tenant_binding(&request)).await?;
        let body = self.jobs.item_audio(&record, item).await?;
        let stream = body.flat_map(|chunk| {
            let messages: Vec<Result<pb::ReadJobItemAudioResponse, Status>> = match chunk {
                Ok(bytes) => bytes
                    .chunks(AUDIO_CHUNK)
                    .map(|c| Ok(pb::ReadJobItemAudioResponse { data: c.to_vec() }))
                    .collect(),
                Err(e) => vec![Err(JobsError::blob("reading the item's audio")(e).into())],
            };
            futures::stream::iter(messages)
        });
        Ok(Response::new(Box::pin(stream)))
    }
}
