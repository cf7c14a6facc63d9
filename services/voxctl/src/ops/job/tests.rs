//! Tests of `voxctl job` that need no server: names, the CreateJob request built from a
//! manifest and its request id, what is printed, the report of a job's items, and how errors
//! read and are retried.

use std::{
    collections::HashMap,
    path::Path,
    time::{Duration, SystemTime},
};

use tonic::Code;
use tonic_types::StatusExt as _;
use voxpool_domain::{contract::JobsReason, snapshot::Snapshot, status::with_info};
use voxpool_proto::{
    jobs::v1::{ItemCounts, ItemError, Job, JobItem, job, job_item, job_item_spec},
    prost_types::Timestamp,
    scheduler::v1::Priority,
};

use super::{
    Jobs, MAX_INLINE_ITEMS,
    download::{Fetched, item_report, summarize},
    fields, is_over, item_name, job_name,
    submit::{JobOptions, Submitted, build_request, earlier_job},
    transient, view,
    wait::{exit_code, outcome_line},
};
use crate::{format::Format, manifest::Manifest, report::Status};

fn options() -> JobOptions {
    JobOptions {
        format: Format::Wav,
        sample_rate_hz: 0,
        priority: Priority::Batch,
        tenant: String::new(),
        webhook_url: String::new(),
        request_id: None,
    }
}

fn parse(text: &str) -> Manifest {
    Manifest::parse(text.as_bytes(), Path::new("."))
}

fn sealed_snapshot_json() -> String {
    let json = r#"{"packId":"vp_1","packVersion":"1","provider":"openai","model":"m","voiceId":"alloy",
        "ttsModelId":"p","tier":"STANDARD","frozenAt":"2026-01-01T00:00:00Z","digest":""}"#;
    let snapshot = Snapshot::from_json(json).expect("snapshot").seal();
    serde_json::to_string(&snapshot.to_json_value()).expect("json")
}

const TWO: &str = "{\"id\":\"a\",\"text\":\"hello\",\"packId\":\"vp_1\"}\n{\"id\":\"b\",\"text\":\"bye\",\"packId\":\"vp_1\",\"emotion\":\"calm\",\"seed\":7}\n";

#[test]
fn a_job_is_named_with_or_without_its_collection() {
    assert_eq!(job_name("abc").as_deref(), Ok("jobs/abc"));
    assert_eq!(job_name("jobs/abc").as_deref(), Ok("jobs/abc"));
    assert_eq!(job_name("  jobs/j_01H\n").as_deref(), Ok("jobs/j_01H"));
    for bad in [
        "",
        "jobs/",
        "jobs/a/items/b",
        "a b",
        "a\u{1b}[2J",
        "other/x",
    ] {
        let err = job_name(bad).expect_err(bad);
        assert!(err.contains("jobs/<id>"), "{bad:?}: {err}");
    }
    assert_eq!(item_name("jobs/abc", "ch-1"), "jobs/abc/items/ch-1");
}

#[test]
fn the_request_carries_every_item_with_its_voice_emotion_and_seed() {
    let snap = sealed_snapshot_json();
    let manifest = parse(&format!(
        "{TWO}\n{{\"id\":\"c\",\"text\":\"x\",\"snapshot\":{snap}}}\n"
    ));
    let opts = JobOptions {
        format: Format::Mp3,
        sample_rate_hz: 24_000,
        priority: Priority::Standard,
        tenant: "team-a".into(),
        webhook_url: "https://hooks.example.com/x".into(),
        request_id: None,
    };
    let request = build_request(&manifest, Path::new("m.jsonl"), &opts).expect("request");
    assert_eq!(request.items.len(), 3);
    let [a, b, c] = &request.items[..] else {
        panic!("three items");
    };
    assert_eq!(
        (a.id.as_str(), a.text.as_str(), a.emotion.as_str(), a.seed),
        ("a", "hello", "", None),
        "no seed: the server derives the id's, as batch does"
    );
    assert_eq!(a.voice, Some(job_item_spec::Voice::PackId("vp_1".into())));
    assert_eq!((b.emotion.as_str(), b.seed), ("calm", Some(7)));
    assert!(matches!(&c.voice, Some(job_item_spec::Voice::SnapshotJson(j)) if *j == snap));
    assert_eq!(
        request.format,
        voxpool_proto::synthesis::v1::AudioFormat::Mp3 as i32
    );
    assert_eq!(
        (
            request.sample_rate_hz,
            request.priority,
            request.tenant.as_str()
        ),
        (24_000, Priority::Standard as i32, "team-a")
    );
    assert_eq!(request.webhook_url, "https://hooks.example.com/x");
    assert!(request.manifest_uri.is_empty());
    assert_eq!(
        request.request_id.len(),
        64,
        "hex SHA-256, no sha256: prefix"
    );
    assert!(request.request_id.bytes().all(|b| b.is_ascii_hexdigit()));
}

#[test]
fn the_same_submit_has_the_same_request_id_and_a_changed_one_another() {
    let id = |text: &str, opts: &JobOptions| {
        build_request(&parse(text), Path::new("m.jsonl"), opts)
            .expect("request")
            .request_id
    };
    let base = id(TWO, &options());
    assert_eq!(base, id(TWO, &options()), "stable across runs");
    assert_eq!(
        base,
        id(&format!("\n{TWO}\n\n"), &options()),
        "blank lines change no item"
    );
    let other_priority = JobOptions {
        priority: Priority::Standard,
        webhook_url: "https://h/x".into(),
        ..options()
    };
    assert_eq!(
        base,
        id(TWO, &other_priority),
        "priority and webhook change no audio"
    );
    for changed in [
        id(&TWO.replace("hello", "hullo"), &options()),
        id(&TWO.replace("\"seed\":7", "\"seed\":8"), &options()),
        id(
            TWO,
            &JobOptions {
                tenant: "t".into(),
                ..options()
            },
        ),
        id(
            TWO,
            &JobOptions {
                format: Format::Pcm,
                ..options()
            },
        ),
        id(
            TWO,
            &JobOptions {
                sample_rate_hz: 16_000,
                ..options()
            },
        ),
    ] {
        assert_ne!(changed, base);
    }
    let given = JobOptions {
        request_id: Some("my-key".into()),
        ..options()
    };
    assert_eq!(id(TWO, &given), "my-key");
    let none = JobOptions {
        request_id: Some(String::new()),
        ..options()
    };
    assert_eq!(id(TWO, &none), "", "--request-id '' sends none");
}

#[test]
fn an_over_long_text_is_reported_with_the_other_bad_lines_at_once() {
    let long = "a".repeat(super::submit::MAX_TEXT_CHARS + 1);
    let text = format!(
        "{{\"id\":\"long\",\"text\":\"{long}\",\"packId\":\"p\"}}\nnot json\n{{\"id\":\"ok\",\"text\":\"t\",\"packId\":\"p\"}}\n"
    );
    let manifest = parse(&text);
    let all = super::submit::problems(&manifest);
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!((all[0].line, all[1].line), (1, 2), "in line order");
    assert!(
        all[0].to_string().contains("20001 characters")
            && all[0].to_string().contains("at most 20000"),
        "{}",
        all[0]
    );
    let err = build_request(&manifest, Path::new("m.jsonl"), &options()).expect_err("refused");
    assert_eq!(err.exit_code, 2);
    assert!(
        err.message.contains("2 invalid manifest line(s)"),
        "{}",
        err.message
    );
}

#[test]
fn a_manifest_with_bad_lines_none_or_too_many_items_is_refused_with_exit_2() {
    let bad = parse(&format!("{TWO}{{\"id\":\"c\"}}\nnot json\n"));
    let err = build_request(&bad, Path::new("m.jsonl"), &options()).expect_err("refused");
    assert_eq!(err.exit_code, 2);
    assert!(
        err.message
            .contains("2 invalid manifest line(s); nothing was submitted"),
        "{}",
        err.message
    );
    let empty = build_request(&parse("\n\n"), Path::new("m.jsonl"), &options()).expect_err("empty");
    assert_eq!(empty.exit_code, 2);
    let lines: String = (0..=MAX_INLINE_ITEMS)
        .map(|i| format!("{{\"id\":\"i{i}\",\"text\":\"t\",\"packId\":\"p\"}}\n"))
        .collect();
    let err = build_request(&parse(&lines), Path::new("m.jsonl"), &options()).expect_err("big");
    assert_eq!(err.exit_code, 2);
    assert!(
        err.message.contains("10001 items") && err.message.contains("several jobs"),
        "{}",
        err.message
    );
}

fn at(seconds: i64) -> Option<Timestamp> {
    Some(Timestamp { seconds, nanos: 0 })
}

fn job_with(state: job::State, counts: ItemCounts) -> Job {
    Job {
        name: "jobs/j1".into(),
        state: state as i32,
        total_items: counts.queued
            + counts.running
            + counts.succeeded
            + counts.failed
            + counts.cancelled,
        item_counts: Some(counts),
        characters: 300,
        characters_succeeded: 200,
        create_time: at(1_796_000_000),
        start_time: at(1_796_000_001),
        end_time: None,
        ..Job::default()
    }
}

fn item(id: &str, state: job_item::State) -> JobItem {
    JobItem {
        id: id.into(),
        state: state as i32,
        attempts: 1,
        characters: 100,
        ..JobItem::default()
    }
}

#[test]
fn report_entries_follow_the_item_state_and_what_the_download_did() {
    let mut ok = item("a", job_item::State::Succeeded);
    (ok.key_id, ok.chunks, ok.cached_chunks, ok.attempts) = ("up/k1".into(), 3, 1, 2);
    let written = item_report(1, &ok, Format::Mp3, Some(&Fetched::Written(10)));
    assert_eq!(
        (written.status, written.resumed, written.file.as_deref()),
        (Status::Ok, false, Some("a.mp3"))
    );
    assert_eq!(
        (
            written.attempts,
            written.keys.clone(),
            written.chunks,
            written.cached_chunks
        ),
        (2, vec!["up/k1".to_owned()], 3, 1)
    );
    let present = item_report(1, &ok, Format::Mp3, Some(&Fetched::Present));
    assert_eq!((present.status, present.resumed), (Status::Ok, true));
    let lost = item_report(
        1,
        &ok,
        Format::Mp3,
        Some(&Fetched::Failed("NOT_FOUND".into(), "gone".into())),
    );
    assert_eq!(
        (lost.status, lost.code.as_deref(), lost.error.as_deref()),
        (Status::Failed, Some("NOT_FOUND"), Some("gone"))
    );
    let mut failed = item("b", job_item::State::Failed);
    failed.error = Some(ItemError {
        code: "INVALID_ARGUMENT".into(),
        reason: "VENDOR_REJECTED".into(),
        message: "text has no speakable characters".into(),
        metadata: HashMap::new(),
    });
    let r = item_report(2, &failed, Format::Wav, None);
    assert_eq!(
        (
            r.status,
            r.line,
            r.code.as_deref(),
            r.error.as_deref(),
            r.file
        ),
        (
            Status::Failed,
            2,
            Some("INVALID_ARGUMENT"),
            Some("VENDOR_REJECTED: text has no speakable characters"),
            None
        )
    );
    for state in [
        job_item::State::Cancelled,
        job_item::State::Queued,
        job_item::State::Running,
    ] {
        let r = item_report(3, &item("c", state), Format::Wav, None);
        assert_eq!(
            (r.status, r.code, r.error),
            (Status::NotStarted, None, None),
            "{state:?}"
        );
    }
}

#[test]
fn the_summary_counts_the_items_and_takes_the_times_and_calls_from_the_job() {
    let mut job = job_with(
        job::State::Failed,
        ItemCounts {
            succeeded: 1,
            failed: 1,
            cancelled: 1,
            ..ItemCounts::default()
        },
    );
    job.end_time = at(1_796_000_011);
    let mut failed = item("b", job_item::State::Failed);
    failed.attempts = 3;
    failed.error = Some(ItemError {
        code: "UNAVAILABLE".into(),
        message: "down".into(),
        ..ItemError::default()
    });
    let reports = vec![
        item_report(
            1,
            &item("a", job_item::State::Succeeded),
            Format::Wav,
            Some(&Fetched::Written(5)),
        ),
        item_report(2, &failed, Format::Wav, None),
        item_report(3, &item("c", job_item::State::Cancelled), Format::Wav, None),
    ];
    let s = summarize(&job, &reports, SystemTime::now());
    assert_eq!((s.items, s.ok, s.failed, s.not_started), (3, 1, 1, 1));
    assert_eq!((s.calls, s.retries), (5, 2));
    assert_eq!(s.wall_seconds, 10.0, "start to end of the job");
    assert_eq!(s.chars_per_second, 20.0);
    assert_eq!(s.top_errors, [("UNAVAILABLE: down".to_owned(), 1)]);
    assert!(!s.all_ok());
}

#[test]
fn a_job_is_over_when_it_ended_or_was_cancelled_with_nothing_in_flight() {
    let counts = |running| ItemCounts {
        running,
        succeeded: 1,
        ..ItemCounts::default()
    };
    assert!(is_over(&job_with(job::State::Succeeded, counts(0))));
    assert!(is_over(&job_with(job::State::Failed, counts(0))));
    assert!(!is_over(&job_with(job::State::Running, counts(1))));
    assert!(!is_over(&job_with(job::State::Queued, counts(0))));
    assert!(
        !is_over(&job_with(job::State::Cancelled, counts(2))),
        "items still in flight"
    );
    assert!(is_over(&job_with(job::State::Cancelled, counts(0))));
    let mut ended = job_with(job::State::Cancelled, counts(2));
    ended.end_time = at(1_796_000_002);
    assert!(is_over(&ended));
    assert_eq!(exit_code(&job_with(job::State::Succeeded, counts(0))), 0);
    assert_eq!(exit_code(&job_with(job::State::Failed, counts(0))), 1);
    assert_eq!(exit_code(&job_with(job::State::Cancelled, counts(0))), 1);
    let line = outcome_line(&job_with(job::State::Failed, counts(0)), "jobs/j1");
    assert!(
        line.starts_with("voxctl: jobs/j1 FAILED: 1 items: 1 ok")
            && line.contains("--state failed"),
        "{line}"
    );
}

#[test]
fn status_reads_as_one_block_and_json_keeps_the_proto_field_names() {
    let mut job = job_with(
        job::State::Running,
        ItemCounts {
            queued: 2,
            running: 1,
            succeeded: 3,
            ..ItemCounts::default()
        },
    );
    job.summary_uri = "file:///b/jobs/j1/summary.json".into();
    job.format = voxpool_proto::synthesis::v1::AudioFormat::Wav as i32;
    let text = view::render_status(&job);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "job         jobs/j1");
    assert_eq!(lines[1], "state       RUNNING");
    assert_eq!(
        lines[2], "items       6 total: 2 queued, 1 running, 3 succeeded, 0 failed, 0 cancelled",
        "no cache count while it is 0"
    );
    assert!(
        text.contains("started     2026-11-30T00:53:21Z") && text.contains("ended       -"),
        "{text}"
    );
    assert!(
        !text.contains("summary"),
        "summary.json does not exist before the job ends: {text}"
    );
    let json = serde_json::to_value(view::JobJson::new(&job)).expect("json");
    assert_eq!(json["name"], "jobs/j1");
    assert_eq!(json["state"], "RUNNING");
    assert_eq!(json["itemCounts"]["succeeded"], 3);
    assert_eq!(json["charactersSucceeded"], 200);
    assert_eq!(json["summaryUri"], "file:///b/jobs/j1/summary.json");
    assert_eq!(json["endTime"], serde_json::Value::Null);
    assert!(
        json["createTime"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{json}"
    );
    assert_eq!(json["format"], "WAV");
    assert_eq!(json["priority"], "PRIORITY_UNSPECIFIED");
}

#[test]
fn status_shows_the_summary_once_the_job_ended_and_the_items_the_cache_served() {
    let mut job = job_with(
        job::State::Succeeded,
        ItemCounts {
            succeeded: 6,
            ..ItemCounts::default()
        },
    );
    (job.end_time, job.cached_items) = (at(1_796_000_009), 2);
    job.summary_uri = "file:///b/jobs/j1/summary.json".into();
    let text = view::render_status(&job);
    assert!(
        text.lines().any(|l| l
            == "items       6 total: 0 queued, 0 running, 6 succeeded, 0 failed, 0 cancelled; 2 served from the audio cache"),
        "{text}"
    );
    assert_eq!(
        text.lines().last(),
        Some("summary     file:///b/jobs/j1/summary.json"),
        "{text}"
    );
    // Cancelled with items still in flight: not ended yet, no summary.
    let mut cancelling = job_with(
        job::State::Cancelled,
        ItemCounts {
            running: 1,
            cancelled: 5,
            ..ItemCounts::default()
        },
    );
    cancelling.summary_uri = "file:///b/jobs/j1/summary.json".into();
    assert!(!view::has_ended(&cancelling));
    assert!(!view::render_status(&cancelling).contains("summary"));
}

#[test]
fn the_job_list_shows_name_state_creation_and_counts_per_job() {
    let mut newer = job_with(
        job::State::Running,
        ItemCounts {
            queued: 3,
            running: 1,
            succeeded: 2,
            failed: 1,
            ..ItemCounts::default()
        },
    );
    newer.name = "jobs/j2".into();
    let older = job_with(
        job::State::Cancelled,
        ItemCounts {
            cancelled: 4,
            ..ItemCounts::default()
        },
    );
    let text = view::render_jobs(&[newer, older]);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec![
                "JOB",
                "STATE",
                "CREATED",
                "ITEMS",
                "OK",
                "FAILED",
                "CANCELLED",
                "RUNNING",
                "QUEUED"
            ],
            vec![
                "jobs/j2",
                "RUNNING",
                "2026-11-30T00:53:20Z",
                "7",
                "2",
                "1",
                "0",
                "1",
                "3"
            ],
            vec![
                "jobs/j1",
                "CANCELLED",
                "2026-11-30T00:53:20Z",
                "4",
                "0",
                "0",
                "4",
                "0",
                "0"
            ],
        ]
    );
}

fn submitted(state: job::State, counts: ItemCounts, request_id: &str) -> Submitted {
    Submitted {
        job: job_with(state, counts),
        request_id: request_id.into(),
        tries: 1,
    }
}

#[test]
fn an_answered_job_that_already_ran_is_named_as_the_earlier_submit() {
    let queued = ItemCounts {
        queued: 2,
        ..ItemCounts::default()
    };
    let path = Path::new("live.jsonl");
    assert_eq!(
        earlier_job(&submitted(job::State::Queued, queued, "r1"), path),
        None,
        "a job queued whole is what this submit asked for"
    );
    let cancelled = ItemCounts {
        cancelled: 2,
        ..ItemCounts::default()
    };
    let note = earlier_job(&submitted(job::State::Cancelled, cancelled, "r1"), path)
        .expect("an ended job is an earlier one");
    assert!(
        note.starts_with(
            "voxctl: live.jsonl was submitted before (request id r1): jobs/j1 is that earlier job as it is now, CANCELLED"
        ),
        "{note}"
    );
    assert!(
        note.contains("voxctl job status jobs/j1 shows it")
            && note.ends_with("voxctl job submit live.jsonl --request-id <new id>"),
        "{note}"
    );
    let started = ItemCounts {
        queued: 1,
        succeeded: 1,
        ..ItemCounts::default()
    };
    for state in [job::State::Queued, job::State::Running] {
        let note = earlier_job(&submitted(state, started, "r1"), path)
            .expect("items past QUEUED: it ran before");
        assert!(
            note.contains("voxctl job wait jobs/j1 follows it"),
            "{note}"
        );
    }
    for state in [job::State::Succeeded, job::State::Failed] {
        assert!(earlier_job(&submitted(state, queued, "r1"), path).is_some());
    }
    // After retries, a job still going may be the one a lost answer queued: not said; one
    // that ended is the earlier job all the same.
    let retried = |state| Submitted {
        tries: 3,
        ..submitted(state, started, "r1")
    };
    assert_eq!(earlier_job(&retried(job::State::Running), path), None);
    assert!(earlier_job(&retried(job::State::Succeeded), path).is_some());
    assert_eq!(
        earlier_job(&submitted(job::State::Cancelled, cancelled, ""), path),
        None,
        "without a request id every submit is a new job"
    );
}

#[test]
fn server_field_errors_name_the_manifest_line_and_the_flag() {
    // Blank lines are skipped: the items sent are lines 3 and 5.
    let manifest = parse(&format!("\n\n{}", TWO.replace('\n', "\n\n")));
    let lines: Vec<usize> = manifest.items.iter().map(|i| i.line).collect();
    assert_eq!(lines, [3, 5]);
    let (a, b) = (lines[0], lines[1]);
    let items = &manifest.items;
    assert_eq!(
        fields::problem(
            "items[1].text",
            "20001 characters: at most 20000 per item",
            items
        ),
        format!("line {b} (id \"b\"): text: 20001 characters: at most 20000 per item")
    );
    assert_eq!(
        fields::problem("items[0].pack_id", "empty", items),
        format!("line {a} (id \"a\"): packId: empty")
    );
    assert_eq!(
        fields::problem("items[1].id", "duplicate id (first at items[0])", items),
        format!("line {b} (id \"b\"): id: duplicate id (first at line {a})")
    );
    assert_eq!(
        fields::problem("tenant", "at most 64 characters", items),
        "--tenant: at most 64 characters"
    );
    assert_eq!(
        fields::problem("sample_rate_hz", "7 Hz", items),
        "--sample-rate: 7 Hz"
    );
    assert_eq!(
        fields::problem("items[9].text", "x", items),
        "items[9].text: x",
        "an index the manifest did not send stays as the server said it"
    );
    let status = tonic::Status::with_error_details(
        Code::InvalidArgument,
        "invalid items[1].text: too long; nothing was queued",
        tonic_types::ErrorDetails::with_bad_request(vec![
            tonic_types::FieldViolation::new("items[1].text", "too long"),
            tonic_types::FieldViolation::new("webhook_url", "not https"),
        ]),
    );
    assert_eq!(
        fields::problems(&status, items),
        [
            format!("line {b} (id \"b\"): text: too long"),
            "--webhook-url: not https".to_owned()
        ]
    );
    assert!(fields::problems(&tonic::Status::invalid_argument("x"), items).is_empty());
}

#[test]
fn items_show_the_output_or_the_error_and_escape_what_the_server_wrote() {
    let mut ok = item("a", job_item::State::Succeeded);
    ok.output_uri = "file:///b/jobs/j1/a.wav".into();
    let mut failed = item("b", job_item::State::Failed);
    failed.error = Some(ItemError {
        code: "FAILED_PRECONDITION".into(),
        reason: "PACK_DISABLED".into(),
        message: "pack vp_1 is disabled\u{1b}[2J".into(),
        ..ItemError::default()
    });
    let mut plain = item("c", job_item::State::Failed);
    plain.error = Some(ItemError {
        code: "INTERNAL".into(),
        message: "boom".into(),
        ..ItemError::default()
    });
    let text = view::render_items(&[ok, failed, plain, item("d", job_item::State::Queued)]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "ID  STATE      OUTPUT / ERROR");
    assert_eq!(lines[1], "a   SUCCEEDED  file:///b/jobs/j1/a.wav");
    assert_eq!(
        lines[2],
        "b   FAILED     FAILED_PRECONDITION PACK_DISABLED: pack vp_1 is disabled\\u{1b}[2J"
    );
    assert_eq!(lines[3], "c   FAILED     INTERNAL: boom");
    assert_eq!(lines[4], "d   QUEUED");
    let tally = view::tally_states(&[
        item("x", job_item::State::Failed),
        item("y", job_item::State::Failed),
    ]);
    assert_eq!(tally, "2 failed");
}

fn jobs() -> Jobs {
    let token = crate::connect::client_token(None).expect("no token");
    // A lazy channel: nothing is dialled.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    runtime.block_on(async { Jobs::new("http://127.0.0.1:1", &token).expect("client") })
}

#[test]
fn errors_say_what_to_do_from_the_typed_reason_or_the_code() {
    let jobs = jobs();
    let reason =
        |code, r: JobsReason| with_info(code, "the message", r.as_str(), HashMap::new(), None);
    let gone = jobs.error(
        "GetJob",
        "jobs/x",
        &reason(Code::NotFound, JobsReason::JobNotFound),
    );
    assert_eq!(
        gone.message,
        "no job jobs/x at jobs at http://127.0.0.1:1 (deleted or past its retention?)"
    );
    assert_eq!(gone.exit_code, 1);
    let plain = jobs.error("GetJob", "jobs/x", &tonic::Status::not_found("whatever"));
    assert_eq!(
        plain.message, gone.message,
        "a NOT_FOUND without a reason reads the same"
    );
    let item = jobs.error(
        "ReadJobItemAudio",
        "jobs/x/items/a",
        &reason(Code::NotFound, JobsReason::JobNotFound),
    );
    assert!(
        item.message.starts_with("no job jobs/x at"),
        "{}",
        item.message
    );
    let audio = jobs.error(
        "ReadJobItemAudio",
        "jobs/x/items/a",
        &reason(Code::NotFound, JobsReason::AudioGone),
    );
    assert!(
        audio.message.contains("the audio is gone"),
        "{}",
        audio.message
    );
    let hook = jobs.error(
        "CreateJob",
        "",
        &reason(Code::FailedPrecondition, JobsReason::WebhookSecretMissing),
    );
    assert!(
        hook.message.contains("submit without --webhook-url"),
        "{}",
        hook.message
    );
    let down = tonic::Status::from_error(Box::new(std::io::Error::other("connection refused")));
    let down = jobs.error("GetJob", "jobs/x", &down);
    assert!(
        down.message.contains("check --jobs / VOXPOOL_JOBS"),
        "{}",
        down.message
    );
    let auth = with_info(
        Code::Unauthenticated,
        "needs a token",
        voxpool_domain::contract::AuthReason::ClientTokenMissing.as_str(),
        HashMap::new(),
        None,
    );
    let auth = jobs.error("GetJob", "jobs/x", &auth);
    assert!(
        auth.message.contains("--token or VOXPOOL_CLIENT_TOKEN"),
        "{}",
        auth.message
    );
    let reused = jobs.error(
        "CreateJob",
        "",
        &reason(Code::AlreadyExists, JobsReason::RequestIdReused),
    );
    assert!(
        reused.message.contains("give a new --request-id"),
        "{}",
        reused.message
    );
}

fn store_down() -> tonic::Status {
    with_info(
        Code::Unavailable,
        "the job store does not answer",
        JobsReason::StoreUnavailable.as_str(),
        HashMap::new(),
        None,
    )
}

#[tokio::test(start_paused = true)]
async fn a_budgeted_call_is_retried_while_transient_for_the_whole_budget() {
    let token = crate::connect::client_token(None).expect("no token");
    let jobs = Jobs::new("http://127.0.0.1:1", &token).expect("client");
    let budget = Duration::from_secs(30);
    // Eight failures (the default policy gives up after four retries), then the answer. The
    // backoff ceilings sum to at most 21.2 s, inside the budget.
    let (mut calls, mut said) = (0u32, Vec::new());
    let started = tokio::time::Instant::now();
    let answer = jobs
        .retrying_for(
            budget,
            |status, pause| said.push((status.code(), pause)),
            |_| {
                calls += 1;
                let n = calls;
                async move {
                    if n <= 8 {
                        Err(store_down())
                    } else {
                        Ok(tonic::Response::new(n))
                    }
                }
            },
        )
        .await;
    assert!(matches!(answer, Ok((9, 9))), "{answer:?}");
    assert_eq!(said.len(), 8, "every retry is said");
    assert!(
        said.iter()
            .all(|(c, p)| *c == Code::Unavailable && *p <= Duration::from_secs(5))
    );
    assert!(started.elapsed() < budget);

    // Never answering: tried until the budget has passed, not longer.
    let started = tokio::time::Instant::now();
    let mut tries = 0u32;
    let answer: Result<((), u32), _> = jobs
        .retrying_for(
            budget,
            |_, _| {},
            |_| {
                tries += 1;
                async { Err(store_down()) }
            },
        )
        .await;
    let (status, counted) = answer.expect_err("gave up");
    assert_eq!((status.code(), counted), (Code::Unavailable, tries));
    assert!(tries > 5, "{tries} tries: more than a fixed few");
    let took = started.elapsed();
    assert!(
        took >= budget && took < budget + Duration::from_secs(1),
        "{took:?}"
    );

    // A failure no retry can fix is answered at once.
    let started = tokio::time::Instant::now();
    let answer: Result<((), u32), _> = jobs
        .retrying_for(
            budget,
            |_, _| {},
            |_| async { Err(tonic::Status::invalid_argument("bad")) },
        )
        .await;
    assert_eq!(answer.expect_err("refused").1, 1);
    assert_eq!(started.elapsed(), Duration::ZERO);
}

#[test]
fn only_transient_failures_are_retried() {
    assert!(transient(&tonic::Status::unavailable("down")));
    assert!(transient(&tonic::Status::deadline_exceeded("slow")));
    assert!(transient(&with_info(
        Code::Unavailable,
        "m",
        JobsReason::StoreUnavailable.as_str(),
        HashMap::new(),
        None
    )));
    assert!(!transient(&tonic::Status::not_found("x")));
    assert!(!transient(&tonic::Status::invalid_argument("x")));
    assert!(!transient(&with_info(
        Code::FailedPrecondition,
        "m",
        JobsReason::JobFinished.as_str(),
        HashMap::new(),
        None
    )));
}

#[test]
fn times_print_in_utc_and_durations_never_go_negative() {
    assert_eq!(
        view::time(at(0).as_ref()).as_deref(),
        Some("1970-01-01T00:00:00Z")
    );
    assert_eq!(view::time(None), None);
    assert_eq!(view::seconds_between(at(10).as_ref(), at(4).as_ref()), 0.0);
    assert_eq!(view::seconds_between(at(4).as_ref(), None), 0.0);
}
