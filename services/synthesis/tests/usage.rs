//! Usage metering end to end: what a request is charged for on each path (unary, stream),
//! a failover after partial audio counted as charged, a refusal before audio as free, the
//! records on the usage stream (Charge, Settle, Done of one record id) in a real
//! redis-server, a usage store that is down not failing requests, and BUDGET_EXHAUSTED as
//! both fronts answer it.

mod common;

use std::{collections::HashMap, time::Duration};

use common::{
    Opts, Stack, pool_toml, request,
    scripted::{Scripted, Step},
    snapshot,
};
use tokio_stream::StreamExt;
use tonic::Code;
use voxpool_domain::{
    contract::SynthesisReason,
    usage::{USAGE_FIELD, USAGE_STREAM, UsageEvent},
};
use voxpool_proto::scheduler::v1::Outcome;
use voxpool_synthesis::{adapters::TextLimit, error::SynthesisError, front::error::ApiError};
use voxpool_testkit::RedisServer;

/// One pool `p` of two keys priced 2.0 per million characters.
fn priced_pool() -> String {
    pool_toml("p", "openai", 1, 2, 4).replacen(
        "model = \"m1\"\n",
        "model = \"m1\"\nprice = { per_million_characters = 2.0 }\n",
        1,
    )
}

const TEXT: &str = "Hello, 世界! 🙂";

#[tokio::test]
async fn a_unary_answer_carries_its_usage_priced_by_the_pool() {
    let (adapter, _) = Scripted::new("openai", TextLimit::Chars(4096), vec![]);
    let stack = Stack::start(&priced_pool(), adapter.registry()).await;
    let voice = snapshot("openai", "p", "alloy", "{}");
    let resp = stack.synthesize(request(&voice, TEXT)).await.expect("ok");
    let usage = resp.usage.expect("usage");
    let chars = TEXT.chars().count() as i64;
    assert_eq!(usage.characters, chars, "Unicode scalars for openai");
    assert_eq!(usage.cached_characters, 0);
    assert_eq!(usage.failed_attempts, 0);
    assert_eq!(usage.currency, "USD");
    assert!(usage.audio_ms > 0, "{usage:?}");
    let expected = chars as f64 * 2.0 / 1_000_000.0;
    assert!(
        (usage.cost - expected).abs() < 1e-6,
        "{} vs {expected}",
        usage.cost
    );
}

#[tokio::test]
async fn a_failover_after_partial_audio_counts_both_attempts_and_a_refusal_counts_none() {
    let (adapter, _) = Scripted::new(
        "openai",
        TextLimit::Chars(4096),
        vec![Step::FirstThenFail(Outcome::UpstreamError)],
    );
    let stack = Stack::start(&priced_pool(), adapter.registry()).await;
    let voice = snapshot("openai", "p", "alloy", "{}");
    let resp = stack.synthesize(request(&voice, TEXT)).await.expect("ok");
    let usage = resp.usage.expect("usage");
    let chars = TEXT.chars().count() as i64;
    assert_eq!(resp.attempts.len(), 2);
    assert_eq!(
        usage.characters,
        2 * chars,
        "the broken call produced audio: charged"
    );
    assert_eq!(usage.failed_attempts, 1);

    let (adapter, _) = Scripted::new(
        "openai",
        TextLimit::Chars(4096),
        vec![Step::Fail(Outcome::UpstreamError, Some(503), "busy")],
    );
    let stack = Stack::start(&priced_pool(), adapter.registry()).await;
    let resp = stack.synthesize(request(&voice, TEXT)).await.expect("ok");
    let usage = resp.usage.expect("usage");
    assert_eq!(resp.attempts.len(), 2);
    assert_eq!(usage.characters, chars, "a refusal before audio is free");
    assert_eq!(usage.failed_attempts, 1);
}

#[tokio::test]
async fn the_final_stream_message_carries_the_usage() {
    let (adapter, _) = Scripted::new("openai", TextLimit::Chars(4096), vec![]);
    let stack = Stack::start(&priced_pool(), adapter.registry()).await;
    let voice = snapshot("openai", "p", "alloy", "{}");
    let mut client = stack.synthesis.clone();
    let mut stream = client
        .synthesize_stream(request(&voice, TEXT))
        .await
        .expect("stream")
        .into_inner();
    let mut last = None;
    while let Some(msg) = stream.next().await {
        let msg = msg.expect("message");
        if !msg.r#final {
            assert!(msg.usage.is_none(), "only the final message carries usage");
        }
        last = Some(msg);
    }
    let last = last.expect("a final message");
    assert!(last.r#final);
    assert_eq!(
        last.usage.expect("usage").characters,
        TEXT.chars().count() as i64
    );
}

async fn stream_entries(redis: &RedisServer) -> Vec<UsageEvent> {
    let client = redis::Client::open(redis.url()).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    let entries: Vec<(String, HashMap<String, String>)> = redis::cmd("XRANGE")
        .arg(USAGE_STREAM)
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .expect("xrange");
    entries
        .into_iter()
        .map(|(_, fields)| serde_json::from_str(&fields[USAGE_FIELD]).expect("record"))
        .collect()
}

#[tokio::test]
async fn records_go_to_the_usage_stream_charge_then_settle_then_done() {
    let redis = RedisServer::start();
    let (adapter, _) = Scripted::new(
        "openai",
        TextLimit::Chars(4096),
        vec![Step::Fail(Outcome::RateLimited, Some(429), "slow")],
    );
    let opts = Opts {
        usage_store: Some(redis.url()),
        ..Opts::default()
    };
    let stack = Stack::start_with(&priced_pool(), adapter.registry(), opts).await;
    let voice = snapshot("openai", "p", "alloy", "{}");
    stack.synthesize(request(&voice, TEXT)).await.expect("ok");
    // The Done goes out once the request's last attempt has let go of it.
    let mut events = Vec::new();
    for _ in 0..200 {
        events = stream_entries(&redis).await;
        if events.iter().any(|e| e.kind() == "done") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // Each attempt's Charge before its Settle, the Done last. (Attempts of one request may
    // interleave: a Charge written before the writer connected waits in its queue.)
    let kinds: Vec<&str> = events.iter().map(UsageEvent::kind).collect();
    assert_eq!(kinds.len(), 5, "{events:?}");
    assert_eq!(kinds[4], "done", "{events:?}");
    let at = |kind: &str, n: u32| {
        events.iter().position(|e| match e {
            UsageEvent::Charge { attempt, .. } | UsageEvent::Settle { attempt, .. } => {
                e.kind() == kind && attempt.attempt == n
            }
            UsageEvent::Done { .. } => false,
        })
    };
    for n in [0, 1] {
        let (charge, settle) = (at("charge", n), at("settle", n));
        assert!(
            charge.is_some() && settle.is_some() && charge < settle,
            "attempt {n}: {events:?}"
        );
    }
    let id = &events[0].context().record_id;
    assert!(events.iter().all(|e| &e.context().record_id == id));
    assert_eq!(events[0].context().path, "grpc");
    assert_eq!(events[0].context().pool, "p");
    let mut settled: Vec<(u32, u64)> = events
        .iter()
        .filter_map(|e| match e {
            UsageEvent::Settle { attempt, .. } => Some((attempt.attempt, attempt.characters)),
            _ => None,
        })
        .collect();
    settled.sort_unstable();
    let settled: Vec<u64> = settled.into_iter().map(|(_, n)| n).collect();
    assert_eq!(settled, [0, TEXT.chars().count() as u64], "the 429 is free");
}

/// A stack priced by [`priced_pool`] under `settings` (TOML tables put before the pools)
/// whose usage store never answers, its vendor a [`Scripted`] adapter.
async fn with_a_dead_usage_store(settings: &str) -> (Stack, std::sync::Arc<Scripted>) {
    let (adapter, _) = Scripted::new("openai", TextLimit::Chars(4096), vec![]);
    let opts = Opts {
        usage_store: Some("redis://127.0.0.1:1".into()),
        ..Opts::default()
    };
    let toml = format!("{settings}{}", priced_pool());
    let stack = Stack::start_with(&toml, adapter.registry(), opts).await;
    (stack, adapter)
}

#[tokio::test]
async fn a_usage_store_that_does_not_answer_fails_no_request_when_told_to_serve() {
    let (stack, _) = with_a_dead_usage_store("[usage]\non_store_down = \"serve\"\n").await;
    let voice = snapshot("openai", "p", "alloy", "{}");
    let resp = stack
        .synthesize(request(&voice, TEXT))
        .await
        .expect("served");
    assert_eq!(
        resp.usage.expect("usage").characters,
        TEXT.chars().count() as i64
    );
}

#[tokio::test]
async fn a_usage_store_that_does_not_answer_refuses_the_call_before_the_vendor_has_its_text() {
    // The default, `on_store_down = "refuse"`: the call waits for the store, holding no
    // key, until its deadline leaves no room.
    let (stack, adapter) = with_a_dead_usage_store(
        "[synthesis]\nattempt_timeout_ms = 500\ndefault_deadline_ms = 1500\n",
    )
    .await;
    let voice = snapshot("openai", "p", "alloy", "{}");
    let status = stack
        .synthesize(request(&voice, TEXT))
        .await
        .expect_err("refused: the usage store never answered");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(
        SynthesisReason::of(&status),
        Some(SynthesisReason::UsageStoreUnavailable),
        "{status:?}"
    );
    assert!(
        status.message().contains("redis://127.0.0.1:1")
            && status.message().contains("the vendor was sent nothing"),
        "the message names the store and what happened: {}",
        status.message()
    );
    assert!(
        adapter.calls().is_empty(),
        "the vendor was sent no text: {:?}",
        adapter.calls()
    );
}

/// A budget refusal as the scheduler words it.
const SCHEDULER_SAYS: &str = "budget \"acme-daily\" for \"acme\" is exhausted: 9880 characters used and 120 characters reserved by calls in flight of its 10000 characters per day, so this request's 120 characters do not fit; it resets at 2027-01-15T08:00:00Z (in 3600000ms); wait for the reset, or raise the budget's characters in [[budgets]]";

#[test]
fn budget_exhausted_is_resource_exhausted_on_grpc_and_insufficient_quota_on_http() {
    let details: HashMap<String, String> = [
        ("budget", "acme-daily"),
        ("subject", "acme"),
        ("used", "9880"),
        ("reserved", "120"),
        ("limit", "10000"),
        ("resets_at_ms", "1800000000000"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let error = || SynthesisError::BudgetExhausted {
        pool: "p".into(),
        message: SCHEDULER_SAYS.into(),
        details: details.clone(),
        retry_after: Some(Duration::from_secs(3600)),
    };
    let http = ApiError::of(&error());
    assert_eq!(http.status.as_u16(), 429);
    assert_eq!(http.body()["error"]["type"], "insufficient_quota");
    assert_eq!(http.body()["error"]["code"], "insufficient_quota");
    assert_eq!(http.retry_after_s, Some(3600));

    let status = tonic::Status::from(error());
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(
        SynthesisReason::of(&status),
        Some(SynthesisReason::BudgetExhausted)
    );
    // The scheduler's own words pass through: they say what is used, reserved and asked.
    assert_eq!(status.message(), SCHEDULER_SAYS);
    use tonic_types::StatusExt as _;
    let details = status.get_error_details();
    let info = details.error_info().expect("error info");
    assert_eq!(info.metadata["budget"], "acme-daily");
    assert_eq!(info.metadata["reserved"], "120");
    assert_eq!(info.metadata["resets_at_ms"], "1800000000000");
    assert_eq!(
        details.retry_info().and_then(|r| r.retry_delay),
        Some(Duration::from_secs(3600))
    );
}
