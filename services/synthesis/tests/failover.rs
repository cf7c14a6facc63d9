//! Failover, lease hygiene and deadlines against a real in-process scheduler, with a scripted
//! vendor adapter (invariants 3 of docs/ARCHITECTURE.md, 8 and 9).

mod common;

use std::time::Duration;

use common::{
    Stack, pool_toml, request,
    scripted::{Scripted, Step},
    snapshot,
};
use tonic::Code;
use tonic_types::StatusExt;
use voxpool_proto::scheduler::v1::{self as spb, KeyState, Outcome};
use voxpool_synthesis::adapters::TextLimit;

const WAIT: Duration = Duration::from_secs(10);

fn openai_pool(upstreams: usize, keys: usize, capacity: u32) -> String {
    pool_toml("p", "openai", upstreams, keys, capacity)
}

#[tokio::test]
async fn rate_limited_key_fails_over_to_another_key_with_the_same_voice() {
    let (adapter, _) = Scripted::new(
        "openai",
        TextLimit::Chars(4096),
        vec![Step::Fail(Outcome::RateLimited, Some(429), "slow down")],
    );
    let stack = Stack::start(&openai_pool(2, 1, 2), adapter.registry()).await;
    let voice = snapshot("openai", "p", "alloy", r#"{"rate":1.25}"#);
    let resp = stack
        .synthesize(request(&voice, "Hello there."))
        .await
        .expect("synthesized after failover");

    let calls = adapter.calls();
    assert_eq!(calls.len(), 2);
    assert_ne!(
        calls[0].key_id, calls[1].key_id,
        "the second call must use another key"
    );
    for (call, key) in calls.iter().zip([&calls[0].key_id, &calls[1].key_id]) {
        let file_name = key.replace('/', "-");
        assert_eq!(
            call.secret.as_deref(),
            Some(format!("secret-{file_name}").as_str()),
            "the key's own credential"
        );
        assert_eq!(
            call.voice_id, "alloy",
            "the voice never changes across failover"
        );
        assert_eq!(call.params.rate, Some(1.25));
    }
    assert_eq!(resp.attempts.len(), 2);
    assert_eq!(resp.attempts[0].outcome, Outcome::RateLimited as i32);
    assert_eq!(resp.attempts[0].http_status, 429);
    assert_eq!(resp.attempts[0].message, "slow down");
    assert_eq!(resp.attempts[0].key_id, calls[0].key_id);
    assert_eq!(resp.attempts[1].outcome, Outcome::Success as i32);
    assert_eq!(resp.key_id, calls[1].key_id);
    assert_eq!(resp.sample_rate_hz, 24_000);

    assert_eq!(stack.in_flight("p").await, 0, "every lease released");
    let limited = stack.key("p", &calls[0].key_id).await;
    assert_eq!(
        limited.state,
        KeyState::Cooling as i32,
        "the 429 was reported: the key cools"
    );
}

#[tokio::test]
async fn every_key_failing_lists_every_attempt_and_releases_everything() {
    let steps = vec![
        Step::Fail(Outcome::RateLimited, Some(429), "busy"),
        Step::Fail(Outcome::UpstreamError, Some(503), "overloaded"),
        Step::Fail(Outcome::Timeout, None, "read timeout"),
    ];
    let (adapter, _) = Scripted::new("openai", TextLimit::Chars(4096), steps);
    let stack = Stack::start(&openai_pool(3, 1, 1), adapter.registry()).await;
    let err = stack
        .synthesize(request(&snapshot("openai", "p", "alloy", "{}"), "hi"))
        .await
        .unwrap_err();

    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(
        err.message().starts_with("pool \"p\": all 3 keys failed: "),
        "{}",
        err.message()
    );
    assert!(
        err.message().contains("RATE_LIMITED (429)"),
        "{}",
        err.message()
    );
    assert!(
        err.message().contains("UPSTREAM_ERROR (503)"),
        "{}",
        err.message()
    );
    assert!(err.message().contains("TIMEOUT after"), "{}", err.message());
    let details = err.get_error_details();
    let info = details.error_info().expect("error info");
    assert_eq!(info.reason, "KEYS_EXHAUSTED");
    assert_eq!(info.metadata["attempts"], "3");
    assert_eq!(info.metadata["upstreams_tried"], "u0,u1,u2");
    assert_eq!(adapter.calls().len(), 3);
    assert_eq!(stack.in_flight("p").await, 0);
}

#[tokio::test]
async fn a_single_key_pool_waits_out_its_keys_rate_limit_within_the_deadline() {
    // An OpenAI-compatible server with one key answers 429 once, Retry-After 300 ms: the key
    // cools and the request waits for it, as it waits for a full pool, instead of failing.
    let (adapter, _) = Scripted::new(
        "openai",
        TextLimit::Chars(4096),
        vec![Step::RateLimitedFor(300)],
    );
    let stack = Stack::start(&openai_pool(1, 1, 1), adapter.registry()).await;
    let resp = stack
        .synthesize(request(&snapshot("openai", "p", "alloy", "{}"), "hi"))
        .await
        .expect("audio once the key is back");
    let calls = adapter.calls();
    assert_eq!(calls.len(), 2, "the 429, then the call that spoke");
    assert_eq!(calls[0].key_id, calls[1].key_id, "the pool's one key");
    assert_eq!(resp.attempts[0].outcome, Outcome::RateLimited as i32);
    assert_eq!(resp.attempts[1].outcome, Outcome::Success as i32);
    assert_eq!(stack.in_flight("p").await, 0);
}

#[tokio::test]
async fn throttling_on_every_key_past_the_deadline_is_resource_exhausted() {
    let steps = vec![
        Step::Fail(Outcome::RateLimited, Some(429), "a"),
        Step::Fail(Outcome::QuotaExhausted, Some(429), "b"),
    ];
    let (adapter, _) = Scripted::new("openai", TextLimit::Chars(4096), steps);
    // The rate-limited key cools (Retry-After 60 s) past the request's deadline: no wait.
    let stack = Stack::start(&openai_pool(1, 2, 1), adapter.registry()).await;
    let err = stack
        .synthesize(request(&snapshot("openai", "p", "alloy", "{}"), "hi"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert_eq!(stack.in_flight("p").await, 0);
}

#[tokio::test]
async fn failover_stops_at_max_attempts() {
    let steps = vec![Step::Fail(Outcome::UpstreamError, Some(500), "x"); 3];
    let (adapter, _) = Scripted::new("openai", TextLimit::Chars(4096), steps);
    let toml = format!("{}\n[synthesis]\nmax_attempts = 2\n", openai_pool(1, 3, 1));
    let stack = Stack::start(&toml, adapter.registry()).await;
    let err = stack
        .synthesize(request(&snapshot("openai", "p", "alloy", "{}"), "hi"))
        .await
        .unwrap_err();
    assert!(
        err.message()
            .contains("2 attempts failed (synthesis.max_attempts = 2)"),
        "{}",
        err.message()
    );
    assert_eq!(adapter.calls().len(), 2);
    assert_eq!(stack.in_flight("p").await, 0);
}

#[tokio::test]
async fn client_error_is_returned_at_once_without_failover_or_health_change() {
    let (adapter, _) = Scripted::new(
        "openai",
        TextLimit::Chars(4096),
        vec![Step::Fail(
            Outcome::ClientError,
            Some(400),
            "voice not found",
        )],
    );
    let stack = Stack::start(&openai_pool(1, 3, 1), adapter.registry()).await;
    let err = stack
        .synthesize(request(&snapshot("openai", "p", "nope", "{}"), "hi"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("the vendor refused the request"),
        "{}",
        err.message()
    );
    assert!(
        err.message().contains("voice not found"),
        "{}",
        err.message()
    );
    assert_eq!(
        adapter.calls().len(),
        1,
        "CLIENT_ERROR is not retried on other keys"
    );
    let key = stack.key("p", &adapter.calls()[0].key_id).await;
    assert_eq!(key.state, KeyState::Available as i32);
    assert_eq!(key.consecutive_failures, 0);
    assert_eq!(stack.in_flight("p").await, 0);
}

#[tokio::test]
async fn a_json_body_instead_of_audio_is_an_upstream_error_and_fails_over() {
    let (adapter, _) = Scripted::new("openai", TextLimit::Chars(4096), vec![Step::JsonBody]);
    let stack = Stack::start(&openai_pool(1, 2, 1), adapter.registry()).await;
    let resp = stack
        .synthesize(request(&snapshot("openai", "p", "alloy", "{}"), "hi"))
        .await
        .expect("second key answers");
    assert_eq!(resp.attempts[0].outcome, Outcome::UpstreamError as i32);
    assert!(
        resp.attempts[0].message.contains("unusable audio"),
        "{}",
        resp.attempts[0].message
    );
    assert_eq!(&resp.audio[0..4], b"RIFF");
}

#[tokio::test]
async fn unsupported_param_is_refused_before_any_lease() {
    let (adapter, _) = Scripted::new("openai", TextLimit::Chars(4096), vec![]);
    let stack = Stack::start(&openai_pool(1, 1, 1), adapter.registry()).await;
    // Hold the pool's only slot: a request that tried to lease would wait for it.
    let held = stack.hold_slot("p").await;
    let mut req = request(
        &snapshot("openai", "p", "alloy", r#"{"pitchPct":10}"#),
        "hi",
    );
    req.request_id = "param-test".into();
    let mut call = tonic::Request::new(req);
    call.set_timeout(Duration::from_secs(5));
    let started = tokio::time::Instant::now();
    let err = stack.synthesis.clone().synthesize(call).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "answered without waiting for a lease"
    );
    assert!(
        err.message().contains("params.pitchPct") && err.message().contains("openai"),
        "{}",
        err.message()
    );
    assert_eq!(
        err.get_error_details()
            .bad_request()
            .expect("bad request")
            .field_violations[0]
            .field,
        "params.pitchPct"
    );
    assert!(adapter.calls().is_empty());
    assert_eq!(stack.in_flight("p").await, 1, "only the test's own lease");
    stack
        .scheduler
        .clone()
        .release(spb::ReleaseRequest {
            lease_id: held.lease_id,
            ..Default::default()
        })
        .await
        .expect("release");
}

/// Asserts that the only slot of pool `p` stays taken: an Acquire that waits a second for it is
/// refused (while the vendor still works on an abandoned call, its lease must stay held).
async fn assert_pool_stays_full(stack: &Stack) {
    let err = stack
        .scheduler
        .clone()
        .acquire(spb::AcquireRequest {
            pool: "p".into(),
            wait_timeout_ms: 1000,
            ..Default::default()
        })
        .await
        .expect_err("the slot must stay leased while the vendor works on the abandoned call");
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
}

/// Lets the gated vendor call answer, then checks the lease was reported (a success, not
/// blamed on the key) and released only then.
async fn answer_and_expect_a_clean_release(stack: &Stack, adapter: &Scripted) {
    adapter.open_gate();
    stack.wait_until_idle("p").await;
    let key = stack.key("p", "u0/k0").await;
    assert_eq!(key.state, KeyState::Available as i32);
    assert_eq!(
        key.consecutive_failures, 0,
        "an abandoned call the vendor served is not the key's fault"
    );
    assert_eq!(adapter.calls().len(), 1, "no second vendor call");
}

#[tokio::test]
async fn caller_cancelling_mid_call_keeps_the_lease_until_the_vendor_answers() {
    let (adapter, mut signals) = Scripted::new("openai", TextLimit::Chars(4096), vec![Step::Gate]);
    let stack = Stack::start(&openai_pool(1, 1, 1), adapter.registry()).await;
    let mut client = stack.synthesis.clone();
    let mut req = tonic::Request::new(request(&snapshot("openai", "p", "alloy", "{}"), "hi"));
    // Synthesis retries a scheduler that went away until the caller's deadline: keep it short.
    req.set_timeout(Duration::from_secs(4));
    let call = tokio::spawn(async move { client.synthesize(req).await });
    tokio::time::timeout(WAIT, signals.started.recv())
        .await
        .expect("vendor call started");
    call.abort();
    assert!(call.await.is_err(), "the caller went away");
    assert_pool_stays_full(&stack).await;
    answer_and_expect_a_clean_release(&stack, &adapter).await;
}

#[tokio::test]
async fn caller_cancelling_a_stream_keeps_the_lease_until_the_vendor_answers() {
    let (adapter, mut signals) = Scripted::new("openai", TextLimit::Chars(4096), vec![Step::Gate]);
    let stack = Stack::start(&openai_pool(1, 1, 1), adapter.registry()).await;
    let mut client = stack.synthesis.clone();
    let req = request(&snapshot("openai", "p", "alloy", "{}"), "hi");
    let stream = client
        .synthesize_stream(req)
        .await
        .expect("stream opened")
        .into_inner();
    tokio::time::timeout(WAIT, signals.started.recv())
        .await
        .expect("vendor call started");
    drop(stream);
    assert_pool_stays_full(&stack).await;
    answer_and_expect_a_clean_release(&stack, &adapter).await;
}

#[tokio::test]
async fn caller_deadline_gives_deadline_exceeded_and_the_lease_is_held_until_the_vendor_answers() {
    let (adapter, _) = Scripted::new("openai", TextLimit::Chars(4096), vec![Step::Gate]);
    let stack = Stack::start(&openai_pool(1, 1, 1), adapter.registry()).await;
    let mut call = tonic::Request::new(request(&snapshot("openai", "p", "alloy", "{}"), "hi"));
    call.set_timeout(Duration::from_millis(700));
    let err = stack.synthesis.clone().synthesize(call).await.unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert_pool_stays_full(&stack).await;
    answer_and_expect_a_clean_release(&stack, &adapter).await;
}

#[tokio::test]
async fn an_abandoned_call_the_vendor_never_answers_ends_at_the_attempt_timeout() {
    let (adapter, mut signals) = Scripted::new("openai", TextLimit::Chars(4096), vec![Step::Block]);
    let toml = format!(
        "{}\n[synthesis]\nattempt_timeout_ms = 300\n",
        openai_pool(1, 1, 1)
    );
    let stack = Stack::start(&toml, adapter.registry()).await;
    let mut call = tonic::Request::new(request(&snapshot("openai", "p", "alloy", "{}"), "hi"));
    call.set_timeout(Duration::from_millis(100));
    let err = stack.synthesis.clone().synthesize(call).await.unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    tokio::time::timeout(WAIT, signals.dropped.recv())
        .await
        .expect("the vendor call is cut off at synthesis.attempt_timeout_ms");
    stack.wait_until_idle("p").await;
    let key = stack.key("p", "u0/k0").await;
    assert_eq!(
        key.consecutive_failures, 1,
        "no answer within the attempt timeout is reported as the key's TIMEOUT"
    );
}

#[tokio::test]
async fn a_queueing_upstream_that_holds_a_call_past_the_attempt_timeout_is_an_overload_signal() {
    let (adapter, mut signals) = Scripted::new("openai", TextLimit::Chars(4096), vec![Step::Block]);
    let toml = format!(
        "{}\n[synthesis]\nattempt_timeout_ms = 300\n",
        openai_pool(1, 1, 4).replace("id = \"u0\"\n", "id = \"u0\"\nqueueing = true\n")
    );
    let stack = Stack::start(&toml, adapter.registry()).await;
    let err = stack
        .synthesize(request(&snapshot("openai", "p", "alloy", "{}"), "hi"))
        .await
        .unwrap_err();
    tokio::time::timeout(WAIT, signals.dropped.recv())
        .await
        .expect("the vendor call is cut off at synthesis.attempt_timeout_ms");
    assert!(
        err.message().contains("RATE_LIMITED") && err.message().contains("queueing upstream"),
        "reported as overload, not as the key's failure: {}",
        err.message()
    );
    stack.wait_until_idle("p").await;
    let key = stack.key("p", "u0/k0").await;
    assert_eq!(key.consecutive_failures, 0, "not counted as a failure");
    assert!(
        key.effective_capacity < 4,
        "the queueing server's overload lowered the effective capacity: {key:?}"
    );
}

#[tokio::test]
async fn an_adapter_panic_is_internal_releases_the_lease_and_the_server_keeps_serving() {
    let (adapter, _) = Scripted::new("openai", TextLimit::Chars(4096), vec![Step::Panic]);
    let stack = Stack::start(&openai_pool(1, 1, 1), adapter.registry()).await;
    let voice = snapshot("openai", "p", "alloy", "{}");
    let err = stack.synthesize(request(&voice, "hi")).await.unwrap_err();
    assert_eq!(err.code(), Code::Internal);
    assert!(
        !err.message().contains("scripted adapter panic"),
        "panic payloads never reach callers"
    );
    assert_eq!(stack.in_flight("p").await, 0);
    stack
        .synthesize(request(&voice, "again"))
        .await
        .expect("still serving");
}

#[tokio::test]
async fn a_full_pool_makes_the_request_wait_for_a_slot() {
    let (adapter, _) = Scripted::new("openai", TextLimit::Chars(4096), vec![]);
    let stack = Stack::start(&openai_pool(1, 1, 1), adapter.registry()).await;
    let held = stack.hold_slot("p").await;
    let mut client = stack.synthesis.clone();
    let req = request(&snapshot("openai", "p", "alloy", "{}"), "hi");
    let call = tokio::spawn(async move { client.synthesize(req).await });
    // The synthesis request queues at the scheduler; the pool status shows the waiter.
    let deadline = tokio::time::Instant::now() + WAIT;
    while stack.pool_status("p").await.waiters == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "synthesis never queued for a slot"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        adapter.calls().is_empty(),
        "no vendor call while the pool is full"
    );
    stack
        .scheduler
        .clone()
        .release(spb::ReleaseRequest {
            lease_id: held.lease_id,
            ..Default::default()
        })
        .await
        .expect("release");
    let resp = call
        .await
        .expect("join")
        .expect("synthesized once a slot freed")
        .into_inner();
    assert_eq!(resp.attempts.len(), 1);
    assert_eq!(stack.in_flight("p").await, 0);
}

#[tokio::test]
async fn a_full_pool_until_the_deadline_is_deadline_exceeded() {
    let (adapter, _) = Scripted::new("openai", TextLimit::Chars(4096), vec![]);
    let stack = Stack::start(&openai_pool(1, 1, 1), adapter.registry()).await;
    let held = stack.hold_slot("p").await;
    let mut call = tonic::Request::new(request(&snapshot("openai", "p", "alloy", "{}"), "hi"));
    call.set_timeout(Duration::from_millis(500));
    let err = stack.synthesis.clone().synthesize(call).await.unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(adapter.calls().is_empty());
    stack
        .scheduler
        .clone()
        .release(spb::ReleaseRequest {
            lease_id: held.lease_id,
            ..Default::default()
        })
        .await
        .expect("release");
    stack.wait_until_idle("p").await;
}

#[tokio::test]
async fn a_cloned_voice_only_uses_the_upstreams_that_hold_it() {
    let steps = vec![Step::Fail(Outcome::RateLimited, Some(429), "x")];
    let (adapter, _) = Scripted::new("openai", TextLimit::Chars(4096), steps);
    let stack = Stack::start(&openai_pool(3, 1, 1), adapter.registry()).await;
    let mut voice = snapshot("openai", "p", "cloned-1", "{}");
    voice.upstream_ids = vec!["u1".into()];
    let voice = voice.seal();
    let err = stack.synthesize(request(&voice, "hi")).await.unwrap_err();
    assert!(
        err.message().contains("all 1 keys failed"),
        "{}",
        err.message()
    );
    assert!(
        adapter.calls().iter().all(|c| c.upstream == "u1"),
        "{:?}",
        adapter.calls()
    );
}

/// One single-key openai pool whose only vendor call runs `step` under leases of `ttl`; returns
/// once the call has started, with the Synthesize call still running.
async fn call_in_flight(
    step: Step,
    ttl: Duration,
) -> (
    std::sync::Arc<Scripted>,
    common::scripted::Signals,
    Stack,
    tokio::task::JoinHandle<
        Result<tonic::Response<voxpool_proto::synthesis::v1::SynthesizeResponse>, tonic::Status>,
    >,
) {
    let (adapter, mut signals) = Scripted::new("openai", TextLimit::Chars(4096), vec![step]);
    let stack = common::Stack::start_with(
        &openai_pool(1, 1, 1),
        adapter.registry(),
        common::Opts {
            lease_ttl: ttl,
            ..Default::default()
        },
    )
    .await;
    let mut client = stack.synthesis.clone();
    let mut req = tonic::Request::new(request(&snapshot("openai", "p", "alloy", "{}"), "hi"));
    // Synthesis retries a scheduler that went away until the caller's deadline: keep it short.
    req.set_timeout(Duration::from_secs(4));
    let call = tokio::spawn(async move { client.synthesize(req).await });
    tokio::time::timeout(WAIT, signals.started.recv())
        .await
        .expect("vendor call started");
    (adapter, signals, stack, call)
}

#[tokio::test]
async fn a_call_longer_than_the_lease_ttl_keeps_its_lease_by_renewing() {
    let ttl = Duration::from_millis(300);
    let (adapter, _signals, stack, call) = call_in_flight(Step::Gate, ttl).await;
    // Let three TTLs pass on the store's clock: without renewals the lease would be reaped.
    tokio::time::sleep(ttl * 3).await;
    assert_eq!(
        stack.in_flight("p").await,
        1,
        "the lease is still live after 3 TTLs"
    );
    adapter.open_gate();
    let resp = call.await.expect("join").expect("synthesized").into_inner();
    assert_eq!(resp.attempts.len(), 1);
    assert_eq!(stack.in_flight("p").await, 0);
}

#[tokio::test]
async fn a_call_is_aborted_when_its_lease_can_no_longer_be_renewed() {
    // Fencing: once the scheduler is gone the slot may be handed to someone else after the
    // TTL, so the vendor call must stop rather than run on as an unleased extra request.
    let (_adapter, mut signals, stack, call) =
        call_in_flight(Step::Block, Duration::from_millis(600)).await;
    stack.stop_scheduler();
    tokio::time::timeout(WAIT, signals.dropped.recv())
        .await
        .expect("the vendor call was aborted once its lease could not be renewed");
    let err = tokio::time::timeout(WAIT, call)
        .await
        .expect("answered")
        .expect("join")
        .unwrap_err();
    assert!(
        matches!(
            err.code(),
            Code::Unavailable | Code::ResourceExhausted | Code::DeadlineExceeded
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_running_call_re_registers_its_lease_when_the_store_loses_the_pool() {
    // The scheduler asks for renewals every half recovery window (500 ms here, below the
    // lease's own ttl / 3 of 1 s), and a renewal names the lease's key.
    let (adapter, mut signals) = Scripted::new("openai", TextLimit::Chars(4096), vec![Step::Gate]);
    let stack = common::Stack::start_with(
        &openai_pool(1, 1, 2),
        adapter.registry(),
        common::Opts {
            lease_ttl: Duration::from_secs(3),
            recovery_window_ms: 1_000,
            ..Default::default()
        },
    )
    .await;
    let mut client = stack.synthesis.clone();
    let req = request(&snapshot("openai", "p", "alloy", "{}"), "hi");
    // The fresh store's own window delays this first call by up to a second.
    let call = tokio::spawn(async move { client.synthesize(req).await });
    tokio::time::timeout(WAIT, signals.started.recv())
        .await
        .expect("vendor call started");
    assert_eq!(stack.in_flight("p").await, 1);
    // The store forgets the pool (a Redis restarted empty) while the vendor works.
    stack.store.forget_pool("p").await.expect("forget");
    let lost = stack.pool_status("p").await;
    assert_eq!(lost.in_flight, 0, "the store lost the lease");
    assert!(
        lost.recovering_until_ms > 0,
        "the re-seed opened a recovery window"
    );
    // Within the window the running call's renewal counts it again.
    let deadline = tokio::time::Instant::now() + WAIT;
    while stack.in_flight("p").await != 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the running call's lease was never re-registered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    adapter.open_gate();
    let resp = call.await.expect("join").expect("synthesized").into_inner();
    assert_eq!(resp.attempts.len(), 1);
    stack.wait_until_idle("p").await;
}

#[tokio::test]
async fn audio_over_the_message_limit_points_to_the_stream() {
    let (adapter, _) = Scripted::new("openai", TextLimit::Chars(4096), vec![]);
    let flags = voxpool_runtime::limits::ServerFlags {
        max_message_bytes: 200_000,
        ..Default::default()
    };
    let stack = common::Stack::start_with(
        &openai_pool(1, 1, 1),
        adapter.registry(),
        common::Opts {
            flags,
            ..Default::default()
        },
    )
    .await;
    let text = "word ".repeat(600);
    let err = stack
        .synthesize(request(&snapshot("openai", "p", "alloy", "{}"), &text))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert!(
        err.message().contains("use SynthesizeStream"),
        "{}",
        err.message()
    );
    assert_eq!(stack.in_flight("p").await, 0);
}

#[tokio::test]
async fn ogg_opus_text_that_needs_several_calls_is_refused_naming_the_vendor_limit() {
    let (adapter, _) = Scripted::new("openai", TextLimit::Chars(10), vec![]);
    let stack = Stack::start(&openai_pool(1, 1, 1), adapter.registry()).await;
    let err = stack
        .synthesize(voxpool_proto::synthesis::v1::SynthesizeRequest {
            format: voxpool_proto::synthesis::v1::AudioFormat::OggOpus as i32,
            ..request(
                &snapshot("openai", "p", "alloy", "{}"),
                "Hello there. General Kenobi.",
            )
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message()
            .contains("needs 4 vendor calls (at most 10 characters per call)"),
        "{}",
        err.message()
    );
    assert!(adapter.calls().is_empty(), "refused before any vendor call");
}

#[tokio::test]
async fn a_concurrency_refusal_retries_the_only_key_at_its_lowered_capacity() {
    let (adapter, _) = Scripted::new(
        "openai",
        TextLimit::Chars(4096),
        vec![Step::Fail(
            Outcome::ConcurrencyLimited,
            Some(429),
            "too many concurrent requests",
        )],
    );
    let stack = Stack::start(&openai_pool(1, 1, 4), adapter.registry()).await;
    let resp = stack
        .synthesize(request(
            &snapshot("openai", "p", "alloy", "{}"),
            "Hello there.",
        ))
        .await
        .expect("a full key is not a bad key: the retry waits for a slot on it");
    let calls = adapter.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        calls[0].key_id, calls[1].key_id,
        "the pool's only key, again"
    );
    assert_eq!(resp.attempts[0].outcome, Outcome::ConcurrencyLimited as i32);
    let key = stack.key("p", "u0/k0").await;
    assert_eq!(
        (key.capacity, key.effective_capacity, key.state()),
        (4, 2, KeyState::Available),
        "halved (nothing else was in flight to go by), no cooldown"
    );
}
