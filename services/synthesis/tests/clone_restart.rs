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

mod common;

use std::{net::SocketAddr, time::Duration};

use common::clones::{self, Service, Workdir};
use tokio_util::sync::CancellationToken;
use tonic::Code;
use voxpool_fake_vendors::{
    CloneConfig, CloneState as FakeState, FakeConfig, FakeVendor, VendorKind,
};
use voxpool_proto::{
    catalog::v1::{self as pb, voice_clone::CloneState},
    synthesis::v1 as ypb,
};

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

/// The fake DashScope (acct-a: keys a1, a2; acct-b: key b1), the catalog process, an
/// in-process scheduler and one synthesis replica, each of the processes restartable.
struct Stack {
    fake: FakeVendor,
    work: Workdir,
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
        let secrets = ["a1", "a2", "b1"].map(|k| (k, secret(k)));
        let credentials = secrets.each_ref().map(|(k, s)| (*k, s.as_str()));
        let work = Workdir::new(&POOLS.replace("{url}", &fake.base_url()), &credentials);
        let shutdown = CancellationToken::new();
        let scheduler = clones::admin_scheduler(&work.parsed, shutdown.clone()).await;
        let mut stack = Self {
            fake,
            work,
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
        let catalog = self.work.catalog(&self.catalog_addr);
        self.catalog_addr = catalog.addr.clone();
        self.catalog = Some(catalog);
    }

    /// A synthesis replica with its clone worker.
    fn start_replica(&mut self) {
        let scheduler = format!("http://{}", self.scheduler);
        let y = self.work.synthesis(&scheduler, &self.catalog_addr);
        self.replica = Some(clones::start(y));
    }

    /// A managed clone pack on pool `ds` with one clip; its id.
    async fn pack(&self) -> String {
        let pack = clones::cloned_pack("dashscope clone", "dashscope", MODEL, "ds");
        let reference = pb::AddReferenceRequest {
            language: "en-US".into(),
            ..clones::tone_reference(1_500)
        };
        clones::create_pack(&self.catalog_addr, pack, reference).await
    }

    async fn clone_into(&self, pack_id: &str, scope: &str) {
        clones::clone_voice(&self.catalog_addr, pack_id, scope, 0)
            .await
            .expect("clone voice");
    }

    /// The pack's only clone once it is in `state` (see [`clones::until`]).
    async fn until(&self, pack_id: &str, state: CloneState) -> pb::VoiceClone {
        let what = format!("{state:?}");
        let done = clones::state_is(state);
        clones::until(&self.catalog_addr, pack_id, &what, PATIENCE, done)
            .await
            .remove(0)
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
        clones::synthesize(&self.replica_addr(), pack_id).await
    }

    /// The first answer that is served (see [`clones::until_served`]).
    async fn until_served(&self, pack_id: &str) -> ypb::SynthesizeResponse {
        clones::until_served(&self.replica_addr(), pack_id, PATIENCE).await
    }

    fn replica_addr(&self) -> String {
        let replica = self.replica.as_ref().expect("a replica runs");
        replica.addr.clone()
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
