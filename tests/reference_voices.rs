//! Reference-audio voices end to end on real processes: `voxpool-catalog` (SQLite, clips in a
//! local blob store), `voxpool-scheduler` (memory store), `voxpool-synthesis` (same blob
//! store, cache off so every call reaches a server), `voxctl` for the clips and the batch, and
//! fake self-hosted servers speaking vLLM-Omni's wire format (in process, or as
//! `voxpool-fake-vendor` processes where one must die).
//!
//! - A card bound to a pack with three clips speaks the same clip after the pack's clips are
//!   all replaced (the snapshot names its clips by digest; the blob store keeps them).
//! - A server SIGKILLed mid-batch loses no item: the batch finishes on the other servers.

use std::{
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Instant,
};

use voxpool_e2e::{Service, binary, quiet, start};
use voxpool_fake_vendors::{FakeConfig, FakeVendor, ServerProfile, VendorKind, audio::tone_wav};
use voxpool_proto::{
    catalog::v1::{
        self as cpb, voice_catalog_admin_client::VoiceCatalogAdminClient,
        voice_catalog_client::VoiceCatalogClient,
    },
    synthesis::v1::{self as pb, synthesis_client::SynthesisClient},
};

const ADMIN: &str = "reference-voices-admin-token-0123456789";
const POOL: &str = "gpu";

fn log(c: Command) -> Command {
    quiet(c, "REFERENCE_TEST_LOG")
}

/// Pool `gpu`: one vLLM-Omni server key (capacity 2) per base URL.
fn config(dir: &Path, servers: &[String]) -> PathBuf {
    let mut t =
        format!("[[pools]]\nid = \"{POOL}\"\nprovider = \"selfhosted\"\nmodel = \"cosyvoice3\"\n");
    for (i, url) in servers.iter().enumerate() {
        t.push_str(&format!(
            "[[pools.upstreams]]\nid = \"gpu{i}\"\nbase_url = \"{url}\"\nparams = {{ profile = \"vllm-omni\" }}\n\
             [[pools.upstreams.keys]]\nid = \"server\"\ncapacity = 2\n"
        ));
    }
    t.push_str("[scheduler]\nrecovery_window_ms = 0\nwait_poll_ms = 10\n[synthesis]\nattempt_timeout_ms = 5000\n");
    t.push_str(voxpool_e2e::CLIENT_TOKENS_TOML);
    let path = dir.join("config.toml");
    std::fs::write(&path, t).expect("config");
    path
}

struct Stack {
    dir: tempfile::TempDir,
    _scheduler: Service,
    catalog: Service,
    synthesis: Service,
}

impl Stack {
    fn start(servers: &[String]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = config(dir.path(), servers);
        let blobs = format!("file://{}", dir.path().join("blobs").display());
        let mut s = Command::new(binary("voxpool-scheduler"));
        s.arg("--config")
            .arg(&config)
            .args(["--listen", "127.0.0.1:0", "--store", "memory"]);
        let scheduler = start(log(s));
        let mut c = Command::new(binary("voxpool-catalog"));
        c.args(["--listen", "127.0.0.1:0"])
            .arg("--database")
            .arg(format!(
                "sqlite://{}?mode=rwc",
                dir.path().join("catalog.db").display()
            ))
            .args(["--blob-store", &blobs])
            .env("VOXPOOL_ADMIN_TOKEN", ADMIN);
        let catalog = start(log(c));
        let mut y = Command::new(binary("voxpool-synthesis"));
        y.arg("--config")
            .arg(&config)
            .args([
                "--listen",
                "127.0.0.1:0",
                "--cache",
                "off",
                "--blob-store",
                &blobs,
            ])
            .args(["--scheduler", &format!("http://{}", scheduler.addr)])
            .args(["--catalog", &format!("http://{}", catalog.addr)]);
        let synthesis = start(log(y));
        Self {
            dir,
            _scheduler: scheduler,
            catalog,
            synthesis,
        }
    }

    fn voxctl(&self) -> Command {
        let mut v = Command::new(binary("voxctl"));
        v.env("VOXPOOL_ADMIN_TOKEN", ADMIN)
            .env("VOXPOOL_CLIENT_TOKEN", voxpool_e2e::VOXCTL_TOKEN)
            .env("VOXPOOL_CATALOG", format!("http://{}", self.catalog.addr))
            .env(
                "VOXPOOL_SYNTHESIS",
                format!("http://{}", self.synthesis.addr),
            );
        v
    }

    /// `voxctl pack add-reference PACK FILE --transcript …` of a `ms`-long tone; its digest.
    fn add_clip(&self, pack: &str, ms: u32) -> String {
        let file = self.dir.path().join(format!("clip-{ms}.wav"));
        std::fs::write(&file, tone_wav(16_000, ms).expect("clip")).expect("clip file");
        let out = self
            .voxctl()
            .args(["pack", "add-reference", pack])
            .arg(&file)
            .args(["--transcript", "A tone standing in for a voice."])
            .output()
            .expect("voxctl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn remove_clip(&self, pack: &str, digest: &str) {
        let out = self
            .voxctl()
            .args(["pack", "remove-reference", pack, digest])
            .output()
            .expect("voxctl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    async fn create_pack(&self) -> String {
        let mut admin =
            VoiceCatalogAdminClient::new(voxpool_e2e::connect(&self.catalog.addr).await);
        let mut request = tonic::Request::new(cpb::CreateVoicePackRequest {
            voice_pack: Some(cpb::VoicePack {
                display_name: "Ada".into(),
                provider: "selfhosted".into(),
                model: "cosyvoice3".into(),
                voice_id: "ada".into(),
                tts_model_id: POOL.into(),
                tier: cpb::Tier::Pro as i32,
                locales: vec!["en-US".into()],
                ..Default::default()
            }),
        });
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {ADMIN}").parse().expect("header"),
        );
        admin
            .create_voice_pack(request)
            .await
            .expect("create")
            .into_inner()
            .id
    }

    async fn speak(
        &self,
        voice: pb::synthesize_request::Voice,
        seed: u64,
    ) -> pb::SynthesizeResponse {
        let mut client = SynthesisClient::with_interceptor(
            voxpool_e2e::connect(&self.synthesis.addr).await,
            voxpool_e2e::voxctl_token(),
        );
        client
            .synthesize(pb::SynthesizeRequest {
                voice: Some(voice),
                text: "The card keeps its voice.".into(),
                seed: Some(seed),
                ..Default::default()
            })
            .await
            .expect("synthesize")
            .into_inner()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_bound_with_three_clips_speaks_the_same_clip_after_the_pack_changes() {
    let fake =
        FakeVendor::start(FakeConfig::new(VendorKind::SelfHosted(ServerProfile::VllmOmni)).cap(4))
            .await
            .expect("fake server");
    let stack = Stack::start(&[fake.base_url()]);
    let pack = stack.create_pack().await;
    let first: Vec<String> = [2_000, 2_500, 3_000]
        .map(|ms| stack.add_clip(&pack, ms))
        .into();
    let mut catalog = VoiceCatalogClient::new(voxpool_e2e::connect(&stack.catalog.addr).await);
    let bound = catalog
        .bind_voice_pack(cpb::BindVoicePackRequest {
            pack_id: pack.clone(),
            card_json: r#"{"spec":"chara_card_v3","data":{"name":"Ada","extensions":{}}}"#.into(),
        })
        .await
        .expect("bind")
        .into_inner();
    let card: serde_json::Value = serde_json::from_str(&bound.card_json).expect("card JSON");
    let frozen = card["data"]["extensions"]["airi"]["modules"]["speech"]["voicePack"].to_string();
    assert_eq!(
        card["data"]["extensions"]["airi"]["modules"]["speech"]["voicePack"]["references"]
            .as_array()
            .map(Vec::len),
        Some(3)
    );

    let before = stack
        .speak(
            pb::synthesize_request::Voice::SnapshotJson(frozen.clone()),
            7,
        )
        .await;
    assert!(first.contains(&before.reference_digest), "{before:?}");

    // Every clip of the pack replaced.
    for digest in &first {
        stack.remove_clip(&pack, digest);
    }
    let second: Vec<String> = [3_500, 4_000, 4_500]
        .map(|ms| stack.add_clip(&pack, ms))
        .into();

    let after = stack
        .speak(pb::synthesize_request::Voice::SnapshotJson(frozen), 7)
        .await;
    assert_eq!(
        after.reference_digest, before.reference_digest,
        "the card's voice never drifts"
    );
    let fresh = stack
        .speak(pb::synthesize_request::Voice::PackId(pack), 7)
        .await;
    assert!(
        second.contains(&fresh.reference_digest),
        "the pack itself speaks its new clips"
    );
    assert_eq!(
        fake.reference_digests(),
        [
            before.reference_digest.clone(),
            before.reference_digest,
            fresh.reference_digest
        ],
        "the servers got exactly those clips"
    );
}

/// A fake server as its own process, and its base URL.
fn server_process() -> (Child, String) {
    let mut child = Command::new(binary("voxpool-fake-vendor"))
        .args([
            "--vendor",
            "selfhosted-vllm-omni",
            "--cap",
            "2",
            "--latency-ms",
            "150",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("fake server process");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("its base URL");
    (child, line.trim().to_owned())
}

async fn served(url: &str) -> u64 {
    let stats: serde_json::Value = match reqwest_get(&format!("{url}/_fake/stats")).await {
        Some(v) => v,
        None => return 0,
    };
    stats["server"]["successes"].as_u64().unwrap_or(0)
}

async fn reqwest_get(url: &str) -> Option<serde_json::Value> {
    let out = tokio::process::Command::new("curl")
        .args(["-sf", url])
        .output()
        .await
        .ok()?;
    serde_json::from_slice(&out.stdout).ok()
}

/// Runs `voxctl batch` of `items` items into a fresh directory; (exit code, files, seconds).
async fn batch(
    stack: &Stack,
    pack: &str,
    items: usize,
    name: &str,
    kill: Option<(&mut Child, &str)>,
) -> (Option<i32>, usize, f64) {
    let manifest = stack.dir.path().join(format!("{name}.jsonl"));
    let lines: Vec<String> = (0..items)
        .map(|i| {
            format!(r#"{{"id":"item-{i:03}","text":"Item {i} of the batch.","packId":"{pack}"}}"#)
        })
        .collect();
    std::fs::write(&manifest, lines.join("\n")).expect("manifest");
    let out = stack.dir.path().join(name);
    let started = Instant::now();
    let mut child = tokio::process::Command::from(stack.voxctl());
    child
        .arg("batch")
        .arg(&manifest)
        .arg("--out")
        .arg(&out)
        .args(["--progress", "quiet"]);
    child.stdout(Stdio::null()).stderr(Stdio::null());
    let mut running = child.spawn().expect("voxctl batch");
    if let Some((victim, url)) = kill {
        // SIGKILL once the victim has served a few items: it dies with others in flight.
        while served(url).await < 4 {
            tokio::task::yield_now().await;
        }
        victim.kill().expect("SIGKILL the server");
        let _ = victim.wait();
    }
    let status = running.wait().await.expect("voxctl ends");
    let files = std::fs::read_dir(&out).map_or(0, |d| {
        d.filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "wav"))
            .count()
    });
    (status.code(), files, started.elapsed().as_secs_f64())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_batch_loses_no_item() {
    let mut servers: Vec<(Child, String)> = (0..3).map(|_| server_process()).collect();
    let urls: Vec<String> = servers.iter().map(|(_, u)| u.clone()).collect();
    let stack = Stack::start(&urls);
    let pack = stack.create_pack().await;
    stack.add_clip(&pack, 3_000);
    const ITEMS: usize = 60;
    let (code, files, healthy) = batch(&stack, &pack, ITEMS, "healthy", None).await;
    assert_eq!((code, files), (Some(0), ITEMS), "all servers healthy");
    let (victim, url) = &mut servers[0];
    let url = url.clone();
    let (code, files, killed) = batch(&stack, &pack, ITEMS, "killed", Some((victim, &url))).await;
    assert_eq!(code, Some(0), "the batch finishes on the other servers");
    assert_eq!(files, ITEMS, "no item lost");
    eprintln!(
        "reference voices: {ITEMS} items over 3 servers: {healthy:.2} s healthy; {killed:.2} s with one SIGKILLed mid-batch, 0 items failed"
    );
    for (child, _) in &mut servers {
        let _ = child.kill();
        let _ = child.wait();
    }
}
