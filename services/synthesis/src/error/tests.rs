//! Tests of the status mapping.

use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::StatusExt;
use voxpool_domain::contract::{Outcome, SynthesisReason};

use super::*;

fn attempt(key: &str, outcome: Outcome, status: Option<u16>) -> AttemptRecord {
    AttemptRecord {
        key_id: key.into(),
        upstream_id: key.split('/').next().unwrap_or_default().into(),
        outcome,
        http_status: status,
        latency_ms: 5,
        message: "nope".into(),
        retry_after_ms: None,
    }
}

#[test]
fn exhaustion_lists_every_attempt_in_message_and_details() {
    let e = SynthesisError::Exhausted {
        pool: "p".into(),
        why: "all 2 keys failed".into(),
        attempts: vec![
            attempt("a/k1", Outcome::RateLimited, Some(429)),
            attempt("b/k2", Outcome::UpstreamError, Some(503)),
        ],
        retry_after: None,
    };
    let s = Status::from(e);
    assert_eq!(s.code(), Code::Unavailable);
    assert!(
        s.message()
            .starts_with("pool \"p\": all 2 keys failed: a/k1 RATE_LIMITED (429)"),
        "{}",
        s.message()
    );
    let d = s.get_error_details();
    let md = &d.error_info().unwrap().metadata;
    assert_eq!(md["keys_tried"], "a/k1,b/k2");
    assert_eq!(md["upstreams_tried"], "a,b");
    assert!(md["attempt_2"].contains("UPSTREAM_ERROR (503)"));
}

#[test]
fn exhaustion_by_throttling_only_is_resource_exhausted() {
    let e = SynthesisError::Exhausted {
        pool: "p".into(),
        why: "all 1 keys failed".into(),
        attempts: vec![attempt("a/k1", Outcome::RateLimited, Some(429))],
        retry_after: Some(Duration::from_secs(1)),
    };
    let s = Status::from(e);
    assert_eq!(s.code(), Code::ResourceExhausted);
    assert_eq!(
        s.get_error_details().retry_info().unwrap().retry_delay,
        Some(Duration::from_secs(1))
    );
}

#[test]
fn param_errors_name_the_param_in_bad_request_and_message() {
    let e = SynthesisError::Param(ParamError {
        param: "params.pitchPct".into(),
        value: "60".into(),
        provider: "espeak".into(),
        reason: "must be -50..+50".into(),
    });
    let s = Status::from(e);
    assert_eq!(s.code(), Code::InvalidArgument);
    assert_eq!(
        s.message(),
        "invalid params.pitchPct: espeak cannot apply params.pitchPct = 60: must be -50..+50"
    );
    assert_eq!(
        s.get_error_details()
            .bad_request()
            .unwrap()
            .field_violations[0]
            .field,
        "params.pitchPct"
    );
}

/// One error of every variant (and both codes of exhaustion, a wait for a slot and an
/// interrupted stream whose cause had a field, a reason or a retry time).
fn one_of_each() -> Vec<SynthesisError> {
    let s = String::from;
    let param = || ParamError {
        param: s("params.rate"),
        value: s("3"),
        provider: s("minimax"),
        reason: s("above 2"),
    };
    let throttled = vec![attempt("a/k1", Outcome::RateLimited, Some(429))];
    let failing = vec![attempt("a/k1", Outcome::UpstreamError, Some(503))];
    let waited = || SynthesisError::DeadlineExceeded {
        pool: Some(s("p")),
        budget_ms: 100,
        attempts: Vec::new(),
        in_call: false,
    };
    let interrupted = |cause: SynthesisError| SynthesisError::Interrupted {
        delivered_bytes: 1,
        delivered_messages: 1,
        complete_chunks: 0,
        chunks: 2,
        cause: Box::new(cause),
    };
    let full = || SynthesisError::PoolFull {
        pool: s("p"),
        message: s("full"),
        retry_after: Some(Duration::from_millis(1_500)),
        attempts: Vec::new(),
    };
    vec![
        SynthesisError::invalid("text", "empty"),
        SynthesisError::Param(param()),
        SynthesisError::UnknownPool {
            tts_model_id: s("x"),
            known: s("p"),
        },
        SynthesisError::UnknownProvider {
            provider: s("x"),
            known: s("openai"),
        },
        SynthesisError::ProviderMismatch {
            pool: s("p"),
            pool_provider: s("a"),
            provider: s("b"),
        },
        SynthesisError::NoAdapter {
            pool: s("p"),
            provider: s("a"),
        },
        SynthesisError::NoCredentials {
            pool: s("p"),
            problems: vec![s("k: unset")],
        },
        SynthesisError::UnknownUpstream {
            pool: s("p"),
            upstream: s("u"),
            known: s("v"),
        },
        SynthesisError::CatalogNotFound {
            pack_id: s("vp"),
            message: s("gone"),
        },
        SynthesisError::CatalogRefused {
            pack_id: s("vp"),
            message: s("disabled"),
        },
        SynthesisError::CatalogInvalid { message: s("bad") },
        SynthesisError::ReferenceMissing {
            digest: s("d"),
            location: s("file:///x"),
        },
        SynthesisError::ReferenceCorrupt {
            digest: s("d"),
            location: s("file:///x"),
        },
        SynthesisError::BlobUnavailable {
            location: s("file:///x"),
            cause: s("io"),
        },
        SynthesisError::CatalogUnavailable {
            url: s("http://c"),
            message: s("down"),
        },
        SynthesisError::CatalogFailed {
            url: s("http://c"),
            message: s("bug"),
        },
        SynthesisError::SchedulerUnavailable {
            url: s("http://s"),
            message: s("down"),
        },
        SynthesisError::SchedulerMismatch {
            url: s("http://s"),
            message: s("pools"),
        },
        full(),
        SynthesisError::Exhausted {
            pool: s("p"),
            why: s("all failed"),
            attempts: throttled.clone(),
            retry_after: Some(Duration::from_secs(2)),
        },
        SynthesisError::Exhausted {
            pool: s("p"),
            why: s("all failed"),
            attempts: failing.clone(),
            retry_after: None,
        },
        SynthesisError::VendorRejected {
            pool: s("p"),
            attempt: Box::new(failing[0].clone()),
        },
        waited(),
        SynthesisError::DeadlineExceeded {
            pool: Some(s("p")),
            budget_ms: 100,
            attempts: failing,
            in_call: true,
        },
        SynthesisError::DeadlineExceeded {
            pool: None,
            budget_ms: 100,
            attempts: Vec::new(),
            in_call: false,
        },
        SynthesisError::Audio {
            pool: s("p"),
            message: s("rates differ"),
        },
        SynthesisError::ResponseTooLarge {
            bytes: 10,
            limit: 5,
        },
        SynthesisError::StreamBroken {
            pool: s("p"),
            chunk: 1,
            chunks: 2,
            delivered: 3,
            attempt: None,
        },
        interrupted(SynthesisError::invalid("text", "empty")),
        interrupted(full()),
        interrupted(waited()),
        SynthesisError::DeadlineUnreachable {
            pool: s("p"),
            characters: 1,
            estimate_ms: 2,
            deadline_ms: 1,
            backlog_characters: 0,
            retry_after: None,
            endangers_admitted: false,
        },
        SynthesisError::ReaderStalled {
            pool: s("p"),
            stalled_ms: 1,
            delivered_bytes: 2,
        },
        SynthesisError::AdapterPanicked {
            provider: s("openai"),
        },
    ]
}

#[test]
fn the_status_carries_the_errors_own_code_reason_field_and_retry_time() {
    for (e, status) in one_of_each()
        .into_iter()
        .zip(one_of_each().into_iter().map(Status::from))
    {
        let details = status.get_error_details();
        assert_eq!(status.code(), e.code(), "{e}");
        assert_eq!(status.message(), e.to_string(), "{e}");
        let reason = details.error_info().map(|i| i.reason.as_str());
        assert_eq!(reason, e.reason().map(SynthesisReason::as_str), "{e}");
        let field = details
            .bad_request()
            .and_then(|b| b.field_violations.first())
            .map(|v| v.field.as_str());
        assert_eq!(field, e.field(), "{e}");
        let retry = details.retry_info().and_then(|r| r.retry_delay);
        assert_eq!(retry, e.retry_after(), "{e}");
    }
    let slot_waits: Vec<bool> = one_of_each()
        .iter()
        .map(SynthesisError::waited_for_slot)
        .collect();
    assert_eq!(
        slot_waits.iter().filter(|w| **w).count(),
        2,
        "the wait and its interruption"
    );
}
