//! An in-process Synthesis gRPC server for voxctl's tests and benchmark: a real tonic server
//! on 127.0.0.1:0 whose answers a test scripts per call, and which counts calls and successes
//! per item id (the part of `request_id` before `#`).
//!
//! It also answers `SynthesisAdmin` ([`Admin`]): the bearer token is checked as the real
//! services check it (`voxpool_runtime::auth::AdminAuth`), the stats are scripted, and every
//! purge request is recorded.
//!
//! Audio: a 16-bit mono 16 kHz WAV holding one sample per character of the request text (the
//! character's code point, truncated to i16), so a joined file proves order and completeness.
#![allow(dead_code)]

use std::{
    collections::HashMap,
    io::Cursor,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use voxpool_proto::synthesis::v1::{
    Attempt, AudioChunk, CacheStats, GetCacheStatsRequest, PurgeCacheRequest, PurgeCacheResponse,
    SynthesizeRequest, SynthesizeResponse,
    synthesis_admin_server::{SynthesisAdmin, SynthesisAdminServer},
    synthesis_server::{Synthesis, SynthesisServer},
};

/// The admin token the fake accepts unless told otherwise ([`Admin::token`]).
pub const ADMIN_TOKEN: &str = "fake-admin-token-0123456789abcdef";

/// What the fake's `SynthesisAdmin` answers.
#[derive(Clone, Debug)]
pub struct Admin {
    /// The token it accepts; `None` answers FAILED_PRECONDITION, as a server started without
    /// an admin token does.
    pub token: Option<String>,
    /// `GetCacheStats`'s answer.
    pub stats: CacheStats,
    /// `PurgeCache`'s answer.
    pub purged: PurgeCacheResponse,
}

impl Default for Admin {
    fn default() -> Self {
        Self {
            token: Some(ADMIN_TOKEN.to_owned()),
            stats: CacheStats::default(),
            purged: PurgeCacheResponse::default(),
        }
    }
}

/// What the script sees of a call.
#[derive(Clone, Debug)]
pub struct Call {
    /// Item id from the request id.
    pub item: String,
    /// Full request id.
    pub request_id: String,
    /// Request text.
    pub text: String,
    /// 1-based number of this call among the item's calls.
    pub nth_for_item: u32,
    /// When it arrived.
    pub at: Instant,
    /// Calls the server has seen before this one (all items).
    pub seen_before: u64,
    /// `cache_policy` of the request, as sent (0 = unspecified).
    pub cache_policy: i32,
}

/// The script's answer: wait `latency`, then answer with audio or the error. The audio is
/// said to come from `chunks` text chunks, `cached` of them served from the cache (one
/// SUCCESS attempt per other chunk, as synthesis lists them).
pub struct Reply {
    pub latency: Duration,
    pub result: Result<(), Status>,
    pub cached: i32,
    pub chunks: i32,
}

impl Reply {
    pub fn ok() -> Self {
        Self {
            latency: Duration::ZERO,
            result: Ok(()),
            cached: 0,
            chunks: 1,
        }
    }
    pub fn err(status: Status) -> Self {
        Self {
            result: Err(status),
            ..Self::ok()
        }
    }
    pub fn after(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }
    /// `cached` of the response's `chunks` text chunks came from the cache.
    pub fn cached(mut self, cached: i32, chunks: i32) -> Self {
        assert!((0..=chunks).contains(&cached) && chunks >= 1);
        (self.cached, self.chunks) = (cached, chunks);
        self
    }
}

pub type Script = Arc<dyn Fn(&Call) -> Reply + Send + Sync>;

#[derive(Default)]
struct Books {
    calls: HashMap<String, u32>,
    successes: HashMap<String, u32>,
    log: Vec<Call>,
    total: u64,
}

struct Inner {
    script: Mutex<Script>,
    books: Mutex<Books>,
    successes: watch::Sender<u64>,
    arrivals: watch::Sender<u64>,
    admin: Mutex<Admin>,
    /// Purge requests that passed the token check, in arrival order.
    purges: Mutex<Vec<PurgeCacheRequest>>,
}

/// A running fake server; stops when dropped.
pub struct FakeSynthesis {
    pub addr: SocketAddr,
    inner: Arc<Inner>,
    stop: CancellationToken,
}

#[derive(Clone)]
struct Service(Arc<Inner>);

impl FakeSynthesis {
    /// Starts a server answering with `script`.
    pub async fn start(script: impl Fn(&Call) -> Reply + Send + Sync + 'static) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake synthesis");
        let addr = listener.local_addr().expect("local addr");
        let inner = Arc::new(Inner {
            script: Mutex::new(Arc::new(script)),
            books: Mutex::new(Books::default()),
            successes: watch::channel(0).0,
            arrivals: watch::channel(0).0,
            admin: Mutex::new(Admin::default()),
            purges: Mutex::new(Vec::new()),
        });
        let stop = CancellationToken::new();
        let service =
            SynthesisServer::new(Service(Arc::clone(&inner))).max_decoding_message_size(64 << 20);
        let admin = SynthesisAdminServer::new(Service(Arc::clone(&inner)));
        let token = stop.clone();
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .add_service(admin)
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    token.cancelled(),
                )
                .await
                .expect("fake synthesis serve");
        });
        Self { addr, inner, stop }
    }

    /// Always answers with audio at once.
    pub async fn healthy() -> Self {
        Self::start(|_| Reply::ok()).await
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Replaces the script.
    pub fn set_script(&self, script: impl Fn(&Call) -> Reply + Send + Sync + 'static) {
        *self.inner.script.lock().expect("script lock") = Arc::new(script);
    }

    /// Replaces what `SynthesisAdmin` answers.
    pub fn set_admin(&self, admin: Admin) {
        *self.inner.admin.lock().expect("admin lock") = admin;
    }

    /// The purge requests that passed the token check so far.
    pub fn purges(&self) -> Vec<PurgeCacheRequest> {
        self.inner.purges.lock().expect("purges").clone()
    }

    /// Calls per item id so far.
    pub fn calls(&self) -> HashMap<String, u32> {
        self.inner.books.lock().expect("books").calls.clone()
    }

    /// Audio answers per item id so far.
    pub fn successes(&self) -> HashMap<String, u32> {
        self.inner.books.lock().expect("books").successes.clone()
    }

    /// Every call so far, in arrival order.
    pub fn log(&self) -> Vec<Call> {
        self.inner.books.lock().expect("books").log.clone()
    }

    pub fn total_calls(&self) -> u64 {
        self.inner.books.lock().expect("books").total
    }

    /// Waits (bounded by `limit`) until at least `n` audio answers were sent.
    pub async fn wait_successes(&self, n: u64, limit: Duration) {
        let mut rx = self.inner.successes.subscribe();
        tokio::time::timeout(limit, rx.wait_for(|s| *s >= n))
            .await
            .unwrap_or_else(|_| panic!("fewer than {n} successes within {limit:?}"))
            .expect("watch open");
    }

    /// Waits (bounded by `limit`) until at least `n` calls arrived.
    pub async fn wait_calls(&self, n: u64, limit: Duration) {
        let mut rx = self.inner.arrivals.subscribe();
        tokio::time::timeout(limit, rx.wait_for(|s| *s >= n))
            .await
            .unwrap_or_else(|_| panic!("fewer than {n} calls within {limit:?}"))
            .expect("watch open");
    }
}

impl Drop for FakeSynthesis {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The WAV the fake answers for `text`.
pub fn wav_for(text: &str) -> Vec<u8> {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 16_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut out = Cursor::new(Vec::new());
    let mut w = hound::WavWriter::new(&mut out, spec).expect("wav writer");
    for c in text.chars() {
        w.write_sample(c as u32 as i16).expect("sample");
    }
    w.finalize().expect("finalize");
    out.into_inner()
}

/// The text a WAV written by the fake (or joined from several) encodes, for ASCII text.
pub fn text_of_wav(bytes: &[u8]) -> String {
    let mut r = hound::WavReader::new(Cursor::new(bytes)).expect("valid wav");
    assert_eq!(r.spec().sample_rate, 16_000);
    r.samples::<i16>()
        .map(|s| char::from(s.expect("sample") as u8))
        .collect()
}

#[tonic::async_trait]
impl Synthesis for Service {
    async fn synthesize(
        &self,
        request: Request<SynthesizeRequest>,
    ) -> Result<Response<SynthesizeResponse>, Status> {
        let request = request.into_inner();
        let item = request
            .request_id
            .split('#')
            .next()
            .unwrap_or_default()
            .to_owned();
        let (call, script) = {
            let mut books = self.0.books.lock().expect("books");
            let n = books.calls.entry(item.clone()).or_default();
            *n += 1;
            let call = Call {
                item: item.clone(),
                request_id: request.request_id.clone(),
                text: request.text.clone(),
                nth_for_item: *n,
                at: Instant::now(),
                seen_before: books.total,
                cache_policy: request.cache_policy,
            };
            books.total += 1;
            books.log.push(call.clone());
            (call, Arc::clone(&self.0.script.lock().expect("script")))
        };
        self.0.arrivals.send_modify(|n| *n += 1);
        let reply = script(&call);
        if !reply.latency.is_zero() {
            tokio::time::sleep(reply.latency).await;
        }
        reply.result?;
        *self
            .0
            .books
            .lock()
            .expect("books")
            .successes
            .entry(item)
            .or_default() += 1;
        self.0.successes.send_modify(|n| *n += 1);
        let spoken = (reply.chunks - reply.cached) as usize;
        Ok(Response::new(SynthesizeResponse {
            audio: wav_for(&request.text),
            format: request.format,
            sample_rate_hz: 16_000,
            key_id: if spoken > 0 { "fake/k1" } else { "" }.into(),
            attempts: vec![
                Attempt {
                    key_id: "fake/k1".into(),
                    outcome: 1,
                    http_status: 200,
                    ..Attempt::default()
                };
                spoken
            ],
            cached_chunks: reply.cached,
            usage: None,
            reference_digest: String::new(),
        }))
    }

    type SynthesizeStreamStream = tokio_stream::Empty<Result<AudioChunk, Status>>;

    async fn synthesize_stream(
        &self,
        _: Request<SynthesizeRequest>,
    ) -> Result<Response<Self::SynthesizeStreamStream>, Status> {
        Err(Status::unimplemented("the fake answers Synthesize only"))
    }

    async fn list_pools(
        &self,
        _: Request<voxpool_proto::synthesis::v1::ListPoolsRequest>,
    ) -> Result<Response<voxpool_proto::synthesis::v1::ListPoolsResponse>, Status> {
        Err(Status::unimplemented("the fake answers Synthesize only"))
    }
}

impl Service {
    /// The admin token check of the real services, against [`Admin::token`].
    fn authorize(&self, metadata: &tonic::metadata::MetadataMap) -> Result<Admin, Status> {
        let admin = self.0.admin.lock().expect("admin").clone();
        let auth = match &admin.token {
            Some(token) => voxpool_runtime::auth::AdminAuth::with_token(
                voxpool_domain::secret::Secret::new(token.clone()),
            ),
            None => voxpool_runtime::auth::AdminAuth::disabled(),
        };
        auth.authorize(metadata)?;
        Ok(admin)
    }
}

#[tonic::async_trait]
impl SynthesisAdmin for Service {
    async fn purge_cache(
        &self,
        request: Request<PurgeCacheRequest>,
    ) -> Result<Response<PurgeCacheResponse>, Status> {
        let admin = self.authorize(request.metadata())?;
        self.0
            .purges
            .lock()
            .expect("purges")
            .push(request.into_inner());
        Ok(Response::new(admin.purged))
    }

    async fn get_cache_stats(
        &self,
        request: Request<GetCacheStatsRequest>,
    ) -> Result<Response<CacheStats>, Status> {
        Ok(Response::new(self.authorize(request.metadata())?.stats))
    }
}
