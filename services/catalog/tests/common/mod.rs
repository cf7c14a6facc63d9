//! Test fixtures shared by the integration tests: a fresh database per test on SQLite (a
//! temporary file) or PostgreSQL (a database of its own on the per-binary throwaway cluster
//! from `voxpool_testkit::PostgresServer`), an in-process gRPC server on
//! `127.0.0.1:0`, and the `db_test!` macro that runs one test body on both backends.
#![allow(dead_code)]

use std::{collections::BTreeMap, net::SocketAddr, sync::Arc};

use tokio_util::sync::CancellationToken;
use tonic::{Request, transport::Channel};
use voxpool_catalog::{model::PackSpec, pools::ServedPools, repo::sea::SeaRepository, server};
use voxpool_domain::{
    secret::Secret,
    snapshot::{Kind, Params, Tier},
};
use voxpool_proto::catalog::v1::{
    self as pb, voice_catalog_admin_client::VoiceCatalogAdminClient,
    voice_catalog_client::VoiceCatalogClient,
};
use voxpool_runtime::auth::AdminAuth;
use voxpool_testkit::PostgresServer;

/// The admin token test servers accept.
pub const TOKEN: &str = "test-admin-token";

/// Which database a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file in a temporary directory.
    Sqlite,
    /// A fresh database on the shared throwaway PostgreSQL cluster.
    Postgres,
}

/// A database URL plus whatever keeps it alive.
pub struct TestDb {
    /// Connection URL for `--database` / `open_repository`.
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    /// A database the caller keeps alive by other means.
    pub fn external(url: String) -> Self {
        Self { url, _dir: None }
    }
}

/// A new, empty database on `backend`.
pub fn test_db(backend: Backend) -> TestDb {
    match backend {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().expect("temp dir");
            let url = format!(
                "sqlite://{}?mode=rwc",
                dir.path().join("catalog.db").display()
            );
            TestDb {
                url,
                _dir: Some(dir),
            }
        }
        Backend::Postgres => TestDb {
            url: PostgresServer::shared().create_database(),
            _dir: None,
        },
    }
}

/// A migrated repository on a new database.
pub async fn repo(backend: Backend) -> (SeaRepository, TestDb) {
    let db = test_db(backend);
    let repo = server::open_repository(&db.url, 8)
        .await
        .expect("open repository");
    (repo, db)
}

/// A valid pack content: espeak `voice`, LITE, no params.
pub fn spec(voice: &str) -> PackSpec {
    PackSpec {
        display_name: format!("Voice {voice}"),
        description: String::new(),
        provider: "espeak".into(),
        model: "espeak-ng".into(),
        voice_id: voice.into(),
        tts_model_id: "espeak-local".into(),
        kind: Kind::Standard,
        upstream_ids: vec![],
        params: Params::default(),
        extra: BTreeMap::new(),
        tier: Tier::Lite,
        locales: vec!["en-US".into()],
        references: vec![],
    }
}

/// A valid create-request message: espeak `voice`, LITE, en-US.
pub fn pack_pb(voice: &str) -> pb::VoicePack {
    pb::VoicePack {
        display_name: format!("Voice {voice}"),
        provider: "espeak".into(),
        model: "espeak-ng".into(),
        voice_id: voice.into(),
        tts_model_id: "espeak-local".into(),
        tier: pb::Tier::Lite as i32,
        locales: vec!["en-US".into()],
        ..Default::default()
    }
}

/// An in-process catalog server; stops when dropped.
pub struct TestServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its repository (for direct checks).
    pub repo: SeaRepository,
    shutdown: CancellationToken,
    /// The blob store's directory (`references/` holds the clips).
    pub blobs: tempfile::TempDir,
    _db: TestDb,
}

impl TestServer {
    /// Starts a server on a new database with admin token [`TOKEN`].
    pub async fn start(backend: Backend) -> Self {
        Self::start_with_auth(backend, AdminAuth::with_token(Secret::new(TOKEN))).await
    }

    /// Starts a server on a new database with `auth`.
    pub async fn start_with_auth(backend: Backend, auth: AdminAuth) -> Self {
        let (repo, db) = repo(backend).await;
        Self::start_on(repo, db, auth).await
    }

    /// Starts a server on a new database that knows the pools of `pools` (`--config`).
    #[allow(dead_code, reason = "used by some test binaries only")]
    pub async fn start_with_pools(backend: Backend, pools: ServedPools) -> Self {
        let (repo, db) = repo(backend).await;
        Self::start_full(repo, db, AdminAuth::with_token(Secret::new(TOKEN)), pools).await
    }

    /// Starts a server over an existing repository.
    pub async fn start_on(repo: SeaRepository, db: TestDb, auth: AdminAuth) -> Self {
        Self::start_full(repo, db, auth, ServedPools::unknown()).await
    }

    async fn start_full(
        repo: SeaRepository,
        db: TestDb,
        auth: AdminAuth,
        pools: ServedPools,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let shutdown = CancellationToken::new();
        let serve_repo: Arc<dyn voxpool_catalog::repo::PackRepository> = Arc::new(repo.clone());
        let flags = voxpool_runtime::limits::ServerFlags::default();
        let stop = shutdown.clone();
        let blobs_dir = tempfile::tempdir().expect("blob dir");
        let blobs = voxpool_runtime::blob::BlobStore::open(Some(&format!(
            "file://{}",
            blobs_dir.path().display()
        )))
        .expect("blob store");
        let clips = voxpool_catalog::reference::ClipStore::new(
            blobs.folder(voxpool_catalog::reference::FOLDER),
        );
        tokio::spawn(async move {
            server::serve_with(listener, serve_repo, auth, pools, clips, &flags, stop).await
        });
        Self {
            addr,
            repo,
            shutdown,
            blobs: blobs_dir,
            _db: db,
        }
    }

    /// A channel to the server.
    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .expect("uri")
            .connect()
            .await
            .expect("connect")
    }

    /// A VoiceCatalog client.
    pub async fn catalog(&self) -> VoiceCatalogClient<Channel> {
        VoiceCatalogClient::new(self.channel().await)
    }

    /// A VoiceCatalogAdmin client.
    pub async fn admin(&self) -> VoiceCatalogAdminClient<Channel> {
        VoiceCatalogAdminClient::new(self.channel().await)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Creates `pack` through the admin API (token [`TOKEN`]); panics on a refusal.
pub async fn create(server: &TestServer, pack: pb::VoicePack) -> pb::VoicePack {
    server
        .admin()
        .await
        .create_voice_pack(authed(pb::CreateVoicePackRequest {
            voice_pack: Some(pack),
        }))
        .await
        .expect("create")
        .into_inner()
}

/// `message` with `authorization: Bearer <TOKEN>`.
pub fn authed<T>(message: T) -> Request<T> {
    with_token(message, TOKEN)
}

/// `message` with `authorization: Bearer <token>`.
pub fn with_token<T>(message: T, token: &str) -> Request<T> {
    let mut r = Request::new(message);
    r.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("header value"),
    );
    r
}

/// Fields named by the status's BadRequest details.
pub fn bad_fields(status: &tonic::Status) -> Vec<String> {
    use tonic_types::StatusExt;
    status
        .get_error_details()
        .bad_request()
        .map(|b| b.field_violations.iter().map(|v| v.field.clone()).collect())
        .unwrap_or_default()
}

/// Runs an async test body `fn(Backend) -> impl Future` once on SQLite and once on
/// PostgreSQL, as `<name>::sqlite` and `<name>::postgres`.
#[macro_export]
macro_rules! db_test {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                super::$name($crate::common::Backend::Sqlite).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                super::$name($crate::common::Backend::Postgres).await;
            }
        }
    };
}
