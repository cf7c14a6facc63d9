use std::collections::HashMap;

use super::*;
use voxpool_domain::status::with_info;

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
        assert!(!retryable(&status), "{status:?}");
    }
}
