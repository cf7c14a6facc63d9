//! An in-process `voxpool.jobs.v1.Jobs` server for `voxctl job`'s tests: a real tonic server
//! on 127.0.0.1:0 that keeps jobs in memory and moves them on by itself, one item per GetJob
//! (an item whose text contains `fail` fails, one containing `stuck` never starts), answers
//! the first [`FakeJobs::fail_next_gets`] GetJobs and [`FakeJobs::fail_next_creates`]
//! CreateJobs with UNAVAILABLE, refuses a text over 20,000 characters with the real server's
//! `BadRequest` (`items[N].text`), pages items and jobs two at a time, refuses to delete a job
//! with items queued or running, counts the audio reads per item, and streams the audio of an
//! item whose id starts with `hang` without ever ending it. Started with
//! [`FakeJobs::start_with_token`] it authenticates callers as the real server does
//! (`voxpool_runtime::auth::ClientAuth`).
#![allow(dead_code)]

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::SystemTime,
};

use tokio_util::sync::CancellationToken;
use tonic::{Code, Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt as _};
use voxpool_domain::{contract::JobsReason, secret::Secret, status::with_info};
use voxpool_proto::jobs::v1::{
    CancelJobRequest, CreateJobRequest, DeleteJobRequest, GetJobRequest, ItemCounts, ItemError,
    Job, JobItem, ListJobItemsRequest, ListJobItemsResponse, ListJobsRequest, ListJobsResponse,
    ReadJobItemAudioRequest, ReadJobItemAudioResponse, job, job_item,
    jobs_server::{Jobs, JobsServer},
};
use voxpool_runtime::auth::ClientAuth;

/// The audio of item `id`: its id repeated to 2.5 kB, so it comes in three messages.
pub fn audio_of(id: &str) -> Vec<u8> {
    id.bytes().cycle().take(2500).collect()
}

/// A job, and its items with their texts.
type Entry = (Job, Vec<(JobItem, String)>);

#[derive(Default)]
struct State {
    jobs: Vec<Entry>,
    created: Vec<CreateJobRequest>,
    reads: HashMap<String, usize>,
    filters: Vec<String>,
    fail_gets: usize,
    fail_creates: usize,
    authorization: Vec<String>,
}

/// The running fake.
pub struct FakeJobs {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: CancellationToken,
}

impl Drop for FakeJobs {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl FakeJobs {
    /// Starts the server; it authenticates no caller.
    pub async fn start() -> Self {
        Self::serve(ClientAuth::open()).await
    }

    /// Starts the server; it accepts only calls carrying `token`, refusing the others as the
    /// real server does.
    pub async fn start_with_token(token: &str) -> Self {
        let auth = ClientAuth::with_tokens([("voxctl".to_owned(), Secret::new(token))], false)
            .expect("client auth");
        Self::serve(auth).await
    }

    async fn serve(auth: ClientAuth) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(Mutex::new(State::default()));
        let stop = CancellationToken::new();
        let service = JobsServer::new(Service(Arc::clone(&state), auth));
        let token = stop.clone();
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    token.cancelled(),
                )
                .await
                .expect("fake jobs serve");
        });
        Self { addr, state, stop }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next `n` GetJobs answer UNAVAILABLE.
    pub fn fail_next_gets(&self, n: usize) {
        self.state.lock().expect("state").fail_gets = n;
    }

    /// The next `n` CreateJobs answer UNAVAILABLE `STORE_UNAVAILABLE` (as during a Redis
    /// failover); they are still recorded in [`FakeJobs::created`].
    pub fn fail_next_creates(&self, n: usize) {
        self.state.lock().expect("state").fail_creates = n;
    }

    /// Every CreateJob request received.
    pub fn created(&self) -> Vec<CreateJobRequest> {
        self.state.lock().expect("state").created.clone()
    }

    /// How many jobs exist.
    pub fn job_count(&self) -> usize {
        self.state.lock().expect("state").jobs.len()
    }

    /// ReadJobItemAudio calls per item name.
    pub fn reads(&self) -> HashMap<String, usize> {
        self.state.lock().expect("state").reads.clone()
    }

    /// Every ListJobItems filter received.
    pub fn filters(&self) -> Vec<String> {
        self.state.lock().expect("state").filters.clone()
    }

    /// Every `authorization` header received.
    pub fn authorization(&self) -> Vec<String> {
        self.state.lock().expect("state").authorization.clone()
    }
}

struct Service(Arc<Mutex<State>>, ClientAuth);

fn recount(job: &mut Job, items: &[(JobItem, String)]) {
    let mut c = ItemCounts::default();
    for (item, _) in items {
        match job_item::State::try_from(item.state) {
            Ok(job_item::State::Queued) => c.queued += 1,
            Ok(job_item::State::Running) => c.running += 1,
            Ok(job_item::State::Succeeded) => c.succeeded += 1,
            Ok(job_item::State::Failed) => c.failed += 1,
            _ => c.cancelled += 1,
        }
    }
    job.item_counts = Some(c);
    job.characters_succeeded = items
        .iter()
        .filter(|(i, _)| i.state == job_item::State::Succeeded as i32)
        .map(|(i, _)| i.characters)
        .sum();
}

/// One step of work: the first queued item that is not stuck ends; the job ends with the last.
fn step(job: &mut Job, items: &mut [(JobItem, String)]) {
    if job.state == job::State::Cancelled as i32 || job.end_time.is_some() {
        return;
    }
    if let Some((item, text)) = items
        .iter_mut()
        .find(|(i, t)| i.state == job_item::State::Queued as i32 && !t.contains("stuck"))
    {
        job.state = job::State::Running as i32;
        job.start_time
            .get_or_insert_with(|| SystemTime::now().into());
        item.attempts = 1;
        if text.contains("fail") {
            item.state = job_item::State::Failed as i32;
            item.error = Some(ItemError {
                code: "INVALID_ARGUMENT".into(),
                reason: "VENDOR_REJECTED".into(),
                message: format!("the vendor refused the text of {}", item.id),
                ..ItemError::default()
            });
        } else {
            item.state = job_item::State::Succeeded as i32;
            item.output_uri = format!("file:///blobs/{}/{}.wav", job.name, item.id);
            item.audio_bytes = audio_of(&item.id).len() as i64;
            item.key_id = "local/engine-1".into();
            item.chunks = 1;
        }
    }
    let left = items
        .iter()
        .any(|(i, _)| i.state == job_item::State::Queued as i32);
    if !left {
        let failed = items
            .iter()
            .any(|(i, _)| i.state == job_item::State::Failed as i32);
        job.state = if failed {
            job::State::Failed
        } else {
            job::State::Succeeded
        } as i32;
        job.end_time = Some(SystemTime::now().into());
    }
}

impl Service {
    fn find<'a>(state: &'a mut State, name: &str) -> Result<&'a mut Entry, Status> {
        state
            .jobs
            .iter_mut()
            .find(|(j, _)| j.name == name)
            .ok_or_else(|| {
                with_info(
                    Code::NotFound,
                    format!("no job {name}"),
                    JobsReason::JobNotFound.as_str(),
                    HashMap::new(),
                    None,
                )
            })
    }

    /// Records the call's `authorization` and authenticates it (refused as the real server
    /// refuses it).
    fn note<T>(&self, request: &Request<T>) -> Result<std::sync::MutexGuard<'_, State>, Status> {
        let mut state = self.0.lock().expect("state");
        let auth = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        state.authorization.push(auth);
        self.1.authenticate(
            &request.metadata().clone().into_headers(),
            request.extensions(),
        )?;
        Ok(state)
    }
}

#[tonic::async_trait]
impl Jobs for Service {
    async fn create_job(
        &self,
        request: Request<CreateJobRequest>,
    ) -> Result<Response<Job>, Status> {
        let mut state = self.note(&request)?;
        let request = request.into_inner();
        state.created.push(request.clone());
        if state.fail_creates > 0 {
            state.fail_creates -= 1;
            return Err(with_info(
                Code::Unavailable,
                "the job store does not answer",
                JobsReason::StoreUnavailable.as_str(),
                HashMap::new(),
                None,
            ));
        }
        too_long(&request)?;
        if !request.request_id.is_empty()
            && let Some((job, _)) = state
                .jobs
                .iter()
                .find(|(j, _)| j.request_id == request.request_id && j.tenant == request.tenant)
        {
            return Ok(Response::new(job.clone()));
        }
        let name = format!("jobs/j{}", state.jobs.len() + 1);
        let items: Vec<(JobItem, String)> = request
            .items
            .iter()
            .map(|spec| {
                let item = JobItem {
                    id: spec.id.clone(),
                    state: job_item::State::Queued as i32,
                    characters: spec.text.chars().count() as i64,
                    ..JobItem::default()
                };
                (item, spec.text.clone())
            })
            .collect();
        let mut job = Job {
            name,
            state: job::State::Queued as i32,
            characters: items.iter().map(|(i, _)| i.characters).sum(),
            create_time: Some(SystemTime::now().into()),
            tenant: request.tenant.clone(),
            priority: request.priority,
            format: request.format,
            sample_rate_hz: request.sample_rate_hz,
            request_id: request.request_id.clone(),
            total_items: items.len() as i32,
            ..Job::default()
        };
        job.summary_uri = format!("file:///blobs/{}/summary.json", job.name);
        recount(&mut job, &items);
        state.jobs.push((job.clone(), items));
        Ok(Response::new(job))
    }

    async fn get_job(&self, request: Request<GetJobRequest>) -> Result<Response<Job>, Status> {
        let mut state = self.note(&request)?;
        if state.fail_gets > 0 {
            state.fail_gets -= 1;
            return Err(Status::unavailable("the job store does not answer"));
        }
        let (job, items) = Self::find(&mut state, &request.get_ref().name)?;
        step(job, items);
        recount(job, items);
        Ok(Response::new(job.clone()))
    }

    async fn list_jobs(
        &self,
        request: Request<ListJobsRequest>,
    ) -> Result<Response<ListJobsResponse>, Status> {
        let state = self.note(&request)?;
        let request = request.into_inner();
        // Newest first.
        let matching: Vec<Job> = state
            .jobs
            .iter()
            .rev()
            .map(|(j, _)| j.clone())
            .filter(|j| j.tenant == request.tenant)
            .collect();
        let (page, next_page_token) = page(&matching, &request.page_token);
        Ok(Response::new(ListJobsResponse {
            jobs: page,
            next_page_token,
        }))
    }

    async fn list_job_items(
        &self,
        request: Request<ListJobItemsRequest>,
    ) -> Result<Response<ListJobItemsResponse>, Status> {
        let mut state = self.note(&request)?;
        let request = request.into_inner();
        state.filters.push(request.filter.clone());
        let wanted = request.filter.strip_prefix("state = ").map(str::to_owned);
        let (_, items) = Self::find(&mut state, &request.name)?;
        let matching: Vec<JobItem> = items
            .iter()
            .map(|(i, _)| i.clone())
            .filter(|i| {
                wanted.as_deref().is_none_or(|w| {
                    job_item::State::try_from(i.state).map(|s| s.as_str_name()) == Ok(w)
                })
            })
            .collect();
        let (items, next_page_token) = page(&matching, &request.page_token);
        Ok(Response::new(ListJobItemsResponse {
            items,
            next_page_token,
        }))
    }

    async fn cancel_job(
        &self,
        request: Request<CancelJobRequest>,
    ) -> Result<Response<Job>, Status> {
        let mut state = self.note(&request)?;
        let (job, items) = Self::find(&mut state, &request.get_ref().name)?;
        if job.end_time.is_some() && job.state != job::State::Cancelled as i32 {
            return Err(with_info(
                Code::FailedPrecondition,
                "the job already ended",
                JobsReason::JobFinished.as_str(),
                HashMap::new(),
                None,
            ));
        }
        for (item, _) in items.iter_mut() {
            if item.state == job_item::State::Queued as i32 {
                item.state = job_item::State::Cancelled as i32;
            }
        }
        job.state = job::State::Cancelled as i32;
        job.end_time.get_or_insert_with(|| SystemTime::now().into());
        recount(job, items);
        Ok(Response::new(job.clone()))
    }

    async fn delete_job(&self, request: Request<DeleteJobRequest>) -> Result<Response<()>, Status> {
        let mut state = self.note(&request)?;
        let name = request.into_inner().name;
        let (_, items) = Self::find(&mut state, &name)?;
        let busy = items.iter().any(|(i, _)| {
            i.state == job_item::State::Queued as i32 || i.state == job_item::State::Running as i32
        });
        if busy {
            return Err(with_info(
                Code::FailedPrecondition,
                format!("{name} has items queued or running: cancel it first"),
                JobsReason::JobNotFinished.as_str(),
                HashMap::new(),
                None,
            ));
        }
        state.jobs.retain(|(j, _)| j.name != name);
        Ok(Response::new(()))
    }

    type ReadJobItemAudioStream = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<ReadJobItemAudioResponse, Status>> + Send>,
    >;

    async fn read_job_item_audio(
        &self,
        request: Request<ReadJobItemAudioRequest>,
    ) -> Result<Response<Self::ReadJobItemAudioStream>, Status> {
        let mut state = self.note(&request)?;
        let name = request.into_inner().name;
        *state.reads.entry(name.clone()).or_default() += 1;
        let (job_name, id) = name
            .split_once("/items/")
            .ok_or_else(|| Status::invalid_argument("name"))?;
        let (_, items) = Self::find(&mut state, job_name)?;
        let (item, _) = items
            .iter()
            .find(|(i, _)| i.id == id)
            .ok_or_else(|| Status::not_found("no such item"))?;
        if item.state != job_item::State::Succeeded as i32 {
            return Err(Status::failed_precondition("the item has not succeeded"));
        }
        let chunks: Vec<_> = audio_of(id)
            .chunks(1000)
            .map(|c| Ok(ReadJobItemAudioResponse { data: c.to_vec() }))
            .collect();
        // An item whose id starts with "hang": its first chunk, then the stream never ends
        // (a download to interrupt).
        if id.starts_with("hang") {
            use tokio_stream::StreamExt as _;
            let first = tokio_stream::iter(chunks).take(1);
            return Ok(Response::new(Box::pin(
                first.chain(tokio_stream::pending()),
            )));
        }
        Ok(Response::new(Box::pin(tokio_stream::iter(chunks))))
    }
}

/// Two of `all` from the position `token` names (empty: the start), and the next token.
fn page<T: Clone>(all: &[T], token: &str) -> (Vec<T>, String) {
    let start: usize = token.parse().unwrap_or(0).min(all.len());
    let end = (start + 2).min(all.len());
    let next = if end < all.len() {
        end.to_string()
    } else {
        String::new()
    };
    (all[start..end].to_vec(), next)
}

/// The real server's answer to items whose text is over 20,000 characters
/// (`services/jobs/src/validate.rs`): INVALID_ARGUMENT, a `BadRequest` naming `items[N].text`
/// (0-based), the first problem in the message.
fn too_long(request: &CreateJobRequest) -> Result<(), Status> {
    let problems: Vec<(String, String)> = request
        .items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| {
            let chars = item.text.chars().count();
            (chars > 20_000).then(|| {
                (
                    format!("items[{i}].text"),
                    format!(
                        "{chars} characters: at most 20000 per item; split it into several items"
                    ),
                )
            })
        })
        .collect();
    let Some((field, why)) = problems.first() else {
        return Ok(());
    };
    let mut details = ErrorDetails::new();
    for (field, why) in &problems {
        details.add_bad_request_violation(field.clone(), why.clone());
    }
    Err(Status::with_error_details(
        Code::InvalidArgument,
        format!("invalid {field}: {why}; nothing was queued"),
        details,
    ))
}
