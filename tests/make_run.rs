//! `make run` (deploy/local/run.sh) on real processes, as a newcomer meets it:
//! - when another stack already runs, it names the port that is taken and starts nothing,
//!   instead of printing "voxpool running" over the old stack and then failing with "Address
//!   already in use";
//! - its ports come from `VOXPOOL_PORT_*` (deploy/local/ports.sh): the README's quickstart, run
//!   with the same variables, works against a stack on other ports;
//! - Ctrl-C (SIGINT to the script's process group, as a terminal sends it) while a long HTTP
//!   answer streams: the answer arrives whole, every service drains and exits, and the last
//!   line says the stack stopped on Ctrl-C;
//! - started in the background by a script (SIGINT ignored on entry, as a non-interactive
//!   shell leaves it for a background job), `kill -INT` on its pid stops it just the same;
//! - the README's cloning walk-through, as written: the seeded managed clone pack is cloned on
//!   the fake ElevenLabs make run starts (one create at the fake, READY in the workspace's
//!   scope), and the speech made with it is real audio from that clone.

use std::{
    io::{BufRead as _, BufReader},
    net::TcpListener,
    os::unix::process::CommandExt as _,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use voxpool_e2e::{
    bin_dir, binary, grpcurl_available, walkthrough, walkthrough_script, workspace_root,
};

#[test]
fn a_taken_port_is_named_before_anything_starts() {
    // The catalog's port, held here: one the system hands out, moved there with
    // VOXPOOL_PORT_CATALOG. The default (50052) lies in Linux's ephemeral range, where any
    // process's long-lived outgoing connection (another test's stack) can sit on it with no
    // listener for minutes: nothing to find taken, yet nothing can bind it.
    let held = TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = held.local_addr().expect("its address").port();
    let run_dir = tempfile::tempdir().expect("tempdir");
    let mut command = Command::new(workspace_root().join("deploy/local/run.sh"));
    for (name, _) in PORT_VARS {
        command.env_remove(name);
    }
    let output = command
        .env("VOXPOOL_PORT_CATALOG", port.to_string())
        .env("VOXPOOL_RUN_DIR", run_dir.path())
        .output()
        .expect("run run.sh");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("port {port} (the catalog's) is taken"))
            && stderr.contains("VOXPOOL_PORT_CATALOG"),
        "the taken port, its service and the variable that moves it are named: {stderr}"
    );
    assert!(
        !stdout.contains("voxpool running") && !stderr.contains("migrations applied"),
        "nothing started: {stdout}{stderr}"
    );
    drop(held);
}

#[test]
fn the_quickstart_runs_against_ports_from_the_environment() {
    assert!(
        grpcurl_available(),
        "grpcurl not on PATH: make setup installs it"
    );
    let stack = Stack::start();
    let script = walkthrough("README.md", "quickstart").join("\n");
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("set -euo pipefail\n{script}"))
        .current_dir(stack.dir.path())
        .envs(stack.ports.iter().map(|(k, v)| (*k, v.to_string())))
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "the quickstart failed against the stack on {:?}:\nstdout: {}\nstderr: {}",
        stack.ports,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let wav = std::fs::read(stack.dir.path().join("scratch/hello.wav")).expect("hello.wav");
    assert!(
        wav.starts_with(b"RIFF") && wav.len() > 22_050,
        "hello.wav is speech: {} bytes",
        wav.len()
    );
    // And the stack really is on those ports: nothing answers on the defaults' behalf.
    let ready = stack.stdout_text();
    for (_, port) in &stack.ports {
        assert!(ready.contains(&format!("127.0.0.1:{port}")), "{ready}");
    }
}

#[test]
fn ctrl_c_lets_a_long_http_answer_finish_and_every_service_drain() {
    let mut stack = Stack::start();
    let http = stack.port("VOXPOOL_PORT_HTTP");
    let key = "Authorization: Bearer dev-http-key-local";
    let voices = Command::new("curl")
        .args(["-sf", "-H", key])
        .arg(format!("http://127.0.0.1:{http}/v1/audio/voices"))
        .output()
        .expect("curl");
    let voices: serde_json::Value = serde_json::from_slice(&voices.stdout).expect("voices JSON");
    let voice = voices["data"]
        .as_array()
        .expect("data")
        .iter()
        .find(|v| v["provider"] == "espeak")
        .expect("an espeak voice")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    // About 18,000 characters: some 1,300 s of audio, streamed as raw PCM for seconds.
    let text: Vec<String> = (0..180)
        .map(|i| format!("Paragraph {i}. The quick brown fox jumps over the lazy dog, and then it runs far away into the forest."))
        .collect();
    let body = serde_json::json!({
        "model": "tts-1", "voice": voice, "input": text.join(" "), "response_format": "pcm"
    });
    let body_file = stack.dir.path().join("long.json");
    std::fs::write(&body_file, body.to_string()).expect("body");
    let audio = stack.dir.path().join("long.pcm");
    let mut curl = Command::new("curl")
        .args(["-sS", "-o"])
        .arg(&audio)
        .args([
            "-w",
            "%{http_code}",
            "-H",
            key,
            "-H",
            "Content-Type: application/json",
        ])
        .arg("--data-binary")
        .arg(format!("@{}", body_file.display()))
        .arg(format!("http://127.0.0.1:{http}/v1/audio/speech"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("curl");
    // Ctrl-C once audio flows, while most of the answer is still to come.
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::metadata(&audio).map_or(0, |m| m.len()) < 100_000 {
        assert!(Instant::now() < deadline, "no audio within 30 s");
        assert!(curl.try_wait().expect("curl").is_none(), "curl ended early");
        std::thread::sleep(Duration::from_millis(20));
    }
    let at_ctrl_c = std::fs::metadata(&audio).map_or(0, |m| m.len());
    let pids = stack.service_pids();
    let asked = Instant::now();
    stack.ctrl_c();
    assert!(
        curl.try_wait().expect("curl").is_none(),
        "the answer was still under way at Ctrl-C"
    );
    let status = stack.wait(Duration::from_secs(90));
    let took = asked.elapsed();
    let curl = curl.wait_with_output().expect("curl");
    let stderr = stack.stderr_text();
    // curl exits 0 only for a whole chunked answer (a cut one is exit 18).
    assert!(
        curl.status.success() && curl.stdout == b"200",
        "the long answer completed whole: curl {:?} {} {}\n{stderr}",
        curl.status,
        String::from_utf8_lossy(&curl.stdout),
        String::from_utf8_lossy(&curl.stderr)
    );
    let len = std::fs::metadata(&audio).expect("audio").len();
    assert!(
        len > 40_000_000 && len > 10 * at_ctrl_c,
        "most of the answer came after Ctrl-C ({at_ctrl_c} bytes before, {len} in all)"
    );
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("make run: stopped on Ctrl-C"),
        "the exit line names Ctrl-C: {stderr}"
    );
    assert!(
        !stderr.contains("stopped on request") && !stderr.contains("stopped unexpectedly"),
        "no service is blamed: {stderr}"
    );
    assert_eq!(
        stderr.matches("second shutdown signal").count(),
        0,
        "each service got one signal and drained: {stderr}"
    );
    assert_eq!(
        stderr.matches("shutdown signal received").count(),
        5,
        "scheduler, catalog, synthesis, jobs and the console each drained once: {stderr}"
    );
    // Synthesis's drain bound is attempt_timeout_ms (30 s) + 1 s for its answers plus the
    // same for its vendor calls; the others' is their 1 s drain delay and their calls.
    assert!(took < Duration::from_secs(70), "stopped in {took:?}");
    for (name, pid) in pids {
        assert!(
            !alive(pid),
            "{name} (pid {pid}) still runs after make run exited"
        );
    }
}

#[test]
fn sigint_stops_a_stack_started_in_the_background_by_a_script() {
    let mut stack = Stack::start_with(SigInt::IgnoredOnEntry);
    let pids = stack.service_pids();
    let status = Command::new("kill")
        .args(["-INT", &stack.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let status = stack.wait(Duration::from_secs(60));
    let stderr = stack.stderr_text();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("make run: stopped on Ctrl-C"),
        "SIGINT stopped it as Ctrl-C does: {stderr}"
    );
    assert!(
        !stderr.contains("SIGINT is ignored here"),
        "no fallback hint where SIGINT could be restored: {stderr}"
    );
    for (name, pid) in pids {
        assert!(
            !alive(pid),
            "{name} (pid {pid}) still runs after make run exited"
        );
    }
}

#[test]
fn a_service_that_dies_stops_the_others_and_is_named() {
    let mut stack = Stack::start();
    let pids = stack.service_pids();
    let synthesis = pids
        .iter()
        .find(|(name, _)| name.starts_with("voxpool-synthes"))
        .expect("synthesis runs")
        .1;
    let killed = Command::new("kill")
        .args(["-KILL", &synthesis.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = stack.wait(Duration::from_secs(60));
    let stderr = stack.stderr_text();
    assert_ne!(status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("make run: synthesis stopped unexpectedly"),
        "the dead service is named: {stderr}"
    );
    assert!(
        !stderr.contains("the job store does not answer") && !stderr.contains("second shutdown"),
        "jobs stopped before its Redis, each service once: {stderr}"
    );
    for (name, pid) in pids {
        assert!(
            !alive(pid),
            "{name} (pid {pid}) still runs after make run exited"
        );
    }
}

#[test]
fn the_fake_gpu_server_is_stopped_and_started_by_pid_and_stops_with_the_stack() {
    let mut stack = Stack::start();
    let gpu = stack.port("VOXPOOL_PORT_GPU_SERVER");
    let script = |what: &str| {
        let out = Command::new(workspace_root().join("deploy/local/gpu-server.sh"))
            .arg(what)
            .env("VOXPOOL_RUN_DIR", stack.dir.path().join("run"))
            .env("CARGO_TARGET_DIR", bin_dir().parent().expect("target dir"))
            .envs(stack.ports.iter().map(|(k, v)| (*k, v.to_string())))
            .output()
            .expect("gpu-server.sh");
        assert!(out.status.success(), "gpu-server.sh {what}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let listening = || std::net::TcpStream::connect(("127.0.0.1", gpu)).is_ok();
    assert!(listening());
    script("stop");
    assert!(!listening(), "stopped");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        stack.child.try_wait().expect("run.sh").is_none(),
        "the stack stays up without its GPU server"
    );
    let started = script("start");
    assert!(listening(), "started again: {started}");
    let pid: u32 = std::fs::read_to_string(stack.dir.path().join("run/fake-gpu-server.pid"))
        .expect("pid file")
        .trim()
        .parse()
        .expect("a pid");
    stack.ctrl_c();
    stack.wait(Duration::from_secs(60));
    assert!(
        !alive(pid) && !listening(),
        "the GPU server started by hand stopped with the stack:\n{}",
        stack.stderr_text()
    );
}

#[test]
fn the_cloning_walkthrough_clones_the_seeded_pack_once_and_speaks_with_it() {
    let stack = Stack::start();
    let script = walkthrough_script("README.md", "cloning").replace(
        "../target/debug/voxctl",
        &binary("voxctl").display().to_string(),
    );
    assert!(
        !script.contains("../target"),
        "every voxctl of the block runs the built one: {script}"
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("set -euo pipefail\n{script}"))
        .current_dir(stack.dir.path())
        .envs(stack.ports.iter().map(|(k, v)| (*k, v.to_string())))
        .env_remove("VOXPOOL_CATALOG")
        .env_remove("VOXPOOL_SYNTHESIS")
        .output()
        .expect("bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the cloning walk-through failed:\n{script}\nstdout: {stdout}\nstderr: {stderr}\nstack: {}",
        stack.stderr_text()
    );
    // `voxctl pack clones` printed the READY row: scope, state, the workspace's voice id.
    let ready: Vec<&str> = stdout
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("READY"))
        .unwrap_or_else(|| panic!("no READY clone printed: {stdout}"))
        .split_whitespace()
        .collect();
    assert_eq!(
        ready[0], "fake-workspace",
        "the upstream is the scope: {stdout}"
    );
    let voice_id = ready[2];

    // The fake's own count: exactly one clone made, in the one workspace, and it is the id the
    // catalog holds, used by the synthesis that spoke.
    let clones = fake_json(&stack, "/_fake/stats/clones");
    let scopes = clones["scopes"].as_object().expect("scopes");
    let creates: u64 = scopes
        .values()
        .map(|c| c["create"].as_u64().expect("create"))
        .sum();
    assert_eq!(creates, 1, "one clone create at the fake: {clones}");
    assert_eq!(scopes["workspace-1"]["refused"], 0, "{clones}");
    let voices = clones["voices"].as_array().expect("voices");
    assert_eq!(voices.len(), 1, "{clones}");
    assert_eq!(voices[0]["voice_id"], voice_id, "{clones}");
    assert_eq!(voices[0]["scope"], "workspace-1", "{clones}");
    assert!(
        voices[0]["last_used_at"].is_u64(),
        "synthesis spoke with the clone: {clones}"
    );
    let keys = fake_json(&stack, "/_fake/stats");
    let spoken: u64 = ["dev-elevenlabs-key-1", "dev-elevenlabs-key-2"]
        .iter()
        .filter_map(|k| keys[k]["successes"].as_u64())
        .sum();
    assert!(spoken >= 1, "the workspace's keys answered audio: {keys}");

    // The WAV: 16-bit mono PCM, more than half a second, not silence.
    let wav = stack.dir.path().join("scratch/ada-cloned.wav");
    let mut reader = hound::WavReader::open(&wav).expect("ada-cloned.wav is a WAV");
    let spec = reader.spec();
    assert_eq!((spec.channels, spec.bits_per_sample), (1, 16), "{spec:?}");
    let samples: Vec<f64> = reader
        .samples::<i16>()
        .map(|s| f64::from(s.expect("a sample")))
        .collect();
    let seconds = samples.len() as f64 / f64::from(spec.sample_rate);
    assert!(seconds > 0.5, "only {seconds:.2} s of audio");
    let rms = (samples.iter().map(|s| s * s).sum::<f64>() / samples.len() as f64).sqrt();
    assert!(rms > 300.0, "the audio is silent (RMS {rms:.0})");
}

/// The JSON the stack's fake ElevenLabs serves at `path`.
fn fake_json(stack: &Stack, path: &str) -> serde_json::Value {
    let port = stack.port("VOXPOOL_PORT_ELEVENLABS");
    let out = Command::new("curl")
        .args(["-sf", &format!("http://127.0.0.1:{port}{path}")])
        .output()
        .expect("curl");
    assert!(out.status.success(), "GET {path}: {out:?}");
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// The `VOXPOOL_PORT_*` variables of deploy/local/ports.sh.
const PORT_VARS: [(&str, &str); 9] = [
    ("VOXPOOL_PORT_SCHEDULER", "scheduler"),
    ("VOXPOOL_PORT_CATALOG", "catalog"),
    ("VOXPOOL_PORT_SYNTHESIS", "synthesis"),
    ("VOXPOOL_PORT_HTTP", "http"),
    ("VOXPOOL_PORT_JOBS", "jobs"),
    ("VOXPOOL_PORT_JOBS_REDIS", "jobs-redis"),
    ("VOXPOOL_PORT_GPU_SERVER", "fake-gpu-server"),
    ("VOXPOOL_PORT_ELEVENLABS", "fake-elevenlabs"),
    ("VOXPOOL_PORT_CONSOLE", "console"),
];

/// `deploy/local/run.sh` in a process group of its own (as a shell starts a foreground job),
/// on free ports, with its run dir in a temp dir; its output collected. Dropped: the group is
/// killed.
struct Stack {
    child: Child,
    dir: tempfile::TempDir,
    ports: Vec<(&'static str, u16)>,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

/// How run.sh finds SIGINT when it starts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SigInt {
    /// At its default, as in a terminal.
    Default,
    /// Ignored, as a non-interactive shell leaves it for a job it starts with `&`.
    IgnoredOnEntry,
}

impl Stack {
    fn start() -> Self {
        Self::start_with(SigInt::Default)
    }

    fn start_with(sigint: SigInt) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        // Bound together so that no two are the same, then let go for run.sh.
        let held: Vec<TcpListener> = PORT_VARS
            .iter()
            .map(|_| TcpListener::bind("127.0.0.1:0").expect("a free port"))
            .collect();
        let ports: Vec<(&'static str, u16)> = PORT_VARS
            .iter()
            .zip(&held)
            .map(|((var, _), l)| (*var, l.local_addr().expect("addr").port()))
            .collect();
        drop(held);
        let run_sh = workspace_root().join("deploy/local/run.sh");
        let mut command = match sigint {
            SigInt::Default => Command::new(run_sh),
            // env execs run.sh in its own place: the child's pid is run.sh's.
            SigInt::IgnoredOnEntry => {
                let mut command = Command::new("env");
                command.arg("--ignore-signal=INT").arg(run_sh);
                command
            }
        };
        command
            .env("VOXPOOL_RUN_DIR", dir.path().join("run"))
            .env("CARGO_TARGET_DIR", bin_dir().parent().expect("target dir"))
            .envs(ports.iter().map(|(k, v)| (*k, v.to_string())))
            .env("RUST_LOG", "info")
            .env_remove("VOXPOOL_CONFIG")
            .env_remove("VOXPOOL_BLOB_STORE")
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        assert!(
            binary("voxpool-jobs").exists(),
            "the stack's binaries are built"
        );
        let mut child = command.spawn().expect("run.sh");
        let stdout = collect(child.stdout.take().expect("stdout"));
        let stderr = collect(child.stderr.take().expect("stderr"));
        let mut stack = Self {
            child,
            dir,
            ports,
            stdout,
            stderr,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !stack.stdout_text().contains("voxpool running") {
            if let Some(status) = stack.child.try_wait().expect("run.sh") {
                panic!(
                    "run.sh exited ({status}) before the stack was ready:\n{}\n{}",
                    stack.stdout_text(),
                    stack.stderr_text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "the stack was not ready within 60 s:\n{}",
                stack.stderr_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        stack
    }

    fn port(&self, var: &str) -> u16 {
        self.ports
            .iter()
            .find(|(k, _)| *k == var)
            .expect("a port variable")
            .1
    }

    fn stdout_text(&self) -> String {
        self.stdout.lock().expect("lock").clone()
    }

    fn stderr_text(&self) -> String {
        self.stderr.lock().expect("lock").clone()
    }

    /// The pid of each process the stack started (its children, by name).
    fn service_pids(&self) -> Vec<(String, u32)> {
        let out = Command::new("ps")
            .args(["-o", "pid=,comm=", "--ppid", &self.child.id().to_string()])
            .output()
            .expect("ps");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let mut parts = l.split_whitespace();
                let pid = parts.next()?.parse().ok()?;
                let name = parts.next()?.to_owned();
                (name.starts_with("voxpool") || name.starts_with("redis")).then_some((name, pid))
            })
            .collect()
    }

    /// What a terminal does on Ctrl-C: SIGINT to the foreground process group.
    fn ctrl_c(&self) {
        let status = Command::new("kill")
            .args(["-INT", "--", &format!("-{}", self.child.id())])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    fn wait(&mut self, bound: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + bound;
        loop {
            if let Some(status) = self.child.try_wait().expect("run.sh") {
                // Let the readers take the last lines.
                std::thread::sleep(Duration::from_millis(200));
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "make run still running {bound:?} after Ctrl-C:\n{}",
                self.stderr_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            // SIGTERM: run.sh stops its services (each in a session of its own) in order.
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
            let _ = self.wait_quietly(Duration::from_secs(60));
        }
    }
}

impl Stack {
    fn wait_quietly(&mut self, bound: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + bound;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        self.child.wait().ok()
    }
}

/// Whether process `pid` runs (a zombie, dead but not yet reaped, does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // `pid (comm) state …`: the state follows the last ')'.
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

/// Reads `from` line by line on a thread into the returned buffer.
fn collect(from: impl std::io::Read + Send + 'static) -> Arc<Mutex<String>> {
    let buffer = Arc::new(Mutex::new(String::new()));
    let sink = buffer.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            let mut text = sink.lock().expect("lock");
            text.push_str(&line);
            text.push('\n');
        }
    });
    buffer
}
