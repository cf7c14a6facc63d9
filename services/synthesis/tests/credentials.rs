//! The credential policy: keys without a readable credential are never leased; a pool with no
//! usable key answers FAILED_PRECONDITION naming the missing variables.

mod common;

use common::{Stack, request, scripted::Scripted, snapshot};
use tonic::Code;
use tonic_types::StatusExt;
use voxpool_synthesis::vendor::TextLimit;

const POOLS: &str = r#"
[[pools]]
id = "nocreds"
provider = "openai"
[[pools.upstreams]]
id = "acct"
[[pools.upstreams.keys]]
id = "k1"
capacity = 1
credential = { env = "VOXPOOL_SYNTH_TEST_UNSET_A" }

[[pools]]
id = "partial"
provider = "openai"
[[pools.upstreams]]
id = "acct"
[[pools.upstreams.keys]]
id = "missing"
capacity = 5
credential = { env = "VOXPOOL_SYNTH_TEST_UNSET_B" }
[[pools.upstreams.keys]]
id = "present"
capacity = 1
credential = { file = "{dir}/present" }
"#;

#[tokio::test]
async fn a_pool_without_any_credential_is_failed_precondition_naming_the_variable() {
    let (adapter, _) = Scripted::new("openai", TextLimit::Chars(4096), vec![]);
    let stack = Stack::start(POOLS, adapter.registry()).await;
    let err = stack
        .synthesize(request(&snapshot("openai", "nocreds", "alloy", "{}"), "hi"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message()
            .contains("VOXPOOL_SYNTH_TEST_UNSET_A is not set"),
        "{}",
        err.message()
    );
    assert_eq!(
        err.get_error_details().error_info().expect("info").reason,
        "CREDENTIALS_MISSING"
    );
    assert!(adapter.calls().is_empty());
}

#[tokio::test]
async fn keys_without_credentials_are_never_leased() {
    let (adapter, _) = Scripted::new("openai", TextLimit::Chars(4096), vec![]);
    let stack = Stack::start(POOLS, adapter.registry()).await;
    for _ in 0..4 {
        let resp = stack
            .synthesize(request(&snapshot("openai", "partial", "alloy", "{}"), "hi"))
            .await
            .expect("served");
        assert_eq!(resp.key_id, "acct/present");
    }
    assert!(
        adapter
            .calls()
            .iter()
            .all(|c| c.secret.as_deref() == Some("secret-present"))
    );
}

#[tokio::test]
async fn a_pool_whose_provider_has_no_adapter_is_failed_precondition() {
    let (adapter, _) = Scripted::new("azure", TextLimit::Chars(4096), vec![]);
    let stack = Stack::start(POOLS, adapter.registry()).await;
    let err = stack
        .synthesize(request(&snapshot("openai", "partial", "alloy", "{}"), "hi"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().contains("needs the \"openai\" adapter"),
        "{}",
        err.message()
    );
}
