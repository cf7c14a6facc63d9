//! Instruction counts of synthesis's request path (`make bench`; gungraun over valgrind's
//! callgrind, so the figure is the same on a busy machine as on an idle one). Each benchmark
//! runs one request, steady state: its setup (not counted) starts the stack in this process,
//! sends the same request once to warm connections and lazy initializations, and hands it all
//! to the measured function, which returns it so that tearing it down is not counted either.
//!
//! The stack, on one current-thread Tokio runtime: a scheduler (memory store) and a stand-in
//! catalog over gRPC on 127.0.0.1:0, and synthesis's `Core` with one in-process adapter that
//! answers at once (200 ms of 24 kHz WAV), so every instruction counted is voxpool's or its
//! libraries', none a vendor's.
//!
//! - `synthesize::zero_latency`: one `Synthesize` (snapshot voice, WAV) through the gRPC handler,
//!   decoded from and encoded to protobuf bytes: prepare, Acquire, the vendor call, Report and
//!   release (the scheduler's side of both calls included: it runs on the same thread);
//! - `synthesize::cache_hit`: the same request answered from the audio cache (a local blob store
//!   filled in the setup). Reading the blob runs on Tokio's blocking threads, which callgrind
//!   does not count here: the figure is the request's own work around it;
//! - `http_speech::zero_latency`: `POST /v1/audio/speech` (a pack id, WAV) through the HTTP
//!   front's router: the body parsed, the pack frozen by the catalog, the same job, the answer
//!   streamed and collected.
//!
//! The binary's allocator (mimalloc) and log subscriber (`info`) are installed. The committed
//! counts and the check against them: docs/BENCHMARKS.md ("Instruction counts").

#![allow(missing_docs, reason = "gungraun's macros generate undocumented items")]

/// The allocator the `voxpool-synthesis` binary uses (see its `main.rs`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::{hint::black_box, io::Cursor, sync::Arc, time::Duration};

use async_trait::async_trait;
use axum::body::Body;
use bytes::Bytes;
use gungraun::{LibraryBenchmarkConfig, library_benchmark, library_benchmark_group, main};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use tower::ServiceExt;
use voxpool_config::Config;
use voxpool_domain::snapshot::Snapshot;
use voxpool_proto::prost::Message;
use voxpool_proto::{
    catalog::v1::{self as cpb, voice_catalog_server::VoiceCatalog},
    synthesis::v1::{self as pb, synthesis_server::Synthesis},
};
use voxpool_runtime::{auth::AdminAuth, blob::BlobStore, limits::ServerFlags};
use voxpool_synthesis::{
    adapters::{
        AudioFormat, AudioSink, ParamError, StreamEnd, TextLimit, VendorAdapter, VendorFailure,
        VendorRequest, registry::Registry,
    },
    cache::Cache,
    front::{Front, auth::ApiKeys},
    server::{self, Options},
    service::{DEFAULT_MAX_MESSAGE_BYTES, SynthesisService},
};

const RATE: u32 = 24_000;

/// An adapter that answers every call at once with the same audio.
struct ZeroLatency {
    audio: Bytes,
}

impl ZeroLatency {
    /// 200 ms of silence as 24 kHz 16-bit mono WAV.
    fn new() -> Self {
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: RATE,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut out = Cursor::new(Vec::new());
        let mut writer = hound::WavWriter::new(&mut out, spec).expect("wav writer");
        for _ in 0..RATE / 5 {
            writer.write_sample(0i16).expect("sample");
        }
        writer.finalize().expect("wav");
        Self {
            audio: Bytes::from(out.into_inner()),
        }
    }
}

#[async_trait]
impl VendorAdapter for ZeroLatency {
    fn provider(&self) -> voxpool_domain::provider::Provider {
        voxpool_domain::provider::Provider::OpenAi
    }

    fn text_limit(&self) -> TextLimit {
        TextLimit::Chars(4096)
    }

    fn check(&self, _: &Snapshot, _: AudioFormat, _: Option<u32>) -> Result<(), ParamError> {
        Ok(())
    }

    fn default_sample_rate_hz(&self, _: AudioFormat) -> Option<u32> {
        Some(RATE)
    }

    async fn stream(
        &self,
        _: VendorRequest<'_>,
        sink: &AudioSink,
    ) -> Result<StreamEnd, VendorFailure> {
        sink.write(self.audio.clone());
        Ok(StreamEnd {
            sample_rate_hz: Some(RATE),
        })
    }
}

/// The voice every request speaks with.
fn voice() -> Snapshot {
    voxpool_fake_vendors::snapshot("openai", "tts-1", "alloy")
}

/// A catalog that freezes one pack, `vp_bench`, to [`voice`].
struct OnePackCatalog;

#[tonic::async_trait]
impl VoiceCatalog for OnePackCatalog {
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
        match r.get_ref().pack_id.as_str() {
            "vp_bench" => Ok(Response::new(voice().to_pb())),
            other => Err(Status::not_found(format!("no voice pack {other:?}"))),
        }
    }
}

/// What a benchmark runs on; returned by it so its drop is not counted.
struct Stack {
    rt: tokio::runtime::Runtime,
    /// The `Synthesize` request as it arrives on the wire.
    request: Vec<u8>,
    service: SynthesisService,
    front: axum::Router,
    _dir: tempfile::TempDir,
}

/// Binds 127.0.0.1:0.
async fn listener() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    (listener, format!("http://{addr}"))
}

/// The stack (module doc), with the audio cache when `cache`, warmed by one request of each
/// kind.
fn stack(cache: bool) -> Stack {
    voxpool_runtime::telemetry::init_logging();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let credential = dir.path().join("key");
    std::fs::write(&credential, "k0\n").expect("credential file");
    // valgrind runs this process about 50 times slower: the scheduler's first health answer
    // may come later than the default grace. Its health probes (every 500 ms by default) would
    // land inside some measured calls and not others (2 runs in 12: +6 % and +16 %): probed
    // once at start-up, then not again for as long as a run lasts.
    let config = Config::from_toml_str(&format!(
        "[[pools]]\nid = \"openai-fake\"\nprovider = \"openai\"\nmodel = \"tts-1\"\n\
         [[pools.upstreams]]\nid = \"u\"\nbase_url = \"http://127.0.0.1:1\"\n\
         [[pools.upstreams.keys]]\nid = \"k0\"\ncapacity = 100\ncredential = {{ file = \"{}\" }}\n\
         [scheduler]\nrecovery_window_ms = 0\n\
         [synthesis]\nscheduler_unavailable_grace_ms = 600000\n\
         scheduler_probe_interval_ms = 300000\n",
        credential.display()
    ))
    .expect("config");
    let shutdown = CancellationToken::new();
    let (service, front) = rt.block_on(async {
        let store = voxpool_scheduler::server::open_store("memory", &config)
            .await
            .expect("store");
        let (scheduler, scheduler_url) = listener().await;
        let (c, s) = (config.clone(), shutdown.clone());
        tokio::spawn(async move {
            voxpool_scheduler::server::serve(scheduler, store, &c, AdminAuth::disabled(), s).await
        });
        let (catalog, catalog_url) = listener().await;
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(cpb::voice_catalog_server::VoiceCatalogServer::new(
                    OnePackCatalog,
                ))
                .serve_with_incoming(TcpListenerStream::new(catalog)),
        );
        let cache = cache.then(|| {
            let blobs = BlobStore::open(Some(&format!("file://{}", dir.path().display())))
                .expect("blob store");
            Arc::new(Cache::new(
                &blobs,
                1,
                config.synthesis.cache_max_bytes,
                Duration::from_millis(config.synthesis.cache_fill_ttl_ms),
            ))
        });
        let mut adapters = Registry::new();
        let adapter: Arc<dyn VendorAdapter> = Arc::new(ZeroLatency::new());
        adapters.insert(adapter.provider(), adapter);
        let options = Options {
            scheduler_url,
            catalog_url,
            lease_ttl: server::DEFAULT_LEASE_TTL,
            client_token: voxpool_runtime::auth::ClientToken::none(),
            cache,
            references: None,
            admin: AdminAuth::disabled(),
            usage_store: None,
        };
        let core = server::build(&config, adapters, &options).expect("synthesis core");
        let keys = ApiKeys::load(&[], true).expect("anonymous callers");
        let front = voxpool_synthesis::front::router(Arc::new(Front::new(
            core.clone(),
            keys,
            &ServerFlags::default(),
        )));
        (
            SynthesisService::new(core, DEFAULT_MAX_MESSAGE_BYTES),
            front,
        )
    });
    let request = pb::SynthesizeRequest {
        voice: Some(pb::synthesize_request::Voice::Snapshot(voice().to_pb())),
        text: "Hello there.".into(),
        format: pb::AudioFormat::Wav as i32,
        ..Default::default()
    }
    .encode_to_vec();
    let stack = Stack {
        rt,
        request,
        service,
        front,
        _dir: dir,
    };
    // Twice: the first fills the cache (when on), the second reads it.
    for _ in 0..2 {
        synthesize(&stack);
        speech(&stack);
    }
    stack
}

fn zero_latency() -> Stack {
    stack(false)
}

fn cache_hit() -> Stack {
    stack(true)
}

/// One `Synthesize` from its wire bytes to the answer's; answers the audio's size.
fn synthesize(s: &Stack) -> usize {
    s.rt.block_on(async {
        let request = pb::SynthesizeRequest::decode(s.request.as_slice()).expect("decode");
        let answer = s
            .service
            .synthesize(Request::new(request))
            .await
            .expect("synthesized")
            .into_inner();
        let audio = answer.audio.len();
        black_box(answer.encode_to_vec());
        audio
    })
}

/// One `POST /v1/audio/speech` through the front's router; answers the body's size.
fn speech(s: &Stack) -> usize {
    let body =
        r#"{"model":"tts-1","input":"Hello there.","voice":"vp_bench","response_format":"wav"}"#;
    let request = axum::http::Request::post("/v1/audio/speech")
        .header("content-type", "application/json")
        .header("authorization", "Bearer sk-bench")
        .body(Body::from(body))
        .expect("request");
    s.rt.block_on(async {
        let answer = s.front.clone().oneshot(request).await.expect("answered");
        assert_eq!(answer.status(), 200, "the speech request succeeds");
        axum::body::to_bytes(answer.into_body(), usize::MAX)
            .await
            .expect("body")
            .len()
    })
}

#[library_benchmark]
#[bench::zero_latency(setup = zero_latency)]
#[bench::cache_hit(setup = cache_hit)]
fn unary(s: Stack) -> Stack {
    black_box(synthesize(&s));
    s
}

#[library_benchmark]
#[bench::zero_latency(setup = zero_latency)]
fn http_speech(s: Stack) -> Stack {
    black_box(speech(&s));
    s
}

library_benchmark_group!(name = synthesis, benchmarks = [unary, http_speech]);

main!(
    config = LibraryBenchmarkConfig::default(),
    library_benchmark_groups = synthesis
);
