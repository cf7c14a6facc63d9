//! Streaming from self-hosted zero-shot servers, end to end inside one process (a real
//! scheduler, synthesis with the built-in adapters, clips in a local blob store, fake servers
//! speaking each profile's wire): a profile that can stream is asked to and its first audio
//! reaches the caller while the server is still generating, lease held; one that cannot, or
//! an upstream with `stream = false`, is asked for a whole WAV and its pool gets a short first
//! chunk; a server that fails before its first byte fails over.

mod common;

use std::{sync::Arc, time::Duration};

use common::{Opts, Stack, request};
use futures::StreamExt;
use voxpool_domain::{
    reference::{Reference, clip_digest},
    snapshot::Snapshot,
};
use voxpool_fake_vendors::{
    FakeConfig, FakeVendor, Fault, ServerProfile, Step, Streaming, VendorKind, audio::tone_wav,
};
use voxpool_proto::{scheduler::v1 as spb, synthesis::v1 as pb};
use voxpool_synthesis::{
    adapters::registry::{AdapterOptions, builtin},
    references::{DEFAULT_CACHE_BYTES, ReferenceClips},
};

const POOL: &str = "gpu";

/// The profiles whose servers can stream (docs/VENDORS.md, "selfhosted").
const STREAMING: [ServerProfile; 3] = [
    ServerProfile::VllmOmni,
    ServerProfile::FishSpeech,
    ServerProfile::GptSovits,
];

/// A rig: the stack, the blob store behind it and the voice (one 4 s clip).
struct Rig {
    stack: Stack,
    voice: Snapshot,
    _blobs: tempfile::TempDir,
}

/// Pool `gpu` with one upstream per fake (`gpu0..`, each one key `server` of capacity 2);
/// `extra` goes into every upstream's `params`.
async fn rig(servers: &[(&FakeVendor, ServerProfile)], extra: &str) -> Rig {
    let blobs = tempfile::tempdir().expect("blob dir");
    let folder = blobs.path().join("references");
    std::fs::create_dir_all(&folder).expect("references dir");
    let bytes = tone_wav(16_000, 4_000).expect("clip");
    let digest = clip_digest(&bytes);
    std::fs::write(folder.join(digest.trim_start_matches("sha256:")), &bytes).expect("clip");
    let mut voice = common::snapshot("selfhosted", POOL, "alice", "{}");
    voice.locales = vec!["en-US".into()];
    voice.references = vec![Reference {
        digest,
        transcript: "A clip of four seconds.".into(),
        language: "en-US".into(),
        emotion: String::new(),
        weight: 1,
        duration_ms: 4_000,
    }];
    let voice = voice.seal();
    let mut toml =
        format!("[[pools]]\nid = \"{POOL}\"\nprovider = \"selfhosted\"\nmodel = \"m\"\n");
    for (i, (fake, profile)) in servers.iter().enumerate() {
        toml.push_str(&format!(
            "[[pools.upstreams]]\nid = \"gpu{i}\"\nbase_url = \"{}\"\n\
             params = {{ profile = \"{}\", clip_dir = \"{}\"{extra} }}\n\
             [[pools.upstreams.keys]]\nid = \"server\"\ncapacity = 2\n",
            fake.base_url(),
            profile.as_str(),
            blobs.path().join("server-clips").display()
        ));
    }
    let store =
        voxpool_runtime::blob::BlobStore::open(Some(&format!("file://{}", blobs.path().display())))
            .expect("blob store");
    let references = Arc::new(ReferenceClips::new(
        store.folder("references"),
        store.location(),
        DEFAULT_CACHE_BYTES,
    ));
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
        voice,
        _blobs: blobs,
    }
}

async fn server(profile: ServerProfile, streaming: Option<Streaming>) -> FakeVendor {
    let mut config = FakeConfig::new(VendorKind::SelfHosted(profile)).cap(2);
    if let Some(s) = streaming {
        config = config.streaming(s);
    }
    FakeVendor::start(config).await.expect("fake server")
}

fn speak(voice: &Snapshot, format: pb::AudioFormat, text: &str) -> pb::SynthesizeRequest {
    pb::SynthesizeRequest {
        format: format as i32,
        ..request(voice, text)
    }
}

/// The JSON bodies the fake received, in order.
fn bodies(fake: &FakeVendor) -> Vec<serde_json::Value> {
    fake.requests()
        .iter()
        .map(|r| serde_json::from_str(&r.body).expect("a JSON body"))
        .collect()
}

/// Whether a recorded body asked its server to stream, in that server's own field.
fn asked_to_stream(profile: ServerProfile, body: &serde_json::Value) -> bool {
    match profile {
        ServerProfile::VllmOmni => {
            body["stream"] == serde_json::json!(true) && body["stream_format"] == "audio"
        }
        ServerProfile::FishSpeech => body["streaming"] == serde_json::json!(true),
        ServerProfile::GptSovits => body["streaming_mode"] == serde_json::json!(true),
        _ => false,
    }
}

#[tokio::test]
async fn each_streaming_profile_delivers_its_first_audio_while_the_server_still_generates() {
    for profile in STREAMING {
        let name = profile.as_str();
        let pacing = Streaming::new(Duration::from_millis(100), Duration::from_millis(1_500), 8);
        let fake = server(profile, Some(pacing)).await;
        let rig = rig(&[(&fake, profile)], "").await;
        for format in [pb::AudioFormat::Pcm, pb::AudioFormat::Wav] {
            // An exact WAV waits for its sizes; a streaming header lets WAV out as it comes.
            let ask = pb::SynthesizeRequest {
                wav_streaming_header: format == pb::AudioFormat::Wav,
                ..speak(&rig.voice, format, "Hello from a voice of my own.")
            };
            let mut stream = rig
                .stack
                .synthesis
                .clone()
                .synthesize_stream(ask.clone())
                .await
                .unwrap_or_else(|e| panic!("{name}: {e:?}"))
                .into_inner();
            let first = stream.next().await.expect("a message").expect("audio");
            assert!(!first.audio.is_empty(), "{name}");
            assert_eq!(
                fake.key_stats("server").in_flight,
                1,
                "{name} {format:?}: the server is still generating when the caller has audio"
            );
            assert_eq!(
                rig.stack.in_flight(POOL).await,
                1,
                "{name} {format:?}: and the lease is held until the server's end"
            );
            let mut streamed = first.audio;
            while let Some(msg) = stream.next().await {
                streamed.extend(msg.expect("message").audio);
            }
            if format == pb::AudioFormat::Wav {
                assert_eq!(&streamed[..4], b"RIFF", "{name}");
            }
            fake.set_streaming(None);
            let whole = rig.stack.synthesize(ask).await.expect("unary").audio;
            assert_eq!(
                streamed, whole,
                "{name} {format:?}: the same audio as unary"
            );
            fake.set_streaming(Some(pacing));
            rig.stack.wait_until_idle(POOL).await;
        }
        let asked = bodies(&fake);
        assert!(
            asked.iter().all(|b| asked_to_stream(profile, b)),
            "{name}: every call asked the server to stream: {asked:?}"
        );
    }
}

#[tokio::test]
async fn an_upstream_with_stream_false_or_a_voice_with_a_speed_on_vllm_omni_asks_for_a_whole_wav() {
    for profile in STREAMING {
        let fake = server(profile, None).await;
        let rig = rig(&[(&fake, profile)], ", stream = false").await;
        rig.stack
            .synthesize(speak(&rig.voice, pb::AudioFormat::Pcm, "Hello there."))
            .await
            .unwrap_or_else(|e| panic!("{}: {e:?}", profile.as_str()));
        let asked = bodies(&fake);
        assert!(
            !asked_to_stream(profile, &asked[0]),
            "{}: {asked:?}",
            profile.as_str()
        );
    }
    let fake = server(ServerProfile::VllmOmni, None).await;
    let rig = rig(&[(&fake, ServerProfile::VllmOmni)], "").await;
    let mut voice = rig.voice.clone();
    voice.params.rate = Some(1.25);
    let voice = voice.seal();
    rig.stack
        .synthesize(speak(&voice, pb::AudioFormat::Pcm, "Hello there."))
        .await
        .expect("a voice with a speed");
    let asked = bodies(&fake);
    assert!(!asked_to_stream(ServerProfile::VllmOmni, &asked[0]));
    assert_eq!(asked[0]["speed"], serde_json::json!(1.25), "{asked:?}");
}

#[tokio::test]
async fn a_pool_that_answers_whole_gets_a_short_first_chunk_and_a_streaming_pool_does_not() {
    let text = "Hi there. This second sentence is longer than the first one. A third ends it.";
    let whole = server(ServerProfile::IndexTtsVllm, None).await;
    let rig_whole = rig(&[(&whole, ServerProfile::IndexTtsVllm)], "").await;
    rig_whole
        .stack
        .synthesize(speak(&rig_whole.voice, pb::AudioFormat::Pcm, text))
        .await
        .expect("index-tts-vllm");
    let mut texts: Vec<String> = bodies(&whole)
        .iter()
        .map(|b| b["text"].as_str().expect("text").to_owned())
        .collect();
    assert!(
        texts.contains(&"Hi there. ".to_owned()),
        "the first chunk is the first sentence: {texts:?}"
    );
    texts.sort();
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert_eq!(texts.concat().len(), text.len());

    let batch = pb::SynthesizeRequest {
        priority: spb::Priority::Batch as i32,
        ..speak(&rig_whole.voice, pb::AudioFormat::Pcm, text)
    };
    rig_whole.stack.synthesize(batch).await.expect("batch");
    let last = bodies(&whole).pop().expect("a batch call");
    assert_eq!(last["text"], text, "a BATCH request keeps the usual split");

    let streaming = server(ServerProfile::FishSpeech, None).await;
    let rig_streaming = rig(&[(&streaming, ServerProfile::FishSpeech)], "").await;
    rig_streaming
        .stack
        .synthesize(speak(&rig_streaming.voice, pb::AudioFormat::Pcm, text))
        .await
        .expect("fish-speech");
    let asked = bodies(&streaming);
    assert_eq!(asked.len(), 1, "a streaming pool sends the text whole");
    assert_eq!(asked[0]["text"], text);
}

#[tokio::test]
async fn a_streaming_server_failing_before_its_first_byte_fails_over_to_another() {
    let pacing = Streaming::new(Duration::from_millis(50), Duration::from_millis(200), 4);
    let fake = server(ServerProfile::FishSpeech, Some(pacing)).await;
    // Two upstreams on one fake: whichever is called first gets the scripted 500.
    fake.script([Step::Fail(Fault::ServerError)]);
    let profile = ServerProfile::FishSpeech;
    let rig = rig(&[(&fake, profile), (&fake, profile)], "").await;
    let mut stream = rig
        .stack
        .synthesis
        .clone()
        .synthesize_stream(speak(&rig.voice, pb::AudioFormat::Pcm, "Hello there."))
        .await
        .expect("stream")
        .into_inner();
    let mut audio = Vec::new();
    while let Some(msg) = stream.next().await {
        audio.extend(msg.expect("no error reaches the caller").audio);
    }
    assert!(!audio.is_empty());
    assert_eq!(
        fake.requests().len(),
        2,
        "the failed call was retried on the other server before any byte went out"
    );
    assert_eq!(fake.key_stats("server").faults_injected, 1);
    rig.stack.wait_until_idle(POOL).await;
}
