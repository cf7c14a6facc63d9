//! HTTP front benchmark (`make bench`; not a test): what the OpenAI-compatible front costs
//! next to gRPC, and how it holds the peer experiment's load. The release binaries next to this
//! bench (`make bench` builds them) run as a stack: a memory-store scheduler, a catalog on
//! SQLite seeded with one pack, a synthesis with `--http-listen`, and an in-process fake
//! OpenAI-compatible vendor with 10 keys of capacity 10. Side by side in one run:
//!
//! 1. **Overhead** over a zero-latency fake: one sequential client, alternating rounds of
//!    gRPC `Synthesize` (pack id, WAV) and `POST /v1/audio/speech` (the same pack, WAV), both
//!    on kept-alive connections. p50/p99 of both; floor ≤ 0.5 ms added by HTTP at p50.
//! 2. **Load**: the fake at 0.4 s per call, 600 calls, 200 at a time, sent by an `aiohttp`
//!    client (benches/http_load.py, `python3` with aiohttp installed). Reports answered calls,
//!    ok/s against the pool's ceiling (100 slots / 0.4 s = 250/s) and the 429s the vendor sent.
//!
//! Knobs: `HTTP_OVERHEAD_REQUESTS` per side (default 2000), `HTTP_OVERHEAD_ROUNDS` (10),
//! `HTTP_LOAD_CALLS` (600), `HTTP_LOAD_CONCURRENCY` (200).

mod common;

use std::{
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use common::{env_or, pct};
use voxpool_fake_vendors::{FakeConfig, FakeVendor, Latency, VendorKind};
use voxpool_proto::synthesis::v1::{self as pb, synthesis_client::SynthesisClient};

const FLOOR_ADDED_MS: f64 = 0.5;
const POOL: &str = "fake-speech";
const KEYS: usize = 10;
const CAP: u32 = 10;
const API_KEY: &str = "bench-http-key";
const CLIENT_TOKEN: &str = "bench-client-token";

/// A child killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `cmd` and returns it with its first `lines` stdout lines.
fn spawn(mut cmd: Command, lines: usize) -> (Proc, Vec<String>) {
    let mut child = cmd
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let read = (0..lines)
        .map(|_| {
            let mut l = String::new();
            out.read_line(&mut l).expect("a stdout line");
            l.trim().to_owned()
        })
        .collect();
    (Proc(child), read)
}

fn after<'a>(line: &'a str, marker: &str) -> &'a str {
    line.split(marker)
        .nth(1)
        .unwrap_or_else(|| panic!("{line:?} has no {marker:?}"))
}

fn write_config(dir: &Path, base_url: &str) -> PathBuf {
    let mut t = format!(
        "[[pools]]\nid = \"{POOL}\"\nprovider = \"openai\"\nmodel = \"tts-1\"\n\
         cache = {{ enabled = false }}\n\
         [[pools.upstreams]]\nid = \"u\"\nbase_url = \"{base_url}\"\n"
    );
    for k in 0..KEYS {
        let credential = dir.join(format!("k{k}"));
        std::fs::write(&credential, format!("sk-{k}\n")).expect("credential");
        t.push_str(&format!(
            "[[pools.upstreams.keys]]\nid = \"k{k}\"\ncapacity = {CAP}\ncredential = {{ file = \"{}\" }}\n",
            credential.display()
        ));
    }
    t.push_str(
        "[[http.api_keys]]\nkey = { env = \"BENCH_HTTP_KEY\" }\ntenant = \"bench\"\n\
         [[client_tokens]]\nname = \"bench\"\ntoken = { env = \"BENCH_CLIENT_TOKEN\" }\n\
         [scheduler]\nrecovery_window_ms = 0\nwait_poll_ms = 10\n\
         [synthesis]\ndefault_deadline_ms = 60000\n",
    );
    let path = dir.join("config.toml");
    std::fs::write(&path, t).expect("config");
    path
}

fn main() {
    let per_side = env_or("HTTP_OVERHEAD_REQUESTS", 2000).max(1);
    let rounds = env_or("HTTP_OVERHEAD_ROUNDS", 10).clamp(1, per_side);
    let calls = env_or("HTTP_LOAD_CALLS", 600);
    let concurrency = env_or("HTTP_LOAD_CONCURRENCY", 200);
    let bin = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent()?.parent().map(Path::to_path_buf))
        .filter(|d| d.join("voxpool-synthesis").exists() && d.join("voxpool-catalog").exists());
    let Some(bin) = bin else {
        println!(
            "## HTTP front\n\nskipped: no release binaries next to the bench (make bench builds them)\n"
        );
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let fake = FakeVendor::start(FakeConfig::new(VendorKind::OpenAi).cap(CAP))
            .await
            .expect("fake vendor");
        let dir = tempfile::tempdir().expect("tempdir");
        let config = write_config(dir.path(), &fake.base_url());
        let db = format!("sqlite://{}?mode=rwc", dir.path().join("c.db").display());
        let packs = dir.path().join("packs.toml");
        std::fs::write(&packs, format!("[[packs]]\ndisplay_name = \"Fake Alloy\"\nprovider = \"openai\"\nmodel = \"tts-1\"\nvoice_id = \"alloy\"\ntts_model_id = \"{POOL}\"\ntier = \"STANDARD\"\n")).expect("packs");
        let seeded = Command::new(bin.join("voxpool-catalog"))
            .args(["--database", &db, "seed"])
            .arg(&packs)
            .output()
            .expect("seed");
        assert!(seeded.status.success(), "seed: {seeded:?}");
        let env = |c: &mut Command| {
            c.env("BENCH_HTTP_KEY", API_KEY)
                .env("BENCH_CLIENT_TOKEN", CLIENT_TOKEN)
                .env("VOXPOOL_CLIENT_TOKEN", CLIENT_TOKEN);
        };
        let mut c = Command::new(bin.join("voxpool-scheduler"));
        c.arg("--config").arg(&config).args(["--store", "memory", "--listen", "127.0.0.1:0"]);
        env(&mut c);
        let (_scheduler, out) = spawn(c, 1);
        let scheduler = after(&out[0], " listening on ").to_owned();
        let mut c = Command::new(bin.join("voxpool-catalog"));
        c.args(["--database", &db, "--listen", "127.0.0.1:0"]);
        let (_catalog, out) = spawn(c, 1);
        let catalog = after(&out[0], " listening on ").to_owned();
        let mut c = Command::new(bin.join("voxpool-synthesis"));
        c.arg("--config").arg(&config).args([
            "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--cache", "off",
            "--scheduler", &format!("http://{scheduler}"), "--catalog", &format!("http://{catalog}"),
        ]);
        env(&mut c);
        let (_synthesis, out) = spawn(c, 2);
        let grpc = after(&out[0], " listening on ").to_owned();
        let http = after(&out[1], " http front on ").to_owned();

        let web = voxpool_synthesis::adapters::http::shared_client().expect("http client");
        let voices: serde_json::Value = web
            .get(format!("{http}/audio/voices"))
            .bearer_auth(API_KEY)
            .send()
            .await
            .expect("voices")
            .json()
            .await
            .expect("voices json");
        let voice = voices["data"][0]["id"].as_str().expect("a voice").to_owned();

        let channel = tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect synthesis");
        let bearer: tonic::metadata::MetadataValue<_> =
            format!("Bearer {CLIENT_TOKEN}").parse().expect("header");
        let mut client = SynthesisClient::with_interceptor(channel, move |mut r: tonic::Request<()>| {
            r.metadata_mut().insert("authorization", bearer.clone());
            Ok(r)
        });
        let request = pb::SynthesizeRequest {
            voice: Some(pb::synthesize_request::Voice::PackId(voice.clone())),
            text: "Hello there.".into(),
            format: pb::AudioFormat::Wav as i32,
            ..Default::default()
        };
        let body = serde_json::json!({"model": "tts-1", "voice": voice, "input": "Hello there.", "response_format": "wav"});
        let speech = format!("{http}/audio/speech");
        let post = || async {
            let r = web
                .post(&speech)
                .bearer_auth(API_KEY)
                .json(&body)
                .send()
                .await
                .expect("speech");
            assert!(r.status().is_success(), "speech: {}", r.status());
            r.bytes().await.expect("audio body")
        };
        for _ in 0..100 {
            client.synthesize(request.clone()).await.expect("synthesize");
            post().await;
        }
        let per_round = per_side / rounds;
        let (mut grpc_times, mut http_times) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            for _ in 0..per_round {
                let t = Instant::now();
                client.synthesize(request.clone()).await.expect("synthesize");
                grpc_times.push(t.elapsed());
            }
            for _ in 0..per_round {
                let t = Instant::now();
                post().await;
                http_times.push(t.elapsed());
            }
        }
        grpc_times.sort_unstable();
        http_times.sort_unstable();
        let (g50, g99) = (pct(&grpc_times, 0.5), pct(&grpc_times, 0.99));
        let (h50, h99) = (pct(&http_times, 0.5), pct(&http_times, 0.99));
        let added = h50 - g50;
        println!("## HTTP front\n");
        println!(
            "### Overhead\n\nOne sequential client, {} requests per side in alternating rounds of {per_round}, zero-latency \
             fake OpenAI-compatible vendor (200 ms WAV), release binaries (memory-store scheduler, SQLite catalog).\n",
            grpc_times.len()
        );
        println!("| path | p50 ms | p99 ms |");
        println!("|---|---:|---:|");
        println!("| gRPC `Synthesize` (pack id) | {g50:.3} | {g99:.3} |");
        println!("| `POST /v1/audio/speech` (same pack) | {h50:.3} | {h99:.3} |");
        println!();
        println!(
            "- p50 added by the HTTP front: {added:.3} ms (floor ≤ {FLOOR_ADDED_MS} ms): {}\n",
            if added <= FLOOR_ADDED_MS { "meets floor" } else { "BELOW FLOOR" }
        );

        fake.set_latency(Latency::Fixed(Duration::from_millis(400)));
        let before = fake.stats();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/http_load.py");
        let out = Command::new("python3")
            .arg(&script)
            .args([&speech, API_KEY, &voice, &calls.to_string(), &concurrency.to_string()])
            .output();
        println!("### {calls} calls, {concurrency} at a time, {KEYS} keys × cap {CAP} at 0.4 s, aiohttp client\n");
        let report: serde_json::Value = match out {
            Ok(o) if o.status.success() => serde_json::from_slice(&o.stdout).expect("load report"),
            Ok(o) => {
                println!("skipped: http_load.py failed: {}\n", String::from_utf8_lossy(&o.stderr).trim());
                return;
            }
            Err(e) => {
                println!("skipped: no python3 ({e})\n");
                return;
            }
        };
        let after = fake.stats();
        let rejected: u64 = after.iter().map(|(k, s)| s.rejected_over_cap - before.get(k).map_or(0, |b| b.rejected_over_cap)).sum();
        let peak = after.values().map(|s| s.peak_concurrency).max().unwrap_or(0);
        let ok = report["ok"].as_u64().unwrap_or(0);
        let seconds = report["seconds"].as_f64().unwrap_or(f64::NAN);
        let ceiling = (KEYS as f64 * f64::from(CAP)) / 0.4;
        println!("| answered 200 | other answers | seconds | ok/s | ceiling ok/s | vendor 429s | peak per key |");
        println!("|---:|---|---:|---:|---:|---:|---:|");
        println!(
            "| {ok} | {} | {seconds:.2} | {:.0} | {ceiling:.0} | {rejected} | {peak} |\n",
            report["other"],
            ok as f64 / seconds
        );
    });
}
