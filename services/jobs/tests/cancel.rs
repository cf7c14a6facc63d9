//! A cancel that lands while a worker runs an item stops its next synthesis call: the worker
//! looks at the job's state right before each call, the parts of an item spoken in parts
//! included, and ends the item CANCELLED instead of calling.
//!
//! Real workers and a real Redis; synthesis is an in-process fake that answers the whole item
//! `RESPONSE_TOO_LARGE` (so the worker speaks it in parts) and holds the first part's call
//! until the test has cancelled the job.

use std::{
    collections::HashMap,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use futures::Stream;
use prost::Message as _;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tonic::{Code, Request, Response, Status};
use voxpool_jobs::{
    model::{Format, ItemState, JobSpec, JobState, Priority},
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

/// Synthesis that finds every whole item too large for one message and holds each part's
/// call until the gate lets it through.
struct SplittingSynthesis {
    /// Request ids of the Synthesize calls, in order.
    calls: Arc<Mutex<Vec<String>>>,
    /// Signalled when a part's call arrives.
    part_arrived: Arc<Notify>,
    /// One permit per part's call allowed to answer.
    gate: Arc<Semaphore>,
}

#[tonic::async_trait]
impl Synthesis for SplittingSynthesis {
    async fn synthesize(
        &self,
        request: Request<spb::SynthesizeRequest>,
    ) -> Result<Response<spb::SynthesizeResponse>, Status> {
        let id = request.into_inner().request_id;
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(id.clone());
        if !id.contains("/p") {
            return Err(voxpool_domain::status::with_info(
                Code::ResourceExhausted,
                "the audio is over the message limit",
                "RESPONSE_TOO_LARGE",
                HashMap::from([
                    ("bytes".to_owned(), "300".to_owned()),
                    ("limit".to_owned(), "100".to_owned()),
                ]),
                None,
            ));
        }
        self.part_arrived.notify_one();
        let permit = self
            .gate
            .acquire()
            .await
            .map_err(|_| Status::aborted("closed"))?;
        permit.forget();
        Ok(Response::new(spb::SynthesizeResponse {
            audio: vec![0; 64],
            format: spb::AudioFormat::Pcm as i32,
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

/// Serves `fake` on 127.0.0.1:0; its URL.
async fn serve(fake: SplittingSynthesis, shutdown: CancellationToken) -> String {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_an_items_parts_stops_its_next_part_and_ends_it_cancelled() {
    let shutdown = CancellationToken::new();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let part_arrived = Arc::new(Notify::new());
    let gate = Arc::new(Semaphore::new(0));
    let url = serve(
        SplittingSynthesis {
            calls: calls.clone(),
            part_arrived: part_arrived.clone(),
            gate: gate.clone(),
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
    let spec = JobSpec {
        tenant: "team-a".into(),
        priority: Priority::Batch,
        format: Format::Pcm,
        sample_rate_hz: 0,
        request_id: String::new(),
        webhook_url: String::new(),
        blob_store: results.location().to_owned(),
        characters: 0,
    };
    let item = JobItemSpec {
        id: "a0".into(),
        text: "The first sentence is here. The second one follows it. A third comes next. And the fourth ends it.".into(),
        voice: Some(Voice::PackId("vp_1".into())),
        ..Default::default()
    };
    let job = voxpool_jobs::model::new_job_id();
    store
        .create(&job, &spec, &[("a0".into(), item.encode_to_vec())])
        .await
        .expect("create");
    let synth = Synthesizer::new(
        &url,
        ClientToken::default(),
        Duration::from_secs(10),
        4 * 1024 * 1024,
    )
    .expect("synthesizer");
    let options = WorkerOptions {
        concurrency: 1,
        visibility_timeout: Duration::from_secs(30),
        max_attempts: 1,
        max_deliveries: 5,
        budget_recheck: Duration::from_secs(60),
        poll: Duration::from_millis(20),
    };
    let workers = Workers::new(store.clone(), synth, results, "c1".into(), options);
    let run = tokio::spawn(workers.run(shutdown.clone(), Duration::from_secs(5)));

    tokio::time::timeout(Duration::from_secs(20), part_arrived.notified())
        .await
        .expect("the worker speaks the item in parts");
    let cancelled = store.cancel(&job).await.expect("cancel");
    assert_eq!(cancelled, Some(Ok(None)), "the item still runs");
    gate.add_permits(16);

    let ended = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let record = store.record(&job).await.expect("read").expect("the job");
            if record.end_ms.is_some() {
                return record;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the job ends once its item does");
    assert_eq!(ended.state, JobState::Cancelled);
    assert_eq!((ended.cancelled, ended.succeeded), (1, 0), "{ended:?}");
    let (rows, _) = store.list_items(&job, 0, 10, None).await.expect("items");
    assert_eq!(rows[0].state, ItemState::Cancelled);
    let calls = calls.lock().unwrap_or_else(PoisonError::into_inner).clone();
    assert_eq!(
        calls,
        [format!("{job}/a0"), format!("{job}/a0/p1")],
        "no part is called after the cancel"
    );
    shutdown.cancel();
    run.await.expect("workers stop");
}
