//! The jobs service's part of the facade: a tenant's jobs with their failed items, cancel,
//! delete, and every succeeded item's audio as one tar archive.

use voxpool_proto::jobs::v1 as jpb;

use super::{Backend, BackendError, Service, convert, failed};
use crate::view::JobView;

/// Most failed items shown per job.
const FAILURES_SHOWN: i32 = 20;

/// Largest archive the console builds in memory.
const MAX_ARCHIVE_BYTES: usize = 512 << 20;

/// A job's results as one archive.
#[derive(Debug)]
pub struct JobArchive {
    /// The tar file's bytes.
    pub bytes: Vec<u8>,
    /// Items in it.
    pub items: usize,
}

impl Backend {
    fn jobs_client(&self) -> Result<jpb::jobs_client::JobsClient<super::Authed>, BackendError> {
        self.jobs
            .clone()
            .ok_or_else(|| BackendError::not_configured(Service::Jobs))
    }

    /// `tenant`'s jobs, newest first, with each one's failed items.
    pub async fn jobs(&self, tenant: &str) -> Result<Vec<JobView>, BackendError> {
        let mut client = self.jobs_client()?;
        let jobs = client
            .list_jobs(Self::request(jpb::ListJobsRequest {
                tenant: tenant.to_owned(),
                page_size: 100,
                page_token: String::new(),
            }))
            .await
            .map_err(failed(Service::Jobs))?
            .into_inner()
            .jobs;
        let mut views = Vec::with_capacity(jobs.len());
        for job in jobs {
            let failures = if job.item_counts.as_ref().is_some_and(|c| c.failed > 0) {
                client
                    .list_job_items(Self::request(jpb::ListJobItemsRequest {
                        name: job.name.clone(),
                        page_size: FAILURES_SHOWN,
                        page_token: String::new(),
                        filter: "state = FAILED".to_owned(),
                    }))
                    .await
                    .map_err(failed(Service::Jobs))?
                    .into_inner()
                    .items
                    .iter()
                    .map(convert::item_failure)
                    .collect()
            } else {
                Vec::new()
            };
            views.push(convert::job(job, failures));
        }
        Ok(views)
    }

    /// Cancels job `id`.
    pub async fn cancel_job(&self, id: &str) -> Result<JobView, BackendError> {
        let job = self
            .jobs_client()?
            .cancel_job(Self::request(jpb::CancelJobRequest {
                name: format!("jobs/{id}"),
            }))
            .await
            .map_err(failed(Service::Jobs))?
            .into_inner();
        Ok(convert::job(job, Vec::new()))
    }

    /// Deletes job `id` and its results.
    pub async fn delete_job(&self, id: &str) -> Result<(), BackendError> {
        self.jobs_client()?
            .delete_job(Self::request(jpb::DeleteJobRequest {
                name: format!("jobs/{id}"),
            }))
            .await
            .map_err(failed(Service::Jobs))?;
        Ok(())
    }

    /// Every succeeded item's audio of job `id`, as a tar archive of `<item>.<ext>` files.
    pub async fn job_archive(&self, id: &str) -> Result<JobArchive, BackendError> {
        let mut client = self.jobs_client()?;
        let name = format!("jobs/{id}");
        let mut archive = tar::Builder::new(Vec::new());
        let mut items = 0;
        let mut page_token = String::new();
        loop {
            let page = client
                .list_job_items(Self::request(jpb::ListJobItemsRequest {
                    name: name.clone(),
                    page_size: 1000,
                    page_token: std::mem::take(&mut page_token),
                    filter: "state = SUCCEEDED".to_owned(),
                }))
                .await
                .map_err(failed(Service::Jobs))?
                .into_inner();
            for item in page.items {
                let audio = self.item_audio(&mut client, &name, &item.id).await?;
                let file = item
                    .output_uri
                    .rsplit('/')
                    .next()
                    .filter(|f| !f.is_empty())
                    .map_or_else(|| format!("{}.wav", item.id), str::to_owned);
                let mut header = tar::Header::new_gnu();
                header.set_size(audio.len() as u64);
                header.set_mode(0o644);
                header.set_cksum();
                archive
                    .append_data(&mut header, &file, audio.as_slice())
                    .map_err(|e| too_large(&format!("cannot add {file} to the archive: {e}")))?;
                items += 1;
                if archive.get_ref().len() > MAX_ARCHIVE_BYTES {
                    return Err(too_large(
                        "the job's audio is over 512 MiB: read it with `voxctl job download` instead",
                    ));
                }
            }
            if page.next_page_token.is_empty() {
                break;
            }
            page_token = page.next_page_token;
        }
        let bytes = archive
            .into_inner()
            .map_err(|e| too_large(&format!("cannot finish the archive: {e}")))?;
        Ok(JobArchive { bytes, items })
    }

    async fn item_audio(
        &self,
        client: &mut jpb::jobs_client::JobsClient<super::Authed>,
        job: &str,
        item: &str,
    ) -> Result<Vec<u8>, BackendError> {
        let mut stream = client
            .read_job_item_audio(Self::request(jpb::ReadJobItemAudioRequest {
                name: format!("{job}/items/{item}"),
            }))
            .await
            .map_err(failed(Service::Jobs))?
            .into_inner();
        let mut audio = Vec::new();
        while let Some(message) = stream.message().await.map_err(failed(Service::Jobs))? {
            audio.extend_from_slice(&message.data);
        }
        Ok(audio)
    }
}

fn too_large(message: &str) -> BackendError {
    BackendError {
        service: Service::Jobs,
        code: tonic::Code::ResourceExhausted,
        message: message.to_owned(),
        fields: Vec::new(),
    }
}
