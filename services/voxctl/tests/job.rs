//! `voxctl job` as a user runs it, against an in-process fake Jobs server
//! ([`common::fake_jobs`]): submit (idempotent, bad manifests refused), status, wait (through
//! UNAVAILABLE answers, with its exit codes), items (filter, paging), cancel, and download
//! (files, report, resume).

mod common;

use std::{path::Path, process::Output};

use common::fake_jobs::{FakeJobs, audio_of};

const TOKEN: &str = "job-test-client-token-0123";

async fn voxctl(url: &str, args: &[&str]) -> Output {
    let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_voxctl"));
    for var in ["VOXPOOL_JOBS", "VOXPOOL_CLIENT_TOKEN"] {
        c.env_remove(var);
    }
    c.arg("job")
        .args(args)
        .args(["--jobs", url, "--token", TOKEN])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    c.output().await.expect("run voxctl")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn manifest(dir: &Path, name: &str, texts: &[(&str, &str)]) -> String {
    let lines: String = texts
        .iter()
        .map(|(id, text)| {
            format!(
                "{}\n",
                serde_json::json!({"id": id, "text": text, "packId": "vp_test"})
            )
        })
        .collect();
    let path = dir.join(name);
    std::fs::write(&path, lines).expect("write manifest");
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_submitted_once_waited_for_listed_and_downloaded_resumably() {
    let fake = FakeJobs::start().await;
    let url = fake.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let items = [
        ("a", "One."),
        ("b", "Two."),
        ("c", "This one will fail."),
        ("d", "Four."),
        ("e", "Five."),
    ];
    let m = manifest(dir.path(), "m.jsonl", &items);

    let first = voxctl(&url, &["submit", &m]).await;
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    assert_eq!(stdout(&first), "jobs/j1\n", "only the name on stdout");
    let again = voxctl(&url, &["submit", &m]).await;
    assert_eq!(
        stdout(&again),
        "jobs/j1\n",
        "the same submit answers the same job"
    );
    assert_eq!(fake.job_count(), 1);
    let created = fake.created();
    assert_eq!(created[0].request_id, created[1].request_id);
    assert_eq!(created[0].items.len(), 5);
    assert_eq!(
        created[0].priority,
        voxpool_proto::scheduler::v1::Priority::Batch as i32
    );
    assert!(
        fake.authorization()
            .iter()
            .all(|a| *a == format!("Bearer {TOKEN}")),
        "every call carries the client token"
    );

    let bad = manifest(dir.path(), "bad.jsonl", &[("a", "x"), ("a", "dup")]);
    let refused = voxctl(&url, &["submit", &bad]).await;
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("duplicate id") && stdout(&refused).is_empty(),
        "{}",
        stderr(&refused)
    );
    assert_eq!(fake.created().len(), 2, "nothing sent for a bad manifest");

    let status = voxctl(&url, &["status", "j1"]).await;
    assert_eq!(status.status.code(), Some(0), "{}", stderr(&status));
    assert!(
        stdout(&status).starts_with("job         jobs/j1\nstate       "),
        "{}",
        stdout(&status)
    );

    // The store is down for two polls: said, retried, and the wait goes on to the end.
    fake.fail_next_gets(2);
    let wait = voxctl(
        &url,
        &[
            "wait",
            "jobs/j1",
            "--interval",
            "10ms",
            "--progress",
            "lines",
        ],
    )
    .await;
    let said = stderr(&wait);
    assert_eq!(wait.status.code(), Some(1), "a FAILED job exits 1: {said}");
    assert_eq!(said.matches("UNAVAILABLE").count(), 2, "{said}");
    assert!(said.contains("asking again in"), "{said}");
    assert!(
        said.contains("voxctl: jobs/j1 FAILED: 5 items: 4 ok, 1 failed, 0 cancelled"),
        "{said}"
    );

    let json = voxctl(&url, &["status", "j1", "--json"]).await;
    let value: serde_json::Value = serde_json::from_str(&stdout(&json)).expect("JSON");
    assert_eq!(value["state"], "FAILED");
    assert_eq!(value["itemCounts"]["succeeded"], 4);
    assert_eq!(value["totalItems"], 5);

    let failed = voxctl(&url, &["items", "j1", "--state", "failed"]).await;
    assert_eq!(failed.status.code(), Some(0), "{}", stderr(&failed));
    let lines: Vec<String> = stdout(&failed).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[1].starts_with("c   FAILED  INVALID_ARGUMENT VENDOR_REJECTED: the vendor refused"),
        "{lines:?}"
    );
    assert!(fake.filters().contains(&"state = FAILED".to_owned()));
    let all = voxctl(&url, &["items", "j1"]).await;
    assert_eq!(
        stdout(&all).lines().count(),
        6,
        "every page: {}",
        stdout(&all)
    );

    let out = dir.path().join("audio");
    let out_arg = out.display().to_string();
    let download = voxctl(&url, &["download", "j1", &out_arg]).await;
    assert_eq!(
        download.status.code(),
        Some(1),
        "one item failed: {}",
        stderr(&download)
    );
    for id in ["a", "b", "d", "e"] {
        assert_eq!(
            std::fs::read(out.join(format!("{id}.wav"))).expect("file"),
            audio_of(id)
        );
    }
    assert!(!out.join("c.wav").exists());
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).expect("report"))
            .expect("json");
    assert_eq!(report["manifest"], "jobs/j1");
    assert_eq!(report["summary"]["ok"], 4);
    assert_eq!(report["summary"]["failed"], 1);
    assert_eq!(report["items"][2]["status"], "failed");
    assert_eq!(report["items"][2]["code"], "INVALID_ARGUMENT");
    assert!(
        stderr(&download).contains("voxctl: 5 items: 4 ok"),
        "{}",
        stderr(&download)
    );
    assert_eq!(fake.reads().values().sum::<usize>(), 4);

    // A re-run keeps the files already there and reads nothing again.
    std::fs::remove_file(out.join("d.wav")).expect("remove one");
    let resumed = voxctl(
        &url,
        &[
            "download",
            "jobs/j1",
            &out_arg,
            "--report",
            &dir.path().join("r.json").display().to_string(),
        ],
    )
    .await;
    assert_eq!(resumed.status.code(), Some(1));
    assert_eq!(fake.reads().values().sum::<usize>(), 5, "only d again");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("r.json")).expect("report"))
            .expect("json");
    assert_eq!(report["summary"]["okResumed"], 3);

    let cancel = voxctl(&url, &["cancel", "j1"]).await;
    assert_eq!(cancel.status.code(), Some(1));
    assert!(
        stderr(&cancel).contains("jobs/j1 has already ended (FAILED): nothing to cancel"),
        "{}",
        stderr(&cancel)
    );
    let missing = voxctl(&url, &["status", "nope"]).await;
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).contains(&format!(
            "no job jobs/nope at jobs at {url} (deleted or past its retention?)"
        )),
        "{}",
        stderr(&missing)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_exits_0_on_success_124_on_timeout_and_a_cancelled_job_says_so() {
    let fake = FakeJobs::start().await;
    let url = fake.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let ok = manifest(dir.path(), "ok.jsonl", &[("a", "One."), ("b", "Two.")]);
    let name = stdout(
        &voxctl(
            &url,
            &["submit", &ok, "--tenant", "t1", "--priority", "standard"],
        )
        .await,
    );
    let name = name.trim();
    let wait = voxctl(
        &url,
        &["wait", name, "--interval", "10ms", "--progress", "quiet"],
    )
    .await;
    assert_eq!(wait.status.code(), Some(0), "{}", stderr(&wait));
    let download = voxctl(
        &url,
        &[
            "download",
            name,
            &dir.path().join("o").display().to_string(),
        ],
    )
    .await;
    assert_eq!(
        download.status.code(),
        Some(0),
        "every item ok: {}",
        stderr(&download)
    );

    let stuck = manifest(dir.path(), "stuck.jsonl", &[("s", "I am stuck.")]);
    let name = stdout(&voxctl(&url, &["submit", &stuck]).await);
    let name = name.trim();
    let wait = voxctl(
        &url,
        &[
            "wait",
            name,
            "--interval",
            "10ms",
            "--timeout",
            "300ms",
            "--progress",
            "quiet",
        ],
    )
    .await;
    assert_eq!(wait.status.code(), Some(124), "{}", stderr(&wait));
    assert!(stderr(&wait).contains("(--timeout)"), "{}", stderr(&wait));
    let cancel = voxctl(&url, &["cancel", name]).await;
    assert_eq!(cancel.status.code(), Some(0), "{}", stderr(&cancel));
    assert_eq!(stdout(&cancel), "CANCELLED\n");
    let wait = voxctl(
        &url,
        &["wait", name, "--interval", "10ms", "--progress", "quiet"],
    )
    .await;
    assert_eq!(
        wait.status.code(),
        Some(1),
        "CANCELLED exits 1: {}",
        stderr(&wait)
    );
    let download = voxctl(
        &url,
        &[
            "download",
            name,
            &dir.path().join("s").display().to_string(),
        ],
    )
    .await;
    assert_eq!(download.status.code(), Some(1));
    assert!(
        stderr(&download).contains("1 not started"),
        "{}",
        stderr(&download)
    );
}
