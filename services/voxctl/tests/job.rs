//! `voxctl job` as a user runs it, against an in-process fake Jobs server
//! ([`common::fake_jobs`]): submit (idempotent, bad manifests refused), status, wait (through
//! UNAVAILABLE answers, with its exit codes), items (filter, paging), cancel, and download
//! (files, report, resume).

mod common;

use std::{path::Path, process::Output};

use common::fake_jobs::{FakeJobs, audio_of};

const TOKEN: &str = "job-test-client-token-0123";

async fn voxctl(url: &str, args: &[&str]) -> Output {
    voxctl_as(url, args, Some(TOKEN)).await
}

/// `voxctl job ARGS --jobs URL`, with `--token` when `token` is given.
async fn voxctl_as(url: &str, args: &[&str], token: Option<&str>) -> Output {
    let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_voxctl"));
    for var in ["VOXPOOL_JOBS", "VOXPOOL_CLIENT_TOKEN"] {
        c.env_remove(var);
    }
    c.arg("job")
        .args(args)
        .args(["--jobs", url])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    if let Some(token) = token {
        c.args(["--token", token]);
    }
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
    assert!(
        !stderr(&again).contains("submitted before"),
        "a job still queued whole is the one this submit meant: {}",
        stderr(&again)
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
    assert!(
        !stdout(&status).contains("summary"),
        "no summary before the job ends: {}",
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

    let ended = voxctl(&url, &["status", "j1"]).await;
    assert!(
        stdout(&ended).contains("summary     file:///blobs/jobs/j1/summary.json"),
        "the summary once the job ended: {}",
        stdout(&ended)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resubmitted_manifest_says_it_answers_the_earlier_job_and_how_to_run_it_again() {
    let fake = FakeJobs::start().await;
    let url = fake.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let live = manifest(dir.path(), "live.jsonl", &[("s", "I am stuck.")]);
    let first = voxctl(&url, &["submit", &live]).await;
    assert_eq!(stdout(&first), "jobs/j1\n", "{}", stderr(&first));
    let request_id = fake.created()[0].request_id.clone();
    let cancel = voxctl(&url, &["cancel", "j1"]).await;
    assert_eq!(cancel.status.code(), Some(0), "{}", stderr(&cancel));

    let again = voxctl(&url, &["submit", &live]).await;
    let said = stderr(&again);
    assert_eq!(again.status.code(), Some(0), "{said}");
    assert_eq!(
        stdout(&again),
        "jobs/j1\n",
        "stdout stays only the name: {said}"
    );
    assert!(
        said.contains(&format!(
            "{live} was submitted before (request id {request_id}): jobs/j1 is that earlier job as it is now, CANCELLED"
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!("voxctl job submit {live} --request-id <new id>")),
        "{said}"
    );
    assert!(
        !said.contains("follows it"),
        "an ended job is not followed: {said}"
    );

    let rerun = voxctl(&url, &["submit", &live, "--request-id", "live-rerun-1"]).await;
    assert_eq!(stdout(&rerun), "jobs/j2\n", "{}", stderr(&rerun));
    assert!(
        !stderr(&rerun).contains("submitted before"),
        "{}",
        stderr(&rerun)
    );
    assert_eq!(fake.job_count(), 2);

    // A job already running is the earlier one too: said, and followed with wait.
    let two = manifest(dir.path(), "two.jsonl", &[("a", "One."), ("b", "Two.")]);
    let name = stdout(&voxctl(&url, &["submit", &two]).await);
    let name = name.trim();
    let status = voxctl(&url, &["status", name]).await;
    assert!(stdout(&status).contains("RUNNING"), "{}", stdout(&status));
    let again = voxctl(&url, &["submit", &two]).await;
    let said = stderr(&again);
    assert_eq!(stdout(&again), format!("{name}\n"));
    assert!(
        said.contains("was submitted before")
            && said.contains(&format!("{name} is that earlier job as it is now, RUNNING"))
            && said.contains(&format!("voxctl job wait {name} follows it")),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_retries_unavailable_with_the_same_request_id_until_its_timeout() {
    let fake = FakeJobs::start().await;
    let url = fake.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let m = manifest(dir.path(), "m.jsonl", &[("a", "One.")]);
    fake.fail_next_creates(3);
    let submit = voxctl(&url, &["submit", &m]).await;
    let said = stderr(&submit);
    assert_eq!(submit.status.code(), Some(0), "{said}");
    assert_eq!(stdout(&submit), "jobs/j1\n");
    assert_eq!(said.matches("trying again in").count(), 3, "{said}");
    assert!(
        said.contains(
            "UNAVAILABLE STORE_UNAVAILABLE: the job store does not answer; trying again in"
        ),
        "{said}"
    );
    let created = fake.created();
    assert_eq!(created.len(), 4, "three failures, then the answer");
    assert!(
        created
            .iter()
            .all(|r| r.request_id == created[0].request_id),
        "every try carries the same request id"
    );
    assert_eq!(fake.job_count(), 1);

    let other = manifest(dir.path(), "other.jsonl", &[("b", "Two.")]);
    fake.fail_next_creates(usize::MAX);
    let gave_up = voxctl(&url, &["submit", &other, "--timeout", "1s"]).await;
    let said = stderr(&gave_up);
    assert_eq!(gave_up.status.code(), Some(1), "{said}");
    assert!(stdout(&gave_up).is_empty(), "{}", stdout(&gave_up));
    // "…; gave up after N tries in S.Ss (--timeout 1s): …"
    let (tries, secs) = said
        .split_once("gave up after ")
        .and_then(|(_, rest)| rest.split_once(" (--timeout 1s)"))
        .and_then(|(counts, _)| counts.split_once(" tries in "))
        .unwrap_or_else(|| panic!("no give-up line: {said}"));
    let tries: usize = tries.parse().expect("tries");
    let secs: f64 = secs.trim_end_matches('s').parse().expect("seconds");
    assert_eq!(tries, fake.created().len() - 4, "every try counted: {said}");
    assert!(tries >= 2, "{said}");
    assert!(
        secs >= 1.0,
        "tried for the whole --timeout, not a fixed few times: {said}"
    );
    assert_eq!(
        said.matches("trying again in").count(),
        tries - 1,
        "every retry said: {said}"
    );
    assert_eq!(fake.job_count(), 1);
}

/// Ctrl-C during `voxctl job download`: exit 130 saying how to resume, no temporary file left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_download_says_how_to_resume_and_leaves_no_partial_file() {
    let fake = FakeJobs::start().await;
    let url = fake.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let m = manifest(dir.path(), "m.jsonl", &[("a", "One."), ("hang", "Two.")]);
    let submitted = voxctl(&url, &["submit", &m]).await;
    assert_eq!(submitted.status.code(), Some(0), "{}", stderr(&submitted));
    // The fake moves one item on per GetJob: waiting ends them.
    let waited = voxctl(&url, &["wait", "jobs/j1"]).await;
    assert_eq!(waited.status.code(), Some(0), "{}", stderr(&waited));
    let out = dir.path().join("audio");
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_voxctl"))
        .env_remove("VOXPOOL_JOBS")
        .args(["job", "download", "jobs/j1"])
        .arg(&out)
        .args(["--jobs", &url, "--token", TOKEN, "--concurrency", "2"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("voxctl");
    // Interrupt once the first item's file is complete (in place under its name, which it
    // gets only once whole) and the hanging one is being read (two at once: either may start
    // first). The directory also holds the run's lock file from the start: not a file of an
    // item.
    let complete = || out.join("a.wav").is_file();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !(fake.reads().keys().any(|k| k.ends_with("/hang")) && complete()) {
        assert!(
            std::time::Instant::now() < until,
            "the first item was never written, or the hanging one never read"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let pid = child.id().expect("pid").to_string();
    let sent = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill");
    assert!(sent.success());
    let done = tokio::time::timeout(std::time::Duration::from_secs(10), child.wait_with_output())
        .await
        .expect("voxctl ends after Ctrl-C")
        .expect("output");
    let said = stderr(&done);
    assert_eq!(done.status.code(), Some(130), "{said}");
    assert!(
        said.contains("voxctl: interrupted: 1 file(s) complete")
            && said.contains("again to resume"),
        "{said}"
    );
    let left: Vec<String> = std::fs::read_dir(&out)
        .expect("out dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".part") || n.starts_with(".voxctl-tmp-"))
        .collect();
    assert!(left.is_empty(), "no temporary file left: {left:?}");
    assert_eq!(
        std::fs::read(out.join("a.wav")).expect("a.wav"),
        audio_of("a")
    );
}

/// An over-long text is a problem of its line like any other, found here with the others at
/// once (the server would name it only once they were fixed): nothing is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_long_text_is_named_by_its_manifest_line_with_the_other_problems() {
    let fake = FakeJobs::start().await;
    let url = fake.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let long = "x".repeat(20_001);
    let lines = format!(
        "\n{}\n\n{}\nnot json\n",
        serde_json::json!({"id": "short", "text": "One.", "packId": "vp_test"}),
        serde_json::json!({"id": "long", "text": long, "packId": "vp_test"})
    );
    let path = dir.path().join("m.jsonl");
    std::fs::write(&path, lines).expect("write");
    let m = path.display().to_string();
    let submit = voxctl(&url, &["submit", &m]).await;
    let said = stderr(&submit);
    assert_eq!(submit.status.code(), Some(2), "{said}");
    assert!(stdout(&submit).is_empty());
    assert!(
        said.contains(&format!(
            "voxctl: {m}: line 4 (id \"long\"): text: 20001 characters: at most 20000 per item"
        )) && said.contains(&format!("voxctl: {m}: line 5:")),
        "the long text (line 4, blank lines counted) and the bad line 5, together: {said}"
    );
    assert!(
        said.contains("2 invalid manifest line(s); nothing was submitted"),
        "{said}"
    );
    assert!(fake.created().is_empty(), "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_a_tenants_jobs_newest_first_and_delete_needs_the_job_ended() {
    let fake = FakeJobs::start().await;
    let url = fake.url();
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, tenant) in [("a", "t1"), ("b", "t1"), ("c", ""), ("d", "t1")] {
        let m = manifest(
            dir.path(),
            &format!("{name}.jsonl"),
            &[(name, "I am stuck.")],
        );
        let submit = voxctl(&url, &["submit", &m, "--tenant", tenant]).await;
        assert_eq!(submit.status.code(), Some(0), "{}", stderr(&submit));
    }
    let list = voxctl(&url, &["list", "--tenant", "t1"]).await;
    assert_eq!(list.status.code(), Some(0), "{}", stderr(&list));
    let rows: Vec<String> = stdout(&list).lines().map(str::to_owned).collect();
    assert_eq!(rows.len(), 4, "a header and every page: {rows:?}");
    let header: Vec<&str> = rows[0].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "JOB",
            "STATE",
            "CREATED",
            "ITEMS",
            "OK",
            "FAILED",
            "CANCELLED",
            "RUNNING",
            "QUEUED"
        ]
    );
    let names: Vec<&str> = rows[1..]
        .iter()
        .filter_map(|r| r.split_whitespace().next())
        .collect();
    assert_eq!(names, ["jobs/j4", "jobs/j2", "jobs/j1"], "newest first");
    let cells: Vec<&str> = rows[1].split_whitespace().collect();
    assert_eq!(
        (cells[1], cells[3], cells[8]),
        ("QUEUED", "1", "1"),
        "{rows:?}"
    );
    assert!(cells[2].ends_with('Z'), "created in UTC: {rows:?}");
    assert!(
        stderr(&list).contains("voxctl: 3 job(s) of tenant t1"),
        "{}",
        stderr(&list)
    );
    let shared = voxctl(&url, &["list"]).await;
    let shown = stdout(&shared);
    let rows: Vec<&str> = shown.lines().collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows[1].starts_with("jobs/j3 "), "{rows:?}");

    let refused = voxctl(&url, &["delete", "j1"]).await;
    let said = stderr(&refused);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(
        said.contains("jobs/j1 is QUEUED")
            && said.contains("cancel it first (voxctl job cancel jobs/j1)"),
        "{said}"
    );
    assert_eq!(fake.job_count(), 4);
    let cancel = voxctl(&url, &["cancel", "j1"]).await;
    assert_eq!(cancel.status.code(), Some(0), "{}", stderr(&cancel));
    let delete = voxctl(&url, &["delete", "jobs/j1"]).await;
    assert_eq!(delete.status.code(), Some(0), "{}", stderr(&delete));
    assert!(
        stderr(&delete).contains("voxctl: deleted jobs/j1"),
        "{}",
        stderr(&delete)
    );
    assert_eq!(fake.job_count(), 3);
    let gone = voxctl(&url, &["delete", "j1"]).await;
    assert_eq!(gone.status.code(), Some(1));
    assert!(
        stderr(&gone).contains("no job jobs/j1 at"),
        "{}",
        stderr(&gone)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn download_refuses_a_file_for_dir_and_fails_when_its_report_cannot_be_written() {
    let fake = FakeJobs::start().await;
    let url = fake.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let m = manifest(dir.path(), "m.jsonl", &[("a", "One.")]);
    assert_eq!(stdout(&voxctl(&url, &["submit", &m]).await), "jobs/j1\n");
    let wait = voxctl(
        &url,
        &["wait", "j1", "--interval", "10ms", "--progress", "quiet"],
    )
    .await;
    assert_eq!(wait.status.code(), Some(0), "{}", stderr(&wait));

    let afile = dir.path().join("afile");
    std::fs::write(&afile, "not a directory").expect("write");
    let afile_arg = afile.display().to_string();
    let into_file = voxctl(&url, &["download", "j1", &afile_arg]).await;
    let said = stderr(&into_file);
    assert_eq!(into_file.status.code(), Some(2), "{said}");
    assert!(
        said.contains(&format!("{afile_arg} is not a directory")),
        "{said}"
    );
    assert!(!said.contains("File exists"), "{said}");
    assert!(fake.reads().is_empty(), "nothing downloaded");

    let out = dir.path().join("out");
    let report = afile.join("report.json");
    let unwritable = voxctl(
        &url,
        &[
            "download",
            "j1",
            &out.display().to_string(),
            "--report",
            &report.display().to_string(),
        ],
    )
    .await;
    let said = stderr(&unwritable);
    assert_eq!(unwritable.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!("cannot write the report {}", report.display())),
        "{said}"
    );
    assert!(
        !said.contains(&format!("; report {}", report.display())),
        "never claims the report it could not write: {said}"
    );
    assert_eq!(
        std::fs::read(out.join("a.wav")).expect("the audio is written"),
        audio_of("a")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_without_the_token_says_how_to_send_it_once() {
    let fake = FakeJobs::start_with_token(TOKEN).await;
    let url = fake.url();
    let refused = voxctl_as(&url, &["status", "j1"], None).await;
    let said = stderr(&refused);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(
        said.contains("GetJob (jobs at") && said.contains("UNAUTHENTICATED"),
        "{said}"
    );
    assert_eq!(
        said.matches("VOXPOOL_CLIENT_TOKEN").count(),
        1,
        "the hint once: {said}"
    );
    assert!(said.contains("dev-client-token-voxctl"), "{said}");
    let wrong = voxctl_as(&url, &["status", "j1"], Some("another-token-0123456789")).await;
    let said = stderr(&wrong);
    assert_eq!(said.matches("VOXPOOL_CLIENT_TOKEN").count(), 1, "{said}");
    let right = voxctl(&url, &["status", "j1"]).await;
    assert!(
        stderr(&right).contains("no job jobs/j1"),
        "with the token the call goes through: {}",
        stderr(&right)
    );
}
