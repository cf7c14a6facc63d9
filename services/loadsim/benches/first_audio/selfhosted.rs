//! The self-hosted part of the first-audio benchmark (module doc of `first_audio.rs`, parts 3
//! and 4): fake zero-shot servers, each a pool of one server key; reference clips in a local
//! blob store; a stand-in catalog (FreezeSnapshot only) so the HTTP front can name the voices
//! by pack id; one synthesis server with the HTTP front, on the bench's scheduler.

use std::{
    net::SocketAddr,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use futures::StreamExt;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, codegen::Bytes};
use voxpool_config::Config;
use voxpool_domain::{
    audio::clip::ClipFormat,
    reference::{Reference, clip_digest},
    snapshot::Snapshot,
};
use voxpool_fake_vendors::{FakeConfig, FakeVendor, Latency, ServerProfile, Streaming, VendorKind};
use voxpool_proto::{
    catalog::v1::{self as cpb, voice_catalog_server::VoiceCatalog},
    scheduler::v1 as spb,
    synthesis::v1::{self as pb, synthesis_client::SynthesisClient},
};
use voxpool_synthesis::{
    adapters::{
        AudioFormat, AudioSink, KeyCredential, ReferenceAudio, UpstreamTarget, Utterance,
        VendorAdapter, VendorRequest, http::shared_client, selfhosted::SelfHosted,
    },
    references::{DEFAULT_CACHE_BYTES, ReferenceClips},
    server::{HttpListener, Options},
};

/// The profiles whose servers stream.
pub const STREAMING: [ServerProfile; 3] = [
    ServerProfile::VllmOmni,
    ServerProfile::FishSpeech,
    ServerProfile::GptSovits,
];
/// A streaming fake's first bytes, and the time over which the rest follows.
pub const FIRST_BYTE: Duration = Duration::from_millis(200);
pub const STREAM_REST: Duration = Duration::from_millis(300);
/// The non-streaming fake (index-tts-vllm): a fixed start plus this per character.
pub const WHOLE_START: Duration = Duration::from_millis(50);
pub const PER_CHAR: Duration = Duration::from_millis(4);
/// The short-first-chunk text: a short first sentence, then about 230 characters.
pub const FIRST_SENTENCE: &str = "Hello there. ";
pub const REST: &str = "I have been waiting for you all evening, and the tea has gone cold twice. \
    Sit down and tell me everything about the journey, from the first station to the last one. \
    Then we can decide what to do about the letter that came this morning.";

pub fn pool_id(profile: ServerProfile) -> String {
    format!("sh-{}", profile.as_str())
}

/// The fakes: one streaming server per [`STREAMING`] profile and one index-tts-vllm server
/// that answers whole, its time growing with its text.
pub async fn fakes() -> Vec<(ServerProfile, FakeVendor)> {
    let mut out = Vec::new();
    for profile in STREAMING {
        let config = FakeConfig::new(VendorKind::SelfHosted(profile))
            .cap(0)
            .streaming(Streaming::new(FIRST_BYTE, STREAM_REST, 8));
        out.push((
            profile,
            FakeVendor::start(config).await.expect("fake server"),
        ));
    }
    let whole = FakeConfig::new(VendorKind::SelfHosted(ServerProfile::IndexTtsVllm))
        .cap(0)
        .latency(Latency::Fixed(WHOLE_START))
        .per_char(PER_CHAR);
    out.push((
        ServerProfile::IndexTtsVllm,
        FakeVendor::start(whole).await.expect("fake server"),
    ));
    out
}

/// The `[[pools]]` of the fakes (one upstream and key each), clips placed under `dir`.
pub fn pools_toml(fakes: &[(ServerProfile, FakeVendor)], dir: &Path) -> String {
    let clip_dir = dir.join("server-clips");
    fakes
        .iter()
        .map(|(profile, fake)| {
            format!(
                "[[pools]]\nid = \"{}\"\nprovider = \"selfhosted\"\nmodel = \"m\"\n\
                 [[pools.upstreams]]\nid = \"{}\"\nbase_url = \"{}\"\n\
                 params = {{ profile = \"{}\", clip_dir = \"{}\" }}\n\
                 [[pools.upstreams.keys]]\nid = \"server\"\ncapacity = 64\n",
                pool_id(*profile),
                profile.as_str(),
                fake.base_url(),
                profile.as_str(),
                clip_dir.display()
            )
        })
        .collect()
}

/// A 4 s clip stored under `dir/references/` (as AddReference does), with its bytes.
pub fn clip(dir: &Path) -> (Reference, Vec<u8>) {
    let folder = dir.join("references");
    std::fs::create_dir_all(&folder).expect("references dir");
    let bytes = voxpool_fake_vendors::audio::tone_wav(16_000, 4_000).expect("clip");
    let digest = clip_digest(&bytes);
    std::fs::write(folder.join(digest.trim_start_matches("sha256:")), &bytes).expect("clip");
    let reference = Reference {
        digest,
        transcript: "A clip of four seconds.".into(),
        language: "en-US".into(),
        emotion: String::new(),
        weight: 1,
        duration_ms: 4_000,
    };
    (reference, bytes)
}

/// The voice of `profile`'s pool, speaking from `reference`.
pub fn voice(profile: ServerProfile, reference: &Reference) -> Snapshot {
    let mut voice = voxpool_fake_vendors::snapshot("selfhosted", "m", "alice");
    voice.tts_model_id = pool_id(profile);
    voice.pack_id = format!("vp_{}", profile.as_str().replace('-', "_"));
    voice.references = vec![reference.clone()];
    voice.seal()
}

/// FreezeSnapshot of the bench's voices by pack id; nothing else.
struct StandIn(Vec<Snapshot>);

#[tonic::async_trait]
impl VoiceCatalog for StandIn {
    async fn list_voice_packs(
        &self,
        _: Request<cpb::ListVoicePacksRequest>,
    ) -> Result<Response<cpb::ListVoicePacksResponse>, Status> {
        Err(Status::unimplemented("not in this stand-in"))
    }
    async fn get_voice_pack(
        &self,
        _: Request<cpb::GetVoicePackRequest>,
    ) -> Result<Response<cpb::VoicePack>, Status> {
        Err(Status::unimplemented("not in this stand-in"))
    }
    async fn bind_voice_pack(
        &self,
        _: Request<cpb::BindVoicePackRequest>,
    ) -> Result<Response<cpb::BindVoicePackResponse>, Status> {
        Err(Status::unimplemented("not in this stand-in"))
    }
    async fn freeze_snapshot(
        &self,
        r: Request<cpb::FreezeSnapshotRequest>,
    ) -> Result<Response<cpb::VoicePackSnapshot>, Status> {
        self.0
            .iter()
            .find(|v| v.pack_id == r.get_ref().pack_id)
            .map(|v| Response::new(v.to_pb()))
            .ok_or_else(|| Status::not_found("no such pack"))
    }
}

/// One synthesis server with the HTTP front (anonymous callers), clips from `dir`'s blob
/// store, packs from a stand-in catalog of `voices`. Returns (gRPC, HTTP) addresses.
pub async fn synthesis(
    config: &Config,
    scheduler: SocketAddr,
    dir: &Path,
    voices: Vec<Snapshot>,
    shutdown: &CancellationToken,
) -> (SocketAddr, SocketAddr) {
    let catalog = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind catalog");
    let catalog_addr = catalog.local_addr().expect("catalog addr");
    let incoming = tonic::transport::server::TcpIncoming::from(catalog);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(cpb::voice_catalog_server::VoiceCatalogServer::new(StandIn(
                voices,
            )))
            .serve_with_incoming(incoming),
    );
    let store = voxpool_runtime::blob::BlobStore::open(Some(&format!("file://{}", dir.display())))
        .expect("blob store");
    let references = Arc::new(ReferenceClips::new(
        store.folder("references"),
        store.location(),
        DEFAULT_CACHE_BYTES,
    ));
    let options = Options {
        scheduler_url: format!("http://{scheduler}"),
        catalog_url: format!("http://{catalog_addr}"),
        lease_ttl: voxpool_synthesis::server::DEFAULT_LEASE_TTL,
        client_token: voxpool_runtime::auth::ClientToken::none(),
        cache: None,
        references: Some(references),
        admin: voxpool_runtime::auth::AdminAuth::disabled(),
        usage_store: None,
    };
    let core = voxpool_synthesis::server::build(
        config,
        voxpool_synthesis::adapters::registry::builtin(&Default::default()),
        &options,
    )
    .expect("synthesis core");
    let grpc = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let http = TcpListener::bind("127.0.0.1:0").await.expect("bind http");
    let addrs = (
        grpc.local_addr().expect("addr"),
        http.local_addr().expect("http addr"),
    );
    let http = HttpListener {
        listener: http,
        keys: voxpool_synthesis::front::auth::ApiKeys::load(&[], true).expect("anonymous"),
    };
    let s = shutdown.clone();
    tokio::spawn(async move {
        voxpool_synthesis::server::serve_with_http(grpc, Some(http), core, &Default::default(), s)
            .await
    });
    addrs
}

/// One direct call: the selfhosted adapter to `fake`, the time to its first byte in the sink.
pub async fn direct(
    profile: ServerProfile,
    fake: &FakeVendor,
    voice: &Arc<Snapshot>,
    clip: &(Reference, Vec<u8>),
    dir: &Path,
) -> Duration {
    let adapter = SelfHosted::new(shared_client().expect("http client"));
    let key = KeyCredential {
        key_id: "direct/server".into(),
        app_id: "server".into(),
        secret: None,
    };
    let mut upstream = UpstreamTarget {
        id: "direct".into(),
        base_url: Some(fake.base_url()),
        ..Default::default()
    };
    upstream
        .params
        .insert("profile".into(), profile.as_str().into());
    upstream.params.insert(
        "clip_dir".into(),
        dir.join("server-clips").display().to_string().into(),
    );
    let reference = ReferenceAudio {
        reference: clip.0.clone(),
        bytes: Bytes::from(clip.1.clone()),
        format: ClipFormat::sniff(&clip.1).expect("a WAV clip"),
    };
    let utterance = Utterance {
        text: "Hello there, this is a live character speaking.".to_owned(),
        voice: voice.clone(),
        pool_model: "m".to_owned(),
        format: AudioFormat::Pcm,
        sample_rate_hz: None,
        reference: Some(Arc::new(reference)),
        seed: None,
    };
    let (sink, mut rx) = AudioSink::new();
    let t = Instant::now();
    let call = tokio::spawn(async move {
        adapter
            .stream(
                VendorRequest {
                    utterance: &utterance,
                    key: &key,
                    upstream: &upstream,
                    timeout: Duration::from_secs(10),
                    attempt_id: "bench",
                    gate: Default::default(),
                },
                &sink,
            )
            .await
    });
    rx.recv().await.expect("first audio");
    let first = t.elapsed();
    call.await.expect("task").expect("direct call");
    first
}

/// The first `SynthesizeStream` message of `text` in `voice`, read to the end.
pub async fn grpc(
    client: &SynthesisClient<tonic::transport::Channel>,
    voice: &Snapshot,
    text: &str,
    priority: spb::Priority,
) -> Duration {
    let request = pb::SynthesizeRequest {
        voice: Some(pb::synthesize_request::Voice::Snapshot(voice.to_pb())),
        text: text.into(),
        format: pb::AudioFormat::Pcm as i32,
        priority: priority as i32,
        ..Default::default()
    };
    let t = Instant::now();
    let mut stream = client
        .clone()
        .synthesize_stream(request)
        .await
        .expect("stream")
        .into_inner();
    stream.next().await.expect("a message").expect("audio");
    let first = t.elapsed();
    while let Some(m) = stream.next().await {
        m.expect("message");
    }
    first
}

/// The first body bytes of `POST /v1/audio/speech` for `voice`'s pack, read to the end.
pub async fn http(client: &reqwest::Client, addr: SocketAddr, voice: &Snapshot) -> Duration {
    let body = serde_json::json!({
        "model": "tts-1",
        "voice": voice.pack_id,
        "input": "Hello there, this is a live character speaking.",
        "response_format": "pcm",
    });
    let t = Instant::now();
    let mut answer = client
        .post(format!("http://{addr}/v1/audio/speech"))
        .bearer_auth("anonymous")
        .json(&body)
        .send()
        .await
        .expect("speech");
    assert!(answer.status().is_success(), "{}", answer.status());
    answer.chunk().await.expect("body").expect("first bytes");
    let first = t.elapsed();
    while answer.chunk().await.expect("body").is_some() {}
    first
}
