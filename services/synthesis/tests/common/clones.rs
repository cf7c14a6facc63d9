//! Harness of the managed-clone tests (`clone_*.rs`), which run real processes: the
//! `voxpool-catalog` binary (SQLite, clips in a local blob store, the pools file for its clone
//! scopes) and `voxpool-synthesis` binaries (each running its clone worker), an in-process
//! scheduler that takes the admin token, and the catalog's admin API as the tests call it.
//!
//! Every item is shared by some of the clone tests only; `common`'s `#![allow(dead_code)]`
//! keeps the other test binaries quiet about the ones they leave unused.
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
use voxpool_fake_vendors::{CloneConfig, FakeConfig, FakeVendor, VendorKind, audio::tone_wav};
use voxpool_proto::{
    catalog::v1::{self as pb, voice_catalog_admin_client::VoiceCatalogAdminClient},
    synthesis::v1::{self as ypb, synthesis_client::SynthesisClient},
};
use voxpool_runtime::auth::AdminAuth;

/// The admin token of every process a clone test starts (catalog, scheduler, synthesis).
pub const ADMIN: &str = "clone-tests-admin-token-0123456789";

/// A child process killed (SIGKILL) on drop, with the address of its first stdout line.
pub struct Service {
    child: Child,
    /// What the process printed after ` listening on ` (`host:port`).
    pub addr: String,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawns `command` (its logs at the level `CLONE_TEST_LOG` names, default `error`) and waits
/// for its first stdout line, `… listening on <addr>`.
pub fn start(mut command: Command) -> Service {
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
pub fn catalog_binary() -> PathBuf {
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

/// `message` with the [`ADMIN`] bearer token.
pub fn authed<T>(message: T) -> Request<T> {
    let mut r = Request::new(message);
    r.metadata_mut().insert(
        "authorization",
        format!("Bearer {ADMIN}").parse().expect("metadata"),
    );
    r
}

/// A channel to the gRPC server at `addr` (`host:port`).
pub async fn channel(addr: &str) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .expect("url")
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"))
}

/// The files the processes of a clone test share: a temp dir holding `pools.toml`, one
/// credential file per key, the catalog's SQLite database and the blob store's `blobs/`.
pub struct Workdir {
    /// The temp dir (removed on drop).
    pub dir: tempfile::TempDir,
    /// `<dir>/pools.toml`.
    pub config: PathBuf,
    /// The blob store URL, `file://<dir>/blobs`.
    pub blobs: String,
    /// The pools file as parsed (validated, credentials not read).
    pub parsed: Config,
}

impl Workdir {
    /// Writes `pools` (its `{dir}` replaced by the temp dir) and the credential files
    /// (`(file name, secret)`), and checks the pools file parses and validates.
    pub fn new(pools: &str, credentials: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        for (file, secret) in credentials {
            std::fs::write(dir.path().join(file), secret).expect("credential file");
        }
        let text = pools.replace("{dir}", &dir.path().display().to_string());
        let config = dir.path().join("pools.toml");
        std::fs::write(&config, &text).expect("pools file");
        let parsed = Config::from_toml_str(&text).expect("config parses");
        parsed
            .validate(voxpool_config::Credentials::Ignore)
            .expect("config valid");
        let blobs = format!("file://{}", dir.path().join("blobs").display());
        Self {
            dir,
            config,
            blobs,
            parsed,
        }
    }

    /// A catalog process on this dir's SQLite database, the blob store and the pools file,
    /// listening on `listen` (`127.0.0.1:0` for any port; a restart passes the old address).
    pub fn catalog(&self, listen: &str) -> Service {
        let mut c = Command::new(catalog_binary());
        c.args(["--listen", listen, "--blob-store", &self.blobs])
            .arg("--database")
            .arg(format!(
                "sqlite://{}?mode=rwc",
                self.dir.path().join("catalog.db").display()
            ))
            .arg("--config")
            .arg(&self.config)
            .env("VOXPOOL_ADMIN_TOKEN", ADMIN);
        start(c)
    }

    /// The command of a synthesis replica with its clone worker (3 s leases, polled every
    /// 500 ms) on the pools file and blob store, reaching the scheduler at `scheduler` (a URL)
    /// and the catalog at `catalog` (`host:port`); run in the temp dir, with no client token.
    /// Add the keys' credentials to its environment if the pools file reads them from there,
    /// then [`start`] it.
    pub fn synthesis(&self, scheduler: &str, catalog: &str) -> Command {
        let mut y = Command::new(env!("CARGO_BIN_EXE_voxpool-synthesis"));
        y.arg("--config")
            .arg(&self.config)
            .args(["--listen", "127.0.0.1:0", "--cache", "off"])
            .args(["--blob-store", &self.blobs])
            .args(["--scheduler", scheduler])
            .args(["--catalog", &format!("http://{catalog}")])
            .args(["--clone-lease-ms", "3000", "--clone-poll-ms", "500"])
            .env("VOXPOOL_ADMIN_TOKEN", ADMIN)
            .env_remove("VOXPOOL_CLIENT_TOKEN")
            .current_dir(self.dir.path());
        y
    }
}

/// A scheduler on the memory store whose admin RPCs take [`ADMIN`].
pub async fn admin_scheduler(config: &Config, shutdown: CancellationToken) -> SocketAddr {
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

/// The admin client of the catalog at `catalog` (`host:port`).
pub async fn admin(catalog: &str) -> VoiceCatalogAdminClient<Channel> {
    VoiceCatalogAdminClient::new(channel(catalog).await)
}

/// A managed clone pack (STANDARD tier, en-US) named `display_name`, of `provider`'s `model`
/// on pool `pool`, for [`create_pack`].
pub fn cloned_pack(
    display_name: impl Into<String>,
    provider: &str,
    model: &str,
    pool: &str,
) -> pb::VoicePack {
    pb::VoicePack {
        display_name: display_name.into(),
        provider: provider.into(),
        model: model.into(),
        tts_model_id: pool.into(),
        tier: pb::Tier::Standard as i32,
        kind: pb::voice_pack::Kind::Cloned as i32,
        locales: vec!["en-US".into()],
        ..Default::default()
    }
}

/// A reference clip for [`create_pack`]: a 16 kHz tone of `ms` (another length, another
/// identity) with a fixed transcript.
pub fn tone_reference(ms: u32) -> pb::AddReferenceRequest {
    pb::AddReferenceRequest {
        audio: tone_wav(16_000, ms).expect("clip"),
        transcript: "The quick brown fox.".into(),
        ..Default::default()
    }
}

/// Creates `pack` at the catalog `catalog` and adds `reference` to it (its `pack_id` is
/// filled in); the pack's id.
pub async fn create_pack(
    catalog: &str,
    pack: pb::VoicePack,
    reference: pb::AddReferenceRequest,
) -> String {
    let mut admin = admin(catalog).await;
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
            ..reference
        }))
        .await
        .expect("add reference");
    id
}

/// Asks the catalog `catalog` for `pack_id`'s clone in `scope` (and up to `max_scopes`
/// scopes in all, 0: just that one); the pack's clones.
pub async fn clone_voice(
    catalog: &str,
    pack_id: &str,
    scope: &str,
    max_scopes: u32,
) -> Result<Vec<pb::VoiceClone>, tonic::Status> {
    admin(catalog)
        .await
        .clone_voice(authed(pb::CloneVoiceRequest {
            pack_id: pack_id.into(),
            scopes: vec![scope.into()],
            max_scopes,
        }))
        .await
        .map(|r| r.into_inner().clones)
}

/// The clones of `pack_id` the catalog `catalog` lists.
pub async fn list_clones(catalog: &str, pack_id: &str) -> Vec<pb::VoiceClone> {
    admin(catalog)
        .await
        .list_clones(authed(pb::ListClonesRequest {
            pack_id: pack_id.into(),
        }))
        .await
        .expect("list clones")
        .into_inner()
        .clones
}

/// The clones of `pack_id` once `done` holds of them, within `patience` (checked every
/// 100 ms: the catalog has no change feed to wait on); `what` names the wait in the failure.
pub async fn until(
    catalog: &str,
    pack_id: &str,
    what: &str,
    patience: Duration,
    done: impl Fn(&[pb::VoiceClone]) -> bool,
) -> Vec<pb::VoiceClone> {
    let deadline = Instant::now() + patience;
    loop {
        let clones = list_clones(catalog, pack_id).await;
        if done(&clones) {
            return clones;
        }
        assert!(Instant::now() < deadline, "never {what}: {clones:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// For [`until`]: the pack has exactly one clone, in `state`.
pub fn state_is(state: pb::voice_clone::CloneState) -> impl Fn(&[pb::VoiceClone]) -> bool {
    move |c| c.len() == 1 && c[0].state == state as i32
}

/// One request for `pack_id` (by pack id, 30 s deadline) at the synthesis server `replica`
/// (`host:port`).
pub async fn synthesize(
    replica: &str,
    pack_id: &str,
) -> Result<ypb::SynthesizeResponse, tonic::Status> {
    let mut request = Request::new(ypb::SynthesizeRequest {
        voice: Some(ypb::synthesize_request::Voice::PackId(pack_id.into())),
        text: "Hello from the cloned voice.".into(),
        ..Default::default()
    });
    request.set_timeout(Duration::from_secs(30));
    SynthesisClient::new(channel(replica).await)
        .synthesize(request)
        .await
        .map(tonic::Response::into_inner)
}

/// The first answer at `replica` that is served, within `patience`, asking again while the
/// answer is UNAVAILABLE (a clone being made, or the replica's few seconds of cached clone
/// rows).
pub async fn until_served(
    replica: &str,
    pack_id: &str,
    patience: Duration,
) -> ypb::SynthesizeResponse {
    let deadline = Instant::now() + patience;
    loop {
        match synthesize(replica, pack_id).await {
            Ok(served) => return served,
            Err(status) => {
                assert_eq!(status.code(), Code::Unavailable, "{status:?}");
                assert!(Instant::now() < deadline, "never served: {status:?}");
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// An ElevenLabs pools file: pool `eleven` with upstream team-a (keys a1, a2; `{slots}` clone
/// slots, evictable at once: no minimum residence) and team-b (key b1; 5 slots), both at the fake's `{url}`, each key reading its
/// credential from the file `{dir}/<key>` (see [`Workdir::new`] and [`eleven_secret`]).
pub const ELEVEN_POOLS: &str = r#"
[scheduler]
wait_poll_ms = 10

[[pools]]
id = "eleven"
provider = "elevenlabs"
model = "eleven_multilingual_v2"
[[pools.upstreams]]
id = "team-a"
base_url = "{url}"
clone = { slots = {slots}, min_residence = "0s" }
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

/// The secret of ElevenLabs key `k` (what the fake tells workspaces and counts requests by).
pub fn eleven_secret(k: &str) -> String {
    format!("eleven-secret-{k}")
}

/// The fake ElevenLabs with two workspaces: ws-a (keys a1, a2; `ws_a_slots` clones if
/// given, else the fake's default) and ws-b (key b1).
pub async fn eleven_fake(ws_a_slots: Option<u32>) -> FakeVendor {
    let mut clones = CloneConfig::for_vendor(VendorKind::ElevenLabs)
        .scope(eleven_secret("a1"), "ws-a")
        .scope(eleven_secret("a2"), "ws-a")
        .scope(eleven_secret("b1"), "ws-b");
    if let Some(slots) = ws_a_slots {
        clones = clones.scope_slots("ws-a", slots);
    }
    FakeVendor::start(FakeConfig::new(VendorKind::ElevenLabs).clones(clones))
        .await
        .expect("fake")
}
