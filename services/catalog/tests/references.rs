//! Reference clips over gRPC (AddReference, ListReferences, RemoveReference, and what
//! FreezeSnapshot makes of them), on SQLite and PostgreSQL (`db_test!`), with the clips in a
//! real local blob store.

mod common;

use common::{Backend, TestServer, authed, bad_fields, create, pack_pb};
use tonic::Code;
use tonic_types::StatusExt as _;
use voxpool_domain::{reference::clip_digest, snapshot::Snapshot};
use voxpool_fake_vendors::audio::tone_wav;
use voxpool_proto::catalog::v1 as pb;

/// A zero-shot pack of the self-hosted provider.
fn zero_shot(voice: &str) -> pb::VoicePack {
    pb::VoicePack {
        provider: "selfhosted".into(),
        model: "cosyvoice3".into(),
        tts_model_id: "gpu-zero-shot".into(),
        ..pack_pb(voice)
    }
}

fn clip(ms: u32) -> Vec<u8> {
    tone_wav(16_000, ms).expect("a WAV clip")
}

fn add(pack_id: &str, audio: Vec<u8>, emotion: &str) -> pb::AddReferenceRequest {
    pb::AddReferenceRequest {
        pack_id: pack_id.into(),
        audio,
        transcript: "The quick brown fox.".into(),
        language: String::new(),
        emotion: emotion.into(),
        weight: 0,
    }
}

fn reason(status: &tonic::Status) -> String {
    status
        .get_error_details()
        .error_info()
        .map(|i| i.reason.clone())
        .unwrap_or_default()
}

async fn clips_are_stored_by_digest_versioned_and_frozen(backend: Backend) {
    let server = TestServer::start(backend).await;
    let pack = create(&server, zero_shot("alice")).await;
    let mut admin = server.admin().await;
    let audio = clip(2_000);
    let added = admin
        .add_reference(authed(add(&pack.id, audio.clone(), "calm")))
        .await
        .expect("add")
        .into_inner();
    assert_eq!(added.digest, clip_digest(&audio));
    assert_eq!(added.duration_ms, 2_000);
    assert_eq!(added.media_type, "audio/wav");
    assert_eq!(added.language, "en-US", "the pack's first locale");
    assert_eq!(added.weight, 1);
    let hex = added.digest.trim_start_matches("sha256:");
    let stored = std::fs::read(server.blobs.path().join("references").join(hex)).expect("blob");
    assert_eq!(
        stored, audio,
        "the blob store holds the clip under its digest"
    );

    let again = admin
        .add_reference(authed(add(&pack.id, audio.clone(), "")))
        .await
        .expect_err("the same clip twice");
    assert_eq!(again.code(), Code::AlreadyExists);
    assert_eq!(reason(&again), "REFERENCE_EXISTS");
    for ms in [2_500, 3_000] {
        admin
            .add_reference(authed(add(&pack.id, clip(ms), "")))
            .await
            .expect("add");
    }
    let frozen = server
        .catalog()
        .await
        .freeze_snapshot(pb::FreezeSnapshotRequest {
            pack_id: pack.id.clone(),
        })
        .await
        .expect("freeze")
        .into_inner();
    let snapshot = Snapshot::from_pb(&frozen).expect("snapshot");
    snapshot.verify_digest().expect("sealed");
    assert_eq!(snapshot.pack_version, 4, "create + three clips");
    assert_eq!(snapshot.references.len(), 3);
    assert_eq!(snapshot.references[0].digest, added.digest);
    assert_eq!(snapshot.references[0].emotion, "calm");

    let removed = admin
        .remove_reference(authed(pb::RemoveReferenceRequest {
            pack_id: pack.id.clone(),
            digest: added.digest.clone(),
        }))
        .await
        .expect("remove")
        .into_inner();
    assert!(removed.remove_time.is_some());
    let listed = |show_removed| pb::ListReferencesRequest {
        pack_id: pack.id.clone(),
        show_removed,
    };
    let now = admin
        .list_references(authed(listed(false)))
        .await
        .expect("list")
        .into_inner()
        .references;
    assert_eq!(now.len(), 2);
    let all = admin
        .list_references(authed(listed(true)))
        .await
        .expect("list")
        .into_inner()
        .references;
    assert_eq!(all.len(), 3, "a removed clip is kept, marked");
    assert!(
        std::fs::metadata(server.blobs.path().join("references").join(hex)).is_ok(),
        "a removed clip's bytes stay for the snapshots that name it"
    );
    let pack_now = server
        .catalog()
        .await
        .get_voice_pack(pb::GetVoicePackRequest {
            id: pack.id.clone(),
        })
        .await
        .expect("get")
        .into_inner();
    assert_eq!(pack_now.version, 5);
    assert_eq!(pack_now.references.len(), 2);
    let actions: Vec<String> = admin
        .list_voice_pack_revisions(authed(pb::ListVoicePackRevisionsRequest {
            pack_id: pack.id.clone(),
        }))
        .await
        .expect("revisions")
        .into_inner()
        .revisions
        .into_iter()
        .map(|r| r.action)
        .collect();
    assert_eq!(
        actions,
        [
            "create",
            "add_reference",
            "add_reference",
            "add_reference",
            "remove_reference"
        ]
    );
    // Adding the removed clip back brings it back into the pack.
    admin
        .add_reference(authed(add(&pack.id, audio, "")))
        .await
        .expect("re-add");
    let back = admin
        .list_references(authed(listed(false)))
        .await
        .expect("list")
        .into_inner()
        .references;
    assert_eq!(back.len(), 3);
    assert!(back.iter().all(|r| r.remove_time.is_none()));
}
db_test!(clips_are_stored_by_digest_versioned_and_frozen);

async fn refusals_name_the_field_and_the_limit(backend: Backend) {
    let server = TestServer::start(backend).await;
    let pack = create(&server, zero_shot("bob")).await;
    let mut admin = server.admin().await;
    let refused = |req| {
        let mut admin = admin.clone();
        async move { admin.add_reference(authed(req)).await.expect_err("refused") }
    };
    let short = refused(add(&pack.id, clip(500), "")).await;
    assert_eq!(short.code(), Code::InvalidArgument);
    assert_eq!(bad_fields(&short), ["audio"]);
    assert!(short.message().contains("1..30 s"), "{}", short.message());
    let junk = refused(add(&pack.id, b"not audio at all".to_vec(), "")).await;
    assert!(
        junk.message().contains("not WAV, MP3 or FLAC"),
        "{}",
        junk.message()
    );
    let huge = refused(add(&pack.id, vec![0u8; 10 * 1024 * 1024 + 1], "")).await;
    assert!(
        huge.message().contains("over the limit of 10485760 bytes"),
        "{}",
        huge.message()
    );
    // A WAV cut off halfway: its header announces 4 s of samples, 2 s follow. The 2 s that
    // are there decode, which is not the clip that was meant.
    let whole = clip(4_000);
    let cut = refused(add(&pack.id, whole[..whole.len() / 2].to_vec(), "")).await;
    assert_eq!(cut.code(), Code::InvalidArgument);
    assert_eq!(bad_fields(&cut), ["audio"]);
    assert!(cut.message().contains("truncated"), "{}", cut.message());
    // A transcript of zero-width spaces says nothing a model could read with the clip.
    let mut silent = add(&pack.id, clip(2_000), "");
    silent.transcript = "\u{200b}\u{200b}\u{200b}".into();
    let silent = refused(silent).await;
    assert_eq!(bad_fields(&silent), ["transcript"]);
    assert!(
        silent.message().contains("letter or digit"),
        "{}",
        silent.message()
    );
    let mut bad = add(&pack.id, clip(2_000), "Loud!");
    bad.transcript = String::new();
    bad.language = "not a language".into();
    bad.weight = 5_000;
    let many = refused(bad).await;
    assert_eq!(
        bad_fields(&many),
        ["transcript", "language", "emotion", "weight"],
        "every bad field at once"
    );
    let espeak = create(&server, pack_pb("carol")).await;
    let wrong = refused(add(&espeak.id, clip(2_000), "")).await;
    assert_eq!(wrong.code(), Code::FailedPrecondition);
    assert_eq!(reason(&wrong), "REFERENCES_NOT_ACCEPTED");
    assert!(
        wrong.message().contains("selfhosted"),
        "{}",
        wrong.message()
    );
    let missing = refused(add("vp_000000000000000000000000", clip(2_000), "")).await;
    assert_eq!(missing.code(), Code::NotFound);
    let gone = admin
        .remove_reference(authed(pb::RemoveReferenceRequest {
            pack_id: pack.id.clone(),
            digest: clip_digest(b"never added"),
        }))
        .await
        .expect_err("no such clip");
    assert_eq!(gone.code(), Code::NotFound);
    assert_eq!(reason(&gone), "REFERENCE_NOT_FOUND");
    // Nothing refused was stored.
    let listed = admin
        .list_references(authed(pb::ListReferencesRequest {
            pack_id: pack.id.clone(),
            show_removed: true,
        }))
        .await
        .expect("list")
        .into_inner();
    assert!(listed.references.is_empty());
}
db_test!(refusals_name_the_field_and_the_limit);

async fn a_clip_set_is_part_of_the_identity(backend: Backend) {
    let server = TestServer::start(backend).await;
    let first = create(&server, zero_shot("dana")).await;
    let mut admin = server.admin().await;
    let audio = clip(2_000);
    admin
        .add_reference(authed(add(&first.id, audio.clone(), "")))
        .await
        .expect("add");
    // Same voice, no clips: another identity, so it can be created.
    let second = create(&server, zero_shot("dana")).await;
    // Giving it the same clip set would make it the first pack's twin.
    let twin = admin
        .add_reference(authed(add(&second.id, audio, "")))
        .await
        .expect_err("identity clash");
    assert_eq!(twin.code(), Code::AlreadyExists);
    assert_eq!(reason(&twin), "PACK_IDENTITY_EXISTS");
    assert!(twin.message().contains(&first.id), "{}", twin.message());
    // An update cannot move a pack with clips to a provider that speaks none.
    let moved = admin
        .update_voice_pack(authed(pb::UpdateVoicePackRequest {
            voice_pack: Some(pb::VoicePack {
                id: first.id.clone(),
                provider: "espeak".into(),
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["provider".into()],
            }),
            expected_version: 0,
        }))
        .await
        .expect_err("clips need selfhosted");
    assert_eq!(bad_fields(&moved), ["voice_pack.provider"]);
    // An update of another field keeps the clips.
    let renamed = admin
        .update_voice_pack(authed(pb::UpdateVoicePackRequest {
            voice_pack: Some(pb::VoicePack {
                id: first.id.clone(),
                display_name: "Dana, renamed".into(),
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["display_name".into()],
            }),
            expected_version: 0,
        }))
        .await
        .expect("rename")
        .into_inner();
    assert_eq!(renamed.references.len(), 1);
}
db_test!(a_clip_set_is_part_of_the_identity);

async fn a_seeded_pack_that_gained_clips_is_not_seeded_again(backend: Backend) {
    use voxpool_catalog::{pools::ServedPools, reference::ClipStore, seed};
    let server = TestServer::start(backend).await;
    let file = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/config/packs.toml"
    ));
    let clips = ClipStore::in_memory();
    let entries = seed::load(file, &ServedPools::unknown()).expect("seed file");
    let first = seed::apply(&server.repo, &clips, entries.clone())
        .await
        .expect("seed");
    let ada = first
        .iter()
        .find_map(|o| match o {
            seed::SeedOutcome::Created { id, display_name }
                if display_name.contains("zero-shot") =>
            {
                Some(id.clone())
            }
            _ => None,
        })
        .expect("the zero-shot pack is created");
    server
        .admin()
        .await
        .add_reference(authed(add(&ada, clip(2_000), "angry")))
        .await
        .expect("a clip added after seeding");
    let again = seed::apply(&server.repo, &clips, entries)
        .await
        .expect("seed again");
    assert!(
        again
            .iter()
            .all(|o| matches!(o, seed::SeedOutcome::Existing { .. })),
        "nothing created the second time: {again:?}"
    );
    assert!(
        again
            .iter()
            .any(|o| matches!(o, seed::SeedOutcome::Existing { id, .. } if *id == ada))
    );
}
db_test!(a_seeded_pack_that_gained_clips_is_not_seeded_again);
