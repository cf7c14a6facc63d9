//! Routing follows clones, on real servers: the `voxpool-catalog` binary (SQLite, clips in a
//! local blob store, the pools file for its clone scopes), an in-process scheduler and
//! synthesis servers over gRPC (with the real ElevenLabs adapter and the admin token), and the
//! fake ElevenLabs with two workspaces: `ws-a` (keys a1, a2 of upstream team-a) and `ws-b`
//! (key b1 of team-b). The test plays the clone worker itself through CloneWork Claim/Report,
//! so what is READY where is set by the test, not by a worker.
//!
//! - A clone READY in team-a: 100 requests are all served by team-a's keys (0 at team-b's,
//!   counted at the fake), and each use is recorded (`last_used_at`).
//! - The vendor drops the clone: the next request gets one vendor call (no failover), answers
//!   UNAVAILABLE CLONE_PENDING naming team-a, the catalog no longer holds the dropped id (a
//!   clone is asked for again there) and team-a's keys are not cooled.
//! - No READY clone: 50 requests at once over two synthesis replicas all answer CLONE_PENDING
//!   and the catalog holds exactly one clone row.
//!
//! The catalog binary is found beside the test's target directory (`cargo build --workspace
//! --bins`, as `make test` does, builds it).

mod common;

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use common::clones::{
    self, ADMIN, ELEVEN_POOLS, Service, Workdir, authed, channel, eleven_fake,
    eleven_secret as secret,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::{Code, transport::Channel};
use voxpool_domain::{contract::SynthesisReason, secret::Secret};
use voxpool_fake_vendors::{FakeVendor, audio::tone_wav};
use voxpool_proto::{
    catalog::v1::{self as pb, clone_work_client::CloneWorkClient, voice_clone::CloneState},
    scheduler::v1::{self as spb, pool_scheduler_client::PoolSchedulerClient},
    synthesis::v1 as ypb,
};
use voxpool_runtime::{
    auth::{AdminAuth, ClientToken},
    limits::ServerFlags,
};
use voxpool_synthesis::{
    adapters::registry::{self, AdapterOptions},
    server::{self, Options},
};

/// The fake, the catalog process, an in-process scheduler and synthesis replicas.
struct Stack {
    work: Workdir,
    fake: FakeVendor,
    catalog: Service,
    scheduler: SocketAddr,
    replicas: Vec<SocketAddr>,
    shutdown: CancellationToken,
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Stack {
    async fn start(replicas: usize) -> Self {
        let fake = eleven_fake(None).await;
        let pools = ELEVEN_POOLS
            .replace("{url}", &fake.base_url())
            .replace("{slots}", "5");
        let secrets = ["a1", "a2", "b1"].map(|k| (k, secret(k)));
        let credentials = secrets.each_ref().map(|(k, s)| (*k, s.as_str()));
        let work = Workdir::new(&pools, &credentials);
        let catalog = work.catalog("127.0.0.1:0");
        let shutdown = CancellationToken::new();
        let (scheduler, _) = common::start_scheduler(&work.parsed, shutdown.clone()).await;
        let mut stack = Self {
            work,
            fake,
            catalog,
            scheduler,
            replicas: Vec::new(),
            shutdown,
        };
        for _ in 0..replicas {
            stack.replicas.push(stack.synthesis().await);
        }
        stack
    }

    /// One more synthesis replica (no clone worker runs in process: the test plays it).
    async fn synthesis(&self) -> SocketAddr {
        let options = Options {
            scheduler_url: format!("http://{}", self.scheduler),
            catalog_url: format!("http://{}", self.catalog.addr),
            lease_ttl: Duration::from_secs(15),
            client_token: ClientToken::none(),
            cache: None,
            references: None,
            admin: AdminAuth::with_token(Secret::new(ADMIN)),
            usage_store: None,
        };
        let core = server::build(
            &self.work.parsed,
            registry::builtin(&AdapterOptions::default()),
            &options,
        )
        .expect("build synthesis");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let token = self.shutdown.clone();
        tokio::spawn(async move {
            server::serve_with(listener, core, &ServerFlags::default(), token)
                .await
                .expect("synthesis serve");
        });
        addr
    }

    async fn channel(&self) -> Channel {
        channel(&self.catalog.addr).await
    }

    /// A managed clone pack on the pool with one clip; its id.
    async fn pack(&self) -> String {
        let pack = clones::cloned_pack(
            "routed clone",
            "elevenlabs",
            "eleven_multilingual_v2",
            "eleven",
        );
        clones::create_pack(&self.catalog.addr, pack, clones::tone_reference(1_500)).await
    }

    async fn clones(&self, pack_id: &str) -> Vec<pb::VoiceClone> {
        clones::list_clones(&self.catalog.addr, pack_id).await
    }

    /// Plays the clone worker: clones `pack_id` into `scope` at the fake with key `key` and
    /// reports it READY with the vendor's id; answers the id.
    async fn ready_clone(&self, pack_id: &str, scope: &str, key: &str) -> String {
        clones::clone_voice(&self.catalog.addr, pack_id, scope, 0)
            .await
            .expect("clone voice");
        let mut work = CloneWorkClient::new(self.channel().await);
        let tasks = work
            .claim(authed(pb::ClaimCloneWorkRequest {
                worker: "test-worker".into(),
                scopes: vec![scope.into()],
                max: 1,
                lease_ms: 60_000,
            }))
            .await
            .expect("claim")
            .into_inner()
            .tasks;
        assert_eq!(tasks.len(), 1, "the CREATE is due: {tasks:?}");
        let voice_id = self.vendor_clone(pack_id, key).await;
        work.report(authed(pb::ReportCloneWorkRequest {
            pack_id: pack_id.into(),
            scope: scope.into(),
            lease_token: tasks[0].lease_token.clone(),
            outcome: Some(pb::report_clone_work_request::Outcome::Ready(
                pb::CloneReady {
                    vendor_voice_id: voice_id.clone(),
                    expires_at: None,
                },
            )),
        }))
        .await
        .expect("report ready");
        voice_id
    }

    /// An instant voice clone made at the fake with key `key` (`POST /v1/voices/add`).
    async fn vendor_clone(&self, name: &str, key: &str) -> String {
        let clip = tone_wav(16_000, 1_500).expect("clip");
        let form = reqwest::multipart::Form::new()
            .text("name", name.to_owned())
            .part(
                "files",
                reqwest::multipart::Part::bytes(clip)
                    .file_name("clip.wav")
                    .mime_str("audio/wav")
                    .expect("mime"),
            );
        let answer: serde_json::Value = reqwest::Client::new()
            .post(format!("{}/v1/voices/add", self.fake.base_url()))
            .header("xi-api-key", secret(key))
            .multipart(form)
            .send()
            .await
            .expect("add voice")
            .error_for_status()
            .expect("voice added")
            .json()
            .await
            .expect("json");
        answer["voice_id"].as_str().expect("voice_id").to_owned()
    }

    async fn synthesize(
        &self,
        replica: usize,
        pack_id: &str,
    ) -> Result<ypb::SynthesizeResponse, tonic::Status> {
        clones::synthesize(&self.replicas[replica].to_string(), pack_id).await
    }

    async fn pool_status(&self) -> spb::PoolStatus {
        PoolSchedulerClient::new(channel(&self.scheduler.to_string()).await)
            .get_pool_status(spb::GetPoolStatusRequest {
                pool: "eleven".into(),
            })
            .await
            .expect("pool status")
            .into_inner()
    }

    fn requests(&self, key: &str) -> u64 {
        self.fake.key_stats(&secret(key)).total_requests
    }
}

fn assert_clone_pending(status: &tonic::Status, scope: &str) {
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(
        SynthesisReason::of(status),
        Some(SynthesisReason::ClonePending),
        "{status:?}"
    );
    assert!(
        status.message().contains("being made") && status.message().contains(scope),
        "the message says a clone is being made and where: {}",
        status.message()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloned_voice_is_served_only_where_its_clone_is_ready_and_a_dropped_clone_is_made_again()
{
    let stack = Stack::start(1).await;
    let pack = stack.pack().await;
    let voice_id = stack.ready_clone(&pack, "team-a", "a1").await;

    let results = futures_join(&stack, &pack, 100).await;
    for r in &results {
        let r = r.as_ref().expect("served");
        assert!(r.key_id.starts_with("team-a/"), "served by {}", r.key_id);
    }
    let (a1, a2, b1) = (
        stack.requests("a1"),
        stack.requests("a2"),
        stack.requests("b1"),
    );
    assert_eq!(a1 + a2, 100, "every request on team-a's keys");
    assert_eq!(b1, 0, "none on team-b's key");

    // Each use is recorded (the keep-alive a vendor that drops unused clones needs).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let clones = stack.clones(&pack).await;
        if clones[0].last_used_at.is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "no use recorded: {clones:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The vendor drops the clone (deleted in the workspace behind voxpool's back).
    let deleted = reqwest::Client::new()
        .delete(format!("{}/v1/voices/{voice_id}", stack.fake.base_url()))
        .header("xi-api-key", secret("a2"))
        .send()
        .await
        .expect("delete");
    assert!(deleted.status().is_success(), "{deleted:?}");
    let before = a1 + a2;
    let gone = stack
        .synthesize(0, &pack)
        .await
        .expect_err("the clone is gone");
    assert_clone_pending(&gone, "team-a");
    assert_eq!(
        stack.requests("a1") + stack.requests("a2"),
        before + 1,
        "one vendor call: a clone gone is not failed over to the scope's other key"
    );
    assert_eq!(stack.requests("b1"), 0);
    let clones = stack.clones(&pack).await;
    assert_eq!(clones.len(), 1, "{clones:?}");
    assert_eq!(clones[0].scope, "team-a");
    assert_eq!(
        clones[0].state,
        CloneState::Pending as i32,
        "marked gone, then asked for again in its scope: {clones:?}"
    );
    assert!(clones[0].vendor_voice_id.is_empty(), "{clones:?}");
    for key in stack.pool_status().await.keys {
        assert_eq!(
            key.state,
            spb::KeyState::Available as i32,
            "a clone gone never cools a key: {key:?}"
        );
    }
    // Until the clone is made again, requests are told so without a vendor call.
    let waiting = stack.synthesize(0, &pack).await.expect_err("not ready");
    assert_clone_pending(&waiting, "team-a");
    assert_eq!(stack.requests("a1") + stack.requests("a2"), before + 1);
}

/// The answers of `n` requests for `pack` made at once on replica 0.
async fn futures_join(
    stack: &Stack,
    pack: &str,
    n: usize,
) -> Vec<Result<ypb::SynthesizeResponse, tonic::Status>> {
    let calls = (0..n).map(|i| stack.synthesize(i % stack.replicas.len(), pack));
    futures::future::join_all(calls).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_requests_at_once_over_two_replicas_ask_for_one_clone() {
    let stack = Stack::start(2).await;
    let pack = stack.pack().await;
    let answers = futures_join(&stack, &pack, 50).await;
    for answer in &answers {
        let status = answer.as_ref().expect_err("no clone is READY yet");
        assert_eq!(
            SynthesisReason::of(status),
            Some(SynthesisReason::ClonePending),
            "{status:?}"
        );
        assert!(
            tonic_types::StatusExt::get_error_details(status)
                .retry_info()
                .is_some(),
            "a RetryInfo says when to ask again: {status:?}"
        );
    }
    let clones = stack.clones(&pack).await;
    assert_eq!(clones.len(), 1, "one clone asked for: {clones:?}");
    assert_eq!(clones[0].state, CloneState::Pending as i32);
    assert_clone_pending(answers[0].as_ref().expect_err("pending"), &clones[0].scope);
    let counts = stack.fake.clone_counts();
    assert!(
        counts.values().all(|c| c.create == 0),
        "synthesis requests make no vendor clone call themselves: {counts:?}"
    );
    assert_eq!(
        stack.requests("a1") + stack.requests("a2") + stack.requests("b1"),
        0
    );
}
