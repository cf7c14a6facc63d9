//! Tests of `classify.rs`: the status table, Retry-After parsing, scrubbing, error answers.

use std::time::Duration;

use reqwest::header::{HeaderValue, RETRY_AFTER};

use super::*;

#[test]
fn status_table_matches_vendors_md() {
    for (status, outcome) in [
        (400, Outcome::ClientError),
        (401, Outcome::KeyInvalid),
        (402, Outcome::QuotaExhausted),
        (403, Outcome::KeyInvalid),
        (404, Outcome::ClientError),
        (408, Outcome::Timeout),
        (415, Outcome::ClientError),
        (422, Outcome::ClientError),
        (429, Outcome::RateLimited),
        (500, Outcome::UpstreamError),
        (502, Outcome::UpstreamError),
        (503, Outcome::UpstreamError),
        (302, Outcome::UpstreamError),
    ] {
        assert_eq!(outcome_for_status(status), outcome, "status {status}");
    }
}

#[test]
fn retry_after_reads_seconds_fractions_dates_and_ms() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    let with = |name: &'static str, v: &str| {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_str(v).unwrap());
        h
    };
    assert_eq!(retry_after_ms(&with("retry-after", "7"), now), Some(7000));
    assert_eq!(retry_after_ms(&with("retry-after", "0.25"), now), Some(250));
    assert_eq!(
        retry_after_ms(&with("retry-after-ms", "120"), now),
        Some(120)
    );
    let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
    assert_eq!(
        retry_after_ms(&with(RETRY_AFTER.as_str(), &later), now),
        Some(30_000)
    );
    let earlier = httpdate::fmt_http_date(now - Duration::from_secs(30));
    assert_eq!(retry_after_ms(&with("retry-after", &earlier), now), Some(0));
    assert_eq!(retry_after_ms(&with("retry-after", "soon"), now), None);
    assert_eq!(retry_after_ms(&HeaderMap::new(), now), None);
    // Without Retry-After: the rate-limit window's reset.
    assert_eq!(
        retry_after_ms(&with("x-ratelimit-reset-requests", "6m0s"), now),
        Some(360_000)
    );
    assert_eq!(
        retry_after_ms(&with("x-ratelimit-reset-requests", "250ms"), now),
        Some(250)
    );
    assert_eq!(
        retry_after_ms(&with("x-ratelimit-reset", "3"), now),
        Some(3000)
    );
    let unix = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 5;
    assert_eq!(
        retry_after_ms(&with("x-ratelimit-reset", &unix.to_string()), now),
        Some(5000),
        "a Unix time in seconds"
    );
}

#[test]
fn scrub_removes_the_secret_and_masked_echoes() {
    let secret = Secret::new("sk-test-0123456789abcdef");
    let msg =
        "Incorrect API key provided: sk-tes***********cdef. key sk-test-0123456789abcdef again";
    let out = scrub(msg, Some(&secret));
    assert!(!out.contains("sk-test-0123456789abcdef"), "{out}");
    assert!(!out.contains("cdef"), "{out}");
    assert!(out.contains("Incorrect API key provided"), "{out}");
    let long = "x".repeat(1000);
    assert!(scrub(&long, None).chars().count() <= MAX_MESSAGE_CHARS + 1);
    assert_eq!(scrub("line\nbreak", None), "line break");
}

#[test]
fn documents_are_never_taken_for_audio() {
    let mut json = HeaderMap::new();
    json.insert(
        "content-type",
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    assert!(is_document(&json, b"RIFF...."));
    assert!(is_document(
        &HeaderMap::new(),
        br#" {"error":{"code":"x"}}"#
    ));
    assert!(!is_document(&HeaderMap::new(), &[0x7B, 0x00, 0x12, 0x34]));
    assert!(audio::sniff(AudioFormat::Mp3, &[0xFF, 0xFB, 0x90, 0xC0]).is_ok());
    assert!(audio::sniff(AudioFormat::Mp3, b"{\"a\":1}").is_err());
    assert!(audio::sniff(AudioFormat::Pcm, &[1, 2, 3]).is_err());
}

#[test]
fn an_error_answer_shows_code_and_message_or_the_body_and_reads_retry_after() {
    let mut headers = HeaderMap::new();
    headers.insert("retry-after", HeaderValue::from_static("3"));
    let secret = Secret::new("sk-test-0123456789abcdef");
    let f = ErrorAnswer {
        status: 429,
        headers: &headers,
        body: b"{}",
        code: "rate_limit_exceeded".into(),
        message: "slow down sk-test-0123456789abcdef",
        outcome: None,
    }
    .failure("openai", Some(&secret));
    assert_eq!(f.outcome, Outcome::RateLimited);
    assert_eq!(f.retry_after_ms, Some(3000));
    assert_eq!(f.http_status, Some(429));
    assert!(
        f.message
            .starts_with("openai: HTTP 429 rate_limit_exceeded: slow down"),
        "{}",
        f.message
    );
    assert!(!f.message.contains("0123456789"), "{}", f.message);
    let no_doc = HeaderMap::new();
    let f = ErrorAnswer {
        status: 200,
        headers: &no_doc,
        body: b"<html>busy</html>",
        code: String::new(),
        message: "",
        outcome: None,
    }
    .failure("azure", None);
    assert_eq!(
        f.outcome,
        Outcome::UpstreamError,
        "an error in a 200 is the vendor's"
    );
    assert!(f.message.contains("<html>busy</html>"), "{}", f.message);
    let f = ErrorAnswer {
        status: 200,
        headers: &no_doc,
        body: b"{}",
        code: "code 1004".into(),
        message: "auth",
        outcome: Some(Outcome::KeyInvalid),
    }
    .failure("minimax", None);
    assert_eq!(f.outcome, Outcome::KeyInvalid, "the vendor's code decides");
}

#[test]
fn a_503_with_retry_after_is_an_overload_signal_and_a_bare_503_a_failure() {
    let answer = |headers: &HeaderMap, outcome| {
        ErrorAnswer {
            status: 503,
            headers,
            body: b"busy",
            code: String::new(),
            message: "",
            outcome,
        }
        .failure("openai", None)
    };
    let mut retry = HeaderMap::new();
    retry.insert("retry-after", HeaderValue::from_static("2"));
    let f = answer(&retry, None);
    assert_eq!(f.outcome, Outcome::RateLimited);
    assert_eq!(f.retry_after_ms, Some(2000));
    // The vendor's overloaded code (UPSTREAM_ERROR) with Retry-After is shedding load too.
    let f = answer(&retry, Some(Outcome::UpstreamError));
    assert_eq!(f.outcome, Outcome::RateLimited);
    assert_eq!(
        answer(&HeaderMap::new(), None).outcome,
        Outcome::UpstreamError
    );
    // A rate-limit window's reset header alone does not make a 503 an overload signal.
    let mut reset = HeaderMap::new();
    reset.insert("x-ratelimit-reset", HeaderValue::from_static("3"));
    assert_eq!(answer(&reset, None).outcome, Outcome::UpstreamError);
    // Any other outcome the vendor's code names stays.
    assert_eq!(
        answer(&retry, Some(Outcome::KeyInvalid)).outcome,
        Outcome::KeyInvalid
    );
}

#[tokio::test]
async fn a_refused_connection_says_so_and_where_to_look() {
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let err = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/v1/audio/speech"))
        .send()
        .await
        .expect_err("nothing listens");
    assert!(crate::adapters::http::connection_refused(&err));
    let failure = crate::adapters::http::transport_failure(
        "openai",
        &err,
        None,
        Duration::from_secs(5),
        None,
    );
    assert_eq!(failure.outcome, Outcome::Timeout);
    assert!(
        failure.message.contains("connection refused") && failure.message.contains("base_url"),
        "{}",
        failure.message
    );
    assert!(
        !failure.message.contains(&port.to_string()),
        "{}",
        failure.message
    );
}
