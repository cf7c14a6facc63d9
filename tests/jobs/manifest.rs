//! A `manifest_uri` is read as it streams, within its limits: a 48 MB line and a 200 MB
//! manifest are refused without the replica's memory growing by their size (its peak resident
//! set, `VmHWM`, is the measure), every bad line is still named at once, and a manifest that is
//! a symlink out of a `file://` store is refused, not read.

use std::io::Write as _;

use tonic::Code;
use voxpool_proto::jobs::v1 as jpb;
use voxpool_testkit::RedisServer;

use super::stack::*;

/// The peak resident set of process `pid`, in KiB (`VmHWM` of `/proc/<pid>/status`).
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

/// Whether `e`'s `BadRequest` names `field` with a description containing `what`. Read from
/// the encoded details (this crate has no `tonic-types`): a violation is its field's bytes,
/// then its description's, before the next violation's field.
fn violated(e: &tonic::Status, field: &str, what: &str) -> bool {
    let text = String::from_utf8_lossy(e.details());
    text.match_indices(field).any(|(i, _)| {
        let rest = &text[i + field.len()..];
        let own = &rest[..rest.find("manifest_uri").unwrap_or(rest.len())];
        own.contains(what)
    })
}

fn manifest_request(uri: &str) -> jpb::CreateJobRequest {
    jpb::CreateJobRequest {
        tenant: "manifests".into(),
        manifest_uri: uri.into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_is_read_as_it_streams_within_its_limits() {
    const MB: usize = 1_000_000;
    // What the replica may grow by while refusing a manifest many times that size.
    const GROWTH_KIB: u64 = 24 * 1024;
    let stack = Stack::start(20).await;
    let redis = RedisServer::start();
    let a = stack.jobs(&redis.url(), 2, &[], None);
    let pid = a.child.id();
    let mut c = client(&a).await;
    let folder = stack.blob_dir().join("manifests");
    std::fs::create_dir_all(&folder).expect("manifests folder");
    let good = |id: &str| format!("{{\"id\":\"{id}\",\"text\":\"Hello.\",\"packId\":\"vp_1\"}}\n");
    // The baseline once the path has served a small manifest (connections, buffers, threads).
    std::fs::write(folder.join("small.jsonl"), "not json\n").expect("manifest");
    let e = c
        .create_job(manifest_request("manifests/small.jsonl"))
        .await
        .expect_err("a bad line");
    assert!(
        violated(&e, "manifest_uri line 1", "not a manifest item"),
        "{e:?}"
    );
    let baseline = peak_rss_kib(pid);

    // A 48 MB line between good and bad lines: named with the others, never held whole.
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(folder.join("long-line.jsonl")).expect("manifest"),
    );
    f.write_all(good("a").as_bytes()).expect("write");
    f.write_all(b"{\"id\":\"huge\",\"packId\":\"vp_1\",\"text\":\"")
        .expect("write");
    let block = vec![b'a'; MB];
    for _ in 0..48 {
        f.write_all(&block).expect("write");
    }
    f.write_all(b"\"}\n{\"id\":\"b\",\"text\":\"Two.\",\"packId\":\"\"}\n")
        .expect("write");
    f.write_all(good("c").as_bytes()).expect("write");
    f.flush().expect("flush");
    drop(f);
    let e = c
        .create_job(manifest_request("manifests/long-line.jsonl"))
        .await
        .expect_err("a 48 MB line");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(violated(&e, "manifest_uri line 2", "longer than"), "{e:?}");
    assert!(
        violated(&e, "manifest_uri line 3", "packId: empty"),
        "every bad line at once: {e:?}"
    );
    let grown = peak_rss_kib(pid).saturating_sub(baseline);
    eprintln!("JOBS-FIGURE: manifest with a 48 MB line: replica peak RSS +{grown} KiB");
    assert!(
        grown < GROWTH_KIB,
        "the replica grew by {grown} KiB reading a 48 MB line"
    );

    // 200 MB (a sparse file): refused from its size, not read.
    let huge = std::fs::File::create(folder.join("huge.jsonl")).expect("manifest");
    huge.set_len(200 * MB as u64).expect("set_len");
    let e = c
        .create_job(manifest_request("manifests/huge.jsonl"))
        .await
        .expect_err("a 200 MB manifest");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(
        violated(&e, "manifest_uri", "at most 67108864 bytes"),
        "{e:?}"
    );
    let grown = peak_rss_kib(pid).saturating_sub(baseline);
    eprintln!("JOBS-FIGURE: 200 MB manifest: replica peak RSS +{grown} KiB");
    assert!(
        grown < GROWTH_KIB,
        "the replica grew by {grown} KiB refusing 200 MB"
    );

    // A symlink out of the store: refused as no path of the store, its target never read.
    let outside = stack.dir.path().join("outside.jsonl");
    std::fs::write(&outside, good("x")).expect("outside manifest");
    std::os::unix::fs::symlink(&outside, folder.join("link.jsonl")).expect("symlink");
    let e = c
        .create_job(manifest_request("manifests/link.jsonl"))
        .await
        .expect_err("a symlink out of the store");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains("manifest_uri") && e.message().contains("symlink"),
        "{}",
        e.message()
    );
    let listed = c
        .list_jobs(jpb::ListJobsRequest {
            tenant: "manifests".into(),
            ..Default::default()
        })
        .await
        .expect("ListJobs")
        .into_inner();
    assert!(listed.jobs.is_empty(), "nothing queued: {listed:?}");
}
