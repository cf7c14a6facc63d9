//! A spent budget pauses a tenant's items without failing them or spending their attempts,
//! other tenants' items run on, and each item's usage adds up on its job.
//!
//! Real workers and a real Redis; synthesis is an in-process fake that answers
//! `BUDGET_EXHAUSTED` for one tenant while told to, and audio with its usage otherwise.

use std::{
    collections::HashMap,
    pin::Pin,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use futures::Stream;
use prost::Message as _;
use tokio_util::sync::CancellationToken;
use tonic::{Code, Request, Response, Status};
use voxpool_jobs::{
    model::{Format, ItemState, JobRecord, JobSpec, JobState, Priority},
    results::Results,
    store::JobStore,
    synth::Synthesizer,
    worker::{WorkerOptions, Workers},
};
use voxpool_proto::{
    jobs::v1::{JobItemSpec, job_item_spec::Voice},
    synthesis::v1::{
        self as spb,
        synthesis_server::{Synthesis, SynthesisServer},
    },
};
use voxpool_runtime::{auth::ClientToken, blob::BlobStore};
use voxpool_testkit::RedisServer;

/// The tenant whose budget is spent.
const SPENT: &str = "team-a";

/// Synthesis that refuses [`SPENT`]'s calls while `refusing`, and speaks everything else.
struct BudgetSynthesis {
    refusing: Arc<AtomicBool>,
    /// Refused calls.
    refused: Arc<AtomicUsize>,
    /// The `voxpool-origin` metadata of every call.
    origins: Arc<Mutex<Vec<String>>>,
}

#[tonic::async_trait]
impl Synthesis for BudgetSynthesis {
    async fn synthesize(
        &self,
        request: Request<spb::SynthesizeRequest>,
    ) -> Result<Response<spb::SynthesizeResponse>, Status> {
        let origin = request
            .metadata()
            .get("voxpool-origin")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        self.origins
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(origin);
        let request = request.into_inner();
        if request.tenant == SPENT && self.refusing.load(Ordering::Acquire) {
            self.refused.fetch_add(1, Ordering::AcqRel);
            return Err(voxpool_domain::status::with_info(
                Code::ResourceExhausted,
                "budget team-a-daily of tenant:team-a is spent (1000 of 1000 characters); it resets at the period's end: raise it or wait",
                "BUDGET_EXHAUSTED",
                HashMap::from([
                    ("budget".to_owned(), "team-a-daily".to_owned()),
                    ("subject".to_owned(), "tenant:team-a".to_owned()),
                    ("used".to_owned(), "1000".to_owned()),
                    ("limit".to_owned(), "1000".to_owned()),
                    ("resets_at_ms".to_owned(), "4102444800000".to_owned()),
                ]),
                Some(Duration::from_secs(3600)),
            ));
        }
        let characters = i64::try_from(request.text.chars().count()).unwrap_or(0);
        Ok(Response::new(spb::SynthesizeResponse {
            audio: vec![0; 64],
            format: spb::AudioFormat::Pcm as i32,
            usage: Some(spb::Usage {
                characters,
                billed_characters: characters,
                audio_ms: 100,
                cost: 0.000_25,
                currency: "USD".into(),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    type SynthesizeStreamStream =
        Pin<Box<dyn Stream<Item = Result<spb::AudioChunk, Status>> + Send>>;

    async fn synthesize_stream(
        &self,
        _: Request<spb::SynthesizeRequest>,
    ) -> Result<Response<Self::SynthesizeStreamStream>, Status> {
        Err(Status::unimplemented("not in this fake"))
    }

    async fn list_pools(
        &self,
        _: Request<spb::ListPoolsRequest>,
    ) -> Result<Response<spb::ListPoolsResponse>, Status> {
        Ok(Response::new(spb::ListPoolsResponse::default()))
    }
}

async fn serve(fake: BudgetSynthesis, shutdown: CancellationToken) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(SynthesisServer::new(fake))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                shutdown.cancelled_owned(),
            ),
    );
    format!("http://{addr}")
}

async fn create(store: &JobStore, results: &Results, tenant: &str, texts: &[&str]) -> String {
    let spec = JobSpec {
        tenant: tenant.into(),
        priority: Priority::Batch,
        format: Format::Pcm,
        sample_rate_hz: 0,
        request_id: String::new(),
        webhook_url: String::new(),
        blob_store: results.location().to_owned(),
        characters: 0,
    };
    let items: Vec<(String, Vec<u8>)> = texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let spec = JobItemSpec {
                id: format!("i{i}"),
                text: (*text).into(),
                voice: Some(Voice::PackId("vp_1".into())),
                ..Default::default()
            };
            (spec.id.clone(), spec.encode_to_vec())
        })
        .collect();
    let job = voxpool_jobs::model::new_job_id();
    store.create(&job, &spec, &items).await.expect("create");
    job
}

/// The job's record once `done` holds for it (20 s at most).
async fn until(store: &JobStore, job: &str, done: impl Fn(&JobRecord) -> bool) -> JobRecord {
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let record = store.record(job).await.expect("read").expect("the job");
            if done(&record) {
                return record;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the job gets there")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_budget_pauses_its_tenants_items_without_failing_them_and_usage_adds_up() {
    let shutdown = CancellationToken::new();
    let refusing = Arc::new(AtomicBool::new(true));
    let refused = Arc::new(AtomicUsize::new(0));
    let origins = Arc::new(Mutex::new(Vec::new()));
    let url = serve(
        BudgetSynthesis {
            refusing: refusing.clone(),
            refused: refused.clone(),
            origins: origins.clone(),
        },
        shutdown.clone(),
    )
    .await;
    let redis = RedisServer::start();
    let store = JobStore::connect(
        &redis.url(),
        "vj",
        None,
        Duration::from_secs(3600),
        Duration::from_secs(2),
    )
    .await
    .expect("job store");
    let blobs = tempfile::tempdir().expect("blob dir");
    let results = Results::new(
        BlobStore::open(Some(&format!("file://{}", blobs.path().display()))).expect("blobs"),
    );
    let spent = create(
        &store,
        &results,
        SPENT,
        &["one two", "three", "four five six"],
    )
    .await;
    let other = create(&store, &results, "team-b", &["alpha", "beta gamma"]).await;
    let synth = Synthesizer::new(
        &url,
        ClientToken::default(),
        Duration::from_secs(10),
        4 * 1024 * 1024,
    )
    .expect("synthesizer");
    // One attempt and two deliveries per item: a refusal that spent either would fail it.
    let options = WorkerOptions {
        concurrency: 2,
        visibility_timeout: Duration::from_secs(30),
        max_attempts: 1,
        max_deliveries: 2,
        budget_recheck: Duration::from_millis(200),
        poll: Duration::from_millis(20),
    };
    let workers = Workers::new(store.clone(), synth, results.clone(), "c1".into(), options);
    let run = tokio::spawn(workers.run(shutdown.clone(), Duration::from_secs(5)));

    let done = until(&store, &other, |r| r.end_ms.is_some()).await;
    assert_eq!(done.state, JobState::Succeeded, "{done:?}");
    assert_eq!(done.succeeded, 2);
    // Rechecked after each pause: more refusals than an item has attempts and deliveries.
    let waiting = until(&store, &spent, |r| {
        r.budget_wait.is_some() && refused.load(Ordering::Acquire) > 6
    })
    .await;
    assert_eq!(
        (waiting.failed, waiting.succeeded, waiting.end_ms),
        (0, 0, None),
        "waiting items neither fail nor end: {waiting:?}"
    );
    let wait = waiting.budget_wait.clone().expect("the wait");
    assert_eq!(
        (wait.budget.as_str(), wait.subject.as_str()),
        ("team-a-daily", "tenant:team-a")
    );
    assert_eq!(wait.resets_at_ms, 4_102_444_800_000);
    assert!(
        wait.next_try_ms > 0 && wait.next_try_ms < wait.resets_at_ms,
        "tried again before the reset (a raised budget is noticed): {wait:?}"
    );
    assert!(wait.message.contains("team-a-daily"));
    let shown = voxpool_jobs::convert::job(&waiting, &results);
    let shown_wait = shown.budget_wait.expect("the API shows the wait");
    assert_eq!(shown_wait.budget, "team-a-daily");
    assert!(shown_wait.reset_time.is_some() && shown_wait.next_try_time.is_some());

    refusing.store(false, Ordering::Release);
    let ended = until(&store, &spent, |r| r.end_ms.is_some()).await;
    assert_eq!(ended.state, JobState::Succeeded, "{ended:?}");
    assert_eq!(ended.succeeded, 3);
    assert!(ended.budget_wait.is_none(), "a success clears the wait");

    let (rows, _) = store.list_items(&spent, 0, 10, None).await.expect("items");
    let mut sum = voxpool_jobs::usage::Usage::default();
    for row in &rows {
        assert_eq!(row.state, ItemState::Succeeded);
        assert_eq!(row.attempts, 1, "no attempt spent on a refusal: {row:?}");
        let usage = row
            .result
            .as_ref()
            .and_then(|r| r.usage.clone())
            .expect("the item's usage");
        sum.add(&usage);
        let item = voxpool_jobs::convert::item(row, &results);
        assert_eq!(
            item.usage.map(|u| u.characters),
            Some(usage.characters),
            "JobItem.usage"
        );
    }
    assert_eq!(sum.characters, 7 + 5 + 13);
    assert_eq!(ended.usage, sum, "the job's usage is its items' added up");
    assert_eq!(ended.usage.cost_micros, 750);
    assert_eq!(ended.usage.currency, "USD");
    let shown = voxpool_jobs::convert::job(&ended, &results)
        .usage
        .expect("Job.usage");
    assert_eq!((shown.characters, shown.audio_ms), (25, 300));
    assert!((shown.cost - 0.000_75).abs() < 1e-12);
    let origins = origins
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    assert!(
        !origins.is_empty() && origins.iter().all(|o| o == "job"),
        "every call says it speaks a job's item: {origins:?}"
    );
    shutdown.cancel();
    run.await.expect("workers stop");
}
