//! DashScope CosyVoice clones end to end, and restarts mid-training, on real processes: the
//! `voxpool-catalog` binary (SQLite, clips in a local blob store, the pools file for its clone
//! scopes), `voxpool-synthesis` binaries (each running its clone worker with the keys'
//! credentials), an in-process scheduler, and the fake DashScope's voice enrollment (per-account
//! visibility, a voice DEPLOYING until the fake clock passes its training, counted calls).
//! Nothing here plays the worker: every vendor clone call is made by a synthesis replica.
//!
//! - A pack's clone is enrolled in account acct-a from its clip, polled to READY, and serves
//!   requests on acct-a's keys only (none on acct-b's, counted at the fake); once the vendor
//!   drops the voice, the request that finds it gone has it enrolled again, and it is served.
//! - The catalog is SIGKILLed while the voice deploys and started again on the same database:
//!   the clone still becomes READY, with exactly one enrollment at the vendor.
//! - The synthesis replica is SIGKILLed while the voice deploys and started again: the same.
//!
//! The catalog binary is found beside the test's target directory (`cargo build --workspace
//! --bins`, as `make test` does, builds it).

use std::{
    io::{BufRead as _, BufReader},
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::{Code, Request, transport::Channel};
use voxpool_config::Config;
use voxpool_domain::secret::Secret;
use voxpool_fake_vendors::{
    CloneConfig, CloneState as FakeState, FakeConfig, FakeVendor, VendorKind, audio::tone_wav,
};
use voxpool_proto::{
    catalog::v1::{
        self as pb, voice_catalog_admin_client::VoiceCatalogAdminClient, voice_clone::CloneState,
    },
    synthesis::v1::{self as ypb, synthesis_client::SynthesisClient},
};
use voxpool_runtime::auth::AdminAuth;

const ADMIN: &str = "clone-restart-admin-token-0123456789";
const MODEL: &str = "cosyvoice-v2";
/// Longest a test waits for the catalog or a replica to reach a state it polls for.
const PATIENCE: Duration = Duration::from_secs(40);
/// Fake time for a voice to deploy.
const TRAINING: Duration = Duration::from_secs(60);

const POOLS: &str = r#"
[scheduler]
wait_poll_ms = 10

[[pools]]
id = "ds"
provider = "dashscope"
model = "cosyvoice-v2"
[[pools.upstreams]]
id = "acct-a"
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
id = "acct-b"
base_url = "{url}"
clone = { slots = 5 }
[[pools.upstreams.keys]]
id = "b1"
capacity = 2
credential = { file = "{dir}/b1" }
"#;

fn secret(key: &str) -> String {
    format!("dashscope-secret-{key}")
}

/// A child process killed (SIGKILL) on drop, with the address of its first stdout line.
struct Service {
    child: Child,
    addr: String,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(mut command: Command) -> Service {
    command.env(
        "RUST_LOG",
        std::env::var("CLONE_TEST_LOG").unwrap_or_else(|_| "error".into()),
    );
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {command:?}: {e}"));
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("first line");
    let addr = line
        .split(" listening on ")
        .nth(1)
        .unwrap_or_else(|| panic!("{command:?} printed {line:?} instead of its address"))
        .trim()
        .to_owned();
    Service { child, addr }
}

/// `target/<profile>/voxpool-catalog`, beside this test's `deps/`.
fn catalog_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let path = exe
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("voxpool-catalog");
    assert!(
        path.exists(),
        "{} not built: run `cargo build --workspace --bins` (make test does)",
        path.display()
    );
    path
}

fn authed<T>(message: T) -> Request<T> {
    let mut r = Request::new(message);
    r.metadata_mut().insert(
        "authorization",
        format!("Bearer {ADMIN}").parse().expect("metadata"),
    );
    r
}

async fn channel(addr: &str) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .expect("url")
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"))
}

/// A scheduler on the memory store whose admin RPCs take [`ADMIN`].
async fn scheduler(config: &Config, shutdown: CancellationToken) -> SocketAddr {
    let store = voxpool_scheduler::server::open_store("memory", config)
        .await
        .expect("memory store");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let config = config.clone();
    tokio::spawn(async move {
        voxpool_scheduler::server::serve(
            listener,
            store,
            &config,
            AdminAuth::with_token(Secret::new(ADMIN)),
            shutdown,
        )
        .await
        .expect("scheduler serve");
    });
    addr
}

/// The fake DashScope (acct-a: keys a1, a2; acct-b: key b1), the catalog process, an
/// in-process scheduler and one synthesis replica, each of the processes restartable.
struct Stack {
    fake: FakeVendor,
    dir: tempfile::TempDir,
    config: PathBuf,
    blobs: String,
    catalog: Option<Service>,
    catalog_addr: String,
    scheduler: SocketAddr,
    replica: Option<Service>,
    shutdown: CancellationToken,
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Stack {
    async fn start() -> Self {
        let clones = CloneConfig::for_vendor(VendorKind::DashScope)
            .scope(secret("a1"), "acct-a")
            .scope(secret("a2"), "acct-a")
            .scope(secret("b1"), "acct-b")
            .training(TRAINING);
        let fake = FakeVendor::start(FakeConfig::new(VendorKind::DashScope).clones(clones))
            .await
            .expect("fake");
        let dir = tempfile::tempdir().expect("tempdir");
        for key in ["a1", "a2", "b1"] {
            std::fs::write(dir.path().join(key), secret(key)).expect("credential file");
        }
        let text = POOLS
            .replace("{url}", &fake.base_url())
            .replace("{dir}", &dir.path().display().to_string());
        let config = dir.path().join("pools.toml");
        std::fs::write(&config, &text).expect("pools file");
        let parsed = Config::from_toml_str(&text).expect("config parses");
        let blobs = format!("file://{}", dir.path().join("blobs").display());
        let shutdown = CancellationToken::new();
        let scheduler = scheduler(&parsed, shutdown.clone()).await;
        let mut stack = Self {
            fake,
            dir,
            config,
            blobs,
            catalog: None,
            catalog_addr: "127.0.0.1:0".into(),
            scheduler,
            replica: None,
            shutdown,
        };
        stack.start_catalog();
        stack.start_replica();
        stack
    }

    /// Starts the catalog on its database, at the address it had before (first: any port).
    fn start_catalog(&mut self) {
        let mut c = Command::new(catalog_binary());
        c.args(["--listen", &self.catalog_addr, "--blob-store", &self.blobs])
            .arg("--database")
            .arg(format!(
                "sqlite://{}?mode=rwc",
                self.dir.path().join("catalog.db").display()
            ))
            .arg("--config")
            .arg(&self.config)
            .env("VOXPOOL_ADMIN_TOKEN", ADMIN);
        let catalog = start(c);
        self.catalog_addr = catalog.addr.clone();
        self.catalog = Some(catalog);
    }

    /// A synthesis replica with its clone worker.
    fn start_replica(&mut self) {
        let mut y = Command::new(env!("CARGO_BIN_EXE_voxpool-synthesis"));
        y.arg("--config")
            .arg(&self.config)
            .args(["--listen", "127.0.0.1:0", "--cache", "off"])
            .args(["--blob-store", &self.blobs])
            .args(["--scheduler", &format!("http://{}", self.scheduler)])
            .args(["--catalog", &format!("http://{}", self.catalog_addr)])
            .args(["--clone-lease-ms", "3000", "--clone-poll-ms", "500"])
            .env("VOXPOOL_ADMIN_TOKEN", ADMIN)
            .env_remove("VOXPOOL_CLIENT_TOKEN")
            .current_dir(self.dir.path());
        self.replica = Some(start(y));
    }

    async fn admin(&self) -> VoiceCatalogAdminClient<Channel> {
        VoiceCatalogAdminClient::new(channel(&self.catalog_addr).await)
    }

    /// A managed clone pack on pool `ds` with one clip; its id.
    async fn pack(&self) -> String {
        let mut admin = self.admin().await;
        let pack = pb::VoicePack {
            display_name: "dashscope clone".into(),
            provider: "dashscope".into(),
            model: MODEL.into(),
            tts_model_id: "ds".into(),
            tier: pb::Tier::Standard as i32,
            kind: pb::voice_pack::Kind::Cloned as i32,
            locales: vec!["en-US".into()],
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
                language: "en-US".into(),
                ..Default::default()
            }))
            .await
            .expect("add reference");
        id
    }

    async fn clone_into(&self, pack_id: &str, scope: &str) {
        self.admin()
            .await
            .clone_voice(authed(pb::CloneVoiceRequest {
                pack_id: pack_id.into(),
                scopes: vec![scope.into()],
                max_scopes: 0,
            }))
            .await
            .expect("clone voice");
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

    /// The pack's only clone once it is in `state` (checked every 100 ms: the catalog has no
    /// change feed to wait on).
    async fn until(&self, pack_id: &str, state: CloneState) -> pb::VoiceClone {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let mut clones = self.clones(pack_id).await;
            if clones.len() == 1 && clones[0].state == state as i32 {
                return clones.remove(0);
            }
            assert!(Instant::now() < deadline, "never {state:?}: {clones:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The clone TRAINING in acct-a, checked DEPLOYING at the fake.
    async fn training(&self, pack_id: &str) -> String {
        let training = self.until(pack_id, CloneState::Training).await;
        let id = training.vendor_voice_id;
        assert!(id.starts_with("cosyvoice-v2-vp"), "{id}");
        let at_fake = self.fake.clones();
        assert!(
            at_fake
                .iter()
                .any(|v| v.voice_id == id && v.scope == "acct-a" && v.state == FakeState::Training),
            "{at_fake:?}"
        );
        id
    }

    async fn synthesize(&self, pack_id: &str) -> Result<ypb::SynthesizeResponse, tonic::Status> {
        let mut request = Request::new(ypb::SynthesizeRequest {
            voice: Some(ypb::synthesize_request::Voice::PackId(pack_id.into())),
            text: "Hello from the cloned voice.".into(),
            ..Default::default()
        });
        request.set_timeout(Duration::from_secs(30));
        let replica = self.replica.as_ref().expect("a replica runs");
        SynthesisClient::new(channel(&replica.addr).await)
            .synthesize(request)
            .await
            .map(tonic::Response::into_inner)
    }

    /// The first answer that is served, asking again while it is UNAVAILABLE (a clone being
    /// made, or the replica's few seconds of cached clone rows).
    async fn until_served(&self, pack_id: &str) -> ypb::SynthesizeResponse {
        let deadline = Instant::now() + PATIENCE;
        loop {
            match self.synthesize(pack_id).await {
                Ok(served) => return served,
                Err(status) => {
                    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
                    assert!(Instant::now() < deadline, "never served: {status:?}");
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn creates(&self) -> u64 {
        self.fake
            .clone_counts()
            .get("acct-a")
            .map_or(0, |c| c.create)
    }

    fn requests(&self, key: &str) -> u64 {
        self.fake.key_stats(&secret(key)).total_requests
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dashscope_clone_is_enrolled_serves_its_account_only_and_is_enrolled_again_once_gone() {
    let stack = Stack::start().await;
    let pack = stack.pack().await;
    stack.clone_into(&pack, "acct-a").await;
    let id = stack.training(&pack).await;
    stack.fake.advance_clock(TRAINING * 2);
    let ready = stack.until(&pack, CloneState::Ready).await;
    assert_eq!(ready.vendor_voice_id, id);
    assert!(ready.expires_at.is_some(), "a year unused: {ready:?}");

    let served = stack.until_served(&pack).await;
    assert!(served.key_id.starts_with("acct-a/"), "{}", served.key_id);
    for _ in 0..10 {
        let served = stack.synthesize(&pack).await.expect("served");
        assert!(served.key_id.starts_with("acct-a/"), "{}", served.key_id);
    }
    assert!(stack.requests("a1") + stack.requests("a2") >= 11);
    assert_eq!(stack.requests("b1"), 0, "none on acct-b's key");
    let used = stack.fake.clones();
    assert!(
        used.iter()
            .any(|v| v.voice_id == id && v.state == FakeState::Active),
        "spoken with the enrolled voice: {used:?}"
    );
    assert_eq!(stack.creates(), 1);

    // The vendor takes the voice offline: the next request finds it gone (no key cooled),
    // the catalog has it enrolled again, and it serves once deployed.
    assert!(
        stack
            .fake
            .set_clone_state("acct-a", &id, FakeState::Expired)
    );
    let gone = stack
        .synthesize(&pack)
        .await
        .expect_err("the voice is gone");
    assert_eq!(gone.code(), Code::Unavailable, "{gone:?}");
    let again = stack.training(&pack).await;
    assert_ne!(again, id);
    stack.fake.advance_clock(TRAINING * 2);
    stack.until(&pack, CloneState::Ready).await;
    let served = stack.until_served(&pack).await;
    assert!(served.key_id.starts_with("acct-a/"), "{}", served.key_id);
    assert_eq!(stack.creates(), 2, "enrolled again exactly once");
    assert_eq!(stack.requests("b1"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_catalog_killed_mid_training_loses_no_clone_and_makes_no_second_one() {
    let mut stack = Stack::start().await;
    let pack = stack.pack().await;
    stack.clone_into(&pack, "acct-a").await;
    let id = stack.training(&pack).await;

    drop(stack.catalog.take()); // SIGKILL
    stack.start_catalog();
    stack.fake.advance_clock(TRAINING * 2);
    let ready = stack.until(&pack, CloneState::Ready).await;
    assert_eq!(ready.vendor_voice_id, id);
    assert_eq!(stack.creates(), 1, "one enrollment at the vendor");
    let served = stack.until_served(&pack).await;
    assert!(served.key_id.starts_with("acct-a/"), "{}", served.key_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_synthesis_replica_killed_mid_training_loses_no_clone_and_makes_no_second_one() {
    let mut stack = Stack::start().await;
    let pack = stack.pack().await;
    stack.clone_into(&pack, "acct-a").await;
    let id = stack.training(&pack).await;

    drop(stack.replica.take()); // SIGKILL, whatever step it was running
    stack.fake.advance_clock(TRAINING * 2);
    stack.start_replica();
    let ready = stack.until(&pack, CloneState::Ready).await;
    assert_eq!(ready.vendor_voice_id, id);
    assert_eq!(stack.creates(), 1, "one enrollment at the vendor");
    let served = stack.until_served(&pack).await;
    assert!(served.key_id.starts_with("acct-a/"), "{}", served.key_id);
}
