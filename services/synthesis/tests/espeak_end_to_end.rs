//! End to end with real parts: an in-process PoolScheduler, the real `voxpool-synthesis`
//! binary, and the real espeak-ng engine. The audio must be a correct WAV of real speech, and
//! a Ctrl-C (SIGINT to the terminal's process group) drains a call in flight instead of
//! killing its engine.

mod common;

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    process::{Child, Command, Stdio},
    time::Duration,
};

use common::{Stack, json_of, pool_toml, request, snapshot, start_scheduler};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use voxpool_config::Config;
use voxpool_proto::synthesis::v1::{self as pb, synthesis_client::SynthesisClient};
use voxpool_synthesis::adapters::registry::{AdapterOptions, builtin};

const CONFIG: &str = r#"
[[pools]]
id = "espeak-local"
provider = "espeak"
model = "espeak-ng"
[[pools.upstreams]]
id = "local"
[[pools.upstreams.keys]]
id = "engine-1"
capacity = 4
[[pools.upstreams.keys]]
id = "engine-2"
capacity = 4
[scheduler]
# A fresh in-process store: no leases to wait for.
recovery_window_ms = 0
"#;

/// The binary, killed when dropped.
struct Synthesis {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Synthesis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the binary on 127.0.0.1:0 and reads the bound address from its JSON startup log.
fn spawn_synthesis(config: &std::path::Path, scheduler: SocketAddr) -> Synthesis {
    spawn_synthesis_with(
        Command::new(env!("CARGO_BIN_EXE_voxpool-synthesis")),
        config,
        scheduler,
    )
}

/// [`spawn_synthesis`] of `command` (the binary, with whatever the test set on it).
fn spawn_synthesis_with(
    mut command: Command,
    config: &std::path::Path,
    scheduler: SocketAddr,
) -> Synthesis {
    let mut child = command
        .arg("--config")
        .arg(config)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--scheduler",
            &format!("http://{scheduler}"),
            "--catalog",
            "http://127.0.0.1:1",
        ])
        .env("VOXPOOL_LOG_FORMAT", "json")
        .env("RUST_LOG", "info")
        // Every call must reach the engine (and nothing lands in the user's data directory).
        .env("VOXPOOL_CACHE", "off")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn voxpool-synthesis");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("synthesis exited before serving")
            .expect("read log line");
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if v["fields"]["message"] == "voxpool-synthesis serving" {
            break v["fields"]["listen"]
                .as_str()
                .expect("listen field")
                .parse()
                .expect("socket addr");
        }
    };
    std::thread::spawn(move || lines.for_each(drop));
    Synthesis { child, addr }
}

fn rms(samples: &[i16]) -> f64 {
    let sum: f64 = samples.iter().map(|&s| f64::from(s) * f64::from(s)).sum();
    (sum / samples.len().max(1) as f64).sqrt()
}

#[tokio::test]
async fn real_binary_and_engine_produce_a_correct_wav_of_real_speech() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pools.toml");
    std::fs::write(&path, CONFIG).expect("write config");
    let config = Config::from_toml_str(CONFIG).expect("config");
    let shutdown = CancellationToken::new();
    let (scheduler, _store) = start_scheduler(&config, shutdown.clone()).await;
    let synthesis = spawn_synthesis(&path, scheduler);
    let channel = Channel::from_shared(format!("http://{}", synthesis.addr))
        .expect("url")
        .connect()
        .await
        .expect("connect");

    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    for service in ["", "voxpool.synthesis.v1.Synthesis"] {
        let status = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: service.into(),
            })
            .await
            .expect("health check")
            .into_inner()
            .status;
        assert_eq!(
            status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32,
            "{service:?}"
        );
    }

    let voice = snapshot(
        "espeak",
        "espeak-local",
        "en-us",
        r#"{"pitchPct":20,"rate":1.2,"volumePct":-10}"#,
    );
    let req = pb::SynthesizeRequest {
        voice: Some(pb::synthesize_request::Voice::SnapshotJson(json_of(&voice))),
        text: "Hello world. This is voxpool speaking through a leased engine slot.".into(),
        format: pb::AudioFormat::Wav as i32,
        ..Default::default()
    };
    let resp = SynthesisClient::new(channel)
        .max_decoding_message_size(64 << 20)
        .synthesize(req)
        .await
        .expect("synthesize")
        .into_inner();

    let wav = &resp.audio;
    assert_eq!(&wav[0..4], b"RIFF");
    assert_eq!(&wav[8..16], b"WAVEfmt ");
    assert_eq!(
        u32::from_le_bytes([wav[4], wav[5], wav[6], wav[7]]) as usize,
        wav.len() - 8,
        "RIFF size matches"
    );
    assert_eq!(&wav[36..40], b"data");
    assert_eq!(
        u32::from_le_bytes([wav[40], wav[41], wav[42], wav[43]]) as usize,
        wav.len() - 44,
        "data size matches"
    );
    let reader = hound::WavReader::new(std::io::Cursor::new(wav)).expect("hound reads it");
    let spec = reader.spec();
    assert_eq!(
        (spec.sample_rate, spec.channels, spec.bits_per_sample),
        (22_050, 1, 16)
    );
    let samples: Vec<i16> = reader
        .into_samples()
        .collect::<Result<_, _>>()
        .expect("samples");
    let seconds = samples.len() as f64 / 22_050.0;
    assert!(seconds > 0.5, "{seconds} s of audio");
    let voiced: Vec<i16> = samples
        .chunks(2205)
        .filter(|w| rms(w) > 300.0)
        .flatten()
        .copied()
        .collect();
    assert!(
        voiced.len() as f64 / 22_050.0 > 0.5,
        "{} s above the silence threshold",
        voiced.len() as f64 / 22_050.0
    );
    assert!(rms(&voiced) > 1000.0, "rms {}", rms(&voiced));
    assert_eq!(resp.sample_rate_hz, 22_050);
    assert_eq!(resp.format, pb::AudioFormat::Wav as i32);
    assert!(resp.key_id.starts_with("local/engine-"), "{}", resp.key_id);
    assert_eq!(resp.attempts.len(), 1);
    shutdown.cancel();
}

#[tokio::test]
async fn params_change_the_audio_and_quiet_volume_is_quieter() {
    let stack = Stack::start(
        &pool_toml("espeak-local", "espeak", 1, 1, 4),
        builtin(&AdapterOptions::default()),
    )
    .await;
    let text = "The quick brown fox jumps over the lazy dog.";
    let loud = stack
        .synthesize(request(
            &snapshot("espeak", "espeak-local", "en-us", "{}"),
            text,
        ))
        .await
        .expect("default");
    let quiet = stack
        .synthesize(request(
            &snapshot("espeak", "espeak-local", "en-us", r#"{"volumePct":-70}"#),
            text,
        ))
        .await
        .expect("quiet");
    let fast = stack
        .synthesize(request(
            &snapshot("espeak", "espeak-local", "en-us", r#"{"rate":2}"#),
            text,
        ))
        .await
        .expect("fast");
    let samples = |wav: &[u8]| -> Vec<i16> {
        hound::WavReader::new(std::io::Cursor::new(wav))
            .expect("wav")
            .into_samples()
            .collect::<Result<_, _>>()
            .expect("samples")
    };
    let (l, q, f) = (
        samples(&loud.audio),
        samples(&quiet.audio),
        samples(&fast.audio),
    );
    assert!(
        rms(&q) < rms(&l) * 0.6,
        "volume -70%: rms {} vs {}",
        rms(&q),
        rms(&l)
    );
    assert!(
        (f.len() as f64) < l.len() as f64 * 0.75,
        "rate 2.0: {} vs {} samples",
        f.len(),
        l.len()
    );
}

#[tokio::test]
async fn espeak_stream_concatenates_to_the_unary_wav() {
    let stack = Stack::start(
        &pool_toml("espeak-local", "espeak", 1, 1, 4),
        builtin(&AdapterOptions::default()),
    )
    .await;
    let req = request(
        &snapshot("espeak", "espeak-local", "en-us", "{}"),
        "Streaming works. Really.",
    );
    let unary = stack.synthesize(req.clone()).await.expect("unary").audio;
    let mut stream = stack
        .synthesis
        .clone()
        .synthesize_stream(req)
        .await
        .expect("stream")
        .into_inner();
    let mut joined = Vec::new();
    let mut last_final = false;
    while let Some(msg) = tokio::time::timeout(Duration::from_secs(30), stream.next())
        .await
        .expect("message in time")
    {
        let msg = msg.expect("chunk");
        joined.extend(msg.audio);
        last_final = msg.r#final;
    }
    assert!(last_final);
    assert_eq!(
        joined, unary,
        "espeak-ng output is deterministic; the stream carries the same WAV"
    );
    assert_eq!(stack.in_flight("espeak-local").await, 0);
}

/// A stand-in for espeak-ng that reports its start (`started`), waits for `go`, then runs the
/// real engine; its own process group shows in `pgid`. `--version` (synthesis's start-up check)
/// goes straight to the engine.
const GATED_ENGINE: &str = r#"#!/bin/sh
dir=$(dirname "$0")
if [ "$1" = --version ]; then exec espeak-ng --version; fi
cut -d' ' -f5 /proc/$$/stat > "$dir/pgid.tmp" && mv "$dir/pgid.tmp" "$dir/pgid"
touch "$dir/started"
while [ ! -e "$dir/go" ]; do sleep 0.01; done
exec espeak-ng "$@"
"#;

/// Ctrl-C in the terminal of `make run` is SIGINT to its whole foreground process group:
/// synthesis drains, and the engine it is running for a call must not be killed under it.
#[tokio::test]
async fn a_ctrl_c_drains_synthesis_without_killing_the_engine_mid_call() {
    use std::os::unix::{fs::PermissionsExt as _, process::CommandExt as _};
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = dir.path().join("espeak-gated");
    std::fs::write(&engine, GATED_ENGINE).expect("engine script");
    std::fs::set_permissions(&engine, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let path = dir.path().join("pools.toml");
    std::fs::write(&path, CONFIG).expect("write config");
    let config = Config::from_toml_str(CONFIG).expect("config");
    let shutdown = CancellationToken::new();
    let (scheduler, _store) = start_scheduler(&config, shutdown.clone()).await;
    let mut command = Command::new(env!("CARGO_BIN_EXE_voxpool-synthesis"));
    // Synthesis leads a group of its own, as make run's terminal group would be.
    command.env("VOXPOOL_ESPEAK_BIN", &engine).process_group(0);
    let mut synthesis = spawn_synthesis_with(command, &path, scheduler);
    let channel = Channel::from_shared(format!("http://{}", synthesis.addr))
        .expect("url")
        .connect()
        .await
        .expect("connect");
    let req = pb::SynthesizeRequest {
        voice: Some(pb::synthesize_request::Voice::SnapshotJson(json_of(
            &snapshot("espeak", "espeak-local", "en-us", "{}"),
        ))),
        text: "Still speaking after the interrupt.".into(),
        format: pb::AudioFormat::Wav as i32,
        ..Default::default()
    };
    let call = tokio::spawn(async move { SynthesisClient::new(channel).synthesize(req).await });
    // The engine has started for the call (bounded wait on the file it writes).
    let started = dir.path().join("started");
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while !started.exists() {
        assert!(
            std::time::Instant::now() < until,
            "the engine never started"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let group = synthesis.child.id();
    let engine_group: u32 = std::fs::read_to_string(dir.path().join("pgid"))
        .expect("pgid")
        .trim()
        .parse()
        .expect("a process group id");
    assert_ne!(
        engine_group, group,
        "the engine runs in a process group of its own"
    );
    let sent = Command::new("kill")
        .args(["-INT", "--", &format!("-{group}")])
        .status()
        .expect("kill");
    assert!(sent.success(), "SIGINT to process group {group}");
    std::fs::write(dir.path().join("go"), b"").expect("release the engine");
    let resp = call
        .await
        .expect("call task")
        .expect("the call in flight at Ctrl-C completes")
        .into_inner();
    assert_eq!(&resp.audio[0..4], b"RIFF");
    assert!(
        resp.audio.len() > 22_050,
        "{} bytes of audio",
        resp.audio.len()
    );
    assert_eq!(resp.attempts.len(), 1, "no second try: {:?}", resp.attempts);
    let exit = synthesis
        .child
        .wait()
        .expect("synthesis exits after draining");
    assert!(
        exit.success(),
        "synthesis drained and exited cleanly: {exit:?}"
    );
    shutdown.cancel();
}
