//! A managed clone that is gone, and a managed clone pack the adapter cannot speak, on real
//! servers: the `voxpool-catalog` binary (SQLite, clips in a local blob store, the pools file
//! for its clone scopes), an in-process scheduler and synthesis replica over gRPC (the real
//! ElevenLabs adapter, the admin token) and the fake ElevenLabs with two workspaces: `ws-a`
//! (keys a1, a2 of upstream team-a, capacity 2 each) and `ws-b` (key b1 of team-b). The test
//! plays the clone worker itself through CloneWork Claim/Report.
//!
//! - A clone READY in team-a is spoken once, then deleted (DeleteClone, the vendor's copy
//!   deleted, the row removed) while the replica's cached clone list still holds it READY:
//!   20 requests at once all answer UNAVAILABLE CLONE_PENDING (none NOT_FOUND), the catalog
//!   holds exactly one new PENDING clone in team-a, and the vendor is sent the dead id at most
//!   twice per slot of team-a's keys (not once per request; 1 to 5 times in practice).
//! - A managed clone pack with `extra.n` (which ElevenLabs cannot apply) is refused
//!   INVALID_ARGUMENT naming `extra.n` at once, and no clone is asked for.
//!
//! The harness is the clone tests' shared one (`tests/common/clones.rs`). The catalog binary is
//! found beside the test's target directory (`cargo build --workspace --bins`, as `make test`
//! does, builds it).

mod common;

use std::{
    collections::HashMap,
    net::SocketAddr,
    time::{Duration, Instant},
};

use common::clones::{ADMIN, Service, Workdir, admin_scheduler, authed, channel};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::{Code, Request, transport::Channel};
use voxpool_config::Config;
use voxpool_domain::{contract::SynthesisReason, secret::Secret};
use voxpool_fake_vendors::{CloneConfig, FakeConfig, FakeVendor, VendorKind, audio::tone_wav};
use voxpool_proto::{
    catalog::v1::{
        self as pb, clone_work_client::CloneWorkClient,
        report_clone_work_request::Outcome as Reported,
        voice_catalog_admin_client::VoiceCatalogAdminClient, voice_clone::CloneState,
    },
    synthesis::v1::{self as ypb, synthesis_client::SynthesisClient},
};
use voxpool_runtime::{
    auth::{AdminAuth, ClientToken},
    limits::ServerFlags,
};
use voxpool_synthesis::{
    adapters::registry::{self, AdapterOptions},
    server::{self, Options},
};

/// How long a synthesis replica serves a pack's clones from its cache
/// (`catalog::clones::LIST_TTL`).
const LIST_TTL: Duration = Duration::from_secs(3);

/// Concurrent calls team-a's keys take (a1 and a2, capacity 2 each).
const TEAM_A_SLOTS: u64 = 4;

const POOLS: &str = r#"
[scheduler]
wait_poll_ms = 10
recovery_window_ms = 0

[[pools]]
id = "eleven"
provider = "elevenlabs"
model = "eleven_multilingual_v2"
[[pools.upstreams]]
id = "team-a"
base_url = "{url}"
clone = { slots = 5 }
[[pools.upstreams.keys]]
id = "a1"
capacity = 2
credential = { file = "{dir}/a1" }
[[pools.upstreams.keys]]
id = "a2"
capacity = 2
credential = { file = "{dir}/a2" }
[[pools.upstreams]]
id = "team-b"
base_url = "{url}"
clone = { slots = 5 }
[[pools.upstreams.keys]]
id = "b1"
capacity = 2
credential = { file = "{dir}/b1" }
"#;

fn secret(key: &str) -> String {
    format!("eleven-secret-{key}")
}

/// The fake, the catalog process, an in-process scheduler and one synthesis replica.
struct Stack {
    _dir: Workdir,
    fake: FakeVendor,
    catalog: Service,
    replica: SocketAddr,
    shutdown: CancellationToken,
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Stack {
    async fn start() -> Self {
        let clones = CloneConfig::for_vendor(VendorKind::ElevenLabs)
            .scope(secret("a1"), "ws-a")
            .scope(secret("a2"), "ws-a")
            .scope(secret("b1"), "ws-b");
        let fake = FakeVendor::start(FakeConfig::new(VendorKind::ElevenLabs).clones(clones))
            .await
            .expect("fake");
        let secrets = ["a1", "a2", "b1"].map(|k| (k, secret(k)));
        let credentials: Vec<(&str, &str)> =
            secrets.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let dir = Workdir::new(&POOLS.replace("{url}", &fake.base_url()), &credentials);
        let config = dir.parsed.clone();
        let catalog = dir.catalog("127.0.0.1:0");
        let shutdown = CancellationToken::new();
        let scheduler = admin_scheduler(&config, shutdown.clone()).await;
        let replica = start_synthesis(&config, &scheduler, &catalog.addr, &shutdown).await;
        Self {
            _dir: dir,
            fake,
            catalog,
            replica,
            shutdown,
        }
    }

    async fn admin(&self) -> VoiceCatalogAdminClient<Channel> {
        VoiceCatalogAdminClient::new(channel(&self.catalog.addr).await)
    }

    /// A managed clone pack on pool `eleven` with `extra` and one clip; its id.
    async fn pack(&self, extra: &[(&str, &str)]) -> String {
        let mut admin = self.admin().await;
        let pack = pb::VoicePack {
            display_name: "gone clone".into(),
            provider: "elevenlabs".into(),
            model: "eleven_multilingual_v2".into(),
            tts_model_id: "eleven".into(),
            tier: pb::Tier::Standard as i32,
            kind: pb::voice_pack::Kind::Cloned as i32,
            locales: vec!["en-US".into()],
            extra: extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<HashMap<_, _>>(),
            ..Default::default()
        };
        let id = admin
            .create_voice_pack(authed(pb::CreateVoicePackRequest {
                voice_pack: Some(pack),
            }))
            .await
            .expect("create pack")
            .into_inner()
            .id;
        admin
            .add_reference(authed(pb::AddReferenceRequest {
                pack_id: id.clone(),
                audio: tone_wav(16_000, 1_500).expect("clip"),
                transcript: "The quick brown fox.".into(),
                ..Default::default()
            }))
            .await
            .expect("add reference");
        id
    }

    async fn clones(&self, pack_id: &str) -> Vec<pb::VoiceClone> {
        self.admin()
            .await
            .list_clones(authed(pb::ListClonesRequest {
                pack_id: pack_id.into(),
            }))
            .await
            .expect("list clones")
            .into_inner()
            .clones
    }

    /// Plays the clone worker for the one step due in `scope`: claims it (of kind `work`),
    /// lets `vendor` do the vendor's part (given the task), and reports what it answers.
    async fn work(
        &self,
        scope: &str,
        work: pb::clone_task::Work,
        vendor: impl AsyncFnOnce(&pb::CloneTask) -> Reported,
    ) {
        let mut client = CloneWorkClient::new(channel(&self.catalog.addr).await);
        let tasks = client
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
        assert_eq!(tasks.len(), 1, "one step is due in {scope}: {tasks:?}");
        assert_eq!(tasks[0].work, work as i32, "{tasks:?}");
        let outcome = vendor(&tasks[0]).await;
        client
            .report(authed(pb::ReportCloneWorkRequest {
                pack_id: tasks[0].pack_id.clone(),
                scope: scope.into(),
                lease_token: tasks[0].lease_token.clone(),
                outcome: Some(outcome),
            }))
            .await
            .expect("report");
    }

    /// Clones `pack_id` into team-a at the fake (key a1), READY; the vendor's id.
    async fn ready_clone(&self, pack_id: &str) -> String {
        self.admin()
            .await
            .clone_voice(authed(pb::CloneVoiceRequest {
                pack_id: pack_id.into(),
                scopes: vec!["team-a".into()],
                max_scopes: 0,
            }))
            .await
            .expect("clone voice");
        let voice_id = self.vendor_clone(pack_id).await;
        let ready = voice_id.clone();
        self.work("team-a", pb::clone_task::Work::Create, async |_| {
            Reported::Ready(pb::CloneReady {
                vendor_voice_id: ready,
                expires_at: None,
            })
        })
        .await;
        voice_id
    }

    /// An instant voice clone made at the fake with key a1 (`POST /v1/voices/add`).
    async fn vendor_clone(&self, name: &str) -> String {
        let form = reqwest::multipart::Form::new()
            .text("name", name.to_owned())
            .part(
                "files",
                reqwest::multipart::Part::bytes(tone_wav(16_000, 1_500).expect("clip"))
                    .file_name("clip.wav")
                    .mime_str("audio/wav")
                    .expect("mime"),
            );
        let answer: serde_json::Value = reqwest::Client::new()
            .post(format!("{}/v1/voices/add", self.fake.base_url()))
            .header("xi-api-key", secret("a1"))
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

    /// Deletes the vendor's copy `voice_id` at the fake (key a2).
    async fn vendor_delete(&self, voice_id: &str) {
        let deleted = reqwest::Client::new()
            .delete(format!("{}/v1/voices/{voice_id}", self.fake.base_url()))
            .header("xi-api-key", secret("a2"))
            .send()
            .await
            .expect("delete");
        assert!(deleted.status().is_success(), "{deleted:?}");
    }

    /// A client of the replica, connected.
    async fn client(&self) -> SynthesisClient<Channel> {
        SynthesisClient::new(channel(&self.replica.to_string()).await)
    }

    /// One request for `pack_id` (by pack id, 30 s deadline) through `client`.
    async fn synthesize(
        mut client: SynthesisClient<Channel>,
        pack_id: &str,
    ) -> Result<ypb::SynthesizeResponse, tonic::Status> {
        let mut request = Request::new(ypb::SynthesizeRequest {
            voice: Some(ypb::synthesize_request::Voice::PackId(pack_id.into())),
            text: "Hello from the cloned voice.".into(),
            ..Default::default()
        });
        request.set_timeout(Duration::from_secs(30));
        client
            .synthesize(request)
            .await
            .map(tonic::Response::into_inner)
    }

    fn not_found(&self) -> u64 {
        self.fake.clone_counts().values().map(|c| c.not_found).sum()
    }

    fn creates(&self) -> u64 {
        self.fake.clone_counts().values().map(|c| c.create).sum()
    }
}

/// A synthesis replica in process (no clone worker runs: the test plays it).
async fn start_synthesis(
    config: &Config,
    scheduler: &SocketAddr,
    catalog: &str,
    shutdown: &CancellationToken,
) -> SocketAddr {
    let options = Options {
        scheduler_url: format!("http://{scheduler}"),
        catalog_url: format!("http://{catalog}"),
        lease_ttl: Duration::from_secs(15),
        client_token: ClientToken::none(),
        cache: None,
        references: None,
        admin: AdminAuth::with_token(Secret::new(ADMIN)),
        usage_store: None,
    };
    let core = server::build(
        config,
        registry::builtin(&AdapterOptions::default()),
        &options,
    )
    .expect("build synthesis");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let token = shutdown.clone();
    tokio::spawn(async move {
        server::serve_with(listener, core, &ServerFlags::default(), token)
            .await
            .expect("synthesis serve");
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_right_after_a_clone_is_deleted_are_told_it_is_being_made_again() {
    let stack = Stack::start().await;
    let pack = stack.pack(&[]).await;
    let voice_id = stack.ready_clone(&pack).await;
    let client = stack.client().await;
    // The request reads the pack's clones, the one READY in team-a, which the replica then
    // holds for LIST_TTL.
    let listed_at = Instant::now();
    let served = Stack::synthesize(client.clone(), &pack)
        .await
        .expect("served");
    assert!(served.key_id.starts_with("team-a/"), "{}", served.key_id);

    stack
        .admin()
        .await
        .delete_clone(authed(pb::DeleteCloneRequest {
            pack_id: pack.clone(),
            scope: "team-a".into(),
        }))
        .await
        .expect("delete clone");
    stack
        .work("team-a", pb::clone_task::Work::Delete, async |task| {
            assert_eq!(task.vendor_voice_id, voice_id);
            stack.vendor_delete(&task.vendor_voice_id).await;
            Reported::Deleted(pb::CloneDeleted {})
        })
        .await;
    assert!(stack.clones(&pack).await.is_empty(), "the row is removed");
    let creates = stack.creates();

    assert!(
        listed_at.elapsed() < LIST_TTL,
        "precondition: the burst starts while the replica's cache still lists the deleted \
         clone READY ({:?} after it was read)",
        listed_at.elapsed()
    );
    let burst = (0..20).map(|_| Stack::synthesize(client.clone(), &pack));
    let answers = futures::future::join_all(burst).await;
    for answer in &answers {
        let status = answer.as_ref().expect_err("the clone is gone");
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert_eq!(
            SynthesisReason::of(status),
            Some(SynthesisReason::ClonePending),
            "{status:?}"
        );
        assert!(
            status.message().contains("being made") && status.message().contains("team-a"),
            "{status:?}"
        );
    }

    let clones = stack.clones(&pack).await;
    assert_eq!(
        clones.len(),
        1,
        "exactly one clone asked for again: {clones:?}"
    );
    assert_eq!(clones[0].scope, "team-a", "{clones:?}");
    assert_eq!(clones[0].state, CloneState::Pending as i32, "{clones:?}");
    assert!(clones[0].vendor_voice_id.is_empty(), "{clones:?}");
    assert_eq!(
        stack.creates(),
        creates,
        "synthesis requests make no vendor clone call themselves"
    );
    let not_found = stack.not_found();
    assert!(
        not_found >= 1,
        "the stale cache sent the dead id to the vendor at least once"
    );
    assert!(
        not_found <= 2 * TEAM_A_SLOTS,
        "the dead id reaches the vendor only on calls that held or took a slot of team-a's \
         keys before the first not-found was recorded (each slot at most twice: its call under \
         way, and a refill in the moment between that call's report and its record), not once \
         per request: {not_found} of 20"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_pack_with_an_extra_the_adapter_refuses_is_refused_before_any_clone() {
    let stack = Stack::start().await;
    let pack = stack.pack(&[("n", "1")]).await;

    let status = Stack::synthesize(stack.client().await, &pack)
        .await
        .expect_err("ElevenLabs cannot apply extra.n");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("extra.n"), "{status:?}");

    assert!(
        stack.clones(&pack).await.is_empty(),
        "no clone is asked for a request that cannot be spoken"
    );
    assert_eq!(stack.creates(), 0);
}
