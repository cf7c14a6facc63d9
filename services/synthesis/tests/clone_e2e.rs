//! Managed clones end to end, on real processes: the `voxpool-catalog` binary (SQLite, clips in
//! a local blob store, the pools file for its clone scopes), `voxpool-synthesis` binaries (each
//! running its clone worker with the keys' credentials), an in-process scheduler with the admin
//! token (so keys are disabled through its admin API), and the fake vendors' clone APIs
//! (per-scope visibility, counted calls, a fake clock). Nothing here plays the worker: every
//! vendor clone call is made by a synthesis replica.
//!
//! - ElevenLabs, two workspaces (team-a: keys a1, a2; team-b: key b1): a pack's clone READY in
//!   team-a serves 100 requests on team-a's keys only (0 at b1, counted at the fake); with
//!   team-a's keys disabled, 50 requests at once over two replicas make exactly one clone
//!   create in team-b's workspace, and later requests are served there.
//! - A clone the vendor dropped is cloned again once (two creates in all, even with ten
//!   requests finding it gone at once), and the voice is still the pack's frozen clips (the
//!   snapshot's digest and the clip digest a response names are unchanged).
//! - MiniMax across 8 days of the fake clock: a clone used once by a synthesis is kept and
//!   still served; one never used expires at the vendor, and the request that finds it gone
//!   has it cloned again and then served.
//! - Slots: an ElevenLabs workspace of one slot evicts its least recently used clone (deleted
//!   at the fake before the new one is created there, so the vendor never refuses it); a
//!   Volcengine AppID of one bought slot refuses a second clone naming the scope and its slots.
//!
//! Not covered here: restarts mid-training (clone_worker.rs kills a replica mid-training; the
//! catalog and worker restarts rest on the same leased rows).
//!
//! The catalog binary is found beside the test's target directory (`cargo build --workspace
//! --bins`, as `make test` does, builds it).

mod common;

use std::time::Duration;

use common::clones::{
    self, ELEVEN_POOLS, Service, Workdir, authed, channel, eleven_fake, eleven_secret,
};
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tonic_types::StatusExt as _;
use voxpool_domain::contract::SynthesisReason;
use voxpool_fake_vendors::{CloneConfig, FakeConfig, FakeVendor, VendorKind};
use voxpool_proto::{
    catalog::v1::{self as pb, voice_catalog_client::VoiceCatalogClient, voice_clone::CloneState},
    scheduler::v1::{self as spb, pool_scheduler_client::PoolSchedulerClient},
    synthesis::v1 as ypb,
};

/// Longest a test waits for the catalog or a replica to reach a state it polls for.
const PATIENCE: Duration = Duration::from_secs(40);

/// The catalog process, an in-process scheduler and synthesis replicas over one pools file
/// (`{dir}` in it is the directory holding each key's credential file, named by the key).
struct Stack {
    work: Workdir,
    catalog: Service,
    scheduler: std::net::SocketAddr,
    replicas: Vec<Service>,
    shutdown: CancellationToken,
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Stack {
    /// Starts everything for `pools` with `credentials` (key file name → secret) and
    /// `replicas` synthesis replicas.
    async fn start(pools: &str, credentials: &[(&str, &str)], replicas: usize) -> Self {
        let work = Workdir::new(pools, credentials);
        let catalog = work.catalog("127.0.0.1:0");
        let shutdown = CancellationToken::new();
        let scheduler = clones::admin_scheduler(&work.parsed, shutdown.clone()).await;
        let mut stack = Self {
            work,
            catalog,
            scheduler,
            replicas: Vec::new(),
            shutdown,
        };
        for _ in 0..replicas {
            let replica = stack.synthesis();
            stack.replicas.push(replica);
        }
        stack
    }

    /// A synthesis replica with its clone worker.
    fn synthesis(&self) -> Service {
        let scheduler = format!("http://{}", self.scheduler);
        clones::start(self.work.synthesis(&scheduler, &self.catalog.addr))
    }

    /// A managed clone pack on `pool` with one clip (a tone of `ms`); its id.
    async fn pack(&self, provider: &str, model: &str, pool: &str, ms: u32) -> String {
        let pack = clones::cloned_pack(format!("{provider} clone {ms}"), provider, model, pool);
        clones::create_pack(&self.catalog.addr, pack, clones::tone_reference(ms)).await
    }

    async fn clone_voice(
        &self,
        pack_id: &str,
        scope: &str,
        max_scopes: u32,
    ) -> Result<Vec<pb::VoiceClone>, tonic::Status> {
        clones::clone_voice(&self.catalog.addr, pack_id, scope, max_scopes).await
    }

    async fn clones(&self, pack_id: &str) -> Vec<pb::VoiceClone> {
        clones::list_clones(&self.catalog.addr, pack_id).await
    }

    /// The pack's clones once `done` holds of them (see [`clones::until`]).
    async fn until(
        &self,
        pack_id: &str,
        what: &str,
        done: impl Fn(&[pb::VoiceClone]) -> bool,
    ) -> Vec<pb::VoiceClone> {
        clones::until(&self.catalog.addr, pack_id, what, PATIENCE, done).await
    }

    /// The pack's clone in `scope` once READY.
    async fn ready_in(&self, pack_id: &str, scope: &str) -> pb::VoiceClone {
        let clones = self
            .until(pack_id, &format!("READY in {scope}"), |c| {
                c.iter()
                    .any(|c| c.scope == scope && c.state == CloneState::Ready as i32)
            })
            .await;
        clones
            .into_iter()
            .find(|c| c.scope == scope)
            .expect("the READY clone")
    }

    async fn snapshot(&self, pack_id: &str) -> pb::VoicePackSnapshot {
        VoiceCatalogClient::new(channel(&self.catalog.addr).await)
            .freeze_snapshot(pb::FreezeSnapshotRequest {
                pack_id: pack_id.into(),
            })
            .await
            .expect("freeze")
            .into_inner()
    }

    async fn synthesize(
        &self,
        replica: usize,
        pack_id: &str,
    ) -> Result<ypb::SynthesizeResponse, tonic::Status> {
        clones::synthesize(&self.replicas[replica].addr, pack_id).await
    }

    /// `n` requests for `pack_id` at once, spread over the replicas.
    async fn burst(
        &self,
        pack_id: &str,
        n: usize,
    ) -> Vec<Result<ypb::SynthesizeResponse, tonic::Status>> {
        let calls = (0..n).map(|i| self.synthesize(i % self.replicas.len(), pack_id));
        futures::future::join_all(calls).await
    }

    /// The first answer on `replica` that is served (see [`clones::until_served`]).
    async fn until_served(&self, replica: usize, pack_id: &str) -> ypb::SynthesizeResponse {
        clones::until_served(&self.replicas[replica].addr, pack_id, PATIENCE).await
    }

    async fn disable_key(&self, pool: &str, key_id: &str) {
        PoolSchedulerClient::new(channel(&self.scheduler.to_string()).await)
            .disable_key(authed(spb::DisableKeyRequest {
                pool: pool.into(),
                key_id: key_id.into(),
            }))
            .await
            .expect("disable key");
    }
}

/// The fake ElevenLabs (workspace ws-a holds `ws_a_slots` clones) and a stack whose team-a
/// scope has `slots` slots.
async fn eleven(replicas: usize, slots: u32, ws_a_slots: u32) -> (FakeVendor, Stack) {
    let fake = eleven_fake(Some(ws_a_slots)).await;
    let pools = ELEVEN_POOLS
        .replace("{url}", &fake.base_url())
        .replace("{slots}", &slots.to_string());
    let secrets = ["a1", "a2", "b1"].map(|k| (k, eleven_secret(k)));
    let credentials = secrets.each_ref().map(|(k, s)| (*k, s.as_str()));
    let stack = Stack::start(&pools, &credentials, replicas).await;
    (fake, stack)
}

fn requests(fake: &FakeVendor, key: &str) -> u64 {
    fake.key_stats(&eleven_secret(key)).total_requests
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_clone_serves_only_its_scope_and_a_downed_scope_makes_exactly_one_clone_elsewhere() {
    let (fake, stack) = eleven(2, 5, 10).await;
    let pack = stack
        .pack("elevenlabs", "eleven_multilingual_v2", "eleven", 1_500)
        .await;
    stack
        .clone_voice(&pack, "team-a", 2)
        .await
        .expect("clone into team-a, up to two scopes");
    let in_a = stack.ready_in(&pack, "team-a").await;
    assert_eq!(fake.clone_counts()["ws-a"].create, 1);

    let before = requests(&fake, "a1") + requests(&fake, "a2");
    for answer in stack.burst(&pack, 100).await {
        let served = answer.expect("served");
        assert!(served.key_id.starts_with("team-a/"), "{}", served.key_id);
    }
    assert_eq!(
        requests(&fake, "a1") + requests(&fake, "a2") - before,
        100,
        "every request on team-a's keys"
    );
    assert_eq!(requests(&fake, "b1"), 0, "none on team-b's key");

    // team-a goes down: 50 requests at once over both replicas ask for one more scope.
    stack.disable_key("eleven", "team-a/a1").await;
    stack.disable_key("eleven", "team-a/a2").await;
    let on_a = requests(&fake, "a1") + requests(&fake, "a2");
    let answers = stack.burst(&pack, 50).await;
    let mut told = 0;
    for answer in &answers {
        if let Err(status) = answer {
            assert_eq!(status.code(), Code::Unavailable, "{status:?}");
            if status
                .message()
                .contains("being made in clone scope team-b")
            {
                told += 1;
            }
        }
    }
    assert!(
        told > 0,
        "a refusal says a clone is being made and where: {answers:?}"
    );
    let in_b = stack.ready_in(&pack, "team-b").await;
    assert_ne!(in_b.vendor_voice_id, in_a.vendor_voice_id);
    for replica in 0..2 {
        let served = stack.until_served(replica, &pack).await;
        assert_eq!(served.key_id, "team-b/b1", "served from team-b");
    }
    let counts = fake.clone_counts();
    assert_eq!(counts["ws-b"].create, 1, "one clone in team-b: {counts:?}");
    assert_eq!(counts["ws-a"].create, 1, "{counts:?}");
    assert_eq!(
        requests(&fake, "a1") + requests(&fake, "a2"),
        on_a,
        "no call on team-a's disabled keys"
    );
    let clones = stack.clones(&pack).await;
    assert_eq!(clones.len(), 2, "{clones:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_clone_the_vendor_dropped_is_made_again_once_from_the_same_clips() {
    let (fake, stack) = eleven(2, 5, 10).await;
    let pack = stack
        .pack("elevenlabs", "eleven_multilingual_v2", "eleven", 1_500)
        .await;
    let frozen = stack.snapshot(&pack).await;
    stack.clone_voice(&pack, "team-a", 0).await.expect("clone");
    let first = stack.ready_in(&pack, "team-a").await;
    let served = stack.until_served(0, &pack).await;
    let clip = served.reference_digest.clone();

    // Dropped behind voxpool's back.
    let deleted = reqwest::Client::new()
        .delete(format!(
            "{}/v1/voices/{}",
            fake.base_url(),
            first.vendor_voice_id
        ))
        .header("xi-api-key", eleven_secret("a1"))
        .send()
        .await
        .expect("delete");
    assert!(deleted.status().is_success(), "{deleted:?}");
    for answer in stack.burst(&pack, 10).await {
        let status = answer.expect_err("the clone is gone");
        assert_eq!(
            SynthesisReason::of(&status),
            Some(SynthesisReason::ClonePending),
            "{status:?}"
        );
    }
    let again = stack
        .until(&pack, "READY with a new vendor id", |c| {
            c.len() == 1
                && c[0].state == CloneState::Ready as i32
                && c[0].vendor_voice_id != first.vendor_voice_id
        })
        .await;
    let served = stack.until_served(1, &pack).await;
    assert!(served.key_id.starts_with("team-a/"), "{}", served.key_id);
    assert_eq!(served.reference_digest, clip, "the same clip speaks");
    let counts = fake.clone_counts()["ws-a"];
    assert_eq!(counts.create, 2, "cloned again once: {counts:?}");
    let held: Vec<_> = fake.clones().into_iter().map(|v| v.voice_id).collect();
    assert_eq!(held, [again[0].vendor_voice_id.clone()]);
    let now = stack.snapshot(&pack).await;
    assert_eq!(
        now.digest, frozen.digest,
        "the pack's identity is unchanged"
    );
    assert_eq!(now.references, frozen.references);
    assert!(now.voice_id.is_empty(), "no vendor id is frozen");
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
credential = { file = "{dir}/k1" }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn minimax_keeps_a_clone_used_once_across_eight_days_and_one_unused_is_made_again() {
    let clones = CloneConfig::for_vendor(VendorKind::MiniMax).scope("mm-secret", "group-a");
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::MiniMax).clones(clones))
        .await
        .expect("fake");
    let pools = MINIMAX.replace("{url}", &fake.base_url());
    let stack = Stack::start(&pools, &[("k1", "mm-secret")], 1).await;
    let used = stack.pack("minimax", "speech-02-hd", "mm", 1_500).await;
    let unused = stack.pack("minimax", "speech-02-hd", "mm", 1_600).await;
    stack.clone_voice(&used, "acct-a", 0).await.expect("clone");
    stack
        .clone_voice(&unused, "acct-a", 0)
        .await
        .expect("clone");
    let kept = stack.ready_in(&used, "acct-a").await;
    let dropped = stack.ready_in(&unused, "acct-a").await;
    stack.until_served(0, &used).await;

    fake.advance_clock(Duration::from_secs(8 * 86_400));
    let served = stack.synthesize(0, &used).await.expect("still served");
    assert_eq!(served.key_id, "acct-a/k1");
    assert_eq!(
        stack.clones(&used).await[0].vendor_voice_id,
        kept.vendor_voice_id
    );

    let gone = stack
        .synthesize(0, &unused)
        .await
        .expect_err("expired at the vendor");
    assert_eq!(
        SynthesisReason::of(&gone),
        Some(SynthesisReason::ClonePending),
        "{gone:?}"
    );
    assert!(gone.message().contains("acct-a"), "{}", gone.message());
    let again = stack
        .until(&unused, "READY again", |c| {
            c.len() == 1
                && c[0].state == CloneState::Ready as i32
                && c[0].vendor_voice_id != dropped.vendor_voice_id
        })
        .await;
    assert!(!again[0].vendor_voice_id.is_empty());
    stack.until_served(0, &unused).await;
    let counts = fake.clone_counts()["group-a"];
    assert_eq!(counts.create, 3, "two clones, one made again: {counts:?}");
}

const VOLC: &str = r#"
[[pools]]
id = "volc"
provider = "volcengine"
model = "volcano_icl"
[[pools.upstreams]]
id = "acct"
base_url = "{url}"
clone = { slots = 1 }
params = { cluster = "volcano_icl", speaker_ids = { app1 = ["S_one"] } }
[[pools.upstreams.keys]]
id = "app1"
capacity = 2
credential = { file = "{dir}/app1" }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_workspace_evicts_its_least_recently_used_clone_and_volcengine_refuses() {
    // team-a and its workspace hold one clone: the second pack's clone needs the first's slot.
    let (fake, stack) = eleven(1, 1, 1).await;
    let first = stack
        .pack("elevenlabs", "eleven_multilingual_v2", "eleven", 1_500)
        .await;
    let second = stack
        .pack("elevenlabs", "eleven_multilingual_v2", "eleven", 1_600)
        .await;
    stack.clone_voice(&first, "team-a", 0).await.expect("first");
    let old = stack.ready_in(&first, "team-a").await;
    stack.until_served(0, &first).await;
    stack
        .clone_voice(&second, "team-a", 0)
        .await
        .expect("the full scope evicts for it");
    let new = stack.ready_in(&second, "team-a").await;
    stack.until(&first, "evicted", <[_]>::is_empty).await;
    let counts = fake.clone_counts()["ws-a"];
    assert_eq!(
        (counts.delete, counts.create, counts.refused),
        (1, 2, 0),
        "deleted before the new one was created: {counts:?}"
    );
    let held: Vec<_> = fake
        .clones()
        .into_iter()
        .filter(|v| v.scope == "ws-a")
        .map(|v| (v.voice_id, v.name))
        .collect();
    assert_eq!(held, [(new.vendor_voice_id.clone(), second.clone())]);
    assert_ne!(new.vendor_voice_id, old.vendor_voice_id);
    let served = stack.until_served(0, &second).await;
    assert!(served.key_id.starts_with("team-a/"), "{}", served.key_id);

    // Volcengine: one bought slot per AppID; a second clone there is refused, naming it.
    let volc_fake = FakeVendor::start(
        FakeConfig::new(VendorKind::Volcengine)
            .clones(CloneConfig::for_vendor(VendorKind::Volcengine)),
    )
    .await
    .expect("fake volcengine");
    let volc = Stack::start(
        &VOLC.replace("{url}", &volc_fake.base_url()),
        &[("app1", "volc-token")],
        1,
    )
    .await;
    let held = volc.pack("volcengine", "volcano_icl", "volc", 1_500).await;
    volc.clone_voice(&held, "acct/app1", 0)
        .await
        .expect("the slot");
    volc.until(&held, "TRAINING", |c| {
        c.len() == 1 && c[0].state == CloneState::Training as i32
    })
    .await;
    volc_fake.advance_clock(Duration::from_secs(120));
    volc.ready_in(&held, "acct/app1").await;
    let other = volc.pack("volcengine", "volcano_icl", "volc", 1_600).await;
    let refused = volc
        .clone_voice(&other, "acct/app1", 0)
        .await
        .expect_err("no slot and no delete");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    let info = refused
        .get_error_details()
        .error_info()
        .cloned()
        .expect("info");
    assert_eq!(info.reason, "CLONE_SLOTS_FULL");
    assert_eq!(
        (
            info.metadata["scope"].as_str(),
            info.metadata["slots"].as_str()
        ),
        ("acct/app1", "1")
    );
    assert!(
        refused.message().contains("\"acct/app1\" holds 1 clones"),
        "{}",
        refused.message()
    );
    assert_eq!(
        volc_fake.clone_counts()["app1"].create,
        1,
        "no second upload"
    );
    assert_eq!(
        volc.clones(&held).await[0].state,
        CloneState::Ready as i32,
        "nothing evicted"
    );
}
