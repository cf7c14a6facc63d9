//! First-audio benchmark (`make bench`; not a test): what a live character waits for, and how
//! long text runs, against streaming fake vendors. Side by side in one run:
//!
//! 1. **Time to first audio**: a fake OpenAI-compatible vendor that sends its first bytes after
//!    200 ms and the rest over 1.5 s. Direct: the `openai` adapter's first byte in its sink.
//!    Through voxpool: the first `SynthesizeStream` message (scheduler Acquire, the same
//!    adapter, the relay). p50/p99 of both, alternating rounds; floor ≤ 20 ms added at p50.
//! 2. **A 10-chunk text** (Volcengine V3 stream, 1024-byte chunks, each chunk's audio 200 ms to
//!    first byte + 400 ms): end-to-end `Synthesize` time with `max_parallel_chunks` at its
//!    default (4) and at 10, against 1 (one chunk after another); floor ≤ 0.35×.
//!
//! 3. **Self-hosted servers that stream** (vLLM-Omni, Fish Speech, GPT-SoVITS fakes: first bytes
//!    after 200 ms, the rest over 0.3 s, each in its server's framing, a reference clip per
//!    call): the first audio directly (the `selfhosted` adapter's first byte in its sink),
//!    through `SynthesizeStream` and through the HTTP front (`POST /v1/audio/speech`, first
//!    body bytes), alternating; floor: p50 ≤ the direct first byte + 5 ms on both fronts.
//! 4. **Short first chunk** on a server that answers whole (index-tts-vllm fake: 50 ms plus
//!    4 ms per character): the first audio of a 13-character sentence alone, of that sentence
//!    followed by about 230 characters (first chunk cut at the sentence), and of the same text
//!    as BATCH (the usual split: the whole text in one call), alternating; floor: the long
//!    text's first audio ≤ 1.2 × the sentence alone.
//!
//! Knobs: `FIRST_AUDIO_REQUESTS` per side (default 48), `FIRST_AUDIO_CONCURRENCY` (default 8),
//! `LONG_TEXT_RUNS` per setting (default 3), `SELFHOSTED_ROUNDS` per path (default 24).

mod common;
#[path = "first_audio/selfhosted.rs"]
mod selfhosted;
#[path = "common/stack.rs"]
#[allow(dead_code, reason = "this bench builds its own config")]
mod stack;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use common::{env_or, pct};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use voxpool_config::Config;
use voxpool_domain::secret::Secret;
use voxpool_fake_vendors::{FakeConfig, FakeVendor, Streaming, VendorKind};
use voxpool_proto::synthesis::v1::{self as pb, synthesis_client::SynthesisClient};
use voxpool_synthesis::adapters::{
    AudioFormat, AudioSink, KeyCredential, UpstreamTarget, Utterance, VendorAdapter, VendorRequest,
    http::shared_client, openai::OpenAi,
};
use voxpool_testkit::RedisServer;

const FLOOR_ADDED_MS: f64 = 20.0;
const FLOOR_RATIO: f64 = 0.35;
const FLOOR_SELFHOSTED_ADDED_MS: f64 = 5.0;
const FLOOR_SHORT_FIRST: f64 = 1.2;

/// A scheduler (Redis store) and one synthesis server per `max_parallel_chunks` value, in
/// process; returns a client per synthesis server, the config and the scheduler's address.
async fn stack(
    toml: &str,
    redis: &RedisServer,
    parallel: &[u32],
    shutdown: &CancellationToken,
) -> (
    Vec<SynthesisClient<tonic::transport::Channel>>,
    Config,
    std::net::SocketAddr,
) {
    let config = Config::from_toml_str(toml).expect("config");
    let scheduler = stack::scheduler(&config, &redis.url(), shutdown).await;
    let mut clients = Vec::new();
    for &n in parallel {
        let mut config = config.clone();
        config.synthesis.max_parallel_chunks = n;
        let addr = stack::synthesis(&config, scheduler, None, shutdown).await;
        clients.push(
            SynthesisClient::connect(format!("http://{addr}"))
                .await
                .expect("synthesis"),
        );
    }
    (clients, config, scheduler)
}

fn pool_toml(
    pool: &str,
    provider: &str,
    model: &str,
    base_url: &str,
    extra: &str,
    dir: &std::path::Path,
) -> String {
    let credential = dir.join(format!("{pool}-key"));
    std::fs::write(&credential, "k00\n").expect("credential file");
    format!(
        "[[pools]]\nid = \"{pool}\"\nprovider = \"{provider}\"\nmodel = \"{model}\"\n\
         [[pools.upstreams]]\nid = \"u\"\nbase_url = \"{base_url}\"\n{extra}\
         [[pools.upstreams.keys]]\nid = \"k00\"\ncapacity = 64\ncredential = {{ file = \"{}\" }}\n",
        credential.display()
    )
}

fn main() {
    let per_side = env_or("FIRST_AUDIO_REQUESTS", 48).max(1);
    let concurrency = env_or("FIRST_AUDIO_CONCURRENCY", 8).max(1);
    let runs = env_or("LONG_TEXT_RUNS", 3).max(1);
    let rounds_selfhosted = env_or("SELFHOSTED_ROUNDS", 24).max(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    rt.block_on(async {
        let shutdown = CancellationToken::new();
        let live = FakeVendor::start(
            FakeConfig::new(VendorKind::OpenAi)
                .cap(0)
                .streaming(Streaming::new(
                    Duration::from_millis(200),
                    Duration::from_millis(1500),
                    16,
                )),
        )
        .await
        .expect("fake vendor");
        let chunked = FakeVendor::start(
            FakeConfig::new(VendorKind::Volcengine)
                .cap(0)
                .streaming(Streaming::new(
                    Duration::from_millis(200),
                    Duration::from_millis(400),
                    4,
                )),
        )
        .await
        .expect("fake vendor");
        let servers = selfhosted::fakes().await;
        let toml = format!(
            "{}{}{}",
            selfhosted::pools_toml(&servers, dir.path()),
            pool_toml("openai-fake", "openai", "tts-1", &live.base_url(), "", dir.path()),
            pool_toml(
                "volcengine-fake",
                "volcengine",
                "seed-tts-1.0",
                &chunked.base_url(),
                "params = { api = \"v3\" }\n",
                dir.path()
            )
        );
        let (clients, config, scheduler) = stack(&toml, &redis, &[4, 1, 10], &shutdown).await;
        let (default4, one, ten) = (clients[0].clone(), clients[1].clone(), clients[2].clone());

        // 1. Time to first audio.
        let voice = Arc::new(voxpool_fake_vendors::snapshot("openai", "tts-1", "alloy"));
        let request = pb::SynthesizeRequest {
            voice: Some(pb::synthesize_request::Voice::Snapshot(voice.to_pb())),
            text: "Hello there, this is a live character speaking.".into(),
            format: pb::AudioFormat::Pcm as i32,
            ..Default::default()
        };
        let adapter = Arc::new(OpenAi::new(shared_client().expect("http client")));
        let key = Arc::new(KeyCredential {
            key_id: "u/k00".into(),
            app_id: "k00".into(),
            secret: Some(Secret::new("k00")),
        });
        let upstream = Arc::new(UpstreamTarget {
            id: "u".into(),
            base_url: Some(live.base_url()),
            ..Default::default()
        });
        let direct = |n: usize| {
            let (adapter, voice, key, upstream) =
                (adapter.clone(), voice.clone(), key.clone(), upstream.clone());
            async move {
                let mut out = Vec::new();
                for _ in 0..n {
                    let (sink, mut rx) = AudioSink::new();
                    let utterance = Utterance {
                        text: "Hello there, this is a live character speaking.".to_owned(),
                        voice: voice.clone(),
                        pool_model: "tts-1".to_owned(),
                        format: AudioFormat::Pcm,
                        sample_rate_hz: None,
                        reference: None,
                        seed: None,
                    };
                    let t = Instant::now();
                    let call = {
                        let (adapter, key, upstream) =
                            (adapter.clone(), key.clone(), upstream.clone());
                        tokio::spawn(async move {
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
                        })
                    };
                    rx.recv().await.expect("first audio");
                    out.push(t.elapsed());
                    call.await.expect("task").expect("direct call");
                }
                out
            }
        };
        let through = |n: usize| {
            let (mut client, request) = (default4.clone(), request.clone());
            async move {
                let mut out = Vec::new();
                for _ in 0..n {
                    let t = Instant::now();
                    let mut stream = client
                        .synthesize_stream(request.clone())
                        .await
                        .expect("stream")
                        .into_inner();
                    stream.next().await.expect("a message").expect("audio");
                    out.push(t.elapsed());
                    while let Some(m) = stream.next().await {
                        m.expect("message");
                    }
                }
                out
            }
        };
        // Warm-up: connections, scripts.
        let _ = futures::future::join(direct(2), through(2)).await;
        let rounds = 4;
        let per_task = (per_side / concurrency / rounds).max(1);
        let (mut d, mut v) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            for got in futures::future::join_all((0..concurrency).map(|_| direct(per_task))).await {
                d.extend(got);
            }
            for got in futures::future::join_all((0..concurrency).map(|_| through(per_task))).await {
                v.extend(got);
            }
        }
        d.sort_unstable();
        v.sort_unstable();
        let (d50, d99, v50, v99) = (pct(&d, 0.5), pct(&d, 0.99), pct(&v, 0.5), pct(&v, 0.99));
        println!("## First audio\n");
        println!(
            "Fake OpenAI-compatible vendor streaming PCM: first bytes after 200 ms, the rest over \
             1.5 s in 16 pieces. {} calls per side, {concurrency} at a time, alternating rounds.\n",
            v.len()
        );
        println!("| path | first audio p50 ms | p99 ms |");
        println!("|---|---:|---:|");
        println!("| openai adapter → fake vendor, first byte in the sink (direct) | {d50:.1} | {d99:.1} |");
        println!("| SynthesizeStream → Acquire → adapter → first message (voxpool) | {v50:.1} | {v99:.1} |");
        println!();
        let added = v50 - d50;
        println!(
            "- p50 added by voxpool: {added:.1} ms (floor ≤ {FLOOR_ADDED_MS} ms): {}\n",
            if added <= FLOOR_ADDED_MS { "meets floor" } else { "BELOW FLOOR" }
        );

        // 2. A 10-chunk text, parallel vs one at a time.
        let sentence = "The quick brown fox jumps over the lazy dog near the quiet river bank today. ";
        let block: String = sentence.repeat(13);
        let text: String = (0..10).map(|_| block.as_str()).collect();
        let voice = voxpool_fake_vendors::snapshot("volcengine", "seed-tts-1.0", "zh_female_shuangkuaisisi_moon_bigtts");
        let long = pb::SynthesizeRequest {
            voice: Some(pb::synthesize_request::Voice::Snapshot(voice.to_pb())),
            text,
            format: pb::AudioFormat::Pcm as i32,
            ..Default::default()
        };
        let time = |client: &SynthesisClient<tonic::transport::Channel>| {
            let (mut client, long) = (client.clone(), long.clone());
            async move {
                let t = Instant::now();
                let resp = client.synthesize(long).await.expect("synthesize").into_inner();
                (t.elapsed(), resp.attempts.len())
            }
        };
        let (_, chunks) = time(&one).await;
        let (mut s1, mut s4, mut s10) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            s1.push(time(&one).await.0);
            s4.push(time(&default4).await.0);
            s10.push(time(&ten).await.0);
        }
        let median = |v: &mut Vec<Duration>| {
            v.sort_unstable();
            v[v.len() / 2].as_secs_f64() * 1000.0
        };
        let (m1, m4, m10) = (median(&mut s1), median(&mut s4), median(&mut s10));
        println!("## Long text: chunks side by side\n");
        println!(
            "A text of {chunks} chunks (Volcengine V3 fake stream, each chunk 200 ms to first byte + \
             400 ms), unary Synthesize, median of {runs} runs per setting, alternating.\n"
        );
        println!("| max_parallel_chunks | end to end ms | vs one at a time |");
        println!("|---:|---:|---:|");
        println!("| 1 (one at a time) | {m1:.0} | 1.00 |");
        println!("| 4 (default) | {m4:.0} | {:.2} |", m4 / m1);
        println!("| 10 | {m10:.0} | {:.2} |", m10 / m1);
        println!();
        println!(
            "- default (4) vs one at a time: {:.2}× (floor ≤ {FLOOR_RATIO}×): {}\n",
            m4 / m1,
            if m4 / m1 <= FLOOR_RATIO { "meets floor" } else { "BELOW FLOOR" }
        );
        self_hosted(&servers, &config, scheduler, dir.path(), rounds_selfhosted, &shutdown).await;
        shutdown.cancel();
    });
}

/// Parts 3 and 4 (module doc).
async fn self_hosted(
    servers: &[(voxpool_fake_vendors::ServerProfile, FakeVendor)],
    config: &Config,
    scheduler: std::net::SocketAddr,
    dir: &std::path::Path,
    rounds: usize,
    shutdown: &CancellationToken,
) {
    use voxpool_proto::scheduler::v1::Priority;
    let clip = selfhosted::clip(dir);
    let voices: Vec<_> = servers
        .iter()
        .map(|(profile, _)| selfhosted::voice(*profile, &clip.0))
        .collect();
    let (grpc_addr, http_addr) =
        selfhosted::synthesis(config, scheduler, dir, voices.clone(), shutdown).await;
    let client = SynthesisClient::connect(format!("http://{grpc_addr}"))
        .await
        .expect("synthesis");
    let http = reqwest::Client::new();
    let text = "Hello there, this is a live character speaking.";
    println!(
        "## First audio from self-hosted servers that stream
"
    );
    println!(
        "Fake servers in each one's streaming framing (a WAV header, then 16-bit samples): first \
         bytes after {} ms, the rest over {} ms in 8 pieces; a 4 s reference clip per call. \
         {rounds} sequential calls per path and server, alternating.\n",
        selfhosted::FIRST_BYTE.as_millis(),
        selfhosted::STREAM_REST.as_millis()
    );
    println!(
        "| server | direct p50 ms | SynthesizeStream p50 / p99 ms | HTTP front p50 / p99 ms | added p50 gRPC / HTTP ms |"
    );
    println!("|---|---:|---:|---:|---:|");
    let mut worst: f64 = 0.0;
    for ((profile, fake), voice) in servers.iter().zip(&voices) {
        if !selfhosted::STREAMING.contains(profile) {
            continue;
        }
        let shared = Arc::new(voice.clone());
        let (mut d, mut g, mut h) = (Vec::new(), Vec::new(), Vec::new());
        // Warm-up: connections, the clip placed and cached.
        selfhosted::direct(*profile, fake, &shared, &clip, dir).await;
        selfhosted::grpc(&client, voice, text, Priority::Interactive).await;
        selfhosted::http(&http, http_addr, voice).await;
        for _ in 0..rounds {
            d.push(selfhosted::direct(*profile, fake, &shared, &clip, dir).await);
            g.push(selfhosted::grpc(&client, voice, text, Priority::Interactive).await);
            h.push(selfhosted::http(&http, http_addr, voice).await);
        }
        for v in [&mut d, &mut g, &mut h] {
            v.sort_unstable();
        }
        let (d50, g50, h50) = (pct(&d, 0.5), pct(&g, 0.5), pct(&h, 0.5));
        worst = worst.max(g50 - d50).max(h50 - d50);
        println!(
            "| {} | {d50:.1} | {g50:.1} / {:.1} | {h50:.1} / {:.1} | {:.1} / {:.1} |",
            profile.as_str(),
            pct(&g, 0.99),
            pct(&h, 0.99),
            g50 - d50,
            h50 - d50
        );
    }
    println!();
    println!(
        "- worst p50 added over the direct first byte: {worst:.1} ms (floor ≤ {FLOOR_SELFHOSTED_ADDED_MS} ms): {}\n",
        if worst <= FLOOR_SELFHOSTED_ADDED_MS {
            "meets floor"
        } else {
            "BELOW FLOOR"
        }
    );

    let Some(whole) = servers
        .iter()
        .zip(&voices)
        .find(|((p, _), _)| !selfhosted::STREAMING.contains(p))
        .map(|(_, v)| v)
    else {
        return;
    };
    let long = format!("{}{}", selfhosted::FIRST_SENTENCE, selfhosted::REST);
    let (mut alone, mut short, mut batch) = (Vec::new(), Vec::new(), Vec::new());
    selfhosted::grpc(&client, whole, &long, Priority::Interactive).await;
    for _ in 0..rounds {
        alone.push(
            selfhosted::grpc(
                &client,
                whole,
                selfhosted::FIRST_SENTENCE,
                Priority::Interactive,
            )
            .await,
        );
        short.push(selfhosted::grpc(&client, whole, &long, Priority::Interactive).await);
        batch.push(selfhosted::grpc(&client, whole, &long, Priority::Batch).await);
    }
    for v in [&mut alone, &mut short, &mut batch] {
        v.sort_unstable();
    }
    let (a50, s50, b50) = (pct(&alone, 0.5), pct(&short, 0.5), pct(&batch, 0.5));
    println!(
        "## Short first chunk on a server that answers whole
"
    );
    println!(
        "Fake index-tts-vllm server (whole WAV after {} ms + {} ms per character); \
         `SynthesizeStream`, {rounds} calls per row, alternating.\n",
        selfhosted::WHOLE_START.as_millis(),
        selfhosted::PER_CHAR.as_millis()
    );
    println!("| request | first audio p50 ms | p99 ms | vs sentence alone |");
    println!("|---|---:|---:|---:|");
    println!(
        "| the first sentence alone ({} characters) | {a50:.1} | {:.1} | 1.00 |",
        selfhosted::FIRST_SENTENCE.chars().count(),
        pct(&alone, 0.99)
    );
    println!(
        "| that sentence + {} characters (short first chunk) | {s50:.1} | {:.1} | {:.2} |",
        selfhosted::REST.chars().count(),
        pct(&short, 0.99),
        s50 / a50
    );
    println!(
        "| the same text as BATCH (usual split: one call) | {b50:.1} | {:.1} | {:.2} |",
        pct(&batch, 0.99),
        b50 / a50
    );
    println!();
    println!(
        "- short first chunk vs the sentence alone: {:.2}× (floor ≤ {FLOOR_SHORT_FIRST}×): {}\n",
        s50 / a50,
        if s50 / a50 <= FLOOR_SHORT_FIRST {
            "meets floor"
        } else {
            "BELOW FLOOR"
        }
    );
}
