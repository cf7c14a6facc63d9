//! Managed voice clones over gRPC on SQLite and PostgreSQL (`db_test!`): CloneVoice's rows,
//! idempotence and refusals, the CloneWork lease (one worker per step, a run-out lease handed
//! out again, a stale report refused), the state transitions, DeleteClone and ImportClones.
//! Lease expiry is driven through the store with explicit times, never by waiting.

mod common;

use std::collections::BTreeSet;

use common::{Backend, TestServer, authed, bad_fields, create, pack_pb};
use tonic::{Code, transport::Channel};
use tonic_types::StatusExt as _;
use voxpool_catalog::{clones::store::CloneStore, pools::ServedPools};
use voxpool_config::Config;
use voxpool_fake_vendors::audio::tone_wav;
use voxpool_proto::catalog::v1::{
    self as pb, clone_task::Work, clone_work_client::CloneWorkClient,
    report_clone_work_request::Outcome, voice_clone::CloneState,
};

const POOLS: &str = r#"
[[pools]]
id = "eleven"
provider = "elevenlabs"
[[pools.upstreams]]
id = "team-a"
clone = { slots = 2, min_residence = "0s" }
[[pools.upstreams.keys]]
id = "k1"
capacity = 2
[[pools.upstreams]]
id = "team-b"
clone = { slots = 1, keep_alive = "6d" }
[[pools.upstreams.keys]]
id = "k1"
capacity = 2
[[pools.upstreams]]
id = "team-big"
clone = { slots = 100 }
[[pools.upstreams.keys]]
id = "k1"
capacity = 2
[[pools.upstreams]]
id = "plain"
[[pools.upstreams.keys]]
id = "k1"
capacity = 2
[[pools]]
id = "volc"
provider = "volcengine"
[[pools.upstreams]]
id = "acct"
clone = { slots = 1 }
[[pools.upstreams.keys]]
id = "app-1"
capacity = 2
[[pools.upstreams.keys]]
id = "app-2"
capacity = 2
[[pools]]
id = "espeak-local"
provider = "espeak"
[[pools.upstreams]]
id = "local"
[[pools.upstreams.keys]]
id = "k"
capacity = 2
"#;

async fn server(backend: Backend) -> TestServer {
    let config = Config::from_toml_str(POOLS).expect("pools");
    TestServer::start_with_pools(backend, ServedPools::from_config(&config, "clones.toml")).await
}

/// A managed clone pack on the ElevenLabs pool (`n` makes its identity its own).
fn managed(n: usize) -> pb::VoicePack {
    let mut pack = pb::VoicePack {
        provider: "elevenlabs".into(),
        model: "eleven_multilingual_v2".into(),
        voice_id: String::new(),
        tts_model_id: "eleven".into(),
        kind: pb::voice_pack::Kind::Cloned as i32,
        ..pack_pb("unused")
    };
    pack.extra.insert("n".into(), n.to_string());
    pack
}

/// Creates a managed clone pack with one clip; its id.
async fn managed_with_clip(server: &TestServer, n: usize) -> String {
    with_clip(server, managed(n)).await
}

/// Creates `pack` with one clip; its id.
async fn with_clip(server: &TestServer, pack: pb::VoicePack) -> String {
    let pack = create(server, pack).await;
    server
        .admin()
        .await
        .add_reference(authed(pb::AddReferenceRequest {
            pack_id: pack.id.clone(),
            audio: tone_wav(16_000, 1_500).expect("a WAV clip"),
            transcript: "The quick brown fox.".into(),
            ..Default::default()
        }))
        .await
        .expect("add reference");
    pack.id
}

async fn clone_voice(
    server: &TestServer,
    pack_id: &str,
    scopes: &[&str],
) -> Result<Vec<pb::VoiceClone>, tonic::Status> {
    server
        .admin()
        .await
        .clone_voice(authed(pb::CloneVoiceRequest {
            pack_id: pack_id.into(),
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
            max_scopes: 0,
        }))
        .await
        .map(|r| r.into_inner().clones)
}

async fn list(server: &TestServer, pack_id: &str) -> Vec<pb::VoiceClone> {
    server
        .admin()
        .await
        .list_clones(authed(pb::ListClonesRequest {
            pack_id: pack_id.into(),
        }))
        .await
        .expect("list clones")
        .into_inner()
        .clones
}

fn reason(status: &tonic::Status) -> String {
    status
        .get_error_details()
        .error_info()
        .map(|i| i.reason.clone())
        .unwrap_or_default()
}

fn states(clones: &[pb::VoiceClone]) -> Vec<(String, CloneState)> {
    clones
        .iter()
        .map(|c| (c.scope.clone(), c.state()))
        .collect()
}

async fn work(server: &TestServer) -> CloneWorkClient<Channel> {
    CloneWorkClient::new(server.channel().await)
}

async fn claim(server: &TestServer, worker: &str, scopes: &[&str], max: u32) -> Vec<pb::CloneTask> {
    work(server)
        .await
        .claim(authed(pb::ClaimCloneWorkRequest {
            worker: worker.into(),
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
            max,
            lease_ms: 60_000,
        }))
        .await
        .expect("claim")
        .into_inner()
        .tasks
}

async fn report(
    server: &TestServer,
    pack_id: &str,
    scope: &str,
    token: &str,
    outcome: Outcome,
) -> Result<pb::VoiceClone, tonic::Status> {
    work(server)
        .await
        .report(authed(pb::ReportCloneWorkRequest {
            pack_id: pack_id.into(),
            scope: scope.into(),
            lease_token: token.into(),
            outcome: Some(outcome),
        }))
        .await
        .map(tonic::Response::into_inner)
}

fn store(server: &TestServer) -> CloneStore {
    CloneStore::new(server.repo.connection().clone())
}

fn hour_from_now_us() -> i64 {
    voxpool_catalog::model::now().timestamp_micros() + 3_600_000_000
}

async fn clone_voice_creates_rows_idempotently_and_refuses_what_it_cannot_clone(backend: Backend) {
    let server = server(backend).await;
    let empty = create(&server, managed(0)).await;
    let refused = clone_voice(&server, &empty.id, &["team-a"])
        .await
        .expect_err("no clips");
    assert_eq!(refused.code(), Code::FailedPrecondition);
    assert_eq!(reason(&refused), "CLONE_NOT_MANAGED");
    assert!(
        refused.message().contains("AddReference"),
        "{}",
        refused.message()
    );

    let pack = managed_with_clip(&server, 1).await;
    let first = clone_voice(&server, &pack, &["team-a"])
        .await
        .expect("clone");
    assert_eq!(states(&first), [("team-a".to_owned(), CloneState::Pending)]);
    let again = clone_voice(&server, &pack, &["team-a"])
        .await
        .expect("again");
    assert_eq!(again, first, "asking twice makes one clone, unchanged");

    let unknown = clone_voice(&server, &pack, &["nope"])
        .await
        .expect_err("unknown scope");
    assert_eq!(unknown.code(), Code::InvalidArgument);
    assert_eq!(bad_fields(&unknown), ["scopes[0]"]);
    for known in ["team-a (2 slots)", "team-b (1 slots)", "team-big"] {
        assert!(unknown.message().contains(known), "{}", unknown.message());
    }
    assert!(
        !unknown.message().contains("plain"),
        "{}",
        unknown.message()
    );

    let hand_made = create(
        &server,
        pb::VoicePack {
            voice_id: "voice-123".into(),
            upstream_ids: vec!["team-a".into()],
            ..managed(2)
        },
    )
    .await;
    let refused = clone_voice(&server, &hand_made.id, &[])
        .await
        .expect_err("hand-made");
    assert_eq!(reason(&refused), "CLONE_NOT_MANAGED");
    assert!(
        refused.message().contains("hand-made"),
        "{}",
        refused.message()
    );

    // team-b has one slot: the first pack takes it, the second is refused naming it.
    let other = managed_with_clip(&server, 3).await;
    clone_voice(&server, &other, &["team-b"])
        .await
        .expect("team-b");
    let third = managed_with_clip(&server, 4).await;
    let full = clone_voice(&server, &third, &["team-b"])
        .await
        .expect_err("full");
    assert_eq!(full.code(), Code::ResourceExhausted);
    assert_eq!(reason(&full), "CLONE_SLOTS_FULL");
    let info = full
        .get_error_details()
        .error_info()
        .cloned()
        .expect("info");
    assert_eq!(info.metadata["scope"], "team-b");
    assert_eq!(info.metadata["slots"], "1");
    assert!(full.message().contains("team-b") && full.message().contains("1 clones"));

    // Without scopes: the scope with free slots and the fewest clones (team-big: none yet).
    let picked = clone_voice(&server, &third, &[]).await.expect("picked");
    assert_eq!(
        states(&picked),
        [("team-big".to_owned(), CloneState::Pending)]
    );
    let kept = clone_voice(&server, &third, &[])
        .await
        .expect("max_scopes 1 reached");
    assert_eq!(kept, picked);

    let espeak = create(
        &server,
        pb::VoicePack {
            kind: pb::voice_pack::Kind::Cloned as i32,
            voice_id: String::new(),
            ..pack_pb("x")
        },
    )
    .await;
    let none = server
        .admin()
        .await
        .add_reference(authed(pb::AddReferenceRequest {
            pack_id: espeak.id.clone(),
            audio: tone_wav(16_000, 1_500).expect("wav"),
            transcript: "Hello there.".into(),
            ..Default::default()
        }))
        .await;
    none.expect("a managed clone takes clips whatever its provider");
    let none = clone_voice(&server, &espeak.id, &[])
        .await
        .expect_err("no scopes");
    assert_eq!(none.code(), Code::FailedPrecondition);
    assert_eq!(reason(&none), "NO_CLONE_SCOPES");

    let missing = server
        .admin()
        .await
        .list_clones(authed(pb::ListClonesRequest {
            pack_id: "vp_000000000000000000000000".into(),
        }))
        .await
        .expect_err("unknown pack");
    assert_eq!(missing.code(), Code::NotFound);
}
db_test!(clone_voice_creates_rows_idempotently_and_refuses_what_it_cannot_clone);

async fn a_clone_goes_create_training_ready_then_deleted_under_leases(backend: Backend) {
    let server = server(backend).await;
    let pack = managed_with_clip(&server, 1).await;
    clone_voice(&server, &pack, &["team-b"])
        .await
        .expect("clone");

    let tasks = claim(&server, "w1", &["team-b", "team-a"], 10).await;
    assert_eq!(tasks.len(), 1);
    let task = &tasks[0];
    assert_eq!((task.work(), task.attempt), (Work::Create, 1));
    assert_eq!(task.provider, "elevenlabs");
    assert_eq!(task.pool, "eleven");
    assert_eq!(task.samples.len(), 1);
    assert!(task.samples[0].digest.starts_with("sha256:"));
    assert_eq!(task.samples[0].content_type, "audio/wav");
    assert!(
        claim(&server, "w2", &["team-b"], 10).await.is_empty(),
        "leased to w1"
    );

    let training = report(
        &server,
        &pack,
        "team-b",
        &task.lease_token,
        Outcome::Training(pb::CloneTraining {
            vendor_voice_id: "el-voice-1".into(),
            poll_after_ms: 1_000,
        }),
    )
    .await
    .expect("training");
    assert_eq!(training.state(), CloneState::Training);
    assert_eq!(training.vendor_voice_id, "el-voice-1");
    let stale = report(
        &server,
        &pack,
        "team-b",
        &task.lease_token,
        Outcome::Deleted(pb::CloneDeleted {}),
    )
    .await
    .expect_err("the lease ended with the report");
    assert_eq!(stale.code(), Code::FailedPrecondition);
    assert_eq!(reason(&stale), "CLONE_LEASE_LOST");
    assert_eq!(
        states(&list(&server, &pack).await),
        [("team-b".to_owned(), CloneState::Training)]
    );

    // The poll is due later: claimed through the store at a time past it.
    let polls = store(&server)
        .claim(
            "w2",
            &["team-b".to_owned()],
            10,
            60_000_000,
            hour_from_now_us(),
        )
        .await
        .expect("claim poll");
    assert_eq!(polls.len(), 1);
    let (row, token) = &polls[0];
    assert_eq!(row.work.as_str(), "POLL");
    let ready = report(
        &server,
        &pack,
        "team-b",
        token,
        Outcome::Ready(pb::CloneReady {
            vendor_voice_id: "el-voice-1".into(),
            expires_at: None,
        }),
    )
    .await
    .expect("ready");
    assert_eq!(ready.state(), CloneState::Ready);
    // team-b has keep_alive = "6d": a KEEPALIVE step is due in six days, not now.
    let clones = store(&server).list(&pack).await.expect("rows");
    assert_eq!(clones[0].work.as_str(), "KEEPALIVE");
    assert!(
        clones[0].due_at_us > voxpool_catalog::model::now().timestamp_micros() + 5 * 86_400_000_000
    );

    // DeleteClone: the vendor holds it, so a DELETE step; the row goes when it is reported.
    let deleting = server
        .admin()
        .await
        .delete_clone(authed(pb::DeleteCloneRequest {
            pack_id: pack.clone(),
            scope: "team-b".into(),
        }))
        .await
        .expect("delete")
        .into_inner();
    assert_eq!(deleting.vendor_voice_id, "el-voice-1");
    assert!(deleting.deleting, "the answer shows the pending delete");
    let listed = list(&server, &pack).await;
    assert_eq!(
        (listed[0].state(), listed[0].deleting),
        (CloneState::Ready, true),
        "still READY (and served) while its delete is pending"
    );
    let tasks = claim(&server, "w3", &["team-b"], 10).await;
    assert_eq!(tasks.len(), 1);
    assert_eq!(
        (tasks[0].work(), tasks[0].vendor_voice_id.as_str()),
        (Work::Delete, "el-voice-1")
    );
    report(
        &server,
        &pack,
        "team-b",
        &tasks[0].lease_token,
        Outcome::Deleted(pb::CloneDeleted {}),
    )
    .await
    .expect("deleted");
    assert!(list(&server, &pack).await.is_empty());

    // A clone the vendor never made goes at once; an unknown one is NOT_FOUND.
    clone_voice(&server, &pack, &["team-a"])
        .await
        .expect("clone again");
    server
        .admin()
        .await
        .delete_clone(authed(pb::DeleteCloneRequest {
            pack_id: pack.clone(),
            scope: "team-a".into(),
        }))
        .await
        .expect("delete pending");
    assert!(list(&server, &pack).await.is_empty());
    let gone = server
        .admin()
        .await
        .delete_clone(authed(pb::DeleteCloneRequest {
            pack_id: pack.clone(),
            scope: "team-a".into(),
        }))
        .await
        .expect_err("nothing left");
    assert_eq!(
        (gone.code(), reason(&gone).as_str()),
        (Code::NotFound, "CLONE_NOT_FOUND")
    );

    // A pack that is no managed clone has none to delete: it says so.
    let stock = create(&server, pack_pb("stock")).await;
    let not_managed = server
        .admin()
        .await
        .delete_clone(authed(pb::DeleteCloneRequest {
            pack_id: stock.id.clone(),
            scope: "team-a".into(),
        }))
        .await
        .expect_err("a stock pack");
    assert_eq!(
        (not_managed.code(), reason(&not_managed).as_str()),
        (Code::FailedPrecondition, "CLONE_NOT_MANAGED")
    );
    assert!(
        not_managed.message().contains("STANDARD"),
        "{}",
        not_managed.message()
    );
}
db_test!(a_clone_goes_create_training_ready_then_deleted_under_leases);

async fn an_expired_clone_is_cloned_again_and_a_run_out_lease_is_handed_out_again(
    backend: Backend,
) {
    let server = server(backend).await;
    let volc = pb::VoicePack {
        provider: "volcengine".into(),
        model: "seed-icl-1.0".into(),
        tts_model_id: "volc".into(),
        ..managed(1)
    };
    let pack = with_clip(&server, volc).await;
    clone_voice(&server, &pack, &["acct/app-2"])
        .await
        .expect("volcengine key scope");
    let rows = store(&server);
    let scopes = ["acct/app-2".to_owned()];
    let now = voxpool_catalog::model::now().timestamp_micros();
    let first = rows
        .claim("w1", &scopes, 1, 5_000_000, now)
        .await
        .expect("claim");
    assert_eq!(first.len(), 1);
    assert!(
        rows.claim("w2", &scopes, 1, 5_000_000, now + 4_000_000)
            .await
            .expect("claim")
            .is_empty(),
        "the lease still runs"
    );
    let second = rows
        .claim("w2", &scopes, 1, 5_000_000, now + 6_000_000)
        .await
        .expect("claim");
    assert_eq!(second.len(), 1, "a run-out lease is handed out again");
    assert_eq!(second[0].0.attempts, 2);
    assert_ne!(second[0].1, first[0].1);
    let late = report(
        &server,
        &pack,
        "acct/app-2",
        &first[0].1,
        Outcome::Training(pb::CloneTraining {
            vendor_voice_id: "S_1".into(),
            poll_after_ms: 0,
        }),
    )
    .await
    .expect_err("w1's lease was handed on");
    assert_eq!(reason(&late), "CLONE_LEASE_LOST");
    let ready = report(
        &server,
        &pack,
        "acct/app-2",
        &second[0].1,
        Outcome::Ready(pb::CloneReady {
            vendor_voice_id: "S_1".into(),
            expires_at: None,
        }),
    )
    .await
    .expect("ready");
    assert_eq!(ready.state(), CloneState::Ready);

    // The vendor reports it gone: EXPIRED, no vendor id, and CloneVoice makes it PENDING again.
    clone_voice(&server, &pack, &["acct/app-2"])
        .await
        .expect("live: unchanged");
    let mut rows_now = rows.list(&pack).await.expect("rows");
    assert_eq!(rows_now[0].work.as_str(), "NONE");
    // A vendor's "gone" arrives on a step: simulate the keep-alive step the scope would run.
    let expired = {
        use sea_orm::{ConnectionTrait, Statement};
        server
            .repo
            .connection()
            .execute_raw(Statement::from_string(
                server.repo.connection().get_database_backend(),
                "UPDATE voice_clones SET work = 'KEEPALIVE', due_at_us = 0",
            ))
            .await
            .expect("make a step due");
        let due = rows
            .claim("w3", &scopes, 1, 5_000_000, now + 10_000_000)
            .await
            .expect("claim");
        report(
            &server,
            &pack,
            "acct/app-2",
            &due[0].1,
            Outcome::Expired(pb::CloneFailure {
                error: "speaker Expired".into(),
                reclaimed: false,
            }),
        )
        .await
        .expect("expired")
    };
    assert_eq!(expired.state(), CloneState::Expired);
    assert!(expired.vendor_voice_id.is_empty());
    let again = clone_voice(&server, &pack, &["acct/app-2"])
        .await
        .expect("re-clone");
    assert_eq!(
        states(&again),
        [("acct/app-2".to_owned(), CloneState::Pending)]
    );
    rows_now = rows.list(&pack).await.expect("rows");
    assert_eq!(rows_now[0].work.as_str(), "CREATE");
}
db_test!(an_expired_clone_is_cloned_again_and_a_run_out_lease_is_handed_out_again);

async fn two_workers_claiming_at_once_get_disjoint_steps(backend: Backend) {
    let server = server(backend).await;
    let mut packs = Vec::new();
    for n in 0..8 {
        let pack = managed_with_clip(&server, n).await;
        clone_voice(&server, &pack, &["team-big"])
            .await
            .expect("clone");
        packs.push(pack);
    }
    let (a, b) = tokio::join!(
        claim(&server, "w1", &["team-big"], 8),
        claim(&server, "w2", &["team-big"], 8)
    );
    let ids = |tasks: &[pb::CloneTask]| -> BTreeSet<String> {
        tasks.iter().map(|t| t.pack_id.clone()).collect()
    };
    let (ids_a, ids_b) = (ids(&a), ids(&b));
    assert!(ids_a.is_disjoint(&ids_b), "{ids_a:?} vs {ids_b:?}");
    assert_eq!(a.len() + b.len(), 8, "every due step is handed out once");
    let all: BTreeSet<String> = ids_a.union(&ids_b).cloned().collect();
    assert_eq!(all, packs.into_iter().collect());
}
db_test!(two_workers_claiming_at_once_get_disjoint_steps);

async fn import(
    server: &TestServer,
    pool: &str,
    scope: &str,
) -> Result<Vec<pb::CloneImport>, tonic::Status> {
    server
        .admin()
        .await
        .import_clones(authed(pb::ImportClonesRequest {
            pool: pool.into(),
            scope: scope.into(),
        }))
        .await
        .map(|r| r.into_inner().imports)
}

async fn an_import_binds_the_clones_named_after_managed_packs(backend: Backend) {
    let server = server(backend).await;
    let pack = managed_with_clip(&server, 1).await;
    let asked = server
        .admin()
        .await
        .import_clones(authed(pb::ImportClonesRequest {
            pool: "eleven".into(),
            scope: "team-a".into(),
        }))
        .await
        .expect("import")
        .into_inner()
        .imports;
    assert_eq!(asked.len(), 1);
    assert_eq!(
        (asked[0].scope.as_str(), asked[0].state.as_str()),
        ("team-a", "REQUESTED")
    );
    let tasks = claim(&server, "w1", &["team-a"], 10).await;
    assert_eq!(tasks.len(), 1);
    assert_eq!(
        (tasks[0].work(), tasks[0].pack_id.as_str()),
        (Work::Import, "")
    );
    report(
        &server,
        "",
        "team-a",
        &tasks[0].lease_token,
        Outcome::Imported(pb::CloneListing {
            voices: vec![
                pb::ListedVendorVoice {
                    vendor_voice_id: "el-1".into(),
                    name: pack.clone(),
                },
                pb::ListedVendorVoice {
                    vendor_voice_id: "el-2".into(),
                    name: "someone's voice".into(),
                },
            ],
        }),
    )
    .await
    .expect("imported");
    let clones = list(&server, &pack).await;
    assert_eq!(states(&clones), [("team-a".to_owned(), CloneState::Ready)]);
    assert_eq!(clones[0].vendor_voice_id, "el-1");

    // Asked again: the finished run (its state, time and result) and the new one queued.
    let again = import(&server, "eleven", "team-a").await.expect("again");
    let shown: Vec<_> = again
        .iter()
        .map(|i| (i.scope.as_str(), i.state.as_str()))
        .collect();
    assert_eq!(shown, [("team-a", "DONE"), ("team-a", "REQUESTED")]);
    assert_eq!(
        again[0].requested_at, asked[0].requested_at,
        "the finished run's time"
    );
    let (asked_at, finished_at) = (
        again[0].requested_at.expect("asked at"),
        again[0]
            .finished_at
            .expect("the finished run says when it finished"),
    );
    assert!(
        (finished_at.seconds, finished_at.nanos) >= (asked_at.seconds, asked_at.nanos),
        "finished {finished_at:?} before asked {asked_at:?}"
    );
    assert!(
        again[1].finished_at.is_none(),
        "the queued run has not finished"
    );
    let bound: Vec<_> = again[0]
        .bound
        .iter()
        .map(|b| (b.pack_id.as_str(), b.vendor_voice_id.as_str()))
        .collect();
    assert_eq!(bound, [(pack.as_str(), "el-1")]);
    assert_eq!(again[0].unbound, ["el-2"]);
    assert!(again[1].bound.is_empty() && again[1].unbound.is_empty());

    // The second run: the vendor lists the catalog's own clone under another name; it is
    // bound to its pack, never unbound.
    let tasks = claim(&server, "w1", &["team-a"], 10).await;
    assert_eq!(tasks.len(), 1);
    report(
        &server,
        "",
        "team-a",
        &tasks[0].lease_token,
        Outcome::Imported(pb::CloneListing {
            voices: vec![
                pb::ListedVendorVoice {
                    vendor_voice_id: "el-1".into(),
                    name: "renamed at the vendor".into(),
                },
                pb::ListedVendorVoice {
                    vendor_voice_id: "el-2".into(),
                    name: "someone's voice".into(),
                },
            ],
        }),
    )
    .await
    .expect("imported again");
    let stored = store(&server)
        .imports(&["team-a".to_owned()])
        .await
        .expect("imports");
    assert!(stored[0].queued.is_none(), "nothing queued: {stored:?}");
    let last = stored[0].last.as_ref().expect("a finished run");
    assert_eq!(last.state, "DONE");
    assert_eq!(last.result.bound, [(pack.clone(), "el-1".to_owned())]);
    assert_eq!(last.result.unbound, ["el-2"]);
    assert!(last.finished_at_us >= last.requested_at_us);

    let done = import(&server, "eleven", "team-b").await.expect("import b");
    assert_eq!(
        (done[0].scope.as_str(), done[0].state.as_str()),
        ("team-b", "REQUESTED")
    );
    let no_pool = import(&server, "nosuchpool", "")
        .await
        .expect_err("no such pool");
    assert_eq!(no_pool.code(), Code::InvalidArgument);
    assert_eq!(bad_fields(&no_pool), ["pool"]);
    assert!(
        no_pool.message().contains("\"nosuchpool\"") && no_pool.message().contains("eleven"),
        "{}",
        no_pool.message()
    );
    let unknown = server
        .admin()
        .await
        .import_clones(authed(pb::ImportClonesRequest {
            pool: "eleven".into(),
            scope: "plain".into(),
        }))
        .await
        .expect_err("no clone scope");
    assert_eq!(bad_fields(&unknown), ["scope"]);
}
db_test!(an_import_binds_the_clones_named_after_managed_packs);

async fn a_delete_asked_while_a_create_runs_wins_and_keeps_the_vendor_id(backend: Backend) {
    let server = server(backend).await;
    let pack = managed_with_clip(&server, 1).await;
    clone_voice(&server, &pack, &["team-a"])
        .await
        .expect("clone");
    let creating = claim(&server, "w1", &["team-a"], 1).await;
    assert_eq!(creating[0].work(), Work::Create);
    let asked = server
        .admin()
        .await
        .delete_clone(authed(pb::DeleteCloneRequest {
            pack_id: pack.clone(),
            scope: "team-a".into(),
        }))
        .await
        .expect("delete while creating")
        .into_inner();
    assert_eq!(
        asked.state(),
        CloneState::Pending,
        "kept: the vendor may be making it"
    );
    assert!(
        claim(&server, "w2", &["team-a"], 1).await.is_empty(),
        "still w1's"
    );
    let reported = report(
        &server,
        &pack,
        "team-a",
        &creating[0].lease_token,
        Outcome::Training(pb::CloneTraining {
            vendor_voice_id: "el-made".into(),
            poll_after_ms: 5_000,
        }),
    )
    .await
    .expect("w1 reports what it made");
    assert_eq!(reported.vendor_voice_id, "el-made");
    let deleting = claim(&server, "w2", &["team-a"], 1).await;
    assert_eq!(
        deleting.len(),
        1,
        "the delete is due now, not after the poll delay"
    );
    assert_eq!(
        (deleting[0].work(), deleting[0].vendor_voice_id.as_str()),
        (Work::Delete, "el-made")
    );

    // The clips, not a vendor id, are what a snapshot of a managed clone freezes.
    let snapshot = server
        .catalog()
        .await
        .freeze_snapshot(pb::FreezeSnapshotRequest {
            pack_id: pack.clone(),
        })
        .await
        .expect("freeze")
        .into_inner();
    assert!(snapshot.voice_id.is_empty());
    assert!(snapshot.upstream_ids.is_empty());
    assert_eq!(snapshot.references.len(), 1);
}
db_test!(a_delete_asked_while_a_create_runs_wins_and_keeps_the_vendor_id);

/// Claims the one due step of `scope`, checks it is `pack`'s CREATE and reports it READY as
/// `vendor_voice_id`.
async fn make_ready(server: &TestServer, pack: &str, scope: &str, vendor_voice_id: &str) {
    let tasks = claim(server, "w-ready", &[scope], 10).await;
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    assert_eq!(
        (tasks[0].pack_id.as_str(), tasks[0].work()),
        (pack, Work::Create)
    );
    report(
        server,
        pack,
        scope,
        &tasks[0].lease_token,
        Outcome::Ready(pb::CloneReady {
            vendor_voice_id: vendor_voice_id.into(),
            expires_at: None,
        }),
    )
    .await
    .expect("ready");
}

/// The steps a claim of `scope` hands out now, as (pack, work), reported at once with
/// `deleted` for DELETE steps (the vendor freed the slot).
async fn claim_and_delete(server: &TestServer, scope: &str) -> BTreeSet<(String, Work)> {
    let mut out = BTreeSet::new();
    for task in claim(server, "w-evict", &[scope], 10).await {
        if task.work() == Work::Delete {
            report(
                server,
                &task.pack_id,
                scope,
                &task.lease_token,
                Outcome::Deleted(pb::CloneDeleted {}),
            )
            .await
            .expect("deleted");
        }
        out.insert((task.pack_id.clone(), task.work()));
    }
    out
}

async fn a_full_scope_evicts_its_least_recently_used_clone_where_the_vendor_can_delete(
    backend: Backend,
) {
    let server = server(backend).await;
    let rows = store(&server);
    // team-a (ElevenLabs) has 2 slots: p1 then p2 READY; p2 used before p1, so p2 is the LRU
    // although p1 was made first.
    let p1 = managed_with_clip(&server, 1).await;
    clone_voice(&server, &p1, &["team-a"]).await.expect("p1");
    make_ready(&server, &p1, "team-a", "el-1").await;
    let p2 = managed_with_clip(&server, 2).await;
    clone_voice(&server, &p2, &["team-a"]).await.expect("p2");
    make_ready(&server, &p2, "team-a", "el-2").await;
    let now = voxpool_catalog::model::now().timestamp_micros();
    rows.mark_used(&p2, "team-a", "el-2", None, now - 2_000)
        .await
        .expect("p2 used");
    rows.mark_used(&p1, "team-a", "el-1", None, now - 1_000)
        .await
        .expect("p1 used later");

    let p3 = managed_with_clip(&server, 3).await;
    let asked = clone_voice(&server, &p3, &["team-a"])
        .await
        .expect("full: the LRU clone is evicted for it");
    assert_eq!(states(&asked), [("team-a".to_owned(), CloneState::Pending)]);
    let evicted = rows.get(&p2, "team-a").await.expect("row").expect("p2");
    assert_eq!(
        (evicted.state.as_str(), evicted.work.as_str()),
        ("READY", "DELETE"),
        "the least recently used clone gets a DELETE step"
    );
    let kept = rows.get(&p1, "team-a").await.expect("row").expect("p1");
    assert_eq!(
        kept.work.as_str(),
        "NONE",
        "the more recently used clone stays"
    );

    // The vendor still holds p2 until its delete is reported: p3's CREATE waits for it.
    let first = claim(&server, "w1", &["team-a"], 10).await;
    let steps: Vec<_> = first
        .iter()
        .map(|t| (t.pack_id.clone(), t.work()))
        .collect();
    assert_eq!(
        steps,
        [(p2.clone(), Work::Delete)],
        "no CREATE before the delete"
    );
    assert_eq!(first[0].vendor_voice_id, "el-2");

    // Another pack while p2 is being deleted: p1 is READY and not yet evicted, so it goes;
    // a fifth finds only PENDING clones holding the slots and is refused naming the scope.
    let p4 = managed_with_clip(&server, 4).await;
    clone_voice(&server, &p4, &["team-a"])
        .await
        .expect("p4 evicts p1");
    assert_eq!(
        rows.get(&p1, "team-a")
            .await
            .expect("row")
            .expect("p1")
            .work
            .as_str(),
        "DELETE"
    );
    let p5 = managed_with_clip(&server, 5).await;
    let refused = clone_voice(&server, &p5, &["team-a"])
        .await
        .expect_err("nothing READY to evict");
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(reason(&refused), "CLONE_SLOTS_FULL");
    let info = refused
        .get_error_details()
        .error_info()
        .cloned()
        .expect("info");
    assert_eq!(
        (
            info.metadata["scope"].as_str(),
            info.metadata["slots"].as_str()
        ),
        ("team-a", "2")
    );
    assert!(
        refused.message().contains("none can be evicted"),
        "{}",
        refused.message()
    );

    // p2's delete reported: one slot is free at the vendor, so p3's CREATE (asked first) goes
    // with p1's DELETE; p4's waits for p1's delete.
    report(
        &server,
        &p2,
        "team-a",
        &first[0].lease_token,
        Outcome::Deleted(pb::CloneDeleted {}),
    )
    .await
    .expect("p2 deleted");
    assert!(rows.get(&p2, "team-a").await.expect("row").is_none());
    let second = claim_and_delete(&server, "team-a").await;
    assert_eq!(
        second,
        BTreeSet::from([(p1.clone(), Work::Delete), (p3.clone(), Work::Create)])
    );
    let third = claim_and_delete(&server, "team-a").await;
    assert_eq!(third, BTreeSet::from([(p4.clone(), Work::Create)]));
}
db_test!(a_full_scope_evicts_its_least_recently_used_clone_where_the_vendor_can_delete);

const MINIMAX_POOLS: &str = r#"
[[pools]]
id = "mm"
provider = "minimax"
[[pools.upstreams]]
id = "group-1"
clone = { slots = 1, min_residence = "0s" }
[[pools.upstreams.keys]]
id = "k1"
capacity = 2
[[pools.upstreams]]
id = "group-2"
clone = { slots = 1, min_residence = "0s" }
[[pools.upstreams.keys]]
id = "k1"
capacity = 2
"#;

async fn cloning_without_scopes_evicts_in_the_scope_whose_clone_was_used_least_recently(
    backend: Backend,
) {
    let config = Config::from_toml_str(MINIMAX_POOLS).expect("pools");
    let server =
        TestServer::start_with_pools(backend, ServedPools::from_config(&config, "mm.toml")).await;
    let rows = store(&server);
    let minimax = |n| pb::VoicePack {
        provider: "minimax".into(),
        model: "speech-02-hd".into(),
        tts_model_id: "mm".into(),
        ..managed(n)
    };
    let x = with_clip(&server, minimax(1)).await;
    let y = with_clip(&server, minimax(2)).await;
    let picked = clone_voice(&server, &x, &[]).await.expect("x");
    assert_eq!(
        states(&picked),
        [("group-1".to_owned(), CloneState::Pending)]
    );
    make_ready(&server, &x, "group-1", "mm-x").await;
    let picked = clone_voice(&server, &y, &[]).await.expect("y");
    assert_eq!(
        states(&picked),
        [("group-2".to_owned(), CloneState::Pending)]
    );
    make_ready(&server, &y, "group-2", "mm-y").await;
    let now = voxpool_catalog::model::now().timestamp_micros();
    rows.mark_used(&x, "group-1", "mm-x", None, now - 1_000)
        .await
        .expect("x used");
    rows.mark_used(&y, "group-2", "mm-y", None, now - 2_000)
        .await
        .expect("y used earlier");

    // Both scopes full: the one whose clone was used least recently (group-2) makes room.
    let z = with_clip(&server, minimax(3)).await;
    let picked = clone_voice(&server, &z, &[]).await.expect("z evicts");
    assert_eq!(
        states(&picked),
        [("group-2".to_owned(), CloneState::Pending)]
    );
    assert_eq!(
        claim_and_delete(&server, "group-2").await,
        BTreeSet::from([(y.clone(), Work::Delete)])
    );
    assert_eq!(
        claim_and_delete(&server, "group-2").await,
        BTreeSet::from([(z.clone(), Work::Create)])
    );
    assert!(rows.get(&x, "group-1").await.expect("row").is_some());
}
db_test!(cloning_without_scopes_evicts_in_the_scope_whose_clone_was_used_least_recently);

/// One ElevenLabs scope of 3 slots with the default minimum residence (10 minutes).
const RESIDENCE_POOLS: &str = r#"
[[pools]]
id = "el"
provider = "elevenlabs"
[[pools.upstreams]]
id = "team"
clone = { slots = 3 }
[[pools.upstreams.keys]]
id = "k1"
capacity = 2
"#;

/// Moves the clone's creation and last use `minutes` into the past (as if that much time had
/// passed since).
async fn age(server: &TestServer, pack: &str, scope: &str, minutes: i64) {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, sea_query::Expr};
    use voxpool_catalog::repo::entity::voice_clone::{Column, Entity};
    let then = voxpool_catalog::model::now().timestamp_micros() - minutes * 60_000_000;
    let changed = Entity::update_many()
        .col_expr(Column::CreatedAtUs, Expr::value(then))
        .col_expr(Column::LastUsedAtUs, Expr::value(Some(then)))
        .filter(Column::PackId.eq(pack))
        .filter(Column::Scope.eq(scope))
        .exec(server.repo.connection())
        .await
        .expect("age");
    assert_eq!(changed.rows_affected, 1);
}

async fn a_clone_made_or_used_within_min_residence_is_not_evicted(backend: Backend) {
    let config = Config::from_toml_str(RESIDENCE_POOLS).expect("pools");
    let server =
        TestServer::start_with_pools(backend, ServedPools::from_config(&config, "el.toml")).await;
    let rows = store(&server);
    let el = |n| pb::VoicePack {
        tts_model_id: "el".into(),
        ..managed(n)
    };
    let mut packs = Vec::new();
    for n in 1..=4 {
        packs.push(with_clip(&server, el(n)).await);
    }

    // Four packs spoken in turn over three slots: each request uses the pack's clone, or asks
    // for one. The three made first stay; the fourth is refused rather than evicting (which
    // would delete and create a clone at the vendor on every request).
    let (mut creates, mut deletes, mut refusals) = (0, 0, Vec::new());
    for i in 0..8 {
        let pack = &packs[i % 4];
        let ready = list(&server, pack)
            .await
            .into_iter()
            .find(|c| c.state() == CloneState::Ready);
        if let Some(c) = ready {
            let now = voxpool_catalog::model::now().timestamp_micros();
            rows.mark_used(pack, "team", &c.vendor_voice_id, None, now)
                .await
                .expect("used");
            continue;
        }
        match clone_voice(&server, pack, &[]).await {
            Ok(_) => {
                for task in claim(&server, "w", &["team"], 10).await {
                    let outcome = match task.work() {
                        Work::Create => {
                            creates += 1;
                            Outcome::Ready(pb::CloneReady {
                                vendor_voice_id: format!("el-{}", task.pack_id),
                                expires_at: None,
                            })
                        }
                        Work::Delete => {
                            deletes += 1;
                            Outcome::Deleted(pb::CloneDeleted {})
                        }
                        other => panic!("unexpected step {other:?}"),
                    };
                    report(&server, &task.pack_id, "team", &task.lease_token, outcome)
                        .await
                        .expect("report");
                }
            }
            Err(refused) => refusals.push(refused),
        }
    }
    assert_eq!((creates, deletes), (3, 0));
    assert_eq!(refusals.len(), 2, "the fourth pack, both times");
    let refused = &refusals[0];
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(reason(refused), "CLONE_SLOTS_FULL");
    let info = refused
        .get_error_details()
        .error_info()
        .cloned()
        .expect("info");
    assert_eq!(
        (
            info.metadata["scope"].as_str(),
            info.metadata["slots"].as_str()
        ),
        ("team", "3")
    );
    for part in ["\"team\"", "3 clones", "within the last 10m", "add slots"] {
        assert!(refused.message().contains(part), "{}", refused.message());
    }
    // Naming the scope: the same refusal.
    let named = clone_voice(&server, &packs[3], &["team"])
        .await
        .expect_err("named scope");
    assert_eq!(reason(&named), "CLONE_SLOTS_FULL");
    assert!(
        named.message().contains("within the last 10m"),
        "{}",
        named.message()
    );

    // Once a clone has gone unused past the residence, it is the one evicted.
    age(&server, &packs[1], "team", 11).await;
    clone_voice(&server, &packs[3], &[])
        .await
        .expect("evicts the clone unused for 11 minutes");
    for (i, pack) in packs.iter().enumerate().take(3) {
        let row = rows.get(pack, "team").await.expect("row").expect("clone");
        let want = if i == 1 { "DELETE" } else { "NONE" };
        assert_eq!(row.work.as_str(), want, "{pack}");
    }
}
db_test!(a_clone_made_or_used_within_min_residence_is_not_evicted);

async fn a_full_volcengine_scope_refuses_naming_the_scope_and_its_slots(backend: Backend) {
    let server = server(backend).await;
    let volc = |n| pb::VoicePack {
        provider: "volcengine".into(),
        model: "seed-icl-1.0".into(),
        tts_model_id: "volc".into(),
        ..managed(n)
    };
    let a = with_clip(&server, volc(1)).await;
    clone_voice(&server, &a, &["acct/app-1"]).await.expect("a");
    make_ready(&server, &a, "acct/app-1", "S_a").await;
    let b = with_clip(&server, volc(2)).await;
    let refused = clone_voice(&server, &b, &["acct/app-1"])
        .await
        .expect_err("bought slots are not evicted");
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(reason(&refused), "CLONE_SLOTS_FULL");
    let info = refused
        .get_error_details()
        .error_info()
        .cloned()
        .expect("info");
    assert_eq!(
        (
            info.metadata["scope"].as_str(),
            info.metadata["slots"].as_str()
        ),
        ("acct/app-1", "1")
    );
    for part in ["acct/app-1", "1 clones", "bought"] {
        assert!(refused.message().contains(part), "{}", refused.message());
    }
    let a_row = store(&server).get(&a, "acct/app-1").await.expect("row");
    assert_eq!(a_row.expect("a").work.as_str(), "NONE", "nothing evicted");

    // Without scopes: the other key's scope; then both are full and nothing is evicted.
    clone_voice(&server, &b, &[]).await.expect("b on app-2");
    make_ready(&server, &b, "acct/app-2", "S_b").await;
    let c = with_clip(&server, volc(3)).await;
    let full = clone_voice(&server, &c, &[])
        .await
        .expect_err("every scope full");
    assert_eq!(reason(&full), "CLONE_SLOTS_FULL");
    assert!(
        full.message().contains("acct/app-1 (1 slots)") && full.message().contains("acct/app-2"),
        "{}",
        full.message()
    );
}
db_test!(a_full_volcengine_scope_refuses_naming_the_scope_and_its_slots);

/// A seeded managed clone's `replicate = { max_scopes }` is the number of scopes CloneVoice
/// without scopes fills.
async fn a_seeded_replicate_sets_how_many_scopes_a_clone_fills(backend: Backend) {
    let server = server(backend).await;
    let dir = tempfile::tempdir().expect("seed dir");
    std::fs::write(
        dir.path().join("clip.wav"),
        tone_wav(16_000, 1_500).expect("a WAV clip"),
    )
    .expect("clip file");
    let seed = dir.path().join("packs.toml");
    std::fs::write(
        &seed,
        r#"[[packs]]
display_name = "Seeded clone"
provider = "elevenlabs"
model = "eleven_multilingual_v2"
tts_model_id = "eleven"
kind = "CLONED"
tier = "PRO"
references = [{ file = "clip.wav", transcript = "The quick brown fox.", language = "en-US" }]
replicate = { max_scopes = 2 }
"#,
    )
    .expect("seed file");
    let pools = ServedPools::from_config(&Config::from_toml_str(POOLS).expect("pools"), "t");
    let entries = voxpool_catalog::seed::load(&seed, &pools).expect("a valid seed");
    let blobs = voxpool_runtime::blob::BlobStore::open(Some(&format!(
        "file://{}",
        server.blobs.path().display()
    )))
    .expect("blob store");
    let clips = voxpool_catalog::reference::ClipStore::new(
        blobs.folder(voxpool_catalog::reference::FOLDER),
    );
    let outcomes = voxpool_catalog::seed::apply(&server.repo, &clips, entries)
        .await
        .expect("seeded");
    let (voxpool_catalog::seed::SeedOutcome::Created { id, .. }
    | voxpool_catalog::seed::SeedOutcome::Existing { id, .. }) = &outcomes[0];
    let clones = clone_voice(&server, id, &[]).await.expect("cloned");
    assert_eq!(clones.len(), 2, "two scopes, as replicate says: {clones:?}");
}
db_test!(a_seeded_replicate_sets_how_many_scopes_a_clone_fills);
