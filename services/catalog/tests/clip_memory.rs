//! A burst of large AddReference uploads against the `voxpool-catalog` binary: the clips are
//! decoded a few at a time, so the process's peak resident set (`VmHWM`) stays bounded however
//! many arrive at once, and every upload ends stored or refused RESOURCE_EXHAUSTED with a
//! retry delay (and then stored on its retry).

use std::{
    io::{BufRead as _, BufReader},
    process::{Child, Command, Stdio},
    time::Duration,
};

use tonic::{Code, Request, transport::Channel};
use tonic_types::StatusExt as _;
use voxpool_proto::catalog::v1::{self as pb, voice_catalog_admin_client::VoiceCatalogAdminClient};

const BIN: &str = env!("CARGO_BIN_EXE_voxpool-catalog");
const TOKEN: &str = "clip-memory-admin-token";
/// Uploads at once.
const UPLOADS: usize = 50;
/// Packs they go to (at most 16 clips a pack).
const PACKS: usize = 5;
/// What the burst may add to the catalog's peak RSS. An upload being checked holds its message,
/// the decoder's copy and buffers (about 25 MiB here); each waiting one at most an HTTP/2
/// stream window of its body (1 MiB). Two at a time measured 121–145 MiB; 50 at once, before
/// the gate, 509 MiB.
const BOUND_KB: u64 = 200 * 1024;

struct Catalog {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Catalog {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start() -> Catalog {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(BIN)
        .args(["--listen", "127.0.0.1:0", "--database"])
        .arg(format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("c.db").display()
        ))
        .arg("--blob-store")
        .arg(format!("file://{}", dir.path().join("blobs").display()))
        .env("VOXPOOL_ADMIN_TOKEN", TOKEN)
        .env_remove("VOXPOOL_DATABASE")
        .env_remove("VOXPOOL_CONFIG")
        .env_remove("VOXPOOL_POOLS_CONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start voxpool-catalog");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the address line");
    let addr = line
        .split_whitespace()
        .last()
        .expect("an address")
        .to_owned();
    Catalog {
        child,
        addr,
        _dir: dir,
    }
}

/// The peak resident set of process `pid`, in KiB.
fn peak_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("proc status")
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

/// A WAV of 26 s, 48 kHz stereo 32-bit PCM (9.5 MiB, just under the 10 MiB limit); `n` makes
/// its samples its own.
fn big_clip(n: usize) -> Vec<u8> {
    const RATE: u32 = 48_000;
    let data_len: u32 = RATE * 8 * 26;
    let mut out = Vec::with_capacity(44 + data_len as usize);
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data_len).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&RATE.to_le_bytes());
    out.extend_from_slice(&(RATE * 8).to_le_bytes());
    out.extend_from_slice(&8u16.to_le_bytes());
    out.extend_from_slice(&32u16.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data_len.to_le_bytes());
    let sample = i32::try_from(n).expect("small") * 1_000_000;
    for i in 0..data_len / 4 {
        let wave = if i % 64 < 32 { sample } else { -sample };
        out.extend_from_slice(&wave.to_le_bytes());
    }
    out
}

fn authed<T>(message: T) -> Request<T> {
    let mut r = Request::new(message);
    r.metadata_mut().insert(
        "authorization",
        format!("Bearer {TOKEN}").parse().expect("header"),
    );
    r.set_timeout(Duration::from_secs(120));
    r
}

async fn client(addr: &str) -> VoiceCatalogAdminClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("url")
        .connect()
        .await
        .expect("connect");
    VoiceCatalogAdminClient::new(channel)
        .max_encoding_message_size(64 << 20)
        .max_decoding_message_size(64 << 20)
}

async fn create_pack(admin: &mut VoiceCatalogAdminClient<Channel>, n: usize) -> String {
    admin
        .create_voice_pack(authed(pb::CreateVoicePackRequest {
            voice_pack: Some(pb::VoicePack {
                display_name: format!("Zero-shot {n}"),
                provider: "selfhosted".into(),
                model: "cosyvoice3".into(),
                voice_id: format!("voice-{n}"),
                tts_model_id: "gpu-zero-shot".into(),
                tier: pb::Tier::Standard.into(),
                locales: vec!["en-US".into()],
                ..Default::default()
            }),
        }))
        .await
        .expect("create pack")
        .into_inner()
        .id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_large_uploads_at_once_keep_the_catalogs_peak_rss_bounded() {
    let catalog = start();
    let mut admin = client(&catalog.addr).await;
    let mut packs = Vec::new();
    for n in 0..PACKS {
        packs.push(create_pack(&mut admin, n).await);
    }
    let clips: Vec<Vec<u8>> = (0..UPLOADS).map(|n| big_clip(n + 1)).collect();
    let before = peak_kb(catalog.child.id());
    let uploads: Vec<_> = clips
        .into_iter()
        .enumerate()
        .map(|(n, audio)| {
            let (addr, pack) = (catalog.addr.clone(), packs[n % PACKS].clone());
            tokio::spawn(async move {
                let mut admin = client(&addr).await;
                let mut refused = 0;
                loop {
                    let request = pb::AddReferenceRequest {
                        pack_id: pack.clone(),
                        audio: audio.clone(),
                        transcript: "A long clip of a steady tone.".into(),
                        ..Default::default()
                    };
                    match admin.add_reference(authed(request)).await {
                        Ok(_) => return refused,
                        Err(s) if s.code() == Code::ResourceExhausted => {
                            let retry = s
                                .get_error_details()
                                .retry_info()
                                .and_then(|r| r.retry_delay)
                                .expect("a refusal says when to retry");
                            refused += 1;
                            tokio::time::sleep(retry).await;
                        }
                        Err(s) => panic!("upload {n}: {s:?}"),
                    }
                }
            })
        })
        .collect();
    let mut refusals = 0;
    for upload in uploads {
        refusals += upload.await.expect("upload task");
    }
    let grown = peak_kb(catalog.child.id()).saturating_sub(before);
    eprintln!(
        "peak RSS grew {} MiB over {before} KiB for {UPLOADS} uploads of 9.5 MiB ({refusals} refusals retried)",
        grown / 1024
    );
    assert!(
        grown <= BOUND_KB,
        "the catalog's peak RSS grew {} MiB (bound {} MiB)",
        grown / 1024,
        BOUND_KB / 1024
    );
}
