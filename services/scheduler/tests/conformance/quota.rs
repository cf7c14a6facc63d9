//! Character quotas: keys stop at their budget, in-flight reservations, near-quota keys picked last, the next period.

use super::*;

conformance!(
    a_key_stops_at_its_character_quota_while_others_serve_and_the_next_period_brings_it_back,
    keys_near_their_quota_are_picked_last,
    calls_in_flight_never_take_a_key_past_its_quota,
    with_every_key_over_quota_the_error_names_them_and_their_reset,
    a_report_with_a_bad_character_count_is_invalid_argument,
);

/// `uniform_pool(1, keys, capacity)` with `quota` on `u0/k0`.
fn quota_pool(keys: usize, capacity: u32, quota: &str) -> String {
    uniform_pool(1, keys, capacity).replacen(
        &format!("id = \"k0\"\ncapacity = {capacity}\n"),
        &format!("id = \"k0\"\ncapacity = {capacity}\nquota = {quota}\n"),
        1,
    )
}

/// Acquires on `u0/k0` reserving `characters` and reports a success of them.
async fn spend(h: &Harness, characters: i64) -> pb::ReportResponse {
    let lease = h
        .acquire_with(
            req::acquire("p")
                .upstream_ids(vec!["u0".into()])
                .exclude_keys((1..4).map(|k| format!("u0/k{k}")).collect())
                .characters(characters),
        )
        .await
        .unwrap();
    assert_eq!(lease.key_id, "u0/k0");
    h.client()
        .report(
            req::report(lease.lease_id, Outcome::Success)
                .releasing()
                .characters(characters),
        )
        .await
        .unwrap()
        .into_inner()
}

async fn a_key_stops_at_its_character_quota_while_others_serve_and_the_next_period_brings_it_back(
    b: Backend,
) {
    let h = start(b, &quota_pool(2, 5, "{ characters = 100, per = \"day\" }")).await;
    spend(&h, 60).await;
    let k = h.key("p", "u0/k0").await;
    assert_eq!((k.quota_used, k.quota_limit), (60, 100));
    assert_eq!(k.state(), KeyState::Available);
    let now = h.status("p").await.now_ms;
    let day = 86_400_000;
    assert_eq!(
        k.quota_resets_at_ms,
        (now / day + 1) * day,
        "the next UTC midnight"
    );
    let r = spend(&h, 40).await;
    assert_eq!(r.key_state(), KeyState::OverQuota);
    let k = h.key("p", "u0/k0").await;
    assert_eq!((k.quota_used, k.state()), (100, KeyState::OverQuota));
    assert_eq!(k.cooldown_until_ms, k.quota_resets_at_ms);
    for _ in 0..5 {
        assert_eq!(
            h.acquire("p").await.unwrap().key_id,
            "u0/k1",
            "the other key serves"
        );
    }
    // The period rolls over (the store's clock moved past midnight): the key is back, unused.
    let now = h.status("p").await.now_ms;
    h.advance("p", u64::try_from(k.quota_resets_at_ms - now + 1).unwrap())
        .await;
    let k = h.key("p", "u0/k0").await;
    assert_eq!((k.quota_used, k.state()), (0, KeyState::Available));
    spend(&h, 10).await;
    assert_eq!(h.key("p", "u0/k0").await.quota_used, 10);
}

async fn calls_in_flight_never_take_a_key_past_its_quota(b: Backend) {
    let h = start(b, &quota_pool(1, 10, "{ characters = 300, per = \"day\" }")).await;
    let reserve = |characters: i64| h.acquire_with(req::acquire("p").characters(characters));
    // Three calls of 100 characters hold the whole quota while they run.
    let mut leases = Vec::new();
    for _ in 0..3 {
        leases.push(reserve(100).await.expect("room in the quota"));
    }
    let refused = reserve(100).await.unwrap_err();
    assert_eq!(
        refused.code(),
        Code::ResourceExhausted,
        "reserved, not spent: a slot may come back ({refused:?})"
    );
    assert!(
        refused.message().contains("character quota"),
        "the message says why a pool with free slots refused: {}",
        refused.message()
    );
    let k = h.key("p", "u0/k0").await;
    assert_eq!((k.quota_used, k.in_flight), (0, 3), "{k:?}");
    // A report counts at most what its Acquire reserved.
    let mut reports = Vec::new();
    for (lease, reported) in leases.iter().zip([150, 100, 50]) {
        reports.push(
            h.client()
                .report(
                    req::report(lease.lease_id.clone(), Outcome::Success)
                        .releasing()
                        .characters(reported),
                )
                .await
                .unwrap()
                .into_inner(),
        );
    }
    let k = h.key("p", "u0/k0").await;
    assert_eq!(
        k.quota_used, 250,
        "150 reported, 100 reserved: 100 counted ({k:?})"
    );
    assert_eq!(k.state(), KeyState::Available);
    // More than the period has left, with nothing reserved: only the next period serves it
    // (UNAVAILABLE, not worth a wait); what fits is granted.
    let err = reserve(100).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    let last = reserve(50).await.expect("50 fit");
    h.client()
        .report(
            req::report(last.lease_id, Outcome::Success)
                .releasing()
                .characters(50),
        )
        .await
        .unwrap();
    let k = h.key("p", "u0/k0").await;
    assert_eq!(
        (k.quota_used, k.state()),
        (300, KeyState::OverQuota),
        "never past the quota"
    );
    // A call that reserved nothing counts nothing.
    let h = start(b, &quota_pool(1, 10, "{ characters = 300, per = \"day\" }")).await;
    let free = h.acquire("p").await.unwrap();
    h.client()
        .report(
            req::report(free.lease_id, Outcome::Success)
                .releasing()
                .characters(5_000),
        )
        .await
        .unwrap();
    assert_eq!(h.key("p", "u0/k0").await.quota_used, 0);
}

async fn keys_near_their_quota_are_picked_last(b: Backend) {
    let h = start(
        b,
        &quota_pool(2, 5, "{ characters = 100, per = \"month\" }"),
    )
    .await;
    spend(&h, 95).await;
    for _ in 0..5 {
        assert_eq!(
            h.acquire("p").await.unwrap().key_id,
            "u0/k1",
            "within a tenth of its quota: used only when no other key has room"
        );
    }
    assert_eq!(h.acquire("p").await.unwrap().key_id, "u0/k0");
}

async fn with_every_key_over_quota_the_error_names_them_and_their_reset(b: Backend) {
    let h = start(b, &quota_pool(1, 5, "{ characters = 10, per = \"month\" }")).await;
    spend(&h, 10).await;
    let k = h.key("p", "u0/k0").await;
    assert_eq!(k.state(), KeyState::OverQuota);
    let err = h.acquire("p").await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(
        err.message().contains("over quota") && err.message().contains("u0/k0"),
        "{}",
        err.message()
    );
    let details = err.get_error_details();
    let info = details.error_info().expect("error info");
    assert_eq!(info.metadata["over_quota_keys"], "u0/k0");
    assert_eq!(
        info.metadata["quota_resets_at_ms:u0/k0"],
        k.quota_resets_at_ms.to_string()
    );
    assert!(
        details.retry_info().is_some(),
        "retry when the period resets"
    );
}

async fn a_report_with_a_bad_character_count_is_invalid_argument(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 5)).await;
    let lease = h.acquire("p").await.unwrap();
    let err = h
        .client()
        .report(req::report(lease.lease_id, Outcome::Success).characters(-1))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("characters"), "{}", err.message());
}
