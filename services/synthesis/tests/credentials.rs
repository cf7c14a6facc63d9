//! The credential policy: keys without a readable credential are never leased; a pool with no
//! usable key answers FAILED_PRECONDITION naming the missing variables.

mod common;

use common::{Stack, request, scripted::Scripted, snapshot};
use tonic::Code;
use tonic_types::StatusExt;
use voxpool_synthesis::adapters::TextLimit;

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

/// Synthesis's ListPools answer.
async fn list_pools(stack: &Stack) -> Vec<voxpool_proto::synthesis::v1::PoolReadiness> {
    stack
        .synthesis
        .clone()
        .list_pools(voxpool_proto::synthesis::v1::ListPoolsRequest {})
        .await
        .expect("ListPools")
        .into_inner()
        .pools
}

#[tokio::test]
async fn list_pools_says_which_keys_have_no_credential_and_which_pools_cannot_serve() {
    let (adapter, _) = Scripted::new("openai", TextLimit::Chars(4096), vec![]);
    let pools = list_pools(&Stack::start(POOLS, adapter.registry()).await).await;
    let ids: Vec<&str> = pools.iter().map(|p| p.pool.as_str()).collect();
    assert_eq!(ids, ["nocreds", "partial"]);
    let (nocreds, partial) = (&pools[0], &pools[1]);
    assert!(nocreds.adapter_available && !nocreds.serving);
    assert!(!nocreds.keys[0].usable);
    assert!(
        nocreds.keys[0]
            .problem
            .contains("VOXPOOL_SYNTH_TEST_UNSET_A is not set"),
        "{nocreds:?}"
    );
    assert!(partial.serving);
    let usable: Vec<(&str, bool)> = partial
        .keys
        .iter()
        .map(|k| (k.key_id.as_str(), k.usable))
        .collect();
    assert_eq!(usable, [("acct/missing", false), ("acct/present", true)]);
    assert!(
        !format!("{pools:?}").contains("secret-present"),
        "never the credential itself"
    );
}

#[tokio::test]
async fn list_pools_marks_a_pool_whose_adapter_is_missing_as_not_serving() {
    let (adapter, _) = Scripted::new("azure", TextLimit::Chars(4096), vec![]);
    let pools = list_pools(&Stack::start(POOLS, adapter.registry()).await).await;
    assert!(
        pools.iter().all(|p| !p.adapter_available && !p.serving),
        "{pools:?}"
    );
}
