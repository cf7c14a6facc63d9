//! The stack every jobs test runs on: a fake OpenAI-compatible vendor (in process, counting
//! calls, fixed latency), `voxpool-scheduler` (memory store), `voxpool-catalog` (SQLite),
//! `voxpool-synthesis` (audio cache off unless a test's synthesis arguments turn it on) and as
//! many `voxpool-jobs` replicas as a test starts on its own Redis.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use tonic::transport::Channel;
use voxpool_e2e::{Service, binary, quiet, start, start_with_stderr};
use voxpool_fake_vendors::{FakeConfig, FakeVendor, Latency, VendorKind};
use voxpool_proto::jobs::v1::{self as jpb, job, job_item_spec::Voice, jobs_client::JobsClient};

pub const POOL: &str = "openai-fake";
/// The bound of every wait on a job.
pub const DEADLINE: Duration = Duration::from_secs(90);

fn log(c: Command) -> Command {
    quiet(c, "JOBS_TEST_LOG")
}

pub struct Stack {
    pub dir: tempfile::TempDir,
    pub fake: FakeVendor,
    _scheduler: Service,
    _catalog: Service,
    pub synthesis: Service,
}

fn config(dir: &Path, base_url: &str, client_tokens: &str) -> PathBuf {
    let mut t = format!(
        "[[pools]]\nid = \"{POOL}\"\nprovider = \"openai\"\nmodel = \"tts-1\"\n\
         [[pools.upstreams]]\nid = \"u\"\nbase_url = \"{base_url}\"\n"
    );
    for k in 0..4 {
        let credential = dir.join(format!("k{k}"));
        std::fs::write(&credential, format!("k{k}\n")).expect("credential file");
        t.push_str(&format!(
            "[[pools.upstreams.keys]]\nid = \"k{k}\"\ncapacity = 16\ncredential = {{ file = \"{}\" }}\n",
            credential.display()
        ));
    }
    t.push_str(
        "[scheduler]\nwait_poll_ms = 10\nrecovery_window_ms = 0\n\
         [synthesis]\nattempt_timeout_ms = 10000\ndefault_deadline_ms = 30000\n",
    );
    t.push_str(voxpool_e2e::CLIENT_TOKENS_TOML);
    t.push_str(client_tokens);
    let path = dir.join("config.toml");
    std::fs::write(&path, t).expect("config file");
    path
}

impl Stack {
    /// The stack with every vendor call taking `latency_ms`.
    pub async fn start(latency_ms: u64) -> Self {
        Self::start_with(latency_ms, &[]).await
    }

    /// [`Stack::start`] with `synthesis_args` added to synthesis's command line.
    pub async fn start_with(latency_ms: u64, synthesis_args: &[&str]) -> Self {
        Self::start_with_tokens(latency_ms, synthesis_args, "", &[]).await
    }

    /// [`Stack::start_with`] with `client_tokens` (more `[[client_tokens]]` entries) in the
    /// config (`config.toml` in [`Stack::dir`]) and `scheduler_env` in the scheduler's
    /// environment.
    pub async fn start_with_tokens(
        latency_ms: u64,
        synthesis_args: &[&str],
        client_tokens: &str,
        scheduler_env: &[(&str, &str)],
    ) -> Self {
        let fake = FakeVendor::start(
            FakeConfig::new(VendorKind::OpenAi)
                .cap(0)
                .latency(Latency::Fixed(Duration::from_millis(latency_ms))),
        )
        .await
        .expect("fake vendor");
        let dir = tempfile::tempdir().expect("tempdir");
        let config = config(dir.path(), &fake.base_url(), client_tokens);
        let mut s = log(Command::new(binary("voxpool-scheduler")));
        s.arg("--config")
            .arg(&config)
            .args(["--listen", "127.0.0.1:0", "--store", "memory"])
            .envs(scheduler_env.iter().copied());
        let scheduler = start(s);
        let mut c = Command::new(binary("voxpool-catalog"));
        c.args(["--listen", "127.0.0.1:0", "--database"])
            .arg(format!(
                "sqlite://{}?mode=rwc",
                dir.path().join("catalog.db").display()
            ))
            .env("VOXPOOL_ADMIN_TOKEN", "jobs-test-admin-token-0123456789");
        let catalog = start(log(c));
        let mut y = Command::new(binary("voxpool-synthesis"));
        y.arg("--config")
            .arg(&config)
            .args(["--listen", "127.0.0.1:0"])
            .args(["--scheduler", &format!("http://{}", scheduler.addr)])
            .args(["--catalog", &format!("http://{}", catalog.addr)])
            .args(synthesis_args);
        let synthesis = start(log(y));
        Self {
            dir,
            fake,
            _scheduler: scheduler,
            _catalog: catalog,
            synthesis,
        }
    }

    pub fn blob_dir(&self) -> PathBuf {
        self.dir.path().join("blobs")
    }

    /// A `voxpool-jobs` replica on `store`; its logs (info) go to `log_file` when given.
    pub fn jobs(
        &self,
        store: &str,
        concurrency: u32,
        env: &[(&str, &str)],
        log_file: Option<&Path>,
    ) -> Service {
        let synthesis = format!("http://{}", self.synthesis.addr);
        self.jobs_on(
            store,
            concurrency,
            env,
            log_file,
            &self.blob_dir(),
            &synthesis,
        )
    }

    /// [`Stack::jobs`] writing its results to the blob store in `blob_dir` and calling
    /// synthesis at `synthesis`.
    pub fn jobs_on(
        &self,
        store: &str,
        concurrency: u32,
        env: &[(&str, &str)],
        log_file: Option<&Path>,
        blob_dir: &Path,
        synthesis: &str,
    ) -> Service {
        // Quiet first: the test's own `env` (an OTLP endpoint, say) then wins over its removals.
        let mut j = log(Command::new(binary("voxpool-jobs")));
        j.args(["--listen", "127.0.0.1:0", "--store", store])
            .args(["--synthesis", synthesis])
            .args(["--blob-store", &format!("file://{}", blob_dir.display())])
            .args([
                "--visibility-timeout",
                "2s",
                "--concurrency",
                &concurrency.to_string(),
            ])
            .env("VOXPOOL_CLIENT_TOKEN", voxpool_e2e::VOXCTL_TOKEN);
        for (k, v) in env {
            j.env(k, v);
        }
        match log_file {
            Some(path) => {
                j.env("RUST_LOG", "voxpool_jobs=info");
                let file = std::fs::File::create(path).expect("log file");
                start_with_stderr(j, Stdio::from(file))
            }
            None => start(j),
        }
    }

    /// Requests the fake vendor has seen.
    pub fn vendor_calls(&self) -> u64 {
        self.fake.stats().values().map(|k| k.total_requests).sum()
    }
}

pub async fn client(service: &Service) -> JobsClient<Channel> {
    JobsClient::new(voxpool_e2e::connect(&service.addr).await)
}

/// Item `i`: a distinct text on the fake's voice.
pub fn item(i: usize) -> jpb::JobItemSpec {
    let voice = voxpool_fake_vendors::snapshot("openai", "tts-1", "alloy");
    jpb::JobItemSpec {
        id: format!("item-{i:05}"),
        text: format!("This is item number {i:05} of the job."),
        voice: Some(Voice::Snapshot(voice.to_pb())),
        ..Default::default()
    }
}

pub fn request(tenant: &str, n: usize) -> jpb::CreateJobRequest {
    jpb::CreateJobRequest {
        tenant: tenant.into(),
        items: (0..n).map(item).collect(),
        ..Default::default()
    }
}

pub async fn create(c: &mut JobsClient<Channel>, req: jpb::CreateJobRequest) -> jpb::Job {
    c.create_job(req).await.expect("CreateJob").into_inner()
}

pub async fn get(c: &mut JobsClient<Channel>, name: &str) -> jpb::Job {
    c.get_job(jpb::GetJobRequest { name: name.into() })
        .await
        .expect("GetJob")
        .into_inner()
}

pub fn counts(j: &jpb::Job) -> jpb::ItemCounts {
    j.item_counts.unwrap_or_default()
}

pub fn state(j: &jpb::Job) -> job::State {
    job::State::try_from(j.state).unwrap_or(job::State::Unspecified)
}

/// A client of `service` once GetJob of `name` answers again (it answers UNAVAILABLE while
/// the store fails over); panics [`DEADLINE`] after `since`.
pub async fn answering(service: &Service, name: &str, since: Instant) -> JobsClient<Channel> {
    loop {
        let mut c = client(service).await;
        let answer = c.get_job(jpb::GetJobRequest { name: name.into() }).await;
        match answer {
            Ok(_) => return c,
            Err(e) => assert!(
                since.elapsed() < DEADLINE,
                "the job store never answered after the failover: {e:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls (bounded by [`DEADLINE`]) until `log` contains `line`.
pub async fn until_logged(log: &Path, line: &str) {
    let until = Instant::now() + DEADLINE;
    while !std::fs::read_to_string(log)
        .unwrap_or_default()
        .contains(line)
    {
        assert!(
            Instant::now() < until,
            "{} never logged {line:?}",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls (bounded by [`DEADLINE`]) until `service`'s health answers `serving`.
pub async fn until_health(service: &Service, serving: bool) {
    use tonic_health::pb::{
        HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
    };
    let want = if serving {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    } as i32;
    let mut health = HealthClient::new(voxpool_e2e::connect(&service.addr).await);
    let until = Instant::now() + DEADLINE;
    loop {
        let now = health
            .check(HealthCheckRequest::default())
            .await
            .map(|r| r.into_inner().status);
        if now.as_ref().is_ok_and(|s| *s == want) {
            return;
        }
        assert!(
            Instant::now() < until,
            "{}: health never {want}: {now:?}",
            service.addr
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls GetJob every 20 ms until `pred` holds (panics after [`DEADLINE`]).
pub async fn wait(
    c: &mut JobsClient<Channel>,
    name: &str,
    what: &str,
    pred: impl Fn(&jpb::Job) -> bool,
) -> jpb::Job {
    let until = Instant::now() + DEADLINE;
    loop {
        let j = get(c, name).await;
        if pred(&j) {
            return j;
        }
        assert!(
            Instant::now() < until,
            "{name}: not {what} within {DEADLINE:?}: {j:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the job has an end_time (terminal, nothing in flight).
pub async fn ended(c: &mut JobsClient<Channel>, name: &str) -> jpb::Job {
    wait(c, name, "ended", |j| j.end_time.is_some()).await
}

/// Every item, paging 100 at a time (`filter` as ListJobItems takes it).
pub async fn items(c: &mut JobsClient<Channel>, name: &str, filter: &str) -> Vec<jpb::JobItem> {
    let mut all = Vec::new();
    let mut token = String::new();
    loop {
        let page = c
            .list_job_items(jpb::ListJobItemsRequest {
                name: name.into(),
                page_size: 100,
                page_token: token,
                filter: filter.into(),
            })
            .await
            .expect("ListJobItems")
            .into_inner();
        assert!(page.items.len() <= 100);
        all.extend(page.items);
        if page.next_page_token.is_empty() {
            return all;
        }
        token = page.next_page_token;
    }
}

pub fn item_state(i: &jpb::JobItem) -> jpb::job_item::State {
    jpb::job_item::State::try_from(i.state).unwrap_or(jpb::job_item::State::Unspecified)
}

/// Asserts job `name` SUCCEEDED with its `n` items in order, each with an attempt counted and
/// its object written.
pub async fn assert_all_succeeded(
    c: &mut JobsClient<Channel>,
    stack: &Stack,
    name: &str,
    n: usize,
) {
    let j = ended(c, name).await;
    if state(&j) != job::State::Succeeded {
        // Which items failed, and why: the job alone does not say.
        let failed: Vec<jpb::JobItem> = items(c, name, "")
            .await
            .into_iter()
            .filter(|i| item_state(i) != jpb::job_item::State::Succeeded)
            .collect();
        panic!(
            "job {name} ended {:?}, not SUCCEEDED: {j:?}; items not succeeded: {failed:?}",
            state(&j)
        );
    }
    assert_eq!(counts(&j).succeeded as usize, n, "{j:?}");
    let all = items(c, name, "").await;
    assert_eq!(all.len(), n);
    let id = name.trim_start_matches("jobs/");
    for (i, it) in all.iter().enumerate() {
        assert_eq!(it.id, format!("item-{i:05}"), "items in submission order");
        assert_eq!(item_state(it), jpb::job_item::State::Succeeded, "{it:?}");
        // Counted before each call, also across a store failover.
        assert!(
            it.attempts >= 1,
            "a succeeded item with no attempt counted: {it:?}"
        );
        let object = stack
            .blob_dir()
            .join("jobs")
            .join(id)
            .join(format!("{}.wav", it.id));
        let size = std::fs::metadata(&object).map_or(0, |m| m.len());
        assert!(size > 0, "{} has no object ({it:?})", object.display());
    }
}
