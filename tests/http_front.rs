//! Synthesis's OpenAI-compatible HTTP front (docs/HTTP.md) with real clients: the official
//! `openai` Python SDK (tests/http/openai_client.py) and `curl`, against real binaries — a
//! memory-store scheduler, a catalog seeded with one pack, a synthesis with `--http-listen` —
//! and an in-process fake OpenAI-compatible vendor that counts what it sees per key.
//!
//! Synchronization is by signals: the SDK script's output lines, the fake's request counter
//! and its pause gate. The one bounded poll waits for a released lease to show in the
//! scheduler's status.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use voxpool_e2e::{Service, binary, scheduler_client, start, start_http, workspace_root};
use voxpool_fake_vendors::{FakeConfig, FakeVendor, Fault, Latency, Step, Streaming, VendorKind};
use voxpool_proto::scheduler::v1 as spb;

const POOL: &str = "fake-speech";
/// A pool configured with no usable key: its packs are not listed as voices.
const KEYLESS_POOL: &str = "fake-speech-keyless";
/// Tenant `team-a`, INTERACTIVE: configured by its SHA-256 only.
const KEY_A: &str = "sk-http-team-a-0123456789";
/// Tenant `team-b`, BATCH: configured as `key = { env = "VOXPOOL_TEST_HTTP_KEY" }`.
const KEY_B: &str = "sk-http-team-b-9876543210";

/// One stack: fake vendor, scheduler, catalog, synthesis with its HTTP front.
struct Stack {
    fake: FakeVendor,
    _dir: tempfile::TempDir,
    scheduler: Service,
    _catalog: Service,
    _synthesis: Service,
    /// `http://ADDR/v1`.
    url: String,
    /// The seeded pack's id (a voice of `GET /v1/audio/voices`).
    voice: String,
}

impl Stack {
    /// `keys` keys of capacity `cap` on the fake; `deadline_ms` is synthesis's deadline.
    async fn start(fake: FakeConfig, keys: usize, cap: u32, deadline_ms: u64) -> Self {
        Self::start_with(fake, keys, cap, deadline_ms, Access::ApiKeys).await
    }

    /// [`Stack::start`] with the HTTP front's callers known as `access` says.
    async fn start_with(
        fake: FakeConfig,
        keys: usize,
        cap: u32,
        deadline_ms: u64,
        access: Access,
    ) -> Self {
        let fake = FakeVendor::start(fake).await.expect("fake vendor");
        let dir = tempfile::tempdir().expect("tempdir");
        let config = write_config(dir.path(), &fake.base_url(), keys, cap, deadline_ms, access);
        let db = format!("sqlite://{}?mode=rwc", dir.path().join("c.db").display());
        let packs = dir.path().join("packs.toml");
        std::fs::write(
            &packs,
            format!(
                "[[packs]]\ndisplay_name = \"Fake Alloy\"\nprovider = \"openai\"\nmodel = \"tts-1\"\nvoice_id = \"alloy\"\ntts_model_id = \"{POOL}\"\ntier = \"STANDARD\"\n\
                 [[packs]]\ndisplay_name = \"Keyless Echo\"\nprovider = \"openai\"\nmodel = \"tts-1\"\nvoice_id = \"echo\"\ntts_model_id = \"{KEYLESS_POOL}\"\ntier = \"STANDARD\"\n"
            ),
        )
        .expect("packs file");
        let seeded = Command::new(binary("voxpool-catalog"))
            .args(["--database", &db, "seed"])
            .arg(&packs)
            .env("VOXPOOL_BLOB_STORE", voxpool_e2e::test_blob_store())
            .output()
            .expect("seed");
        assert!(seeded.status.success(), "seed: {seeded:?}");
        let mut c = Command::new(binary("voxpool-scheduler"));
        c.arg("--config")
            .arg(&config)
            .args(["--store", "memory", "--listen", "127.0.0.1:0"]);
        let scheduler = start(c);
        let mut c = Command::new(binary("voxpool-catalog"));
        c.args(["--database", &db, "--listen", "127.0.0.1:0"]);
        let catalog = start(c);
        let mut c = Command::new(binary("voxpool-synthesis"));
        c.arg("--config").arg(&config).args([
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--scheduler",
            &format!("http://{}", scheduler.addr),
            "--catalog",
            &format!("http://{}", catalog.addr),
        ]);
        c.env("VOXPOOL_TEST_HTTP_KEY", KEY_B);
        if access == Access::Anonymous {
            c.arg("--http-allow-anonymous");
        }
        let (synthesis, url) = start_http(c);
        let listed = sdk(&["list", &url, KEY_A], None);
        let voice = listed["voices"][0]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("a voice: {listed}"))
            .to_owned();
        // The keyless pool's pack is not listed: every call to it would be 503.
        assert_eq!(
            listed["voices"].as_array().map(Vec::len),
            Some(1),
            "{listed}"
        );
        assert_eq!(listed["voices"][0]["model"], POOL, "{listed}");
        assert_eq!(listed["models"], json!([POOL]), "{listed}");
        Self {
            fake,
            _dir: dir,
            scheduler,
            _catalog: catalog,
            _synthesis: synthesis,
            url,
            voice,
        }
    }

    /// One SDK speech call with `spec` (the body beyond `model` and `voice`) and `key`.
    fn speak(&self, key: &str, spec: Value) -> Value {
        let mut spec = spec;
        if spec.get("voice").is_none() {
            spec["voice"] = json!(self.voice);
        }
        sdk(&["speak", &self.url, key], Some(&spec))
    }

    /// Leases held on the pool now, as the scheduler counts them.
    async fn leases_in_flight(&self) -> i32 {
        scheduler_client(&self.scheduler.addr)
            .await
            .get_pool_status(spb::GetPoolStatusRequest { pool: POOL.into() })
            .await
            .expect("pool status")
            .into_inner()
            .in_flight
    }

    fn vendor_in_flight(&self) -> u64 {
        self.fake.stats().values().map(|k| k.in_flight).sum()
    }
}

/// How the HTTP front knows its callers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    /// `[[http.api_keys]]`: KEY_A (team-a) and KEY_B (team-b).
    ApiKeys,
    /// No key configured, `--http-allow-anonymous`.
    Anonymous,
}

fn write_config(
    dir: &Path,
    base_url: &str,
    keys: usize,
    cap: u32,
    deadline_ms: u64,
    access: Access,
) -> PathBuf {
    let mut t = format!(
        "[[pools]]\nid = \"{POOL}\"\nprovider = \"openai\"\nmodel = \"tts-1\"\n\
         price = {{ per_million_characters = 15.0 }}\n\
         [[pools.upstreams]]\nid = \"u\"\nbase_url = \"{base_url}\"\n"
    );
    for k in 0..keys {
        let credential = dir.join(format!("k{k}"));
        std::fs::write(&credential, format!("sk-{k}\n")).expect("credential file");
        t.push_str(&format!(
            "[[pools.upstreams.keys]]\nid = \"k{k}\"\ncapacity = {cap}\ncredential = {{ file = \"{}\" }}\n",
            credential.display()
        ));
    }
    // A pool whose one key has no credential here (its variable is never set).
    t.push_str(&format!(
        "[[pools]]\nid = \"{KEYLESS_POOL}\"\nprovider = \"openai\"\nmodel = \"tts-1\"\n\
         [[pools.upstreams]]\nid = \"u\"\nbase_url = \"{base_url}\"\n\
         [[pools.upstreams.keys]]\nid = \"k0\"\ncapacity = 1\n\
         credential = {{ env = \"VOXPOOL_TEST_CREDENTIAL_NEVER_SET\" }}\n"
    ));
    if access == Access::ApiKeys {
        let digest = hex::encode(Sha256::digest(KEY_A.as_bytes()));
        t.push_str(&format!(
            "[[http.api_keys]]\nsha256 = \"{digest}\"\ntenant = \"team-a\"\npriority = \"INTERACTIVE\"\n\
             [[http.api_keys]]\nkey = {{ env = \"VOXPOOL_TEST_HTTP_KEY\" }}\ntenant = \"team-b\"\npriority = \"BATCH\"\n"
        ));
    }
    t.push_str(&format!(
        "[scheduler]\nwait_poll_ms = 10\nrecovery_window_ms = 0\nrate_limit_cooldown_ms = 2000\n\
         [synthesis]\ndefault_deadline_ms = {deadline_ms}\nmax_text_chars = 2000\n"
    ));
    t.push_str(voxpool_e2e::CLIENT_TOKENS_TOML);
    let path = dir.join("config.toml");
    std::fs::write(&path, t).expect("config file");
    path
}

fn script() -> PathBuf {
    workspace_root().join("tests/http/openai_client.py")
}

/// Runs the SDK script with `args` and `body` (a request body, one line on its stdin) and
/// returns its one JSON line.
fn sdk(args: &[&str], body: Option<&Value>) -> Value {
    let mut child = Command::new("python3")
        .arg(script())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (and `pip install openai httpx`: .ci/run does)");
    let mut stdin = child.stdin.take().expect("stdin");
    if let Some(body) = body {
        writeln!(stdin, "{body}").expect("write the body");
    }
    drop(stdin);
    let out = child.wait_with_output().expect("openai_client.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "openai_client.py {}: {}\n{stdout}",
        args[0],
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn fake_openai(cap: u32, latency_ms: u64) -> FakeConfig {
    FakeConfig::new(VendorKind::OpenAi)
        .cap(cap)
        .latency(Latency::Fixed(Duration::from_millis(latency_ms)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_and_curl_list_voices_speak_and_stream_sse() {
    let stack = Stack::start(fake_openai(10, 0), 1, 4, 30_000).await;
    let mp3 = stack.speak(KEY_A, json!({"input": "Hello from the SDK."}));
    assert_eq!(mp3["status"], 200, "{mp3}");
    assert_eq!(
        mp3["content_type"], "audio/mpeg",
        "mp3 is OpenAI's default: {mp3}"
    );
    assert_eq!(mp3["pool"], POOL, "{mp3}");
    assert!(mp3["bytes"].as_u64() > Some(0), "{mp3}");
    let wav = stack.speak(
        KEY_B,
        json!({"input": "Hello.", "response_format": "wav", "speed": 1.25}),
    );
    assert_eq!(wav["head"], hex::encode(b"RIFF"), "a WAV file: {wav}");
    let sse = stack.speak(
        KEY_A,
        json!({"input": "Hello.", "response_format": "pcm", "stream_format": "sse"}),
    );
    let events: Vec<&str> = sse["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(events.len() >= 2, "{sse}");
    assert_eq!(events.last(), Some(&"speech.audio.done"), "{sse}");
    assert!(
        events[..events.len() - 1]
            .iter()
            .all(|e| *e == "speech.audio.delta"),
        "{sse}"
    );
    assert!(sse["audio_bytes"].as_u64() > Some(0), "{sse}");

    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("hello.wav");
    let body = json!({"model": "tts-1", "voice": stack.voice, "input": "Hello from curl.", "response_format": "wav"});
    let curl = Command::new("curl")
        .args(["-sS", "-o"])
        .arg(&file)
        .args([
            "-w",
            "%{http_code} %{content_type}",
            "-H",
            &format!("Authorization: Bearer {KEY_A}"),
        ])
        .args([
            "-H",
            "Content-Type: application/json",
            "-d",
            &body.to_string(),
        ])
        .arg(format!("{}/audio/speech", stack.url))
        .output()
        .expect("curl");
    assert_eq!(String::from_utf8_lossy(&curl.stdout), "200 audio/wav");
    assert_eq!(&std::fs::read(&file).expect("audio")[..4], b"RIFF");
    let anonymous = Command::new("curl")
        .args([
            "-sS",
            "-w",
            "\n%{http_code}",
            "-H",
            "Content-Type: application/json",
            "-d",
            &body.to_string(),
        ])
        .arg(format!("{}/audio/speech", stack.url))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&anonymous.stdout);
    let (error, status) = text.rsplit_once('\n').expect("body and status");
    assert_eq!(status, "401", "{text}");
    let error: Value = serde_json::from_str(error).expect("an OpenAI error body");
    assert_eq!(error["error"]["type"], "authentication_error", "{error}");
    // A served path with the wrong method: 405 naming the method it takes, OpenAI's shape.
    let wrong = Command::new("curl")
        .args(["-sS", "-D", "-", "-X", "GET"])
        .args(["-H", &format!("Authorization: Bearer {KEY_A}")])
        .arg(format!("{}/audio/speech", stack.url))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&wrong.stdout);
    let (head, body) = text.split_once("\r\n\r\n").expect("headers and body");
    assert!(head.starts_with("HTTP/1.1 405"), "{text}");
    assert!(
        head.to_ascii_lowercase().contains("\nallow: post"),
        "{text}"
    );
    let error: Value = serde_json::from_str(body).expect("an OpenAI error body");
    assert_eq!(error["error"]["code"], "method_not_allowed", "{error}");
    assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");
    assert_eq!(
        stack
            .fake
            .stats()
            .values()
            .map(|k| k.successes)
            .sum::<u64>(),
        4,
        "no call without a key reached the vendor"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_says_what_it_bills_in_its_headers_and_its_sse_done_event() {
    let stack = Stack::start(fake_openai(10, 0), 1, 4, 30_000).await;
    // OpenAI bills Unicode scalars: the Han characters and the emoji count one each.
    let text = "Bill me, 你好 🎉.";
    let characters = text.chars().count() as i64;
    let cost = characters as f64 * 15.0 / 1e6;
    let curl = |body: &Value| {
        let out = Command::new("curl")
            .args(["-sS", "-N", "-D", "-"])
            .args(["-H", &format!("Authorization: Bearer {KEY_A}")])
            .args([
                "-H",
                "Content-Type: application/json",
                "-d",
                &body.to_string(),
            ])
            .arg(format!("{}/audio/speech", stack.url))
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let header = |answer: &str, name: &str| -> String {
        answer
            .split("\r\n\r\n")
            .next()
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
            })
            .unwrap_or_else(|| panic!("no {name} header: {answer:.300}"))
    };
    let wav = curl(
        &json!({"model": "tts-1", "voice": stack.voice, "input": text, "response_format": "wav"}),
    );
    assert_eq!(header(&wav, "x-voxpool-characters"), characters.to_string());
    let said: f64 = header(&wav, "x-voxpool-cost").parse().expect("a number");
    assert!((said - cost).abs() < 1e-6, "cost {said}, expected {cost}");
    assert_eq!(header(&wav, "x-voxpool-currency"), "USD");
    let sse = curl(
        &json!({"model": "tts-1", "voice": stack.voice, "input": text, "response_format": "pcm", "stream_format": "sse"}),
    );
    let done: Value = sse
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|e| e["type"] == "speech.audio.done")
        .unwrap_or_else(|| panic!("no speech.audio.done event: {sse:.500}"));
    let usage = &done["usage"];
    assert_eq!(usage["characters"], characters, "{done}");
    assert_eq!(usage["cached_characters"], 0, "{done}");
    assert!(usage["audio_ms"].as_i64() > Some(0), "{done}");
    let billed = usage["cost"].as_f64().expect("cost");
    assert!((billed - cost).abs() < 1e-6, "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_bytes_arrive_before_the_vendor_finishes_and_a_disconnect_releases_the_lease() {
    // The vendor streams its first piece at once and the rest over a minute.
    let fake =
        fake_openai(10, 0).streaming(Streaming::new(Duration::ZERO, Duration::from_secs(60), 30));
    let stack = Stack::start(fake, 1, 4, 120_000).await;
    let spec = json!({"voice": stack.voice, "input": "A long answer.", "response_format": "pcm"});
    let mut hold = Command::new("python3")
        .arg(script())
        .args(["hold", &stack.url, KEY_A])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut signal = hold.stdin.take().expect("stdin");
    writeln!(signal, "{spec}").expect("write the body");
    let mut lines = BufReader::new(hold.stdout.take().expect("stdout")).lines();
    let first: Value =
        serde_json::from_str(&lines.next().expect("a line").expect("read")).expect("json");
    assert_eq!(first["status"], 200, "{first}");
    assert!(first["first_bytes"].as_u64() > Some(0), "{first}");
    assert_eq!(
        stack.vendor_in_flight(),
        1,
        "the vendor is still answering when the first bytes are in: {:?}",
        stack.fake.stats()
    );
    assert_eq!(
        stack.leases_in_flight().await,
        1,
        "its lease is held meanwhile"
    );

    signal.write_all(b"go\n").expect("signal");
    let closed: Value =
        serde_json::from_str(&lines.next().expect("a line").expect("read")).expect("json");
    assert_eq!(closed["closed"], true);
    assert!(hold.wait().expect("exit").success());
    let mut polls = 0;
    while stack.leases_in_flight().await != 0 || stack.vendor_in_flight() != 0 {
        polls += 1;
        assert!(
            polls < 200,
            "the disconnected call's lease and vendor request are still held after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_error_answers_the_status_and_shape_an_openai_client_expects() {
    // One key of capacity 1 and a 2 s deadline: a held call fills the pool.
    let stack = Stack::start(fake_openai(10, 0), 1, 1, 2_000).await;
    let check = |got: &Value, status: u64, class: &str, code: &str, param: Option<&str>| {
        assert_eq!(got["status"], status, "{got}");
        assert_eq!(got["class"], class, "{got}");
        assert_eq!(got["body"]["code"], code, "{got}");
        assert_eq!(got["body"]["param"].as_str(), param, "{got}");
        assert!(
            got["body"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{got}"
        );
    };
    let got = stack.speak("sk-not-a-key", json!({"input": "x"}));
    check(&got, 401, "AuthenticationError", "invalid_api_key", None);
    let got = stack.speak(KEY_A, json!({"input": "x", "speed": 9}));
    check(&got, 400, "BadRequestError", "invalid_value", Some("speed"));
    let got = stack.speak(KEY_A, json!({"input": "x", "response_format": "flac"}));
    check(
        &got,
        400,
        "BadRequestError",
        "invalid_value",
        Some("response_format"),
    );
    let got = stack.speak(KEY_A, json!({"input": "x".repeat(2_001)}));
    check(&got, 400, "BadRequestError", "invalid_value", Some("input"));
    let got = stack.speak(KEY_A, json!({"input": "x", "voice": "vp_no_such_pack"}));
    check(&got, 404, "NotFoundError", "voice_not_found", Some("voice"));
    assert!(
        got["body"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("GET /v1/audio/voices") && !m.contains("ListVoicePacks")),
        "an HTTP caller is pointed at the HTTP listing: {got}"
    );
    let got = stack.speak(KEY_A, json!({"input": "x".repeat(200_000)}));
    check(
        &got,
        413,
        "APIStatusError",
        "request_too_large",
        Some("body"),
    );

    // The vendor refuses with its 503: no other key can take the call.
    stack.fake.script([Step::Fail(Fault::ServerError)]);
    let got = stack.speak(KEY_A, json!({"input": "x"}));
    check(&got, 503, "InternalServerError", "keys_exhausted", None);
    // The vendor rate-limits the only key: 429 with the cooldown as Retry-After.
    stack.fake.script([Step::Fail(Fault::RateLimited {
        retry_after_secs: Some(2),
    })]);
    let got = stack.speak(KEY_A, json!({"input": "x"}));
    check(&got, 429, "RateLimitError", "keys_exhausted", None);
    assert!(
        got["retry_after"]
            .as_str()
            .and_then(|s| s.parse::<u64>().ok())
            >= Some(1),
        "{got}"
    );

    // A call the vendor holds past the deadline is 504; one waiting behind it for the only
    // slot is 429 with Retry-After.
    let seen = stack
        .fake
        .stats()
        .values()
        .map(|k| k.total_requests)
        .sum::<u64>();
    stack.fake.pause();
    let held = {
        let (url, voice) = (stack.url.clone(), stack.voice.clone());
        std::thread::spawn(move || {
            sdk(
                &["speak", &url, KEY_A],
                Some(&json!({"voice": voice, "input": "held"})),
            )
        })
    };
    stack.fake.wait_for_requests(seen + 1).await;
    let waiting = stack.speak(KEY_A, json!({"input": "behind"}));
    let held = held.join().expect("held call");
    stack.fake.resume();
    check(&held, 504, "InternalServerError", "deadline_exceeded", None);
    check(&waiting, 429, "RateLimitError", "pool_full", None);
    assert!(
        waiting["retry_after"]
            .as_str()
            .and_then(|s| s.parse::<u64>().ok())
            >= Some(1),
        "{waiting}"
    );
}

/// One HTTP/1.1 exchange written by hand (`request` as it goes on the wire, the connection
/// closed after it): the answer's status, and its body as JSON.
fn raw(url: &str, request: &[u8]) -> (u16, Value) {
    use std::io::Read as _;
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_owned();
    let mut tcp = std::net::TcpStream::connect(&addr).expect("connect");
    tcp.write_all(request).expect("send");
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).expect("read the answer");
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {answer:?}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    let body = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer:?}"));
    (status, body)
}

/// A speech request with `body` sent as `content_type`.
fn post(voice_body: &str, content_type: &str) -> Vec<u8> {
    format!(
        "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{voice_body}",
        voice_body.len()
    )
    .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anonymous_front_serves_the_sdk_and_refuses_what_it_would_not_apply() {
    // No [[http.api_keys]], --http-allow-anonymous; a deadline past the SDK's own 60 s, so a
    // call that waits the server's deadline out ends at the SDK instead.
    let stack = Stack::start_with(fake_openai(10, 0), 1, 1, 120_000, Access::Anonymous).await;
    // The SDK always sends a key: with none configured, any key is anonymous.
    let got = stack.speak("sk-any-key-at-all", json!({"input": "Hello, anyone."}));
    assert_eq!(got["status"], 200, "{got}");

    // The client's deadline: the vendor holds the call; X-Stainless-Timeout ends it as a 504
    // with its attempts, long before the server's own deadline or the SDK's timeout.
    stack.fake.pause();
    let got = stack.speak(
        "sk-any",
        json!({"input": "held", "_headers": {"X-Stainless-Timeout": "1.5"}}),
    );
    stack.fake.resume();
    assert_eq!(got["status"], 504, "{got}");
    assert_eq!(got["body"]["code"], "deadline_exceeded", "{got}");
    let got = stack.speak(
        "sk-any",
        json!({"input": "x", "_headers": {"X-Voxpool-Timeout": "soon"}}),
    );
    assert_eq!(got["status"], 400, "{got}");
    assert_eq!(got["body"]["param"], "X-Voxpool-Timeout", "{got}");

    let voice = &stack.voice;
    let cases = [
        (
            post(
                &format!(r#"{{"input":"x","voice":"{voice}"}}"#),
                "text/plain",
            ),
            "Content-Type",
        ),
        (
            post(
                &format!(r#"{{"input":"say this","voice":"{voice}","input":"say that"}}"#),
                "application/json",
            ),
            "input",
        ),
        (
            post(
                &format!(r#"{{"input":"x","voice":{{"id":"{voice}","style":"calm"}}}}"#),
                "application/json",
            ),
            "voice.style",
        ),
    ];
    for (request, param) in cases {
        let (status, body) = raw(&stack.url, &request);
        assert_eq!(status, 400, "{param}: {body}");
        assert_eq!(body["error"]["param"], param, "{body}");
        assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    }
    // hyper's own answers: a request line it cannot read, headers past its buffer.
    let (status, body) = raw(&stack.url, b"POST /v1/audio/speech HTTP/1.1 x\r\n\r\n");
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "malformed_request", "{body}");
    let mut big = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 100 * 1024));
    big.extend_from_slice(b"\r\n\r\n");
    let (status, body) = raw(&stack.url, &big);
    assert_eq!(status, 431, "{body}");
    assert_eq!(body["error"]["code"], "headers_too_large", "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_http_callers_on_a_hundred_slots_never_take_a_key_past_its_cap() {
    let stack = Stack::start(fake_openai(10, 200), 10, 10, 60_000).await;
    let spec = json!({"voice": stack.voice, "input": "One of many.", "response_format": "pcm"});
    // The vendor holds its answers until all 100 slots are taken, so the load fills the keys
    // however slowly the SDK's callers arrive on a busy machine.
    stack.fake.pause();
    let many = {
        let url = stack.url.clone();
        std::thread::spawn(move || sdk(&["many", &url, KEY_B, "200"], Some(&spec)))
    };
    stack.fake.wait_for_requests(100).await;
    stack.fake.resume();
    let got = many.join().expect("the SDK's callers");
    assert_eq!(
        got["statuses"],
        json!({"200": 200}),
        "every call answered with audio"
    );
    let stats = stack.fake.stats();
    assert_eq!(stats.len(), 10, "all ten keys were used: {stats:?}");
    for (key, s) in &stats {
        assert!(
            s.peak_concurrency <= 10,
            "{key} saw {} at once",
            s.peak_concurrency
        );
        assert_eq!(s.rejected_over_cap, 0, "{key} refused a call over its cap");
    }
    assert_eq!(stats.values().map(|k| k.successes).sum::<u64>(), 200);
    assert!(
        stats.values().any(|k| k.peak_concurrency == 10),
        "the load filled keys: {stats:?}"
    );
}
