//! Jobs benchmark (`make bench`; not a test). Side by side in one run, against one stack: an
//! in-process memory-store scheduler and synthesis (audio cache off, so every item is a vendor
//! call), a fake OpenAI-compatible vendor with a fixed latency, one redis-server and two
//! `voxpool-jobs` release processes.
//!
//! 1. **Throughput**: items/s of an N-item job over the two replicas (CreateJob to SUCCEEDED)
//!    against `voxctl batch` of the same manifest into a new folder, with the same items in
//!    flight (two replicas × `--concurrency C` against `--concurrency 2C`). Floor: the job's
//!    items/s ≥ 0.9 × the batch's.
//! 2. **Kill to resume**: a job running on both replicas, one SIGKILLed once 40% of its items
//!    succeeded: the time until an item
//!    it held runs elsewhere (an item RUNNING again with a second Synthesize call), and until
//!    the job ends, with `--visibility-timeout V`.
//!
//! Knobs: `JOBS_BENCH_ITEMS` (default 2000), `JOBS_BENCH_LATENCY_MS` (50), `JOBS_BENCH_CONCURRENCY`
//! per replica (16), `JOBS_BENCH_VISIBILITY_S` (5). Needs the release `voxctl` and `voxpool-jobs`
//! next to this bench (`make bench` builds them).

#[allow(dead_code, reason = "pct is for the benches that report percentiles")]
mod common;
#[path = "common/stack.rs"]
mod stack;

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use common::env_or;
use stack::AudioCache;
use tokio_util::sync::CancellationToken;
use voxpool_fake_vendors::{FakeConfig, FakeVendor, Latency, VendorKind};
use voxpool_proto::jobs::v1::{self as pb, jobs_client::JobsClient};

const FLOOR_RATIO: f64 = 0.9;

type Jobs = JobsClient<tonic::transport::Channel>;

/// A release binary next to this bench.
fn release_binary(name: &str) -> Option<PathBuf> {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent()?.parent().map(|d| d.join(name)))
        .filter(|p| p.exists())
}

/// A `voxpool-jobs` replica; its address from its first stdout line.
fn replica(
    bin: &Path,
    redis: &str,
    synthesis: &str,
    blobs: &str,
    concurrency: usize,
    visibility: u64,
) -> (Child, String) {
    let mut child = Command::new(bin)
        .args(["--listen", "127.0.0.1:0", "--store", redis])
        .args([
            "--synthesis",
            &format!("http://{synthesis}"),
            "--blob-store",
            blobs,
        ])
        .args(["--concurrency", &concurrency.to_string()])
        .args(["--visibility-timeout", &format!("{visibility}s")])
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start voxpool-jobs");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)
        .expect("address line");
    let addr = line.trim().rsplit(' ').next().expect("address").to_owned();
    (child, addr)
}

fn items(n: usize, tag: &str) -> Vec<pb::JobItemSpec> {
    let voice = voxpool_fake_vendors::snapshot("openai", "tts-1", "alloy");
    let json = serde_json::to_string(&voice).expect("snapshot json");
    (0..n)
        .map(|i| pb::JobItemSpec {
            id: format!("line-{i:05}"),
            text: format!("Line number {i} of the {tag} chapter."),
            voice: Some(pb::job_item_spec::Voice::SnapshotJson(json.clone())),
            ..Default::default()
        })
        .collect()
}

async fn submit(jobs: &Jobs, items: Vec<pb::JobItemSpec>) -> String {
    jobs.clone()
        .create_job(pb::CreateJobRequest {
            items,
            format: voxpool_proto::synthesis::v1::AudioFormat::Pcm as i32,
            ..Default::default()
        })
        .await
        .expect("create job")
        .into_inner()
        .name
}

async fn job(jobs: &Jobs, name: &str) -> pb::Job {
    jobs.clone()
        .get_job(pb::GetJobRequest { name: name.into() })
        .await
        .expect("get job")
        .into_inner()
}

fn ended(j: &pb::Job) -> bool {
    j.end_time.is_some()
}

fn main() {
    let n = env_or("JOBS_BENCH_ITEMS", 2000).max(1);
    let latency = env_or("JOBS_BENCH_LATENCY_MS", 50) as u64;
    let per_replica = env_or("JOBS_BENCH_CONCURRENCY", 16).max(1);
    let visibility = env_or("JOBS_BENCH_VISIBILITY_S", 5).max(1) as u64;
    let (Some(jobs_bin), Some(voxctl)) = (release_binary("voxpool-jobs"), release_binary("voxctl"))
    else {
        println!(
            "## Jobs\n\nskipped: no release voxpool-jobs / voxctl next to the bench (make bench builds them)\n"
        );
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let redis = voxpool_testkit::RedisServer::start();
    rt.block_on(async {
        let shutdown = CancellationToken::new();
        let fake = FakeVendor::start(
            FakeConfig::new(VendorKind::OpenAi).cap(0).latency(Latency::Fixed(Duration::from_millis(latency))),
        )
        .await
        .expect("fake vendor");
        let synthesis = stack::start(&fake.base_url(), dir.path(), 256, AudioCache::Off, &shutdown).await;
        let blobs = format!("file://{}", dir.path().join("blobs").display());
        let (mut a, a_addr) = replica(&jobs_bin, &redis.url(), &synthesis, &blobs, per_replica, visibility);
        let (mut b, _b_addr) = replica(&jobs_bin, &redis.url(), &synthesis, &blobs, per_replica, visibility);
        let client = JobsClient::connect(format!("http://{a_addr}")).await.expect("jobs client");

        // 1. The same items: voxctl batch, then a job over two replicas.
        let manifest = dir.path().join("manifest.jsonl");
        let lines: String = items(n, "batch")
            .iter()
            .map(|i| {
                let Some(pb::job_item_spec::Voice::SnapshotJson(json)) = &i.voice else { unreachable!() };
                let snapshot: serde_json::Value = serde_json::from_str(json).expect("json");
                serde_json::json!({ "id": i.id, "text": i.text, "snapshot": snapshot }).to_string() + "\n"
            })
            .collect();
        std::fs::write(&manifest, lines).expect("manifest");
        let t = Instant::now();
        let status = tokio::task::block_in_place(|| {
            Command::new(&voxctl)
                .arg("batch")
                .arg(&manifest)
                .args(["--out", &dir.path().join("batch-out").display().to_string()])
                .args(["--concurrency", &(2 * per_replica).to_string(), "--progress", "quiet", "--format", "pcm"])
                .args(["--synthesis", &format!("http://{synthesis}"), "--catalog", "http://127.0.0.1:1"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("voxctl")
        });
        assert!(status.success(), "voxctl batch failed: {status}");
        let batch = t.elapsed();
        let t = Instant::now();
        let name = submit(&client, items(n, "job")).await;
        let done = loop {
            let j = job(&client, &name).await;
            if ended(&j) {
                break j;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let job_time = t.elapsed();
        assert_eq!(done.item_counts.map(|c| c.succeeded), Some(i32::try_from(n).unwrap_or(i32::MAX)), "every item succeeded");
        let (batch_rate, job_rate) = (n as f64 / batch.as_secs_f64(), n as f64 / job_time.as_secs_f64());
        println!("## Jobs: a job over two replicas vs voxctl batch\n");
        println!(
            "{n} items against a {latency} ms fake vendor (cache off), {} in flight either way: \
             voxctl batch --concurrency {}, and a job over two voxpool-jobs replicas with \
             --concurrency {per_replica} each (one redis-server).\n",
            2 * per_replica,
            2 * per_replica
        );
        println!("| run | wall time s | items/s |");
        println!("|---|---:|---:|");
        println!("| voxctl batch | {:.2} | {batch_rate:.0} |", batch.as_secs_f64());
        println!("| job, 2 replicas | {:.2} | {job_rate:.0} |", job_time.as_secs_f64());
        let ratio = job_rate / batch_rate;
        println!(
            "\n- job / batch items/s: {ratio:.2}× (floor ≥ {FLOOR_RATIO}×): {}\n",
            if ratio >= FLOOR_RATIO { "meets floor" } else { "BELOW FLOOR" }
        );

        // 2. Kill one replica mid-job.
        let kill_items = (n / 2).max(400);
        // Past the first second, so both replicas have the job in their round.
        let kill_at = i32::try_from(kill_items * 2 / 5).unwrap_or(i32::MAX);
        let name = submit(&client, items(kill_items, "kill")).await;
        loop {
            let j = job(&client, &name).await;
            if j.item_counts.is_some_and(|c| c.succeeded >= kill_at && c.running > 0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _ = b.kill();
        let killed = Instant::now();
        let _ = b.wait();
        let mut resumed = None;
        let done = loop {
            if resumed.is_none() {
                let running = client
                    .clone()
                    .list_job_items(pb::ListJobItemsRequest {
                        name: name.clone(),
                        page_size: 1000,
                        filter: "state = RUNNING".into(),
                        ..Default::default()
                    })
                    .await
                    .expect("list items")
                    .into_inner();
                if running.items.iter().any(|i| i.attempts >= 2) {
                    resumed = Some(killed.elapsed());
                }
            }
            let j = job(&client, &name).await;
            if ended(&j) {
                break j;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let to_end = killed.elapsed();
        let calls: u64 = fake.stats().values().map(|k| k.total_requests).sum();
        println!("## Jobs: one replica SIGKILLed mid-job\n");
        println!(
            "{kill_items} items, the same vendor; the second replica SIGKILLed once {kill_at} items \
             succeeded; --visibility-timeout {visibility}s (items it held wait that long, plus \
             up to half of it for the next look).\n"
        );
        println!("| measure | s |");
        println!("|---|---:|");
        match resumed {
            Some(d) => println!("| kill → an item it held runs elsewhere | {:.2} |", d.as_secs_f64()),
            None => println!("| kill → an item it held runs elsewhere | not seen (it held none, or it ended first) |"),
        }
        println!("| kill → job ended | {:.2} |", to_end.as_secs_f64());
        println!(
            "\n- job state {}, {} of {kill_items} items succeeded; vendor calls in the whole bench: {calls} for {} items\n",
            pb::job::State::try_from(done.state).map_or("?", |s| s.as_str_name()),
            done.item_counts.map_or(0, |c| c.succeeded),
            2 * n + kill_items
        );
        let _ = a.kill();
        let _ = a.wait();
        shutdown.cancel();
    });
}
