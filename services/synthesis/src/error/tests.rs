//! Tests of the status mapping.

use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::StatusExt;
use voxpool_domain::contract::Outcome;

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
