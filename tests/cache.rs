//! The audio cache end to end (docs/SYNTHESIS.md, "Audio cache"), on real parts: one private Redis,
//! two `voxpool-scheduler` processes on it (A, B), two `voxpool-synthesis` processes (X asks
//! A, Y asks B) sharing one blob store, and an in-process fake OpenAI-compatible vendor that
//! counts every request. The blob store is a local directory, or an S3 endpoint (`s3s-fs`,
//! started here on loopback) in the S3 case.
//!
//! Synchronization is by counts and signals: the fake's request counter, its pause/resume
//! gate, a process's exit. No test waits on a clock, except where the fill lock's TTL is the
//! behaviour under test (a killed leader's lock must expire).

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use tokio_stream::StreamExt as _;
use voxpool_e2e::{Authed, Service, binary, start};
use voxpool_fake_vendors::{FakeConfig, FakeVendor, Latency, VendorKind};
use voxpool_proto::synthesis::v1::{
    self as pb, synthesis_admin_client::SynthesisAdminClient, synthesis_client::SynthesisClient,
};
use voxpool_testkit::RedisServer;

const POOL: &str = "openai-fake";
const ADMIN_TOKEN: &str = "cache-test-admin-token-0123456789";
/// Each request's gRPC deadline.
const DEADLINE: Duration = Duration::from_secs(30);

/// Pool `openai-fake` at the fake (8 keys of capacity 10), a 1 s fill-lock TTL (the shortest
/// the config takes: a killed leader's fill is taken over within it), room for long texts.
fn write_config(dir: &Path, base_url: &str, cache_ttl: &str) -> PathBuf {
    let mut t = format!(
        "[[pools]]\nid = \"{POOL}\"\nprovider = \"openai\"\nmodel = \"tts-1\"\n\
         cache = {{ enabled = true, ttl = \"{cache_ttl}\" }}\n\
         [[pools.upstreams]]\nid = \"u\"\nbase_url = \"{base_url}\"\n"
    );
    for k in 0..8 {
        let credential = dir.join(format!("k{k}"));
        std::fs::write(&credential, format!("k{k}\n")).expect("credential file");
        t.push_str(&format!(
            "[[pools.upstreams.keys]]\nid = \"k{k}\"\ncapacity = 10\ncredential = {{ file = \"{}\" }}\n",
            credential.display()
        ));
    }
    // The replicas' shared cache secret: entries one seals, the other serves.
    let secret = dir.join("cache-secret");
    std::fs::write(&secret, "cache-test-secret-0123456789abcdef\n").expect("secret file");
    t.push_str(&format!(
        "[scheduler]\ndefault_lease_ttl_ms = 3000\nwait_poll_ms = 10\nrecovery_window_ms = 0\n\
         [synthesis]\nattempt_timeout_ms = 10000\ndefault_deadline_ms = 30000\n\
         max_text_chars = 60000\ncache_fill_ttl_ms = 1000\n\
         cache_secret = {{ file = \"{}\" }}\n",
        secret.display()
    ));
    t.push_str(voxpool_e2e::CLIENT_TOKENS_TOML);
    let path = dir.join("config.toml");
    std::fs::write(&path, t).expect("config file");
    path
}

fn quiet(command: Command) -> Command {
    voxpool_e2e::quiet(command, "CACHE_TEST_LOG")
}

/// Where the replicas keep audio, and the environment a cloud store needs.
#[derive(Clone)]
struct Blobs {
    url: String,
    env: Vec<(String, String)>,
}

/// The whole fleet of one test.
struct Fleet {
    fake: FakeVendor,
    dir: tempfile::TempDir,
    _redis: RedisServer,
    _schedulers: [Service; 2],
    replicas: [Option<Service>; 2],
    clients: [SynthesisClient<Authed>; 2],
}

impl Fleet {
    async fn start(blobs: Option<Blobs>, cache_ttl: &str) -> Self {
        let redis = RedisServer::start();
        let fake = FakeVendor::start(
            FakeConfig::new(VendorKind::OpenAi)
                .cap(10)
                .latency(Latency::Fixed(Duration::from_millis(20))),
        )
        .await
        .expect("fake vendor");
        let dir = tempfile::tempdir().expect("tempdir");
        let config = write_config(dir.path(), &fake.base_url(), cache_ttl);
        let blobs = blobs.unwrap_or_else(|| Blobs {
            url: format!("file://{}", dir.path().join("blobs").display()),
            env: Vec::new(),
        });
        let schedulers = [(); 2].map(|()| {
            let mut c = Command::new(binary("voxpool-scheduler"));
            c.arg("--config").arg(&config).args([
                "--listen",
                "127.0.0.1:0",
                "--store",
                &redis.url(),
            ]);
            start(quiet(c))
        });
        let replicas = [0, 1].map(|i| Some(synthesis(&config, &schedulers[i], &blobs)));
        let mut clients = Vec::new();
        for replica in replicas.iter().flatten() {
            clients.push(SynthesisClient::new(channel(&replica.addr).await));
        }
        let clients: [SynthesisClient<Authed>; 2] = clients.try_into().expect("two clients");
        Self {
            fake,
            dir,
            _redis: redis,
            _schedulers: schedulers,
            replicas,
            clients,
        }
    }

    /// Requests the fake vendor has seen so far.
    fn vendor_calls(&self) -> u64 {
        self.fake.stats().values().map(|k| k.total_requests).sum()
    }

    fn blob_dir(&self) -> PathBuf {
        self.dir.path().join("blobs").join("cache")
    }

    async fn admin(&self, replica: usize) -> SynthesisAdminClient<tonic::transport::Channel> {
        let addr = &self.replicas[replica]
            .as_ref()
            .expect("replica running")
            .addr;
        SynthesisAdminClient::new(voxpool_e2e::connect(addr).await)
    }
}

fn synthesis(config: &Path, scheduler: &Service, blobs: &Blobs) -> Service {
    let mut c = Command::new(binary("voxpool-synthesis"));
    c.arg("--config")
        .arg(config)
        .args(["--listen", "127.0.0.1:0"])
        .args(["--scheduler", &format!("http://{}", scheduler.addr)])
        .args(["--catalog", "http://127.0.0.1:1"])
        .args(["--lease-ttl-ms", "3000"])
        .args(["--blob-store", &blobs.url])
        .env("VOXPOOL_ADMIN_TOKEN", ADMIN_TOKEN);
    for (k, v) in &blobs.env {
        c.env(k, v);
    }
    start(quiet(c))
}

async fn channel(addr: &str) -> Authed {
    Authed::new(
        voxpool_e2e::connect(addr).await,
        voxpool_e2e::voxctl_token(),
    )
}

fn request(text: &str, policy: pb::CachePolicy) -> tonic::Request<pb::SynthesizeRequest> {
    let voice = voxpool_fake_vendors::snapshot("openai", "tts-1", "alloy");
    assert_eq!(voice.tts_model_id, POOL);
    let mut r = tonic::Request::new(pb::SynthesizeRequest {
        voice: Some(pb::synthesize_request::Voice::Snapshot(voice.to_pb())),
        text: text.into(),
        format: pb::AudioFormat::Mp3 as i32,
        cache_policy: policy as i32,
        ..Default::default()
    });
    r.set_timeout(DEADLINE);
    r
}

async fn speak(
    client: &SynthesisClient<Authed>,
    text: &str,
    policy: pb::CachePolicy,
) -> pb::SynthesizeResponse {
    client
        .clone()
        .synthesize(request(text, policy))
        .await
        .unwrap_or_else(|s| panic!("synthesize {text:?}: {s:?}"))
        .into_inner()
}

fn admin_request<T>(message: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    r.metadata_mut().insert(
        "authorization",
        format!("Bearer {ADMIN_TOKEN}").parse().expect("header"),
    );
    r
}

/// `n` identical requests for `text` sent at once, alternating the two replicas, with the
/// vendor holding the first call until all are sent: their responses, in order.
async fn all_at_once(fleet: &Fleet, n: usize, text: &'static str) -> Vec<pb::SynthesizeResponse> {
    fleet.fake.pause();
    let calls: Vec<_> = (0..n)
        .map(|i| {
            let client = fleet.clients[i % 2].clone();
            tokio::spawn(async move {
                client
                    .clone()
                    .synthesize(request(text, pb::CachePolicy::Use))
                    .await
            })
        })
        .collect();
    fleet.fake.wait_for_requests(1).await;
    fleet.fake.resume();
    let mut responses = Vec::new();
    for call in calls {
        responses.push(call.await.expect("task").expect("synthesize").into_inner());
    }
    responses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_identical_requests_over_two_replicas_make_one_vendor_call() {
    let fleet = Fleet::start(None, "30d").await;
    let text = "Every character of this line is billed once.";
    let responses = all_at_once(&fleet, 100, text).await;
    let cached: i32 = responses.iter().map(|r| r.cached_chunks).sum();
    let audios: Vec<&Vec<u8>> = responses.iter().map(|r| &r.audio).collect();
    assert_eq!(fleet.vendor_calls(), 1, "one vendor call for 100 requests");
    assert!(!audios[0].is_empty());
    assert!(
        audios.iter().all(|a| *a == audios[0]),
        "100 identical audios"
    );
    assert_eq!(
        cached, 99,
        "every request but the leader's was served from the cache"
    );
    // A hit takes no lease: it made no attempt.
    let again = speak(&fleet.clients[1], text, pb::CachePolicy::Use).await;
    assert_eq!((again.cached_chunks, again.attempts.len()), (1, 0));
    assert_eq!(fleet.vendor_calls(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_killed_mid_fill_hands_the_fill_to_a_follower() {
    let mut fleet = Fleet::start(None, "30d").await;
    fleet.fake.pause();
    let text = "The first replica dies while the vendor speaks.";
    let leader = {
        let client = fleet.clients[0].clone();
        tokio::spawn(async move {
            client
                .clone()
                .synthesize(request(text, pb::CachePolicy::Use))
                .await
        })
    };
    fleet.fake.wait_for_requests(1).await;
    let follower = {
        let client = fleet.clients[1].clone();
        tokio::spawn(async move {
            client
                .clone()
                .synthesize(request(text, pb::CachePolicy::Use))
                .await
        })
    };
    // X holds the fill lock and its call is at the vendor: kill it there.
    let mut x = fleet.replicas[0].take().expect("replica X");
    x.child.kill().expect("kill X");
    x.child.wait().expect("reap X");
    assert!(
        leader.await.expect("task").is_err(),
        "the killed leader's caller fails"
    );
    fleet.fake.resume();
    let served = follower
        .await
        .expect("task")
        .expect("the follower took the fill over");
    let served = served.into_inner();
    assert_eq!(served.cached_chunks, 0, "the follower filled it itself");
    assert_eq!(
        fleet.vendor_calls(),
        2,
        "the dead leader's call and the follower's"
    );
    // What the follower stored is whole: the next request is a hit with the same audio.
    let hit = speak(&fleet.clients[1], text, pb::CachePolicy::Use).await;
    assert_eq!((hit.cached_chunks, hit.audio), (1, served.audio));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_long_text_with_one_paragraph_edited_costs_one_vendor_call() {
    let fleet = Fleet::start(None, "30d").await;
    // Ten paragraphs of about 3,800 characters: ten chunks under the OpenAI limit (4,096).
    let paragraph = |n: usize| {
        let sentence = format!("Paragraph {n:02} says the same thing again and again. ");
        sentence.repeat(3_800 / sentence.len())
    };
    let paragraphs: Vec<String> = (0..10).map(paragraph).collect();
    let text = paragraphs.concat();
    let first = speak(&fleet.clients[0], &text, pb::CachePolicy::Use).await;
    assert_eq!(first.cached_chunks, 0);
    let chunks = fleet.vendor_calls();
    assert_eq!(chunks, 10, "ten chunks, ten vendor calls");
    // One word of paragraph 4 changed, to one of the same length: the chunk holding it alone
    // is new (no chunk boundary moves).
    let mut edited = paragraphs.clone();
    edited[4] = edited[4].replacen("same", "sane", 1);
    let second = speak(&fleet.clients[1], &edited.concat(), pb::CachePolicy::Use).await;
    assert_eq!(second.cached_chunks, 9);
    assert_eq!(
        fleet.vendor_calls(),
        chunks + 1,
        "one vendor call for the edit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refresh_replaces_an_entry_and_bypass_neither_reads_nor_writes() {
    let fleet = Fleet::start(None, "30d").await;
    let text = "Policies decide what the cache sees.";
    speak(&fleet.clients[0], text, pb::CachePolicy::Use).await;
    assert_eq!(fleet.vendor_calls(), 1);
    let refreshed = speak(&fleet.clients[0], text, pb::CachePolicy::Refresh).await;
    assert_eq!(refreshed.cached_chunks, 0);
    assert_eq!(fleet.vendor_calls(), 2, "REFRESH synthesizes anew");
    let hit = speak(&fleet.clients[1], text, pb::CachePolicy::Use).await;
    assert_eq!(hit.cached_chunks, 1, "and what it stored serves");

    let bypassed = speak(&fleet.clients[0], text, pb::CachePolicy::Bypass).await;
    assert_eq!(
        bypassed.cached_chunks, 0,
        "BYPASS does not read a present entry"
    );
    assert_eq!(fleet.vendor_calls(), 3);
    let other = "Never stored, because it bypassed.";
    speak(&fleet.clients[0], other, pb::CachePolicy::Bypass).await;
    let after = speak(&fleet.clients[0], other, pb::CachePolicy::Use).await;
    assert_eq!(after.cached_chunks, 0, "BYPASS wrote nothing");
    assert_eq!(fleet.vendor_calls(), 5);
}

/// Every entry file under the local store, for tests that age or damage one.
fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read blob dir") {
            let path = e.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_entry_past_its_ttl_or_damaged_is_filled_again_never_served() {
    let fleet = Fleet::start(None, "1h").await;
    let text = "Old or broken entries are misses.";
    let original = speak(&fleet.clients[0], text, pb::CachePolicy::Use).await;
    // An entry is stored before the request that filled it is answered.
    let written = entries(&fleet.blob_dir());
    assert_eq!(written.len(), 1);
    // Aged past the pool's TTL (1h): a miss, filled again.
    std::fs::File::options()
        .write(true)
        .open(&written[0])
        .expect("open entry")
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(7_200))
        .expect("age entry");
    let aged = speak(&fleet.clients[1], text, pb::CachePolicy::Use).await;
    assert_eq!(aged.cached_chunks, 0, "an expired entry is a miss");
    assert_eq!(fleet.vendor_calls(), 2);
    // Truncated: detected by its digest, deleted, filled again; the caller gets whole audio.
    let refilled = std::fs::read(&written[0]).expect("the refilled entry");
    std::fs::write(&written[0], &refilled[..refilled.len() - 5]).expect("truncate entry");
    let repaired = speak(&fleet.clients[0], text, pb::CachePolicy::Use).await;
    assert_eq!(repaired.cached_chunks, 0, "a damaged entry is never served");
    assert_eq!(repaired.audio, original.audio);
    assert_eq!(fleet.vendor_calls(), 3);
}

/// What someone who can write the store but holds no secret can do to an entry: swap its
/// audio and recompute the digest and length its header gives.
fn forge(object: &[u8], audio: &[u8]) -> Vec<u8> {
    let at = object
        .windows(7)
        .position(|w| w == b"{\"key\":")
        .expect("a JSON header");
    let len = u32::from_be_bytes(object[at - 4..at].try_into().expect("4 bytes")) as usize;
    let mut header: serde_json::Value =
        serde_json::from_slice(&object[at..at + len]).expect("header");
    header["sha256"] = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(audio)).into();
    header["bytes"] = audio.len().into();
    let json = serde_json::to_vec(&header).expect("json");
    let mut out = object[..at - 4].to_vec();
    out.extend_from_slice(&u32::try_from(json.len()).expect("short").to_be_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(audio);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_entry_forged_in_the_store_is_never_served_and_its_refill_serves_every_replica() {
    let fleet = Fleet::start(None, "1h").await;
    let text = "Only voxpool writes what it serves.";
    let original = speak(&fleet.clients[0], text, pb::CachePolicy::Use).await;
    let written = entries(&fleet.blob_dir());
    assert_eq!(written.len(), 1);
    // Someone with write access to the store swaps the audio and fixes up the digest.
    let object = std::fs::read(&written[0]).expect("the entry");
    let planted = vec![0x55u8; original.audio.len()];
    std::fs::write(&written[0], forge(&object, &planted)).expect("forge entry");
    let after = speak(&fleet.clients[1], text, pb::CachePolicy::Use).await;
    assert_eq!(after.cached_chunks, 0, "a forged entry is a miss");
    assert_eq!(
        after.audio, original.audio,
        "the vendor's audio, not the planted"
    );
    assert_eq!(fleet.vendor_calls(), 2);
    // Y's refill is sealed with the shared secret: X serves it.
    let hit = speak(&fleet.clients[0], text, pb::CachePolicy::Use).await;
    assert_eq!(hit.cached_chunks, 1);
    assert_eq!(hit.audio, original.audio);
    assert_eq!(fleet.vendor_calls(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stream_serves_a_hit_at_once_and_purge_by_pack_empties_it() {
    let fleet = Fleet::start(None, "30d").await;
    let text = "Streams hit the cache too.";
    let unary = speak(&fleet.clients[0], text, pb::CachePolicy::Use).await;
    assert_eq!(entries(&fleet.blob_dir()).len(), 1);
    let mut stream = fleet.clients[1]
        .clone()
        .synthesize_stream(request(text, pb::CachePolicy::Use))
        .await
        .expect("stream")
        .into_inner();
    let mut audio = Vec::new();
    let first = stream.next().await.expect("a message").expect("ok");
    assert_eq!(
        first.cached_chunks, 1,
        "the first message says it came from the cache"
    );
    audio.extend(first.audio);
    while let Some(m) = stream.next().await {
        audio.extend(m.expect("ok").audio);
    }
    assert_eq!(audio, unary.audio);
    assert_eq!(fleet.vendor_calls(), 1);

    let voice = voxpool_fake_vendors::snapshot("openai", "tts-1", "alloy");
    let mut admin = fleet.admin(1).await;
    let denied = admin
        .purge_cache(pb::PurgeCacheRequest {
            pack_id: voice.pack_id.clone(),
            ..Default::default()
        })
        .await
        .expect_err("no admin token");
    assert_eq!(denied.code(), tonic::Code::Unauthenticated);
    let purged = admin
        .purge_cache(admin_request(pb::PurgeCacheRequest {
            pack_id: voice.pack_id.clone(),
            ..Default::default()
        }))
        .await
        .expect("purge")
        .into_inner();
    assert_eq!(purged.deleted_entries, 1);
    let stats = admin
        .get_cache_stats(admin_request(pb::GetCacheStatsRequest {}))
        .await
        .expect("stats")
        .into_inner();
    assert_eq!((stats.enabled, stats.entries), (true, 0));
    assert_eq!(stats.pools[0].hits, 1, "replica Y served the stream's hit");
    let after = speak(&fleet.clients[0], text, pb::CachePolicy::Use).await;
    assert_eq!(after.cached_chunks, 0, "purged: a miss");
}

/// An S3 endpoint on loopback: `s3s-fs` (`cargo install s3s-fs --features binary`, as
/// `.ci/run` does) over a temporary directory, with one bucket.
struct S3 {
    child: std::process::Child,
    port: u16,
    _root: tempfile::TempDir,
}

impl Drop for S3 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl S3 {
    fn start() -> Self {
        let root = tempfile::tempdir().expect("s3 root");
        std::fs::create_dir(root.path().join("voxpool")).expect("bucket dir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let child = Command::new("s3s-fs")
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", "voxpool-test", "--secret-key", "voxpool-test-secret"])
            .arg(root.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("s3s-fs not on PATH: cargo install s3s-fs --version 0.14.1 --features binary (.ci/run does)");
        // Killed on drop from here on, however the start ends.
        let s3 = Self {
            child,
            port,
            _root: root,
        };
        // Ready once it accepts connections (bounded).
        for _ in 0..500 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return s3;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("s3s-fs never listened on {port}");
    }

    fn blobs(&self) -> Blobs {
        Blobs {
            url: "s3://voxpool/audio".into(),
            env: [
                ("AWS_ENDPOINT", format!("http://127.0.0.1:{}", self.port)),
                ("AWS_ALLOW_HTTP", "true".into()),
                ("AWS_ACCESS_KEY_ID", "voxpool-test".into()),
                ("AWS_SECRET_ACCESS_KEY", "voxpool-test-secret".into()),
                ("AWS_REGION", "us-east-1".into()),
                ("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "false".into()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_share_entries_on_an_s3_store() {
    let s3 = S3::start();
    let fleet = Fleet::start(Some(s3.blobs()), "30d").await;
    let text = "Stored once in a bucket, served to both replicas.";
    let cached: i32 = all_at_once(&fleet, 20, text)
        .await
        .iter()
        .map(|r| r.cached_chunks)
        .sum();
    assert_eq!(fleet.vendor_calls(), 1);
    assert_eq!(cached, 19);
    let mut admin = fleet.admin(0).await;
    let stats = admin
        .get_cache_stats(admin_request(pb::GetCacheStatsRequest {}))
        .await
        .expect("stats")
        .into_inner();
    assert_eq!(stats.entries, 1, "one entry in the bucket");
    assert!(
        stats.location.starts_with("s3://voxpool/audio"),
        "{}",
        stats.location
    );
    assert_eq!(stats.max_bytes, 0, "a cloud store has no local size bound");
}
