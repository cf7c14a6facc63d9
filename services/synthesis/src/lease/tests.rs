use std::collections::HashMap;

use super::*;
use tonic::{Code, Status};
use voxpool_domain::{
    contract::{Retry, SchedulerReason},
    status::with_info,
};

#[test]
fn scheduler_errors_are_classified_by_code_and_reason() {
    let full = with_info(
        Code::ResourceExhausted,
        "full",
        "POOL_FULL",
        HashMap::new(),
        Some(Duration::from_millis(250)),
    );
    assert_eq!(
        classify(&full),
        AcquireError::PoolFull {
            message: "full".into(),
            retry_after: Some(Duration::from_millis(250))
        }
    );
    let none = with_info(
        Code::ResourceExhausted,
        "none",
        "NO_ELIGIBLE_KEY",
        HashMap::new(),
        None,
    );
    assert!(matches!(
        classify(&none),
        AcquireError::NoEligibleKey { .. }
    ));
    let cooling = with_info(
        Code::Unavailable,
        "cool",
        "KEYS_UNAVAILABLE",
        HashMap::new(),
        None,
    );
    assert!(matches!(
        classify(&cooling),
        AcquireError::KeysUnavailable { .. }
    ));
    let store = with_info(
        Code::Unavailable,
        "store",
        "STORE_UNAVAILABLE",
        HashMap::new(),
        None,
    );
    assert!(matches!(classify(&store), AcquireError::Unreachable { .. }));
    assert!(matches!(
        classify(&Status::not_found("pool")),
        AcquireError::Mismatch { .. }
    ));
    assert!(matches!(
        classify(&Status::unavailable("tcp connect error")),
        AcquireError::Unreachable { .. }
    ));
}

#[test]
fn a_refused_caller_credential_is_a_mismatch_naming_the_setting_not_an_outage() {
    for status in [
        Status::unauthenticated("client token rejected"),
        Status::permission_denied("no"),
    ] {
        let AcquireError::Mismatch { message } = classify(&status) else {
            panic!("{status:?} is not a Mismatch");
        };
        assert!(message.contains("VOXPOOL_CLIENT_TOKEN"), "{message}");
        assert_eq!(retry(&status), Retry::Never, "{status:?}");
    }
}

#[test]
fn another_endpoint_is_tried_for_a_replica_s_trouble_never_for_the_pool_s_state() {
    let with =
        |code, reason: SchedulerReason| with_info(code, "m", reason.as_str(), HashMap::new(), None);
    for again in [
        with(Code::Unavailable, SchedulerReason::StoreUnavailable),
        with(Code::Unavailable, SchedulerReason::ShuttingDown),
        with(Code::Unavailable, SchedulerReason::PoolNotSeeded),
        Status::unavailable("tcp connect error"),
        Status::cancelled("h2 stream reset"),
    ] {
        assert_eq!(retry(&again), Retry::Again, "{again:?}");
    }
    for never in [
        with(Code::Unavailable, SchedulerReason::KeysUnavailable),
        with(Code::Unavailable, SchedulerReason::PoolRecovering),
        with(Code::ResourceExhausted, SchedulerReason::PoolFull),
        with(Code::ResourceExhausted, SchedulerReason::NoEligibleKey),
        with(Code::DeadlineExceeded, SchedulerReason::WaitDeadline),
        with(Code::FailedPrecondition, SchedulerReason::LeaseNotLive),
        Status::deadline_exceeded("budget spent"),
        Status::resource_exhausted("message too large"),
        // Message text decides nothing: no source, no transport failure.
        Status::unknown("transport error"),
        Status::not_found("pool"),
    ] {
        assert_eq!(retry(&never), Retry::Never, "{never:?}");
    }
}

#[tokio::test]
async fn a_scheduler_silent_past_the_grace_fails_new_calls_at_once_not_at_their_deadline() {
    // Nothing listens on port 1: no endpoint ever answers its health check.
    let scheduler = Scheduler::connect_lazy(
        "http://127.0.0.1:1",
        ClientToken::none(),
        Duration::from_millis(200),
        voxpool_runtime::endpoints::PROBE_INTERVAL,
    )
    .expect("client");
    let acquire = Acquire {
        pool: "p".into(),
        exclude_keys: vec![],
        upstream_ids: vec![],
        lease_ttl: Duration::from_secs(30),
        wait: Duration::from_secs(60),
        request_id: "r".into(),
        idempotency_key: "k".into(),
        priority: Priority::Standard,
        tenant: String::new(),
        characters: 0,
        tier: None,
        caller: String::new(),
        cost_micros: 0,
        request_characters: 0,
        request_cost_micros: 0,
    };
    // A bound far above the grace and far below the call's own 60 s deadline: the call must
    // end because the grace passed, not because the deadline did.
    let answer = tokio::time::timeout(
        Duration::from_secs(20),
        scheduler.acquire(&acquire, Duration::from_secs(60)),
    )
    .await
    .expect("the call ended well before its 60 s deadline");
    match answer {
        Err(AcquireError::Unreachable { message }) => assert!(
            message.contains("scheduler_unavailable_grace_ms") && message.contains("127.0.0.1:1"),
            "{message}"
        ),
        other => panic!("expected UNAVAILABLE from the grace, got {other:?}"),
    }
}
