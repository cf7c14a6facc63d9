//! Key health from reports: rate-limit, failure and credential cooldowns, unavailable pools, one outcome per lease.

use super::*;

conformance!(
    rate_limited_cools_the_key_for_retry_after,
    rate_limited_without_retry_after_uses_the_default,
    consecutive_failures_cool_with_capped_backoff_and_success_resets,
    credential_failures_disable_the_key_until_enable,
    a_new_cooldown_never_shortens_an_existing_one,
    every_key_cooling_is_unavailable_naming_the_earliest_return,
    every_key_disabled_is_unavailable_saying_so,
    late_report_with_key_id_still_reaches_the_key,
    an_outcome_counts_once_per_lease,
);

async fn rate_limited_cools_the_key_for_retry_after(b: Backend) {
    let h = start(b, &uniform_pool(1, 2, 5)).await;
    let lease = h
        .acquire_with(req::acquire("p").exclude_keys(vec!["u0/k1".into()]))
        .await
        .unwrap();
    assert_eq!(lease.key_id, "u0/k0");
    let r = h
        .report(&lease.lease_id, Outcome::RateLimited, 5_000, true)
        .await;
    assert_eq!(r.key_state(), KeyState::Cooling);
    assert!(r.released);
    let k = h.key("p", "u0/k0").await;
    assert_eq!(k.state(), KeyState::Cooling);
    let remaining = k.cooldown_until_ms - h.status("p").await.now_ms;
    assert!(
        (4_000..=5_000).contains(&remaining),
        "cooldown ~5s, got {remaining}"
    );
    for _ in 0..5 {
        assert_eq!(
            h.acquire("p").await.unwrap().key_id,
            "u0/k1",
            "cooling key is skipped"
        );
    }
    h.advance("p", 5_001).await;
    assert_eq!(h.key("p", "u0/k0").await.state(), KeyState::Available);
    assert_eq!(h.acquire("p").await.unwrap().key_id, "u0/k0");
}

async fn rate_limited_without_retry_after_uses_the_default(b: Backend) {
    let h = start(b, &uniform_pool(1, 2, 5)).await;
    let lease = h.acquire("p").await.unwrap();
    let r = h
        .report(&lease.lease_id, Outcome::RateLimited, 0, true)
        .await;
    let now = h.status("p").await.now_ms;
    assert!(
        (1..=1_000).contains(&(r.cooldown_until_ms - now)),
        "default 1000 ms, got {}",
        r.cooldown_until_ms - now
    );
}

async fn consecutive_failures_cool_with_capped_backoff_and_success_resets(b: Backend) {
    // threshold 3, base 1000, max 4000 (common::SETTINGS)
    let h = start(b, &uniform_pool(1, 1, 5)).await;
    let h = &h;
    let fail = |outcome| async move {
        let l = h.acquire("p").await.unwrap();
        h.report(&l.lease_id, outcome, 0, true).await
    };
    assert_eq!(
        fail(Outcome::UpstreamError).await.key_state(),
        KeyState::Available
    );
    assert_eq!(
        fail(Outcome::Timeout).await.key_state(),
        KeyState::Available
    );
    let third = fail(Outcome::UpstreamError).await;
    assert_eq!(third.key_state(), KeyState::Cooling);
    let now = h.status("p").await.now_ms;
    assert!((1..=1_000).contains(&(third.cooldown_until_ms - now)));
    assert_eq!(h.key("p", "u0/k0").await.consecutive_failures, 3);
    let expected = [2_000, 4_000, 4_000];
    for want in expected {
        h.advance("p", 4_001).await;
        let r = fail(Outcome::Timeout).await;
        let now = h.status("p").await.now_ms;
        let got = r.cooldown_until_ms - now;
        assert!(
            got <= want && got > want - 1_000,
            "backoff ~{want}, got {got}"
        );
    }
    h.advance("p", 4_001).await;
    let l = h.acquire("p").await.unwrap();
    let r = h.report(&l.lease_id, Outcome::Success, 0, true).await;
    assert_eq!(r.key_state(), KeyState::Available);
    assert_eq!(
        h.key("p", "u0/k0").await.consecutive_failures,
        0,
        "success resets"
    );
    assert_eq!(
        fail(Outcome::UpstreamError).await.key_state(),
        KeyState::Available,
        "count restarted"
    );
}

async fn credential_failures_disable_the_key_until_enable(b: Backend) {
    let h = start(b, &uniform_pool(1, 2, 10)).await;
    let l = h
        .acquire_with(req::acquire("p").exclude_keys(vec!["u0/k1".into()]))
        .await
        .unwrap();
    let r = h.report(&l.lease_id, Outcome::KeyInvalid, 0, true).await;
    assert_eq!(r.key_state(), KeyState::Disabled);
    for _ in 0..6 {
        let l = h
            .acquire_with(req::acquire("p").ttl_ms(600_000))
            .await
            .unwrap();
        assert_eq!(l.key_id, "u0/k1");
    }
    h.advance("p", 60_000).await;
    assert_eq!(
        h.key("p", "u0/k0").await.state(),
        KeyState::Disabled,
        "a minute is not the long cooldown"
    );
    let k = h
        .client()
        .enable_key(admin(req::enable("p", "u0/k0")))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(k.state(), KeyState::Available);
    assert_eq!(h.acquire("p").await.unwrap().key_id, "u0/k0");
    // QUOTA_EXHAUSTED behaves the same.
    let l = h
        .acquire_with(req::acquire("p").exclude_keys(vec!["u0/k1".into()]))
        .await
        .unwrap();
    assert_eq!(
        h.report(&l.lease_id, Outcome::QuotaExhausted, 0, true)
            .await
            .key_state(),
        KeyState::Disabled
    );
}

async fn a_new_cooldown_never_shortens_an_existing_one(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 5)).await;
    let l1 = h.acquire("p").await.unwrap();
    let l2 = h.acquire("p").await.unwrap();
    let long = h
        .report(&l1.lease_id, Outcome::RateLimited, 10_000, true)
        .await;
    let short = h
        .report(&l2.lease_id, Outcome::RateLimited, 1_000, true)
        .await;
    assert_eq!(short.cooldown_until_ms, long.cooldown_until_ms);
    assert_eq!(
        h.key("p", "u0/k0").await.cooldown_until_ms,
        long.cooldown_until_ms
    );
}

async fn every_key_cooling_is_unavailable_naming_the_earliest_return(b: Backend) {
    let h = start(b, &uniform_pool(1, 2, 5)).await;
    let a = h.acquire("p").await.unwrap();
    let b2 = h
        .acquire_with(req::acquire("p").exclude_keys(vec![a.key_id.clone()]))
        .await
        .unwrap();
    h.report(&a.lease_id, Outcome::RateLimited, 3_000, true)
        .await;
    let early = h
        .report(&b2.lease_id, Outcome::RateLimited, 2_000, true)
        .await;
    let err = h.acquire("p").await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(err.message().contains("cooling"), "{}", err.message());
    let d = err.get_error_details();
    let info = d.error_info().expect("ErrorInfo");
    assert_eq!(info.reason, "KEYS_UNAVAILABLE");
    assert_eq!(
        info.metadata["next_available_ms"],
        early.cooldown_until_ms.to_string()
    );
    assert!(d.retry_info().is_some());
}

async fn every_key_disabled_is_unavailable_saying_so(b: Backend) {
    let h = start(b, &uniform_pool(1, 2, 5)).await;
    for key in ["u0/k0", "u0/k1"] {
        h.client()
            .disable_key(admin(req::disable("p", key)))
            .await
            .unwrap();
    }
    let err = h.acquire("p").await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert!(err.message().contains("disabled"), "{}", err.message());
    assert!(err.message().contains("EnableKey"), "{}", err.message());
}

async fn late_report_with_key_id_still_reaches_the_key(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let l = h.acquire_with(req::acquire("p").ttl_ms(100)).await.unwrap();
    h.advance("p", 200).await;
    // The lease expired, but its signed id names its key: the late report still reaches it
    // (with or without key_id), once.
    let late = req::report(l.lease_id.clone(), Outcome::RateLimited)
        .retry_after_ms(2_000)
        .releasing()
        .key_id(l.key_id.clone());
    let r = h.client().report(late.clone()).await.unwrap().into_inner();
    assert_eq!(r.key_state(), KeyState::Cooling);
    assert!(r.outcome_applied);
    assert!(!r.released, "the lease had expired");
    assert_eq!(h.status("p").await.in_flight, 0);
    let again = h.client().report(late).await.unwrap().into_inner();
    assert!(!again.outcome_applied, "an outcome counts once per lease");
    // A lease the store no longer holds, granted longer ago than the report window: its
    // report changes nothing (a replayed id cannot keep a key cooling).
    h.advance("p", 5_000).await;
    let old = h.acquire_with(req::acquire("p").ttl_ms(100)).await.unwrap();
    h.advance("p", 61_000).await;
    let stale = h
        .client()
        .report(req::report(old.lease_id.clone(), Outcome::KeyInvalid))
        .await
        .unwrap()
        .into_inner();
    assert!(!stale.outcome_applied);
    assert_eq!(stale.key_state(), KeyState::Available, "{stale:?}");
}

async fn an_outcome_counts_once_per_lease(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 10)).await;
    let l = h.acquire("p").await.unwrap();
    // Three failures cool a key (failure_threshold 3), but not three reports on one lease.
    let mut applied = Vec::new();
    for _ in 0..3 {
        let r = h
            .client()
            .report(req::report(l.lease_id.clone(), Outcome::UpstreamError))
            .await
            .unwrap()
            .into_inner();
        applied.push(r.outcome_applied);
    }
    assert_eq!(applied, [true, false, false]);
    let k = h.key("p", &l.key_id).await;
    assert_eq!(k.consecutive_failures, 1, "{k:?}");
    assert_eq!(k.state(), KeyState::Available);
    // Concurrency refusals on one lease lower the effective capacity once.
    let c = h.acquire("p").await.unwrap();
    for _ in 0..6 {
        h.client()
            .report(req::report(c.lease_id.clone(), Outcome::ConcurrencyLimited))
            .await
            .unwrap();
    }
    let lowered = h.key("p", &c.key_id).await.effective_capacity;
    assert!(lowered >= 5, "one refusal halves at most: {lowered}");
    // A release after the report still frees the slot.
    let r = h
        .client()
        .report(req::report(l.lease_id.clone(), Outcome::Success).releasing())
        .await
        .unwrap()
        .into_inner();
    assert!(r.released && !r.outcome_applied, "{r:?}");
    assert_eq!(h.status("p").await.in_flight, 1);
}
