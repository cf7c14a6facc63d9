//! The clone worker on real processes: `voxpool-catalog` (SQLite, clips in a local blob store)
//! and `voxpool-synthesis` binaries (the same blob store; no scheduler: clone steps take no
//! lease), against the fake vendors' clone APIs (in process, per-scope visibility, counted
//! clone calls, a fake clock).
//!
//! - ElevenLabs: a worker that claimed the CREATE and died before calling the vendor leaves it
//!   to its lease; the synthesis replica then makes the clone READY in its workspace with
//!   exactly one vendor create (none in the other workspace), and the dead worker's late report
//!   is refused as stale. DeleteClone frees the vendor's slot and removes the row.
//! - MiniMax: CREATE uploads and clones in the key's account: READY, expiring 7 days on.
//! - Volcengine: CREATE trains a configured speaker id (TRAINING); the replica is SIGKILLed;
//!   after the fake clock passes the training, another replica's POLL makes it READY with the
//!   same speaker id and no second upload.
//!
//! - The clone rate: with `max_clones_per_minute = 1`, two packs' CREATEs in one scope are
//!   handed out one per minute, counted in the database, so a second catalog replica on the
//!   same database holds the second back too.
//!
//! The catalog binary is found beside the test's target directory (`cargo build --workspace
//! --bins`, as `make test` does, builds it).

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::clones::{self, Service, Workdir, authed, channel, state_is};
use tonic::{Code, transport::Channel};
use voxpool_fake_vendors::{CloneConfig, FakeConfig, FakeVendor, VendorKind};
use voxpool_proto::catalog::v1::{
    self as pb, clone_work_client::CloneWorkClient,
    voice_catalog_admin_client::VoiceCatalogAdminClient, voice_clone::CloneState,
};

/// A catalog, the pools file, a blob store and a synthesis replica started on demand.
struct Stack {
    work: Workdir,
    catalog: Service,
}

impl Stack {
    fn start(pools: &str) -> Self {
        let work = Workdir::new(pools, &[]);
        let catalog = work.catalog("127.0.0.1:0");
        Self { work, catalog }
    }

    /// A synthesis replica whose keys' credentials are `env` (no scheduler: clone steps take
    /// no lease).
    fn synthesis(&self, env: &[(&str, &str)]) -> Service {
        let mut y = self
            .work
            .synthesis("http://127.0.0.1:1", &self.catalog.addr);
        for (k, v) in env {
            y.env(k, v);
        }
        clones::start(y)
    }

    async fn channel(&self) -> Channel {
        channel(&self.catalog.addr).await
    }

    async fn admin(&self) -> VoiceCatalogAdminClient<Channel> {
        clones::admin(&self.catalog.addr).await
    }

    /// A managed clone pack on `pool` with one clip (a tone of `ms`); its id.
    async fn pack(&self, provider: &str, model: &str, pool: &str, ms: u32) -> String {
        let pack = clones::cloned_pack(format!("{provider} clone"), provider, model, pool);
        clones::create_pack(&self.catalog.addr, pack, clones::tone_reference(ms)).await
    }

    async fn clone_voice(&self, pack_id: &str, scope: &str) {
        clones::clone_voice(&self.catalog.addr, pack_id, scope, 0)
            .await
            .expect("clone voice");
    }

    async fn clones(&self, pack_id: &str) -> Vec<pb::VoiceClone> {
        clones::list_clones(&self.catalog.addr, pack_id).await
    }

    /// The pack's clones once `done` holds of them, within 30 s (see [`clones::until`]).
    async fn until(
        &self,
        pack_id: &str,
        what: &str,
        done: impl Fn(&[pb::VoiceClone]) -> bool,
    ) -> Vec<pb::VoiceClone> {
        let patience = Duration::from_secs(30);
        clones::until(&self.catalog.addr, pack_id, what, patience, done).await
    }
}

const ELEVEN: &str = r#"
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
credential = { env = "CLONE_TEST_A1" }
[[pools.upstreams.keys]]
id = "a2"
capacity = 2
credential = { env = "CLONE_TEST_A2" }
[[pools.upstreams]]
id = "team-b"
base_url = "{url}"
clone = { slots = 5 }
[[pools.upstreams.keys]]
id = "b1"
capacity = 2
credential = { env = "CLONE_TEST_B1" }
"#;

const ELEVEN_KEYS: &[(&str, &str)] = &[
    ("CLONE_TEST_A1", "eleven-secret-a1"),
    ("CLONE_TEST_A2", "eleven-secret-a2"),
    ("CLONE_TEST_B1", "eleven-secret-b1"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elevenlabs_clone_is_made_once_in_its_workspace_and_deleted_there() {
    let clones = CloneConfig::for_vendor(VendorKind::ElevenLabs)
        .scope("eleven-secret-a1", "ws-a")
        .scope("eleven-secret-a2", "ws-a")
        .scope("eleven-secret-b1", "ws-b");
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::ElevenLabs).clones(clones))
        .await
        .expect("fake");
    let stack = Stack::start(&ELEVEN.replace("{url}", &fake.base_url()));
    let pack = stack
        .pack("elevenlabs", "eleven_multilingual_v2", "eleven", 1_500)
        .await;
    stack.clone_voice(&pack, "team-a").await;

    // A worker claims the CREATE and dies before calling the vendor.
    let mut work = CloneWorkClient::new(stack.channel().await);
    let dead = work
        .claim(authed(pb::ClaimCloneWorkRequest {
            worker: "dead-replica".into(),
            scopes: vec!["team-a".into()],
            max: 1,
            lease_ms: 1_000,
        }))
        .await
        .expect("claim")
        .into_inner()
        .tasks;
    assert_eq!(dead.len(), 1, "the CREATE is due: {dead:?}");

    let _synthesis = stack.synthesis(ELEVEN_KEYS);
    let ready = stack
        .until(&pack, "READY", state_is(CloneState::Ready))
        .await;
    let held: Vec<_> = fake
        .clones()
        .into_iter()
        .filter(|v| v.scope == "ws-a")
        .collect();
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(ready[0].vendor_voice_id, held[0].voice_id);
    assert_eq!(
        held[0].name, pack,
        "named by the pack id, so ImportClones binds it back"
    );
    let counts = fake.clone_counts();
    assert_eq!(counts["ws-a"].create, 1, "{counts:?}");
    assert!(
        !counts.contains_key("ws-b"),
        "nothing in the other workspace: {counts:?}"
    );

    // The dead worker's late report is refused and changes nothing.
    let late = work
        .report(authed(pb::ReportCloneWorkRequest {
            pack_id: pack.clone(),
            scope: "team-a".into(),
            lease_token: dead[0].lease_token.clone(),
            outcome: Some(pb::report_clone_work_request::Outcome::Failed(
                pb::CloneFailure {
                    error: "late".into(),
                    reclaimed: false,
                },
            )),
        }))
        .await
        .expect_err("a stale lease token");
    assert_eq!(late.code(), Code::FailedPrecondition, "{late:?}");
    assert_eq!(stack.clones(&pack).await[0].state, CloneState::Ready as i32);

    stack
        .admin()
        .await
        .delete_clone(authed(pb::DeleteCloneRequest {
            pack_id: pack.clone(),
            scope: "team-a".into(),
        }))
        .await
        .expect("delete clone");
    stack.until(&pack, "deleted", <[_]>::is_empty).await;
    assert_eq!(fake.clone_counts()["ws-a"].delete, 1);
    assert!(
        fake.clones().iter().all(|v| v.scope != "ws-a"),
        "the slot is free: {:?}",
        fake.clones()
    );
}

const MINIMAX: &str = r#"
[[pools]]
id = "mm"
provider = "minimax"
model = "speech-02-hd"
[[pools.upstreams]]
id = "acct-a"
base_url = "{url}"
clone = { slots = 5 }
[[pools.upstreams.keys]]
id = "k1"
capacity = 2
credential = { env = "CLONE_TEST_MM" }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minimax_clone_is_ready_and_expires_a_week_on() {
    let clones = CloneConfig::for_vendor(VendorKind::MiniMax).scope("mm-secret", "group-a");
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::MiniMax).clones(clones))
        .await
        .expect("fake");
    let stack = Stack::start(&MINIMAX.replace("{url}", &fake.base_url()));
    let pack = stack.pack("minimax", "speech-02-hd", "mm", 1_500).await;
    let _synthesis = stack.synthesis(&[("CLONE_TEST_MM", "mm-secret")]);
    stack.clone_voice(&pack, "acct-a").await;
    let ready = stack
        .until(&pack, "READY", state_is(CloneState::Ready))
        .await;
    let id = &ready[0].vendor_voice_id;
    assert!(id.starts_with(&format!("{pack}-")), "{id}");
    let week = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        + 7 * 86_400;
    let expires = ready[0].expires_at.as_ref().expect("expires_at").seconds;
    let expires = u64::try_from(expires).expect("positive");
    assert!(
        expires.abs_diff(week) < 600,
        "expires {expires}, a week on is {week}"
    );
    let counts = fake.clone_counts()["group-a"];
    assert_eq!((counts.upload, counts.create, counts.refused), (1, 1, 0));
    assert!(
        fake.clones()
            .iter()
            .any(|v| v.scope == "group-a" && &v.voice_id == id)
    );
}

const VOLC: &str = r#"
[[pools]]
id = "volc"
provider = "volcengine"
model = "volcano_icl"
[[pools.upstreams]]
id = "acct"
base_url = "{url}"
clone = { slots = 2 }
params = { cluster = "volcano_icl", speaker_ids = { app1 = ["S_one", "S_two"] } }
[[pools.upstreams.keys]]
id = "app1"
capacity = 2
credential = { env = "CLONE_TEST_VOLC" }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volcengine_training_survives_a_killed_replica_and_is_polled_ready() {
    let clones = CloneConfig::for_vendor(VendorKind::Volcengine).training(Duration::from_secs(60));
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::Volcengine).clones(clones))
        .await
        .expect("fake");
    let stack = Stack::start(&VOLC.replace("{url}", &fake.base_url()));
    let pack = stack.pack("volcengine", "volcano_icl", "volc", 1_500).await;
    let creds = [("CLONE_TEST_VOLC", "volc-token")];
    let first = stack.synthesis(&creds);
    stack.clone_voice(&pack, "acct/app1").await;
    let training = stack
        .until(&pack, "TRAINING", state_is(CloneState::Training))
        .await;
    assert_eq!(training[0].vendor_voice_id, "S_one");
    drop(first); // SIGKILL, whatever step it was running

    fake.advance_clock(Duration::from_secs(120));
    let _second = stack.synthesis(&creds);
    let ready = stack
        .until(&pack, "READY", state_is(CloneState::Ready))
        .await;
    assert_eq!(ready[0].vendor_voice_id, "S_one");
    let counts = fake.clone_counts()["app1"];
    assert_eq!(counts.create, 1, "one training upload: {counts:?}");
    assert!(
        counts.status >= 2,
        "the free slot was looked up, then polled: {counts:?}"
    );
}

/// `max` due steps of `scope` claimed from the catalog at `addr`.
async fn claim(addr: &str, scope: &str, max: u32) -> Vec<pb::CloneTask> {
    CloneWorkClient::new(channel(addr).await)
        .claim(authed(pb::ClaimCloneWorkRequest {
            worker: "test-worker".into(),
            scopes: vec![scope.into()],
            max,
            lease_ms: 60_000,
        }))
        .await
        .expect("claim")
        .into_inner()
        .tasks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clone_rate_of_a_scope_holds_creates_back_on_every_catalog_replica() {
    let pools = ELEVEN
        .replace("{url}", "http://127.0.0.1:1")
        .replace(
            "id = \"team-a\"\nbase_url = \"http://127.0.0.1:1\"\nclone = { slots = 5 }",
            "id = \"team-a\"\nbase_url = \"http://127.0.0.1:1\"\nclone = { slots = 5, max_clones_per_minute = 1 }",
        );
    assert!(pools.contains("max_clones_per_minute = 1"), "{pools}");
    let stack = Stack::start(&pools);
    let first = stack
        .pack("elevenlabs", "eleven_multilingual_v2", "eleven", 1_500)
        .await;
    // Another clip: another identity.
    let second = stack
        .pack("elevenlabs", "eleven_multilingual_v2", "eleven", 1_600)
        .await;
    assert_ne!(first, second);
    stack.clone_voice(&first, "team-a").await;
    stack.clone_voice(&second, "team-a").await;
    stack.clone_voice(&second, "team-b").await;

    let handed = claim(&stack.catalog.addr, "team-a", 10).await;
    assert_eq!(handed.len(), 1, "one CREATE a minute in team-a: {handed:?}");
    assert_eq!(claim(&stack.catalog.addr, "team-a", 10).await.len(), 0);
    let replica = stack.work.catalog("127.0.0.1:0");
    assert_eq!(
        claim(&replica.addr, "team-a", 10).await.len(),
        0,
        "the count is in the database: another catalog replica holds it back too"
    );
    assert_eq!(
        claim(&replica.addr, "team-b", 10).await.len(),
        1,
        "a scope without a clone rate is not held back"
    );
}
