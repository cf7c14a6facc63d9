//! `voxctl batch` through the library against an in-process fake Synthesis server: output,
//! retries, resume, manifests, splitting, breaker and rate limit.

mod common;

use std::time::{Duration, Instant};

use common::{
    audio_files, config,
    fake_catalog::FakeCatalog,
    fake_synthesis::{FakeSynthesis, Reply, text_of_wav},
    items, names, no_breaker, temp_files, write_manifest,
};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt as _};
use voxctl::{
    batch::{self, BatchError},
    breaker::BreakerConfig,
    report::Status as ItemStatus,
    shutdown::Shutdown,
};
use voxpool_domain::contract::SynthesisReason;

#[tokio::test]
async fn every_item_is_written_as_a_complete_wav_and_the_report_says_so() {
    let server = FakeSynthesis::healthy().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let list = items(40);
    let manifest = write_manifest(dir.path(), "m.jsonl", &list);
    let out = dir.path().join("out");
    let report = dir.path().join("report.json");
    let mut c = config(&manifest, &out, &server.url());
    c.report = Some(report.clone());
    let outcome = batch::run(c, Shutdown::new()).await.expect("run");

    assert_eq!(outcome.exit_code, 0);
    assert_eq!((outcome.summary.ok, outcome.summary.items), (40, 40));
    assert_eq!(audio_files(&out).len(), 40);
    assert!(temp_files(&out).is_empty());
    for (id, text) in &list {
        let bytes = std::fs::read(out.join(format!("{id}.wav"))).expect("file");
        assert_eq!(&text_of_wav(&bytes), text);
    }
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("json");
    assert_eq!(doc["summary"]["ok"], 40);
    let first = &doc["items"][0];
    assert_eq!(
        (
            first["id"].as_str(),
            first["status"].as_str(),
            first["attempts"].as_u64()
        ),
        (Some("item-000"), Some("ok"), Some(1))
    );
    assert_eq!(first["keys"], serde_json::json!(["fake/k1"]));

    // A report that cannot be written (its folder is a file) fails the run: the audio is
    // there, but a script that reads the report has none.
    let mut c = config(&manifest, &out, &server.url());
    c.report = Some(report.join("report.json"));
    let outcome = batch::run(c, Shutdown::new()).await.expect("run");
    assert_eq!(outcome.summary.ok, 40);
    assert_eq!(outcome.exit_code, 1, "no report, not a success");
}

#[tokio::test]
async fn retryable_failures_are_retried_until_the_item_succeeds() {
    let server = FakeSynthesis::start(|call| match call.nth_for_item {
        1 => Reply::err(Status::unavailable("every key failed")),
        2 => Reply::err(Status::resource_exhausted("pool full")),
        3 => Reply::err(Status::deadline_exceeded("vendor too slow")),
        _ => Reply::ok(),
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = write_manifest(dir.path(), "m.jsonl", &items(10));
    let out = dir.path().join("out");
    let mut c = config(&manifest, &out, &server.url());
    c.breaker = no_breaker();
    let outcome = batch::run(c, Shutdown::new()).await.expect("run");

    assert_eq!(outcome.exit_code, 0);
    assert!(
        server.calls().values().all(|n| *n == 4),
        "{:?}",
        server.calls()
    );
    assert!(outcome.items.iter().all(|i| i.attempts == 4));
    assert_eq!((outcome.summary.calls, outcome.summary.retries), (40, 30));
}

#[tokio::test]
async fn client_errors_fail_the_item_at_once_with_the_servers_message() {
    let server = FakeSynthesis::start(|call| match call.item.as_str() {
        "item-001" => Reply::err(Status::invalid_argument(
            "invalid params.pitch_pct: openai cannot apply pitch",
        )),
        "item-002" => Reply::err(Status::failed_precondition("pack vp_test is disabled")),
        "item-003" => Reply::err(Status::not_found("no pool for tts model id \"x\"")),
        _ => Reply::ok(),
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = write_manifest(dir.path(), "m.jsonl", &items(5));
    let out = dir.path().join("out");
    let outcome = batch::run(config(&manifest, &out, &server.url()), Shutdown::new())
        .await
        .expect("run");

    assert_eq!(outcome.exit_code, 1);
    let calls = server.calls();
    for (id, code, words) in [
        ("item-001", "INVALID_ARGUMENT", "cannot apply pitch"),
        ("item-002", "FAILED_PRECONDITION", "is disabled"),
        ("item-003", "NOT_FOUND", "no pool"),
    ] {
        assert_eq!(calls[id], 1, "{id} was retried");
        let item = outcome
            .items
            .iter()
            .find(|i| i.id.as_deref() == Some(id))
            .expect("item");
        assert_eq!(item.status, ItemStatus::Failed);
        assert_eq!(item.code.as_deref(), Some(code));
        assert!(
            item.error.as_deref().unwrap_or_default().contains(words),
            "{item:?}"
        );
    }
    assert_eq!(audio_files(&out), ["item-000.wav", "item-004.wav"]);
    assert!(
        outcome
            .summary
            .top_errors
            .iter()
            .any(|(e, _)| e.starts_with("INVALID_ARGUMENT: "))
    );
}

#[tokio::test]
async fn the_servers_retry_info_delay_is_waited_before_the_next_attempt() {
    let server = FakeSynthesis::start(|call| match call.nth_for_item {
        1 => Reply::err(Status::with_error_details(
            Code::ResourceExhausted,
            "pool \"p\" is full (10/10 in flight); retry in 400ms",
            ErrorDetails::with_retry_info(Some(Duration::from_millis(400))),
        )),
        _ => Reply::ok(),
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = write_manifest(dir.path(), "m.jsonl", &items(1));
    let out = dir.path().join("out");
    let outcome = batch::run(config(&manifest, &out, &server.url()), Shutdown::new())
        .await
        .expect("run");

    assert_eq!(outcome.exit_code, 0);
    let log = server.log();
    assert_eq!(log.len(), 2);
    let gap = log[1].at - log[0].at;
    assert!(
        gap >= Duration::from_millis(400),
        "retried after {gap:?}, before the server's 400ms"
    );
    assert!(gap < Duration::from_secs(5));
}

#[tokio::test]
async fn an_item_that_keeps_failing_stops_after_max_attempts_with_the_last_error() {
    let server = FakeSynthesis::start(|call| match call.item.as_str() {
        "item-000" => Reply::err(Status::unavailable(format!(
            "attempt {} failed",
            call.nth_for_item
        ))),
        _ => Reply::ok(),
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = write_manifest(dir.path(), "m.jsonl", &items(2));
    let out = dir.path().join("out");
    let mut c = config(&manifest, &out, &server.url());
    c.retry.max_attempts = 3;
    c.breaker = no_breaker();
    let outcome = batch::run(c, Shutdown::new()).await.expect("run");

    assert_eq!(server.calls()["item-000"], 3);
    let item = &outcome.items[0];
    assert_eq!((item.status, item.attempts), (ItemStatus::Failed, 3));
    assert_eq!(item.error.as_deref(), Some("attempt 3 failed"));
    assert_eq!(outcome.exit_code, 1);
}

#[tokio::test]
async fn a_call_slower_than_the_deadline_is_abandoned_and_retried() {
    let server = FakeSynthesis::start(|call| match call.nth_for_item {
        1 => Reply::ok().after(Duration::from_secs(5)),
        _ => Reply::ok(),
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = write_manifest(dir.path(), "m.jsonl", &items(1));
    let out = dir.path().join("out");
    let mut c = config(&manifest, &out, &server.url());
    c.deadline = Duration::from_millis(200);
    let started = Instant::now();
    let outcome = batch::run(c, Shutdown::new()).await.expect("run");

    assert_eq!(outcome.exit_code, 0);
    assert_eq!(outcome.items[0].attempts, 2);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the slow call was waited for"
    );
}

#[tokio::test]
async fn a_rerun_makes_no_call_for_finished_items_and_reports_them_as_resumed() {
    let server = FakeSynthesis::healthy().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = write_manifest(dir.path(), "m.jsonl", &items(20));
    let out = dir.path().join("out");
    batch::run(config(&manifest, &out, &server.url()), Shutdown::new())
        .await
        .expect("first run");
    let before = server.total_calls();

    let outcome = batch::run(config(&manifest, &out, &server.url()), Shutdown::new())
        .await
        .expect("second run");
    assert_eq!(
        server.total_calls(),
        before,
        "finished items were synthesized again"
    );
    assert_eq!(outcome.exit_code, 0);
    assert_eq!((outcome.summary.ok, outcome.summary.ok_resumed), (20, 20));
}

#[tokio::test]
async fn a_finished_item_whose_file_was_deleted_is_redone() {
    let server = FakeSynthesis::healthy().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = write_manifest(dir.path(), "m.jsonl", &items(3));
    let out = dir.path().join("out");
    batch::run(config(&manifest, &out, &server.url()), Shutdown::new())
        .await
        .expect("first run");
    std::fs::remove_file(out.join("item-001.wav")).expect("rm");

    let outcome = batch::run(config(&manifest, &out, &server.url()), Shutdown::new())
        .await
        .expect("second run");
    assert_eq!(server.calls()["item-001"], 2);
    assert_eq!(server.calls()["item-000"], 1);
    assert_eq!((outcome.exit_code, audio_files(&out).len()), (0, 3));
}

#[tokio::test]
async fn failed_items_are_skipped_on_resume_unless_retry_failed_is_given() {
    let server = FakeSynthesis::start(|call| match (call.item.as_str(), call.nth_for_item) {
        ("item-001", 1) => Reply::err(Status::invalid_argument("text too long")),
        _ => Reply::ok(),
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = write_manifest(dir.path(), "m.jsonl", &items(3));
    let out = dir.path().join("out");
    let first = batch::run(config(&manifest, &out, &server.url()), Shutdown::new())
        .await
        .expect("run 1");
    assert_eq!(first.exit_code, 1);

    let second = batch::run(config(&manifest, &out, &server.url()), Shutdown::new())
        .await
        .expect("run 2");
    assert_eq!(
        server.calls()["item-001"],
        1,
        "a failed item was retried without --retry-failed"
    );
    assert_eq!((second.exit_code, second.summary.failed_resumed), (1, 1));

    let mut c = config(&manifest, &out, &server.url());
    c.retry_failed = true;
    let third = batch::run(c, Shutdown::new()).await.expect("run 3");
    assert_eq!(server.calls()["item-001"], 2);
    assert_eq!(server.calls()["item-000"], 1);
    assert_eq!(third.exit_code, 0);
}

#[tokio::test]
async fn resuming_with_another_manifest_is_refused_unless_forced_and_then_redoes_only_changed_items()
 {
    let server = FakeSynthesis::healthy().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut list = items(4);
    let manifest = write_manifest(dir.path(), "m.jsonl", &list);
    let out = dir.path().join("out");
    batch::run(config(&manifest, &out, &server.url()), Shutdown::new())
        .await
        .expect("first run");

    list[2].1 = "A different text.".into();
    let manifest = write_manifest(dir.path(), "m.jsonl", &list);
    let err = batch::run(config(&manifest, &out, &server.url()), Shutdown::new())
        .await
        .expect_err("refused");
    assert!(matches!(err, BatchError::Checkpoint(_)), "{err}");
    assert!(err.to_string().contains("--force"));
    assert_eq!(err.exit_code(), 2);

    let mut c = config(&manifest, &out, &server.url());
    c.force = true;
    let outcome = batch::run(c, Shutdown::new()).await.expect("forced");
    assert_eq!(outcome.exit_code, 0);
    assert_eq!(server.calls()["item-002"], 2);
    assert_eq!(server.calls()["item-003"], 1);
    assert_eq!(
        text_of_wav(&std::fs::read(out.join("item-002.wav")).expect("file")),
        "A different text."
    );
}

#[tokio::test]
async fn a_long_item_is_split_at_sentences_and_joined_into_one_wav_with_a_correct_header() {
    let server = FakeSynthesis::healthy().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let text: String = (0..30)
        .map(|i| format!("Sentence {i} is here. "))
        .collect::<String>()
        + "\n\nLast paragraph.";
    let manifest = write_manifest(dir.path(), "m.jsonl", &[("long".into(), text.clone())]);
    let out = dir.path().join("out");
    let mut c = config(&manifest, &out, &server.url());
    c.max_chars = 60;
    let outcome = batch::run(c, Shutdown::new()).await.expect("run");

    assert_eq!(outcome.exit_code, 0);
    let log = server.log();
    assert!(log.len() > 1 && log.iter().all(|c| c.text.chars().count() <= 60));
    assert!(
        log.iter()
            .all(|c| c.text.ends_with(". ") || c.text.ends_with(".\n\n") || c.text.ends_with('.')),
        "cut inside a sentence"
    );
    assert_eq!(outcome.items[0].parts, log.len());
    let bytes = std::fs::read(out.join("long.wav")).expect("file");
    let reader = hound::WavReader::new(std::io::Cursor::new(&bytes)).expect("wav");
    assert_eq!(
        reader.duration() as usize,
        text.chars().count(),
        "header length covers every part"
    );
    assert_eq!(text_of_wav(&bytes), text);
}

/// A server whose audio is 1,000 bytes per character under a 40,000-byte message limit: any
/// part over 40 characters is `RESPONSE_TOO_LARGE`, as `voxpool-synthesis` answers it.
fn too_large_over_40_chars(call: &common::fake_synthesis::Call) -> Reply {
    let chars = call.text.chars().count();
    if chars <= 40 {
        return Reply::ok();
    }
    Reply::err(Status::with_error_details(
        Code::ResourceExhausted,
        "the audio is too large; use SynthesizeStream for long text",
        ErrorDetails::with_error_info(
            SynthesisReason::ResponseTooLarge.as_str(),
            "voxpool.synthesis",
            [
                ("bytes".to_owned(), (chars * 1000).to_string()),
                ("limit".to_owned(), "40000".to_owned()),
            ],
        ),
    ))
}

#[tokio::test]
async fn an_item_whose_audio_is_over_the_message_limit_is_split_to_fit_and_never_resent_as_is() {
    let server = FakeSynthesis::start(too_large_over_40_chars).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let long: String = (0..12)
        .map(|i| format!("Sentence {i:02} is here. "))
        .collect();
    let list = [
        ("first".to_owned(), long.clone()),
        ("second".to_owned(), long.clone()),
    ];
    let manifest = write_manifest(dir.path(), "m.jsonl", &list);
    let out = dir.path().join("out");
    let mut c = config(&manifest, &out, &server.url());
    c.concurrency = 1;
    let outcome = batch::run(c, Shutdown::new()).await.expect("run");

    assert_eq!(outcome.exit_code, 0, "{:?}", outcome.summary);
    assert_eq!(
        outcome.summary.retries, 0,
        "a too-large answer is never retried as is"
    );
    let log = server.log();
    let refused: Vec<_> = log.iter().filter(|c| c.text.chars().count() > 40).collect();
    assert_eq!(
        refused.len(),
        1,
        "only the first oversized part is sent: {refused:?}"
    );
    assert!(
        log.iter()
            .filter(|c| c.item == "second")
            .all(|c| c.text.chars().count() <= 40),
        "the next item is split small enough up front"
    );
    for (id, text) in &list {
        let bytes = std::fs::read(out.join(format!("{id}.wav"))).expect("file");
        assert_eq!(
            &text_of_wav(&bytes),
            text,
            "{id}: parts joined in text order"
        );
    }
    let second = outcome
        .items
        .iter()
        .find(|i| i.id.as_deref() == Some("second"));
    assert!(second.is_some_and(|i| i.parts > 1 && i.attempts as usize == i.parts));
}

#[tokio::test]
async fn a_too_large_part_that_cannot_be_split_fails_at_once_with_the_servers_words() {
    // 100 kB per character under a 40 kB limit: not even one character fits.
    let server = FakeSynthesis::start(|call| {
        Reply::err(Status::with_error_details(
            Code::ResourceExhausted,
            "the audio is too large; use SynthesizeStream for long text",
            ErrorDetails::with_error_info(
                SynthesisReason::ResponseTooLarge.as_str(),
                "voxpool.synthesis",
                [
                    (
                        "bytes".to_owned(),
                        (call.text.chars().count() * 100_000).to_string(),
                    ),
                    ("limit".to_owned(), "40000".to_owned()),
                ],
            ),
        ))
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let word = "Hello there.".to_owned();
    let manifest = write_manifest(dir.path(), "m.jsonl", &[("word".into(), word)]);
    let out = dir.path().join("out");
    let outcome = batch::run(config(&manifest, &out, &server.url()), Shutdown::new())
        .await
        .expect("run");

    let item = &outcome.items[0];
    assert_eq!(item.status, ItemStatus::Failed);
    assert_eq!(item.code.as_deref(), Some("RESOURCE_EXHAUSTED"));
    assert!(
        item.error
            .as_deref()
            .is_some_and(|e| e.contains("SynthesizeStream")),
        "{item:?}"
    );
    assert_eq!(server.calls()["word"], 1, "never retried");
}

#[tokio::test]
async fn bad_manifest_lines_are_reported_by_line_number_and_valid_items_still_run() {
    let server = FakeSynthesis::healthy().await;
    let catalog = FakeCatalog::start(&[("vp_test", true), ("vp_off", false)]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("m.jsonl");
    std::fs::write(
        &manifest,
        [
            r#"{"id":"a","text":"one","packId":"vp_test"}"#,
            r#"{"id":"b","text":"two","packId":"vp_test""#,
            r#"{"id":"c","packId":"vp_test"}"#,
            r#"{"id":"a","text":"dup","packId":"vp_test"}"#,
            r#"{"id":"d","text":"four","card":"no-such-card.json"}"#,
            r#"{"id":"e","text":"five","packId":"vp_unknown"}"#,
            r#"{"id":"f","text":"six","packId":"vp_off"}"#,
            r#"{"text":"no id","packId":"vp_test"}"#,
            r#"{"id":"g","text":"seven","packId":"vp_test"}"#,
        ]
        .join("\n"),
    )
    .expect("write");
    let out = dir.path().join("out");
    let mut c = config(&manifest, &out, &server.url());
    c.catalog = Some(catalog.url());
    let outcome = batch::run(c, Shutdown::new()).await.expect("run");

    assert_eq!(outcome.exit_code, 1);
    assert_eq!(audio_files(&out), ["a.wav", "g.wav"]);
    let invalid: Vec<(usize, String)> = outcome
        .items
        .iter()
        .filter(|i| i.status == ItemStatus::Invalid)
        .map(|i| (i.line, i.error.clone().unwrap_or_default()))
        .collect();
    let lines: Vec<usize> = invalid.iter().map(|(l, _)| *l).collect();
    assert_eq!(lines, [2, 3, 4, 5, 6, 7, 8]);
    let msg = |line: usize| {
        invalid
            .iter()
            .find(|(l, _)| *l == line)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    };
    assert!(msg(2).contains("invalid JSON"));
    assert!(msg(3).contains("missing text"));
    assert!(msg(4).contains("duplicate id (first on line 1)"));
    assert!(msg(5).contains("cannot read"));
    assert!(msg(6).contains("unknown pack \"vp_unknown\""), "{}", msg(6));
    assert!(msg(7).contains("disabled"));
    assert!(msg(8).contains("missing id"));
    assert_eq!(outcome.summary.invalid, 7);
    assert!(server.calls().keys().all(|id| id == "a" || id == "g"));
}

#[tokio::test]
async fn strict_refuses_to_synthesize_anything_when_a_line_is_invalid() {
    let server = FakeSynthesis::healthy().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("m.jsonl");
    std::fs::write(
        &manifest,
        "{\"id\":\"a\",\"text\":\"t\",\"packId\":\"p\"}\nnot json\n",
    )
    .expect("write");
    let out = dir.path().join("out");
    let mut c = config(&manifest, &out, &server.url());
    c.strict = true;
    let err = batch::run(c, Shutdown::new()).await.expect_err("strict");
    assert!(matches!(err, BatchError::Strict(1)), "{err}");
    assert_eq!(err.exit_code(), 2);
    assert_eq!(server.total_calls(), 0);
    assert!(names(&out).is_empty());
}

#[tokio::test]
async fn dry_run_validates_the_manifest_without_calling_the_server_or_writing_files() {
    let server = FakeSynthesis::healthy().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = write_manifest(dir.path(), "m.jsonl", &items(5));
    let out = dir.path().join("out");
    let mut c = config(&manifest, &out, &server.url());
    c.dry_run = true;
    let outcome = batch::run(c, Shutdown::new()).await.expect("dry run");
    assert_eq!(
        (
            outcome.exit_code,
            outcome.summary.items,
            outcome.summary.invalid
        ),
        (0, 5, 0)
    );
    assert_eq!(server.total_calls(), 0);
    assert!(!out.exists());
}

#[tokio::test]
async fn the_circuit_breaker_pauses_the_batch_while_the_service_is_down() {
    let down_for = Duration::from_millis(1500);
    let first_call: std::sync::Mutex<Option<Instant>> = std::sync::Mutex::new(None);
    let server = FakeSynthesis::start(move |call| {
        let start = *first_call.lock().expect("lock").get_or_insert(call.at);
        if call.at - start < down_for {
            Reply::err(Status::unavailable("synthesis is restarting"))
        } else {
            Reply::ok()
        }
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = write_manifest(dir.path(), "m.jsonl", &items(40));
    let out = dir.path().join("out");
    let mut c = config(&manifest, &out, &server.url());
    c.concurrency = 16;
    c.retry.max_attempts = 1000;
    c.retry.base = Duration::from_millis(10);
    c.retry.cap = Duration::from_millis(50);
    c.breaker = BreakerConfig {
        window: 10,
        min_calls: 5,
        failure_ratio: 0.5,
        open_base: Duration::from_millis(200),
        open_max: Duration::from_millis(400),
    };
    let outcome = batch::run(c, Shutdown::new()).await.expect("run");

    assert_eq!(
        outcome.exit_code, 0,
        "every item finishes once the service is back"
    );
    assert!(outcome.summary.breaker_trips >= 1);
    let log = server.log();
    let start = log[0].at;
    let while_down = log.iter().filter(|c| c.at - start < down_for).count();
    // Without the breaker 16 workers retrying every ~25ms make ~900 calls in 1.5s; with it,
    // the first few failures open it and then one probe per pause goes out.
    assert!(while_down < 100, "{while_down} calls hit the down service");
}

#[tokio::test]
async fn qps_limits_how_fast_calls_are_sent() {
    let server = FakeSynthesis::healthy().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = write_manifest(dir.path(), "m.jsonl", &items(21));
    let out = dir.path().join("out");
    let mut c = config(&manifest, &out, &server.url());
    c.qps = Some(50.0);
    c.concurrency = 16;
    let outcome = batch::run(c, Shutdown::new()).await.expect("run");

    assert_eq!(outcome.exit_code, 0);
    let log = server.log();
    let span = log[log.len() - 1].at - log[0].at;
    // 21 calls at 50/s need 20 intervals of 20ms.
    assert!(
        span >= Duration::from_millis(380),
        "21 calls took only {span:?} at --qps 50"
    );
}

#[tokio::test]
async fn a_drain_request_before_the_start_leaves_every_item_not_started() {
    let server = FakeSynthesis::healthy().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = write_manifest(dir.path(), "m.jsonl", &items(5));
    let out = dir.path().join("out");
    let shutdown = Shutdown::new();
    shutdown.drain.cancel();
    let outcome = batch::run(config(&manifest, &out, &server.url()), shutdown)
        .await
        .expect("run");
    assert_eq!((outcome.exit_code, outcome.summary.not_started), (130, 5));
    assert!(outcome.summary.interrupted);
    assert_eq!(server.total_calls(), 0);
}

#[tokio::test]
async fn the_report_counts_the_chunks_the_cache_served_per_item_over_every_part_and_in_total() {
    // Each call is said to hold 3 chunks: the first part of an item 2 from the cache, later
    // parts 1.
    let server = FakeSynthesis::start(|call| {
        if call.request_id.contains("#1.") {
            Reply::ok().cached(2, 3)
        } else {
            Reply::ok().cached(1, 3)
        }
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let long: String = (0..6).map(|i| format!("Sentence {i} is here. ")).collect();
    let list = [
        ("short".to_owned(), "One part.".to_owned()),
        ("long".to_owned(), long),
    ];
    let manifest = write_manifest(dir.path(), "m.jsonl", &list);
    let out = dir.path().join("out");
    let report = dir.path().join("report.json");
    let mut c = config(&manifest, &out, &server.url());
    c.max_chars = 60;
    c.report = Some(report.clone());
    let outcome = batch::run(c, Shutdown::new()).await.expect("run");

    assert_eq!(outcome.exit_code, 0);
    let long_calls = server.calls()["long"] as u64;
    assert!(long_calls > 1, "the long item is split");
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("json");
    let item = |id: &str| {
        doc["items"]
            .as_array()
            .expect("items")
            .iter()
            .find(|i| i["id"] == id)
            .cloned()
            .expect("item")
    };
    assert_eq!(
        (
            item("short")["cachedChunks"].as_u64(),
            item("short")["chunks"].as_u64()
        ),
        (Some(2), Some(3))
    );
    let long_cached = 2 + (long_calls - 1);
    assert_eq!(
        (
            item("long")["cachedChunks"].as_u64(),
            item("long")["chunks"].as_u64()
        ),
        (Some(long_cached), Some(3 * long_calls)),
        "every part's count is added"
    );
    assert_eq!(
        (
            doc["summary"]["cachedChunks"].as_u64(),
            doc["summary"]["chunks"].as_u64()
        ),
        (Some(2 + long_cached), Some(3 + 3 * long_calls))
    );
    let text = voxctl::report::render(&outcome.summary);
    assert!(
        text.contains(&format!(
            "cache: {} of {} chunks served from the cache",
            2 + long_cached,
            3 + 3 * long_calls
        )),
        "{text}"
    );

    // A rerun makes no call: its items report what the first run recorded, its total is 0.
    let outcome = batch::run(config(&manifest, &out, &server.url()), Shutdown::new())
        .await
        .expect("rerun");
    let short = outcome
        .items
        .iter()
        .find(|i| i.id.as_deref() == Some("short"))
        .expect("short");
    assert!(short.resumed);
    assert_eq!((short.cached_chunks, short.chunks), (2, 3));
    assert_eq!(
        (outcome.summary.cached_chunks, outcome.summary.chunks),
        (0, 0)
    );
}
