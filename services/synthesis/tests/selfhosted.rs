//! Self-hosted zero-shot servers end to end inside one process: a real scheduler, synthesis
//! with the built-in adapters, reference clips in a real local blob store, and fake servers
//! speaking each profile's wire format (`voxpool_fake_vendors::selfhosted`), which check the
//! clip arrived the way their server takes it and record its digest.

mod common;

use std::{path::Path, sync::Arc, time::Duration};

use common::{Opts, Stack, request};
use tonic::Code;
use tonic_types::StatusExt as _;
use voxpool_domain::{
    reference::{Reference, clip_digest},
    snapshot::Snapshot,
};
use voxpool_fake_vendors::{FakeConfig, FakeVendor, ServerProfile, VendorKind, audio::tone_wav};
use voxpool_proto::{scheduler::v1::KeyState, synthesis::v1 as pb};
use voxpool_synthesis::{
    adapters::registry::{AdapterOptions, builtin},
    references::{DEFAULT_CACHE_BYTES, ReferenceClips},
};

const POOL: &str = "gpu";

/// Clips written into `dir/references/` by digest (as the catalog's AddReference does).
fn store_clips(dir: &Path, clips: &[(u32, &str, u32)]) -> Vec<Reference> {
    let folder = dir.join("references");
    std::fs::create_dir_all(&folder).expect("references dir");
    clips
        .iter()
        .map(|&(ms, emotion, weight)| {
            let bytes = tone_wav(16_000, ms).expect("clip");
            let digest = clip_digest(&bytes);
            std::fs::write(folder.join(digest.trim_start_matches("sha256:")), &bytes)
                .expect("write clip");
            Reference {
                digest,
                transcript: format!("A clip of {ms} milliseconds."),
                language: "en-US".into(),
                emotion: emotion.into(),
                weight,
                duration_ms: ms,
            }
        })
        .collect()
}

fn voice(references: Vec<Reference>) -> Snapshot {
    let mut s = common::snapshot("selfhosted", POOL, "alice", "{}");
    s.locales = vec!["en-US".into()];
    s.references = references;
    s.seal()
}

/// Pool `gpu` with one upstream (one server key of `capacity`) per fake.
fn pool(servers: &[(&FakeVendor, ServerProfile)], clip_dir: &Path) -> String {
    let mut t = format!("[[pools]]\nid = \"{POOL}\"\nprovider = \"selfhosted\"\nmodel = \"m\"\n");
    for (i, (fake, profile)) in servers.iter().enumerate() {
        t.push_str(&format!(
            "[[pools.upstreams]]\nid = \"gpu{i}\"\nbase_url = \"{}\"\n\
             params = {{ profile = \"{}\", clip_dir = \"{}\" }}\n\
             [[pools.upstreams.keys]]\nid = \"server\"\ncapacity = 2\n",
            fake.base_url(),
            profile.as_str(),
            clip_dir.display()
        ));
    }
    t
}

struct Rig {
    stack: Stack,
    _blobs: tempfile::TempDir,
    clips: Vec<Reference>,
}

async fn rig(servers: &[(&FakeVendor, ServerProfile)], clips: &[(u32, &str, u32)]) -> Rig {
    rig_with(servers, clips, |t| t).await
}

/// [`rig`] with the pools TOML edited by `edit`.
async fn rig_with(
    servers: &[(&FakeVendor, ServerProfile)],
    clips: &[(u32, &str, u32)],
    edit: fn(String) -> String,
) -> Rig {
    let blobs = tempfile::tempdir().expect("blob dir");
    let stored = store_clips(blobs.path(), clips);
    let store =
        voxpool_runtime::blob::BlobStore::open(Some(&format!("file://{}", blobs.path().display())))
            .expect("blob store");
    let references = Arc::new(ReferenceClips::new(
        store.folder("references"),
        store.location(),
        DEFAULT_CACHE_BYTES,
    ));
    let toml = edit(pool(servers, &blobs.path().join("server-clips")));
    let stack = Stack::start_with(
        &toml,
        builtin(&AdapterOptions::default()),
        Opts {
            references: Some(references),
            ..Opts::default()
        },
    )
    .await;
    Rig {
        stack,
        _blobs: blobs,
        clips: stored,
    }
}

async fn server(profile: ServerProfile) -> FakeVendor {
    FakeVendor::start(FakeConfig::new(VendorKind::SelfHosted(profile)).cap(2))
        .await
        .expect("fake server")
}

fn speak(
    voice: &Snapshot,
    format: pb::AudioFormat,
    emotion: &str,
    seed: Option<u64>,
) -> pb::SynthesizeRequest {
    pb::SynthesizeRequest {
        format: format as i32,
        emotion: emotion.into(),
        seed,
        ..request(voice, "Hello from a voice of my own.")
    }
}

#[tokio::test]
async fn every_profile_receives_the_clip_the_way_its_server_takes_it() {
    for profile in ServerProfile::ALL {
        let fake = server(profile).await;
        let rig = rig(&[(&fake, profile)], &[(4_000, "", 1)]).await;
        let v = voice(rig.clips.clone());
        for format in [pb::AudioFormat::Wav, pb::AudioFormat::Pcm] {
            let done = rig
                .stack
                .synthesize(speak(&v, format, "", Some(1)))
                .await
                .unwrap_or_else(|e| panic!("{} {format:?}: {e:?}", profile.as_str()));
            assert_eq!(
                done.reference_digest,
                rig.clips[0].digest,
                "{}",
                profile.as_str()
            );
            assert!(!done.audio.is_empty());
            if format == pb::AudioFormat::Wav {
                assert_eq!(&done.audio[..4], b"RIFF", "{}", profile.as_str());
                assert!(done.sample_rate_hz > 0);
            } else {
                assert_ne!(
                    &done.audio[..4],
                    b"RIFF",
                    "{}: PCM has no header",
                    profile.as_str()
                );
            }
        }
        assert_eq!(
            fake.reference_digests(),
            vec![rig.clips[0].digest.clone(); 2],
            "{}: the server got the frozen clip itself",
            profile.as_str()
        );
    }
}

#[tokio::test]
async fn the_same_seed_speaks_the_same_clip_and_an_emotion_picks_by_tag() {
    let fake = server(ServerProfile::VllmOmni).await;
    let rig = rig(
        &[(&fake, ServerProfile::VllmOmni)],
        &[(2_000, "calm", 1), (2_500, "angry", 1), (3_000, "", 1)],
    )
    .await;
    let v = voice(rig.clips.clone());
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..12 {
        let a = rig
            .stack
            .synthesize(speak(&v, pb::AudioFormat::Wav, "", Some(seed)))
            .await
            .expect("a");
        let b = rig
            .stack
            .synthesize(speak(&v, pb::AudioFormat::Wav, "", Some(seed)))
            .await
            .expect("b");
        assert_eq!(a.reference_digest, b.reference_digest, "seed {seed}");
        seen.insert(a.reference_digest);
    }
    assert!(
        seen.len() >= 2,
        "a dozen seeds pick more than one clip: {seen:?}"
    );
    let angry = rig
        .stack
        .synthesize(speak(&v, pb::AudioFormat::Wav, "angry", None))
        .await
        .expect("angry");
    assert_eq!(angry.reference_digest, rig.clips[1].digest);
    assert_eq!(fake.reference_digests().last(), Some(&rig.clips[1].digest));

    let sad = rig
        .stack
        .synthesize(speak(&v, pb::AudioFormat::Wav, "sad", None))
        .await
        .expect_err("no clip is tagged sad");
    assert_eq!(sad.code(), Code::InvalidArgument);
    let field = sad
        .get_error_details()
        .bad_request()
        .map(|b| b.field_violations[0].field.clone());
    assert_eq!(field.as_deref(), Some("emotion"));
    assert!(sad.message().contains("angry, calm"), "{}", sad.message());
}

#[tokio::test]
async fn a_failing_server_is_probed_not_sent_work_and_taken_back_once_healthy() {
    let fake = server(ServerProfile::VllmOmni).await;
    let rig = rig(&[(&fake, ServerProfile::VllmOmni)], &[(2_000, "", 1)]).await;
    let v = voice(rig.clips.clone());
    fake.set_down(true);
    let first = rig
        .stack
        .synthesize(speak(&v, pb::AudioFormat::Wav, "", Some(1)))
        .await;
    assert!(first.is_err(), "the only server is down");
    assert_eq!(fake.key_stats("server").total_requests, 1);
    // Half-open: later calls ask the health route first and send nothing while it fails; the
    // failures count, so the key cools (three in a row, the default threshold).
    for _ in 0..3 {
        let _ = rig
            .stack
            .synthesize(speak(&v, pb::AudioFormat::Wav, "", Some(1)))
            .await;
    }
    assert_eq!(
        fake.key_stats("server").total_requests,
        1,
        "no synthesis is sent to a server whose health check fails"
    );
    let key = rig.stack.key(POOL, "gpu0/server").await;
    assert_eq!(key.state, KeyState::Cooling as i32, "{key:?}");

    fake.set_down(false);
    // Back once its cooldown ends (about a second at the default backoff).
    let mut back = None;
    for _ in 0..100 {
        match rig
            .stack
            .synthesize(speak(&v, pb::AudioFormat::Wav, "", Some(1)))
            .await
        {
            Ok(done) => {
                back = Some(done);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let back = back.expect("the server takes work again once healthy");
    assert_eq!(back.reference_digest, rig.clips[0].digest);
    assert_eq!(
        fake.key_stats("server").total_requests,
        2,
        "one more call, the one that worked"
    );
}

#[tokio::test]
async fn a_clip_outside_the_profiles_window_is_the_requests_fault_and_never_cools_the_server() {
    let fake = server(ServerProfile::GptSovits).await;
    // GPT-SoVITS takes clips of 3..10 s only.
    let rig = rig(&[(&fake, ServerProfile::GptSovits)], &[(2_000, "", 1)]).await;
    let v = voice(rig.clips.clone());
    for _ in 0..4 {
        let e = rig
            .stack
            .synthesize(speak(&v, pb::AudioFormat::Wav, "", Some(1)))
            .await
            .expect_err("too short for GPT-SoVITS");
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains("3..10 s"), "{}", e.message());
    }
    assert_eq!(
        fake.key_stats("server").total_requests,
        0,
        "refused before the server saw it"
    );
    let key = rig.stack.key(POOL, "gpu0/server").await;
    assert_eq!(key.state, KeyState::Available as i32);
    assert_eq!(key.consecutive_failures, 0);
}

#[tokio::test]
async fn a_clip_the_blob_store_lacks_or_a_voice_with_clips_on_another_provider_is_refused() {
    let fake = server(ServerProfile::VllmOmni).await;
    let rig = rig(&[(&fake, ServerProfile::VllmOmni)], &[(2_000, "", 1)]).await;
    let mut missing = rig.clips[0].clone();
    missing.digest = clip_digest(b"a clip nobody stored");
    let e = rig
        .stack
        .synthesize(speak(&voice(vec![missing]), pb::AudioFormat::Wav, "", None))
        .await
        .expect_err("not in the store");
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert_eq!(
        e.get_error_details()
            .error_info()
            .map(|i| i.reason.clone())
            .as_deref(),
        Some("REFERENCE_MISSING")
    );
    let e = rig
        .stack
        .synthesize(speak(
            &voice(rig.clips.clone()),
            pb::AudioFormat::Mp3,
            "",
            None,
        ))
        .await
        .expect_err("servers are asked for WAV");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(fake.key_stats("server").total_requests, 0);
}

#[tokio::test]
async fn calls_slower_than_the_latency_limit_lower_an_adaptive_servers_capacity() {
    let fake = FakeVendor::start(
        FakeConfig::new(VendorKind::SelfHosted(ServerProfile::VllmOmni))
            .cap(4)
            .latency(voxpool_fake_vendors::Latency::Fixed(Duration::from_millis(
                150,
            ))),
    )
    .await
    .expect("fake server");
    let rig = rig_with(
        &[(&fake, ServerProfile::VllmOmni)],
        &[(2_000, "", 1)],
        |t| {
            t.replace("model = \"m\"\n", "model = \"m\"\nadaptive = true\n")
                .replace(
                    "[[pools.upstreams.keys]]",
                    "latency_limit_ms = 50\n[[pools.upstreams.keys]]",
                )
                .replace("capacity = 2", "capacity = 4")
        },
    )
    .await;
    let v = voice(rig.clips.clone());
    let before = rig.stack.key(POOL, "gpu0/server").await;
    assert_eq!(before.effective_capacity, 4);
    let done = rig
        .stack
        .synthesize(speak(&v, pb::AudioFormat::Wav, "", Some(1)))
        .await
        .expect("the slow call's audio is delivered");
    assert_eq!(done.reference_digest, rig.clips[0].digest);
    let after = rig.stack.key(POOL, "gpu0/server").await;
    assert!(
        after.effective_capacity < 4,
        "a call queued past latency_limit_ms is a concurrency signal: {after:?}"
    );
    assert_eq!(
        after.state,
        KeyState::Available as i32,
        "a signal, not a cooldown"
    );
}
