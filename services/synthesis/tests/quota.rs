//! Character quotas end to end (keys near their quota are picked last, so 4 callers share
//! the pool's 2 + 2 slots): synthesis reserves each call's characters at Acquire and reports
//! them, the scheduler counts them per key and period, so calls in flight never take a key
//! past its budget; a key whose budget is spent is not leased (OVER_QUOTA) while the other key
//! serves, and the period's rollover (the store's clock moved past midnight UTC) brings it
//! back. Against the fake OpenAI-compatible vendor, which counts what each key sent.

mod common;

use common::{Stack, json_of};
use voxpool_fake_vendors::{FakeConfig, FakeVendor, VendorKind};
use voxpool_proto::{scheduler::v1::KeyState, synthesis::v1 as pb};
use voxpool_synthesis::adapters::registry::{self, AdapterOptions};

const TEXT: &str = "Hello, quota world."; // 19 characters
/// Five calls' worth.
const BUDGET: u64 = 95;

#[tokio::test]
async fn a_key_stops_at_its_character_budget_while_the_other_serves_until_the_period_resets() {
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::OpenAi))
        .await
        .expect("fake");
    let toml = format!(
        "[[pools]]\nid = \"p\"\nprovider = \"openai\"\nmodel = \"m1\"\n\
         [[pools.upstreams]]\nid = \"u0\"\nbase_url = \"{}\"\n\
         [[pools.upstreams.keys]]\nid = \"k0\"\ncapacity = 2\n\
         credential = {{ file = \"{{dir}}/u0-k0\" }}\n\
         quota = {{ characters = {BUDGET}, per = \"day\" }}\n\
         [[pools.upstreams.keys]]\nid = \"k1\"\ncapacity = 2\n\
         credential = {{ file = \"{{dir}}/u0-k1\" }}\n",
        fake.base_url()
    );
    let stack = Stack::start(&toml, registry::builtin(&AdapterOptions::default())).await;
    let voice = common::snapshot("openai", "p", "alloy", "{}");
    let request = pb::SynthesizeRequest {
        voice: Some(pb::synthesize_request::Voice::SnapshotJson(json_of(&voice))),
        text: TEXT.into(),
        format: pb::AudioFormat::Pcm as i32,
        ..Default::default()
    };
    // 4 callers on 2 + 2 slots: k0 (picked last once near its quota) still gets work.
    let callers: Vec<_> = (0..4)
        .map(|_| {
            let (mut client, request) = (stack.synthesis.clone(), request.clone());
            tokio::spawn(async move {
                for _ in 0..10 {
                    client.synthesize(request.clone()).await.expect("served");
                }
            })
        })
        .collect();
    for c in callers {
        c.await.expect("caller");
    }
    let chars = TEXT.chars().count() as u64;
    let sent_on_k0 = fake.key_stats("secret-u0-k0").total_requests * chars;
    assert_eq!(
        sent_on_k0, BUDGET,
        "k0 served exactly its budget: its calls in flight reserved their characters, so none \
         ran past it"
    );
    assert_eq!(
        fake.key_stats("secret-u0-k1").total_requests * chars + sent_on_k0,
        40 * chars,
        "the other key served the rest"
    );
    let k0 = stack.key("p", "u0/k0").await;
    assert_eq!(k0.state(), KeyState::OverQuota);
    assert_eq!(
        (k0.quota_used as u64, k0.quota_limit as u64),
        (sent_on_k0, BUDGET)
    );
    // Midnight UTC passes on the store's clock: a new period.
    let now = stack.pool_status("p").await.now_ms;
    let to_reset = u64::try_from(k0.quota_resets_at_ms - now + 1).expect("in the future");
    stack
        .store
        .advance_clock("p", to_reset)
        .await
        .expect("clock");
    let k0 = stack.key("p", "u0/k0").await;
    assert_eq!((k0.state(), k0.quota_used), (KeyState::Available, 0));
}
