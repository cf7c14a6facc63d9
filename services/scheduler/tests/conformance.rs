//! One conformance suite, run through gRPC against every lease store: `memory::*`, `redis::*`
//! (a private real redis-server per test), `sentinel::*` (a real Sentinel setup: primary,
//! replica, three sentinels; grants wait for the replica's acknowledgement) and `cluster::*`
//! (a real 3-primary Redis Cluster with a replica per primary). Each test names the behaviour
//! it checks; together they try to break invariants 1-6 of ARCHITECTURE.md.

mod common;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use common::{Backend, Harness, admin, pool_toml, start, start_with, uniform_pool};
use tonic::Code;
use tonic_types::StatusExt;
use voxpool_proto::scheduler::v1::{self as pb, KeyState, Outcome};

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() { super::$name(super::Backend::Memory).await }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() { super::$name(super::Backend::Redis).await }
            )*
        }
        mod sentinel {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() { super::$name(super::Backend::Sentinel).await }
            )*
        }
        mod cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() { super::$name(super::Backend::Cluster).await }
            )*
        }
    };
}

conformance!(
    acquire_spreads_load_across_keys,
    heterogeneous_capacities_fill_proportionally,
    never_over_capacity_with_500_concurrent_acquirers,
    full_pool_without_wait_is_resource_exhausted_with_details,
    waiters_get_released_slots_in_fifo_order,
    wait_timeout_ends_with_resource_exhausted,
    grpc_deadline_bounds_the_wait,
    cancelled_wait_leaves_nothing_behind,
    expired_lease_returns_its_slot_and_cannot_be_renewed,
    renew_extends_a_live_lease,
    release_is_idempotent_and_counts_never_go_negative,
    rate_limited_cools_the_key_for_retry_after,
    rate_limited_without_retry_after_uses_the_default,
    consecutive_failures_cool_with_capped_backoff_and_success_resets,
    credential_failures_disable_the_key_until_enable,
    a_new_cooldown_never_shortens_an_existing_one,
    every_key_cooling_is_unavailable_naming_the_earliest_return,
    every_key_disabled_is_unavailable_saying_so,
    exclude_keys_and_upstream_ids_are_honoured,
    excluding_every_key_is_resource_exhausted,
    unknown_pool_is_not_found,
    report_with_release_frees_the_slot_in_the_same_call,
    late_report_with_key_id_still_reaches_the_key,
    bad_input_is_invalid_argument_naming_the_field,
    admin_rpcs_need_the_bearer_token,
    lowering_capacity_never_oversells_and_zero_disables,
    reseeding_keeps_live_in_flight_counts,
    config_capacity_change_wins_over_admin_override_on_reseed,
    a_wait_that_cannot_end_in_a_grant_answers_at_once,
    a_waiter_gets_a_key_whose_cooldown_ends_within_the_wait,
    waiters_beyond_max_waiters_are_resource_exhausted_naming_it,
    a_wait_that_never_reached_the_head_reports_the_real_counts,
    a_huge_unknown_pool_name_gets_a_short_not_found,
    control_characters_in_ids_are_invalid_argument,
    a_retried_acquire_with_its_idempotency_key_gets_the_same_lease,
    concurrent_acquires_with_one_idempotency_key_take_one_slot,
    a_lost_pool_holds_grants_back_while_live_leases_re_register,
    a_waiting_acquire_waits_out_the_recovery_window,
    a_lost_lease_is_not_re_registered_after_the_window,
    renew_naming_a_foreign_key_is_invalid_argument,
    a_renew_that_finds_the_pool_gone_re_seeds_and_re_registers,
    a_replayed_idempotent_acquire_counts_its_ttl_from_the_retry,
    re_registration_never_takes_a_key_past_its_capacity,
    a_made_up_or_altered_lease_id_changes_nothing,
    an_outcome_counts_once_per_lease,
    an_ended_leases_id_never_reaches_a_later_lease_under_its_idempotency_key,
    a_report_naming_another_key_than_the_leases_is_refused,
    batch_leases_stop_at_the_batch_share_while_interactive_takes_the_rest,
    a_batch_waiter_waits_for_a_batch_slot_even_while_slots_are_free,
    an_interactive_waiter_is_served_before_earlier_batch_waiters,
    a_tenants_backlog_does_not_hold_back_another_tenants_request,
    priority_and_tenant_are_checked_and_reported_per_class,
    release_by_idempotency_key_frees_the_lease_that_key_was_granted,
    a_waiter_no_free_key_suits_lets_the_next_waiter_take_that_key,
    a_concurrency_refusal_lowers_the_effective_capacity_toward_what_the_vendor_accepted,
    sustained_success_raises_the_effective_capacity_one_slot_per_interval_to_the_ceiling,
    a_pool_with_adaptive_off_grants_against_its_capacity_whatever_the_refusals,
    a_rate_limit_on_an_adaptive_pool_lowers_the_effective_capacity_and_cools_only_as_asked,
    set_key_capacity_sets_a_new_ceiling_and_learning_starts_from_it,
    a_refusal_right_after_a_probe_lowers_it_again,
    a_refusal_from_a_lease_above_the_effective_capacity_is_stale,
    refusals_within_the_hold_do_not_lower_it_again,
    a_key_stops_at_its_character_quota_while_others_serve_and_the_next_period_brings_it_back,
    keys_near_their_quota_are_picked_last,
    calls_in_flight_never_take_a_key_past_its_quota,
    with_every_key_over_quota_the_error_names_them_and_their_reset,
    a_report_with_a_bad_character_count_is_invalid_argument,
);

fn in_flight_by_key(s: &pb::PoolStatus) -> HashMap<String, i32> {
    s.keys
        .iter()
        .map(|k| (k.key_id.clone(), k.in_flight))
        .collect()
}

async fn acquire_spreads_load_across_keys(b: Backend) {
    let h = start(b, &uniform_pool(2, 5, 10)).await;
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let mut c = h.client();
            tokio::spawn(async move {
                // As the contract tells a caller: UNAVAILABLE (a grant the replica did not
                // acknowledge in time on a loaded machine, withdrawn) is retried with the same
                // idempotency key.
                let request = idempotent("p", &format!("spread-{i}"));
                let mut last = None;
                for _ in 0..20 {
                    match c.acquire(request.clone()).await {
                        Err(e) if e.code() == Code::Unavailable => last = Some(e),
                        other => return other,
                    }
                }
                Err(last.expect("an UNAVAILABLE answer"))
            })
        })
        .collect();
    let mut per_key: HashMap<String, usize> = HashMap::new();
    for t in tasks {
        let lease = t.await.unwrap().expect("granted").into_inner();
        *per_key.entry(lease.key_id).or_default() += 1;
    }
    assert_eq!(per_key.len(), 10, "every key took leases: {per_key:?}");
    for (key, n) in &per_key {
        assert!(
            (4..=6).contains(n),
            "key {key} holds {n}, expected 4..=6: {per_key:?}"
        );
    }
    let status = h.status("p").await;
    assert_eq!(status.in_flight, 50);
    assert!((status.utilization - 0.5).abs() < 1e-9);
    // Ties are spread, not always the first key: sequential single acquires on an idle pool
    // land on different keys.
    let h2 = start(b, &uniform_pool(1, 10, 10)).await;
    let mut firsts = std::collections::HashSet::new();
    for _ in 0..10 {
        let l = h2.acquire("p").await.unwrap();
        firsts.insert(l.key_id.clone());
        assert!(h2.release(&l.lease_id).await);
    }
    assert!(
        firsts.len() >= 3,
        "idle-pool picks should vary, got {firsts:?}"
    );
}

async fn heterogeneous_capacities_fill_proportionally(b: Backend) {
    let h = start(b, &pool_toml("p", &[vec![2, 4], vec![8]])).await;
    for _ in 0..7 {
        h.acquire("p").await.unwrap();
    }
    let s = in_flight_by_key(&h.status("p").await);
    assert_eq!(s["u0/k0"], 1, "{s:?}");
    assert_eq!(s["u0/k1"], 2, "{s:?}");
    assert_eq!(s["u1/k0"], 4, "{s:?}");
}

async fn never_over_capacity_with_500_concurrent_acquirers(b: Backend) {
    let h = start(b, &uniform_pool(2, 5, 10)).await;
    // The test's own record of held leases per key, independent of the store's counts.
    let held: Arc<Mutex<HashMap<String, i32>>> = Arc::default();
    let peak: Arc<Mutex<HashMap<String, i32>>> = Arc::default();
    let tasks: Vec<_> = (0..500)
        .map(|i| {
            let mut c = h.client();
            let (held, peak) = (held.clone(), peak.clone());
            tokio::spawn(async move {
                let mut granted = 0;
                for _ in 0..3 {
                    let r = c
                        .acquire(pb::AcquireRequest {
                            pool: "p".into(),
                            wait_timeout_ms: 2_000,
                            request_id: format!("t{i}"),
                            ..Default::default()
                        })
                        .await;
                    let Ok(lease) = r else { continue };
                    let lease = lease.into_inner();
                    {
                        let mut held = held.lock().unwrap();
                        let n = held.entry(lease.key_id.clone()).or_default();
                        *n += 1;
                        let mut peak = peak.lock().unwrap();
                        let p = peak.entry(lease.key_id.clone()).or_default();
                        *p = (*p).max(*n);
                    }
                    tokio::task::yield_now().await;
                    *held.lock().unwrap().get_mut(&lease.key_id).unwrap() -= 1;
                    let released = c
                        .release(pb::ReleaseRequest {
                            lease_id: lease.lease_id,
                            ..Default::default()
                        })
                        .await
                        .unwrap();
                    assert!(released.into_inner().released);
                    granted += 1;
                }
                granted
            })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    let peak = peak.lock().unwrap().clone();
    assert_eq!(peak.len(), 10, "{peak:?}");
    for (key, p) in &peak {
        assert!(
            *p <= 10,
            "key {key} reached {p} concurrent leases, capacity is 10"
        );
    }
    assert!(total > 500, "most acquires were served ({total})");
    let s = h.status("p").await;
    assert_eq!(s.in_flight, 0, "every slot returned");

    // And with every slot held at once: exactly 100 grants out of 500 immediate tries.
    let tasks: Vec<_> = (0..500)
        .map(|_| {
            let mut c = h.client();
            tokio::spawn(async move {
                c.acquire(pb::AcquireRequest {
                    pool: "p".into(),
                    ..Default::default()
                })
                .await
            })
        })
        .collect();
    let mut ok = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => ok += 1,
            Err(s) => assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}"),
        }
    }
    assert_eq!(ok, 100);
    for k in h.status("p").await.keys {
        assert_eq!(k.in_flight, 10, "{k:?}");
    }
}

async fn full_pool_without_wait_is_resource_exhausted_with_details(b: Backend) {
    let h = start(b, &uniform_pool(1, 2, 1)).await;
    h.acquire("p").await.unwrap();
    h.acquire("p").await.unwrap();
    let err = h.acquire("p").await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert!(
        err.message().contains("pool \"p\" is full (2/2 in flight"),
        "{}",
        err.message()
    );
    let d = err.get_error_details();
    let info = d.error_info().expect("ErrorInfo");
    assert_eq!(info.reason, "POOL_FULL");
    assert_eq!(info.metadata["pool"], "p");
    assert_eq!(info.metadata["capacity"], "2");
    assert_eq!(info.metadata["in_flight"], "2");
    assert!(
        d.retry_info().and_then(|r| r.retry_delay).is_some(),
        "RetryInfo present"
    );
}

async fn waiters_get_released_slots_in_fifo_order(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let first = h.acquire("p").await.unwrap();
    let spawn_waiter = |name: &'static str| {
        let mut c = h.client();
        tokio::spawn(async move {
            let lease = c
                .acquire(pb::AcquireRequest {
                    pool: "p".into(),
                    wait_timeout_ms: 10_000,
                    request_id: name.into(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            (name, lease)
        })
    };
    let w1 = spawn_waiter("w1");
    h.wait_until("p", "w1 queued", |s| s.waiters == 1).await;
    let w2 = spawn_waiter("w2");
    h.wait_until("p", "w2 queued", |s| s.waiters == 2).await;
    assert!(h.release(&first.lease_id).await);
    let (name, l1) = w1.await.unwrap();
    assert_eq!(name, "w1");
    assert!(
        !w2.is_finished(),
        "w2 must still wait while w1 holds the only slot"
    );
    assert!(h.release(&l1.lease_id).await);
    let (name, l2) = w2.await.unwrap();
    assert_eq!(name, "w2");
    assert!(h.release(&l2.lease_id).await);
    assert_eq!(h.status("p").await.in_flight, 0);
}

async fn wait_timeout_ends_with_resource_exhausted(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    h.acquire("p").await.unwrap();
    let err = h
        .acquire_with(pb::AcquireRequest {
            pool: "p".into(),
            wait_timeout_ms: 100,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("after waiting"), "{}", err.message());
    assert_eq!(h.status("p").await.waiters, 0);
}

async fn grpc_deadline_bounds_the_wait(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    h.acquire("p").await.unwrap();
    let mut req = tonic::Request::new(pb::AcquireRequest {
        pool: "p".into(),
        wait_timeout_ms: 60_000,
        ..Default::default()
    });
    req.set_timeout(Duration::from_millis(1_000));
    let started = std::time::Instant::now();
    let err = h.client().acquire(req).await.unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the 60 s wait was cut by the deadline"
    );
    h.wait_until("p", "waiter gone", |s| s.waiters == 0).await;
}

async fn cancelled_wait_leaves_nothing_behind(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let held = h.acquire("p").await.unwrap();
    let mut c = h.client();
    let waiter = tokio::spawn(async move {
        c.acquire(pb::AcquireRequest {
            pool: "p".into(),
            wait_timeout_ms: 60_000,
            ..Default::default()
        })
        .await
    });
    h.wait_until("p", "waiter queued", |s| s.waiters == 1).await;
    waiter.abort();
    // It leaves this replica's waiters and the store's line (every class at 0).
    h.wait_until("p", "cancelled waiter left the queue", |s| {
        s.waiters == 0 && s.class_waiters.iter().all(|c| c.waiters == 0)
    })
    .await;
    assert!(h.release(&held.lease_id).await);
    let s = h.status("p").await;
    assert_eq!(
        s.in_flight, 0,
        "no lease was granted to the cancelled waiter"
    );
    let again = h.acquire("p").await.expect("slot free at once");
    assert!(h.release(&again.lease_id).await);
}

async fn expired_lease_returns_its_slot_and_cannot_be_renewed(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let lease = h
        .acquire_with(pb::AcquireRequest {
            pool: "p".into(),
            lease_ttl_ms: 1_000,
            ..Default::default()
        })
        .await
        .unwrap();
    let status = h.status("p").await;
    assert!(lease.expires_at_ms - status.now_ms <= 1_000);
    assert_eq!(status.in_flight, 1);
    h.advance("p", 1_001).await;
    assert_eq!(h.status("p").await.in_flight, 0, "expired slot returned");
    let err = h
        .client()
        .renew(pb::RenewRequest {
            lease_id: lease.lease_id.clone(),
            lease_ttl_ms: 1_000,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(
        !h.release(&lease.lease_id).await,
        "release after expiry is a no-op"
    );
    assert_eq!(h.status("p").await.in_flight, 0);
    // The slot is really free.
    h.acquire("p").await.unwrap();
}

async fn renew_extends_a_live_lease(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let lease = h
        .acquire_with(pb::AcquireRequest {
            pool: "p".into(),
            lease_ttl_ms: 1_000,
            ..Default::default()
        })
        .await
        .unwrap();
    h.advance("p", 600).await;
    let renewed = h
        .client()
        .renew(pb::RenewRequest {
            lease_id: lease.lease_id.clone(),
            lease_ttl_ms: 1_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        renewed.expires_at_ms >= lease.expires_at_ms + 500,
        "{renewed:?} vs {lease:?}"
    );
    assert_eq!(renewed.key_id, lease.key_id);
    h.advance("p", 600).await;
    assert_eq!(
        h.status("p").await.in_flight,
        1,
        "still live after the original expiry"
    );
    h.advance("p", 500).await;
    assert_eq!(
        h.status("p").await.in_flight,
        0,
        "expired after the renewed ttl"
    );
}

async fn release_is_idempotent_and_counts_never_go_negative(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 2)).await;
    let lease = h.acquire("p").await.unwrap();
    assert!(h.release(&lease.lease_id).await);
    assert!(!h.release(&lease.lease_id).await);
    assert!(!h.release(&lease.lease_id).await);
    let made_up = h
        .client()
        .release(pb::ReleaseRequest {
            lease_id: made_up_id("p", "u0/k0"),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(made_up.code(), Code::PermissionDenied, "{made_up:?}");
    let s = h.status("p").await;
    assert_eq!(s.in_flight, 0);
    assert!(s.keys.iter().all(|k| k.in_flight == 0));
    // Both slots still usable: nothing was double-freed into extra capacity.
    h.acquire("p").await.unwrap();
    h.acquire("p").await.unwrap();
    assert_eq!(
        h.acquire("p").await.unwrap_err().code(),
        Code::ResourceExhausted
    );
}

async fn rate_limited_cools_the_key_for_retry_after(b: Backend) {
    let h = start(b, &uniform_pool(1, 2, 5)).await;
    let lease = h
        .acquire_with(pb::AcquireRequest {
            pool: "p".into(),
            exclude_keys: vec!["u0/k1".into()],
            ..Default::default()
        })
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
        .acquire_with(pb::AcquireRequest {
            pool: "p".into(),
            exclude_keys: vec!["u0/k1".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let r = h.report(&l.lease_id, Outcome::KeyInvalid, 0, true).await;
    assert_eq!(r.key_state(), KeyState::Disabled);
    for _ in 0..6 {
        let l = h
            .acquire_with(pb::AcquireRequest {
                pool: "p".into(),
                lease_ttl_ms: 600_000,
                ..Default::default()
            })
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
        .enable_key(admin(pb::EnableKeyRequest {
            pool: "p".into(),
            key_id: "u0/k0".into(),
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(k.state(), KeyState::Available);
    assert_eq!(h.acquire("p").await.unwrap().key_id, "u0/k0");
    // QUOTA_EXHAUSTED behaves the same.
    let l = h
        .acquire_with(pb::AcquireRequest {
            pool: "p".into(),
            exclude_keys: vec!["u0/k1".into()],
            ..Default::default()
        })
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
        .acquire_with(pb::AcquireRequest {
            pool: "p".into(),
            exclude_keys: vec![a.key_id.clone()],
            ..Default::default()
        })
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
            .disable_key(admin(pb::DisableKeyRequest {
                pool: "p".into(),
                key_id: key.into(),
            }))
            .await
            .unwrap();
    }
    let err = h.acquire("p").await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert!(err.message().contains("disabled"), "{}", err.message());
    assert!(err.message().contains("EnableKey"), "{}", err.message());
}

async fn exclude_keys_and_upstream_ids_are_honoured(b: Backend) {
    let h = start(b, &uniform_pool(3, 3, 10)).await;
    for _ in 0..20 {
        let l = h
            .acquire_with(pb::AcquireRequest {
                pool: "p".into(),
                upstream_ids: vec!["u2".into()],
                exclude_keys: vec!["u2/k0".into()],
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(l.upstream_id, "u2");
        assert_ne!(l.key_id, "u2/k0");
    }
    let s = in_flight_by_key(&h.status("p").await);
    assert_eq!(s["u2/k1"] + s["u2/k2"], 20);
    assert_eq!(s["u2/k1"], 10, "least utilization within the filter: {s:?}");
    // With the filtered keys full, the pool is full for this caller even though others idle.
    let err = h
        .acquire_with(pb::AcquireRequest {
            pool: "p".into(),
            upstream_ids: vec!["u2".into()],
            exclude_keys: vec!["u2/k0".into()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
}

async fn excluding_every_key_is_resource_exhausted(b: Backend) {
    let h = start(b, &uniform_pool(1, 2, 5)).await;
    let err = h
        .acquire_with(pb::AcquireRequest {
            pool: "p".into(),
            exclude_keys: vec!["u0/k0".into(), "u0/k1".into()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(
        err.get_error_details().error_info().unwrap().reason,
        "NO_ELIGIBLE_KEY"
    );
}

async fn unknown_pool_is_not_found(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let err = h.acquire("nope").await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().contains("\"nope\""), "{}", err.message());
    assert!(
        err.message().contains("known pools: p"),
        "{}",
        err.message()
    );
    let err = h
        .client()
        .get_pool_status(pb::GetPoolStatusRequest {
            pool: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
}

async fn report_with_release_frees_the_slot_in_the_same_call(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let l = h.acquire("p").await.unwrap();
    let r = h.report(&l.lease_id, Outcome::Success, 0, true).await;
    assert!(r.released);
    assert_eq!(r.key_id, "u0/k0");
    assert_eq!(h.status("p").await.in_flight, 0);
    assert!(!h.release(&l.lease_id).await);
    // Report without release keeps the lease.
    let l = h.acquire("p").await.unwrap();
    let r = h.report(&l.lease_id, Outcome::ClientError, 0, false).await;
    assert!(!r.released);
    assert_eq!(
        r.key_state(),
        KeyState::Available,
        "client errors say nothing about the key"
    );
    assert_eq!(h.status("p").await.in_flight, 1);
}

async fn late_report_with_key_id_still_reaches_the_key(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let l = h
        .acquire_with(pb::AcquireRequest {
            pool: "p".into(),
            lease_ttl_ms: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    h.advance("p", 200).await;
    // The lease expired, but its signed id names its key: the late report still reaches it
    // (with or without key_id), once.
    let late = pb::ReportRequest {
        lease_id: l.lease_id.clone(),
        outcome: Outcome::RateLimited as i32,
        retry_after_ms: 2_000,
        release: true,
        key_id: l.key_id.clone(),
        ..Default::default()
    };
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
    let old = h
        .acquire_with(pb::AcquireRequest {
            pool: "p".into(),
            lease_ttl_ms: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    h.advance("p", 61_000).await;
    let stale = h
        .client()
        .report(pb::ReportRequest {
            lease_id: old.lease_id.clone(),
            outcome: Outcome::KeyInvalid as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!stale.outcome_applied);
    assert_eq!(stale.key_state(), KeyState::Available, "{stale:?}");
}

/// A well-formed lease id on `key` of `pool` that no scheduler signed.
fn made_up_id(pool: &str, key: &str) -> String {
    format!(
        "{pool}/{key}/{:032x}.1764640000000.{:032x}",
        rand::random::<u128>(),
        rand::random::<u128>()
    )
}

async fn a_made_up_or_altered_lease_id_changes_nothing(b: Backend) {
    let h = start(b, &uniform_pool(1, 2, 10)).await;
    let real = h.acquire("p").await.unwrap();
    let other_key = if real.key_id == "u0/k0" {
        "u0/k1"
    } else {
        "u0/k0"
    };
    let before = h.status("p").await;
    // Made up, or a real id moved to another key (its MAC no longer verifies).
    for forged in [
        made_up_id("p", other_key),
        real.lease_id.replacen(&real.key_id, other_key, 1),
    ] {
        let mut c = h.client();
        let report = c
            .report(pb::ReportRequest {
                lease_id: forged.clone(),
                outcome: Outcome::KeyInvalid as i32,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(report.code(), Code::PermissionDenied, "{report:?}");
        assert_eq!(
            voxpool_domain::contract::SchedulerReason::of(&report),
            Some(voxpool_domain::contract::SchedulerReason::LeaseNotIssued)
        );
        let renew = c
            .renew(pb::RenewRequest {
                lease_id: forged.clone(),
                lease_ttl_ms: 600_000,
                key_id: other_key.into(),
            })
            .await
            .unwrap_err();
        assert_eq!(renew.code(), Code::PermissionDenied, "{renew:?}");
        let release = c
            .release(pb::ReleaseRequest {
                lease_id: forged,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(release.code(), Code::PermissionDenied, "{release:?}");
    }
    let after = h.status("p").await;
    assert_eq!(after.in_flight, before.in_flight);
    for k in &after.keys {
        assert_eq!(k.state(), KeyState::Available, "{k:?}");
        assert_eq!(k.effective_capacity, 10, "{k:?}");
    }
    assert!(
        h.release(&real.lease_id).await,
        "the real lease is untouched"
    );
}

async fn an_ended_leases_id_never_reaches_a_later_lease_under_its_idempotency_key(b: Backend) {
    let h = start(b, &uniform_pool(1, 2, 10)).await;
    let request = || pb::AcquireRequest {
        pool: "p".into(),
        idempotency_key: "used-twice-0123456789".into(),
        ..Default::default()
    };
    let first = h.acquire_with(request()).await.unwrap();
    assert!(h.release(&first.lease_id).await);
    // The key used again after its lease ended: a new lease under the same token.
    let second = h.acquire_with(request()).await.unwrap();
    assert_ne!(second.lease_id, first.lease_id, "another grant, another id");
    // The first lease's id frees, renews and reports nothing of the second.
    assert!(!h.release(&first.lease_id).await);
    assert_eq!(
        h.status("p").await.in_flight,
        1,
        "the second lease is still held"
    );
    let renewed = h
        .client()
        .renew(pb::RenewRequest {
            lease_id: first.lease_id.clone(),
            lease_ttl_ms: 1_000,
            key_id: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(renewed.code(), Code::FailedPrecondition, "{renewed:?}");
    let late = h
        .client()
        .report(pb::ReportRequest {
            lease_id: first.lease_id.clone(),
            outcome: Outcome::ClientError as i32,
            release: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!late.released, "{late:?}");
    let own = h
        .client()
        .report(pb::ReportRequest {
            lease_id: second.lease_id.clone(),
            outcome: Outcome::UpstreamError as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        own.outcome_applied,
        "the second lease's own first report counts: {own:?}"
    );
    assert!(h.release(&second.lease_id).await);
}

async fn an_outcome_counts_once_per_lease(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 10)).await;
    let l = h.acquire("p").await.unwrap();
    // Three failures cool a key (failure_threshold 3), but not three reports on one lease.
    let mut applied = Vec::new();
    for _ in 0..3 {
        let r = h
            .client()
            .report(pb::ReportRequest {
                lease_id: l.lease_id.clone(),
                outcome: Outcome::UpstreamError as i32,
                ..Default::default()
            })
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
            .report(pb::ReportRequest {
                lease_id: c.lease_id.clone(),
                outcome: Outcome::ConcurrencyLimited as i32,
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let lowered = h.key("p", &c.key_id).await.effective_capacity;
    assert!(lowered >= 5, "one refusal halves at most: {lowered}");
    // A release after the report still frees the slot.
    let r = h
        .client()
        .report(pb::ReportRequest {
            lease_id: l.lease_id.clone(),
            outcome: Outcome::Success as i32,
            release: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.released && !r.outcome_applied, "{r:?}");
    assert_eq!(h.status("p").await.in_flight, 1);
}

async fn a_report_naming_another_key_than_the_leases_is_refused(b: Backend) {
    let h = start(b, &uniform_pool(1, 2, 10)).await;
    let l = h.acquire("p").await.unwrap();
    let other = if l.key_id == "u0/k0" {
        "u0/k1"
    } else {
        "u0/k0"
    };
    let err = h
        .client()
        .report(pb::ReportRequest {
            lease_id: l.lease_id.clone(),
            outcome: Outcome::KeyInvalid as i32,
            key_id: other.into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("key_id"), "{}", err.message());
    assert_eq!(h.key("p", other).await.state(), KeyState::Available);
    assert_eq!(h.key("p", &l.key_id).await.state(), KeyState::Available);
}

async fn bad_input_is_invalid_argument_naming_the_field(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let acquire_cases: Vec<(pb::AcquireRequest, Code, &str)> = vec![
        (
            pb::AcquireRequest {
                pool: "".into(),
                ..Default::default()
            },
            Code::InvalidArgument,
            "pool",
        ),
        (
            pb::AcquireRequest {
                pool: "p".into(),
                lease_ttl_ms: -1,
                ..Default::default()
            },
            Code::InvalidArgument,
            "lease_ttl_ms",
        ),
        (
            pb::AcquireRequest {
                pool: "p".into(),
                lease_ttl_ms: 600_001,
                ..Default::default()
            },
            Code::InvalidArgument,
            "lease_ttl_ms",
        ),
        (
            pb::AcquireRequest {
                pool: "p".into(),
                wait_timeout_ms: -5,
                ..Default::default()
            },
            Code::InvalidArgument,
            "wait_timeout_ms",
        ),
        (
            pb::AcquireRequest {
                pool: "p".into(),
                exclude_keys: (0..10_000).map(|i| format!("u0/k{i}")).collect(),
                ..Default::default()
            },
            Code::InvalidArgument,
            "exclude_keys",
        ),
        (
            pb::AcquireRequest {
                pool: "p".into(),
                upstream_ids: vec!["zz".into()],
                ..Default::default()
            },
            Code::InvalidArgument,
            "upstream_ids[0]",
        ),
        (
            pb::AcquireRequest {
                pool: "p".into(),
                request_id: "x".repeat(200),
                ..Default::default()
            },
            Code::InvalidArgument,
            "request_id",
        ),
    ];
    for (req, code, field) in acquire_cases {
        let err = h.acquire_with(req).await.unwrap_err();
        assert_eq!(err.code(), code, "{field}: {err:?}");
        let br = err.get_error_details();
        let v = &br
            .bad_request()
            .expect("BadRequest detail")
            .field_violations[0];
        assert_eq!(v.field, field);
        assert!(err.message().contains(field), "{}", err.message());
    }
    for bad in [
        "",
        "nope",
        "p/xyz",
        "p/0123456789ABCDEF0123456789ABCDEF",
        "../../etc",
    ] {
        let err = h
            .client()
            .release(pb::ReleaseRequest {
                lease_id: bad.into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{bad:?}");
        assert!(err.message().contains("lease_id"));
    }
    let l = h.acquire("p").await.unwrap();
    for outcome in [0, 99, -1] {
        let err = h
            .client()
            .report(pb::ReportRequest {
                lease_id: l.lease_id.clone(),
                outcome,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.message().contains("outcome"), "{}", err.message());
    }
    let err = h
        .client()
        .report(pb::ReportRequest {
            lease_id: l.lease_id.clone(),
            outcome: 1,
            retry_after_ms: -3,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(err.message().contains("retry_after_ms"));
    // A key_id that is not a key of the lease's pool is named, not mistaken for a missing one.
    let err = h
        .client()
        .report(pb::ReportRequest {
            lease_id: l.lease_id.clone(),
            outcome: 1,
            key_id: "bogus/key".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message()
            .contains("\"bogus/key\" is not a key of pool \"p\""),
        "{}",
        err.message()
    );
    // A lease id of a pool this scheduler does not serve: NOT_FOUND naming the known pools.
    let err = h
        .client()
        .report(pb::ReportRequest {
            lease_id: made_up_id("nope", "u0/k0"),
            outcome: 1,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().contains("nope"), "{}", err.message());
    let err = h
        .client()
        .renew(pb::RenewRequest {
            lease_id: l.lease_id.clone(),
            lease_ttl_ms: -1,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(err.message().contains("lease_ttl_ms"));
    // Still serving, and nothing leaked: only the one lease above is held.
    assert_eq!(h.status("p").await.in_flight, 1);
    assert!(h.release(&l.lease_id).await);
}

async fn admin_rpcs_need_the_bearer_token(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let req = || pb::DisableKeyRequest {
        pool: "p".into(),
        key_id: "u0/k0".into(),
    };
    let err = h.client().disable_key(req()).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    let mut wrong = tonic::Request::new(req());
    wrong
        .metadata_mut()
        .insert("authorization", "Bearer wrong".parse().unwrap());
    let err = h.client().disable_key(wrong).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    assert!(!err.message().contains(common::ADMIN_TOKEN));
    assert_eq!(
        h.key("p", "u0/k0").await.state(),
        KeyState::Available,
        "nothing changed"
    );
    let k = h
        .client()
        .disable_key(admin(req()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(k.state(), KeyState::Disabled);
    let err = h
        .client()
        .disable_key(admin(pb::DisableKeyRequest {
            pool: "p".into(),
            key_id: "u0/nope".into(),
        }))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = h
        .client()
        .set_key_capacity(admin(pb::SetKeyCapacityRequest {
            pool: "p".into(),
            key_id: "u0/k0".into(),
            capacity: -1,
        }))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("capacity"));
}

async fn lowering_capacity_never_oversells_and_zero_disables(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 10)).await;
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(h.acquire("p").await.unwrap());
    }
    let k = h
        .client()
        .set_key_capacity(admin(pb::SetKeyCapacityRequest {
            pool: "p".into(),
            key_id: "u0/k0".into(),
            capacity: 3,
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((k.capacity, k.in_flight), (3, 5));
    assert_eq!(
        h.acquire("p").await.unwrap_err().code(),
        Code::ResourceExhausted
    );
    for l in held.drain(..3) {
        assert!(h.release(&l.lease_id).await);
    }
    // 2 in flight, capacity 3: exactly one more.
    h.acquire("p").await.unwrap();
    assert_eq!(
        h.acquire("p").await.unwrap_err().code(),
        Code::ResourceExhausted
    );
    let k = h
        .client()
        .set_key_capacity(admin(pb::SetKeyCapacityRequest {
            pool: "p".into(),
            key_id: "u0/k0".into(),
            capacity: 0,
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(k.state(), KeyState::Disabled);
    assert_eq!(h.acquire("p").await.unwrap_err().code(), Code::Unavailable);
}

async fn reseeding_keeps_live_in_flight_counts(b: Backend) {
    let h = start(b, &uniform_pool(1, 2, 2)).await;
    for _ in 0..4 {
        h.acquire("p").await.unwrap();
    }
    // A replica restart: a fresh store handle (for Redis a new connection) seeds the same
    // config, and a new server serves from it.
    let store = common::open_store(b, &h.config, h.redis.as_ref()).await;
    let store = if matches!(b, Backend::Memory) {
        // The in-process store lives and dies with its replica; re-seed the same one.
        h.store
            .seed(&voxpool_scheduler::model::PoolSpec::from_config(&h.config))
            .await
            .unwrap();
        h.store.clone()
    } else {
        store
    };
    let h2 = common::start_on(store, h.config.clone(), None).await;
    assert_eq!(
        h2.status("p").await.in_flight,
        4,
        "live counts survived the re-seed"
    );
    assert_eq!(
        h2.acquire("p").await.unwrap_err().code(),
        Code::ResourceExhausted,
        "no new slots handed out"
    );
}

async fn config_capacity_change_wins_over_admin_override_on_reseed(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 4)).await;
    h.client()
        .set_key_capacity(admin(pb::SetKeyCapacityRequest {
            pool: "p".into(),
            key_id: "u0/k0".into(),
            capacity: 2,
        }))
        .await
        .unwrap();
    // Same config again: the admin override stays.
    h.store
        .seed(&voxpool_scheduler::model::PoolSpec::from_config(&h.config))
        .await
        .unwrap();
    assert_eq!(h.key("p", "u0/k0").await.capacity, 2);
    // Config changed to 6: the new configured value wins.
    let changed = voxpool_config::Config::from_toml_str(&uniform_pool(1, 1, 6)).unwrap();
    h.store
        .seed(&voxpool_scheduler::model::PoolSpec::from_config(&changed))
        .await
        .unwrap();
    assert_eq!(h.key("p", "u0/k0").await.capacity, 6);
}

async fn a_wait_that_cannot_end_in_a_grant_answers_at_once(b: Backend) {
    let h = start(b, &uniform_pool(1, 2, 1)).await;
    for key in ["u0/k0", "u0/k1"] {
        h.client()
            .disable_key(admin(pb::DisableKeyRequest {
                pool: "p".into(),
                key_id: key.into(),
            }))
            .await
            .unwrap();
    }
    let started = std::time::Instant::now();
    let err = h
        .acquire_with(pb::AcquireRequest {
            pool: "p".into(),
            wait_timeout_ms: 60_000,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "answered without sitting out the 60 s wait"
    );
    // A cooldown that ends after the wait is just as hopeless.
    h.client()
        .enable_key(admin(pb::EnableKeyRequest {
            pool: "p".into(),
            key_id: "u0/k0".into(),
        }))
        .await
        .unwrap();
    let l = h
        .acquire_with(pb::AcquireRequest {
            pool: "p".into(),
            lease_ttl_ms: 600_000,
            ..Default::default()
        })
        .await
        .unwrap();
    h.report(&l.lease_id, Outcome::RateLimited, 3_600_000, true)
        .await;
    let err = h
        .acquire_with(pb::AcquireRequest {
            pool: "p".into(),
            wait_timeout_ms: 60_000,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert_eq!(h.status("p").await.waiters, 0);
}

async fn a_waiter_gets_a_key_whose_cooldown_ends_within_the_wait(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let l = h.acquire("p").await.unwrap();
    h.report(&l.lease_id, Outcome::RateLimited, 2_000, true)
        .await;
    let mut c = h.client();
    let waiter = tokio::spawn(async move {
        c.acquire(pb::AcquireRequest {
            pool: "p".into(),
            wait_timeout_ms: 30_000,
            ..Default::default()
        })
        .await
    });
    h.wait_until("p", "waiter queued", |s| s.waiters == 1).await;
    h.advance("p", 2_001).await;
    let lease = waiter
        .await
        .unwrap()
        .expect("granted once the cooldown ended")
        .into_inner();
    assert_eq!(lease.key_id, "u0/k0");
}

#[allow(dead_code)]
async fn waiters_beyond_max_waiters_are_resource_exhausted_naming_it(b: Backend) {
    let h = start_with(b, &uniform_pool(1, 1, 1), "max_waiters = 3\n").await;
    let held = h.acquire("p").await.unwrap();
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let mut c = h.client();
            tokio::spawn(async move {
                c.acquire(pb::AcquireRequest {
                    pool: "p".into(),
                    wait_timeout_ms: 60_000,
                    ..Default::default()
                })
                .await
            })
        })
        .collect();
    h.wait_until("p", "three waiters queued", |s| s.waiters == 3)
        .await;
    let err = h
        .acquire_with(pb::AcquireRequest {
            pool: "p".into(),
            wait_timeout_ms: 60_000,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(
        err.message().contains("scheduler.max_waiters"),
        "{}",
        err.message()
    );
    let details = err.get_error_details();
    let info = details.error_info().expect("ErrorInfo");
    assert_eq!(info.reason, "TOO_MANY_WAITERS");
    assert_eq!(
        info.metadata.get("max_waiters").map(String::as_str),
        Some("3")
    );
    // A request that does not wait is still answered as before.
    let err = h.acquire("p").await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(
        err.get_error_details()
            .error_info()
            .map(|i| i.reason.clone()),
        Some("POOL_FULL".into())
    );
    assert!(h.release(&held.lease_id).await);
    for w in waiters {
        w.abort();
    }
    h.wait_until("p", "waiters gone", |s| s.waiters == 0).await;
}

async fn a_wait_that_never_reached_the_head_reports_the_real_counts(b: Backend) {
    let h = start(b, &uniform_pool(1, 2, 1)).await;
    let held: Vec<_> = [h.acquire("p").await.unwrap(), h.acquire("p").await.unwrap()].into();
    // The head waits long; the second waiter's own wait ends while it is still behind it.
    let mut c = h.client();
    let head = tokio::spawn(async move {
        c.acquire(pb::AcquireRequest {
            pool: "p".into(),
            wait_timeout_ms: 60_000,
            ..Default::default()
        })
        .await
    });
    h.wait_until("p", "head queued", |s| s.waiters == 1).await;
    let err = h
        .acquire_with(pb::AcquireRequest {
            pool: "p".into(),
            wait_timeout_ms: 200,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(
        err.message().contains("(2/2 in flight"),
        "the pool's real counts, not 0/0: {}",
        err.message()
    );
    let details = err.get_error_details();
    let info = details.error_info().expect("ErrorInfo");
    assert_eq!(info.metadata.get("capacity").map(String::as_str), Some("2"));
    assert_eq!(
        info.metadata.get("in_flight").map(String::as_str),
        Some("2")
    );
    head.abort();
    for l in held {
        assert!(h.release(&l.lease_id).await);
    }
}

async fn a_huge_unknown_pool_name_gets_a_short_not_found(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let huge = "x".repeat(1 << 20);
    let err = h.acquire(&huge).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{:?}", err.code());
    assert!(
        err.message().len() < 512,
        "{} bytes of message",
        err.message().len()
    );
    assert!(
        err.message().contains("(1048576 bytes)"),
        "{}",
        err.message()
    );
    assert!(err.details().len() < 1024, "details stay short too");
    let err = h
        .client()
        .get_pool_status(pb::GetPoolStatusRequest { pool: huge })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().len() < 512);
}

async fn control_characters_in_ids_are_invalid_argument(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let cases = [
        (
            pb::AcquireRequest {
                pool: "p".into(),
                request_id: "req-1\nlevel=ERROR forged".into(),
                ..Default::default()
            },
            "request_id",
        ),
        (
            pb::AcquireRequest {
                pool: "p\r\nx".into(),
                ..Default::default()
            },
            "pool",
        ),
        (
            pb::AcquireRequest {
                pool: "p".into(),
                request_id: "r".repeat(129),
                ..Default::default()
            },
            "request_id",
        ),
    ];
    for (req, field) in cases {
        let err = h.acquire_with(req.clone()).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{req:?}: {err:?}");
        let details = err.get_error_details();
        let violations = &details.bad_request().expect("BadRequest").field_violations;
        assert_eq!(violations[0].field, field, "{req:?}");
        assert!(!err.message().contains('\n'), "{}", err.message());
    }
    assert_eq!(h.status("p").await.in_flight, 0, "nothing was granted");
}

fn idempotent(pool: &str, key: &str) -> pb::AcquireRequest {
    pb::AcquireRequest {
        pool: pool.into(),
        idempotency_key: key.into(),
        ..Default::default()
    }
}

async fn a_retried_acquire_with_its_idempotency_key_gets_the_same_lease(b: Backend) {
    let h = start(b, &uniform_pool(1, 2, 1)).await;
    let first = h
        .acquire_with(idempotent("p", "6f1c2a1e-attempt-1"))
        .await
        .unwrap();
    let again = h
        .acquire_with(idempotent("p", "6f1c2a1e-attempt-1"))
        .await
        .unwrap();
    assert_eq!(
        again.lease_id, first.lease_id,
        "the retry is answered with the same lease"
    );
    assert_eq!(again.key_id, first.key_id);
    assert_eq!(h.status("p").await.in_flight, 1, "one slot, not two");
    // Another key is another Acquire.
    let other = h
        .acquire_with(idempotent("p", "6f1c2a1e-attempt-2"))
        .await
        .unwrap();
    assert_ne!(other.lease_id, first.lease_id);
    assert_eq!(h.status("p").await.in_flight, 2);
    // The same key on another pool is unrelated (and unknown pools stay NOT_FOUND).
    let err = h
        .acquire_with(idempotent("q", "6f1c2a1e-attempt-1"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    // Once released, the key grants anew (the old lease is gone, not resurrected).
    assert!(h.release(&first.lease_id).await);
    assert!(h.release(&other.lease_id).await);
    let fresh = h
        .acquire_with(idempotent("p", "6f1c2a1e-attempt-1"))
        .await
        .unwrap();
    assert_eq!(h.status("p").await.in_flight, 1);
    assert!(h.release(&fresh.lease_id).await);
    assert!(!h.release(&fresh.lease_id).await, "released once");
    // A key with control characters is refused like any id.
    let err = h.acquire_with(idempotent("p", "a\nb")).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("idempotency_key"),
        "{}",
        err.message()
    );
}

async fn concurrent_acquires_with_one_idempotency_key_take_one_slot(b: Backend) {
    let h = start(b, &uniform_pool(2, 5, 10)).await;
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let mut c = h.client();
            tokio::spawn(async move {
                // As the contract tells a caller: UNAVAILABLE (e.g. a grant the replica did
                // not acknowledge in time, on a loaded machine) is retried with the same key.
                let mut last = None;
                for _ in 0..20 {
                    match c.acquire(idempotent("p", "one-logical-acquire")).await {
                        Err(e) if e.code() == Code::Unavailable => last = Some(e),
                        other => return other,
                    }
                }
                Err(last.expect("an UNAVAILABLE answer"))
            })
        })
        .collect();
    let mut ids = std::collections::HashSet::new();
    for t in tasks {
        ids.insert(t.await.unwrap().expect("granted").into_inner().lease_id);
    }
    assert_eq!(ids.len(), 1, "every retry got the one lease: {ids:?}");
    assert_eq!(h.status("p").await.in_flight, 1);
}

fn _assert_harness_is_send(h: Harness) -> impl Send {
    h
}

/// Recovery window of the recovery tests: long, so only `advance` ends it.
const RECOVERY: &str = "recovery_window_ms = 60000\n";

/// A harness whose start-up recovery window has already ended (the store was fresh).
async fn recovering_harness(b: Backend, pool: &str) -> Harness {
    let h = start_with(b, pool, RECOVERY).await;
    assert!(
        h.status("p").await.recovering_until_ms > 0,
        "a fresh store opens a recovery window: it cannot tell new from lost"
    );
    h.advance("p", 60_000).await;
    assert_eq!(h.status("p").await.recovering_until_ms, 0);
    h
}

async fn renew_with_key(h: &Harness, lease: &pb::Lease) -> Result<pb::Lease, tonic::Status> {
    h.client()
        .renew(pb::RenewRequest {
            lease_id: lease.lease_id.clone(),
            // Outlives the `advance` that ends the window.
            lease_ttl_ms: 120_000,
            key_id: lease.key_id.clone(),
        })
        .await
        .map(tonic::Response::into_inner)
}

async fn a_lost_pool_holds_grants_back_while_live_leases_re_register(b: Backend) {
    let h = recovering_harness(b, &uniform_pool(1, 1, 3)).await;
    let a = h.acquire("p").await.unwrap();
    let c = h.acquire("p").await.unwrap();
    assert_eq!(
        a.renew_interval_ms, 30_000,
        "holders renew every half window"
    );
    h.store.forget_pool("p").await.unwrap();
    // The first call after the loss re-seeds and opens the window: no grant from zero.
    let refused = h.acquire("p").await.unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert_eq!(
        voxpool_domain::contract::SchedulerReason::of(&refused),
        Some(voxpool_domain::contract::SchedulerReason::PoolRecovering)
    );
    let retry = refused
        .get_error_details()
        .retry_info()
        .and_then(|r| r.retry_delay)
        .expect("RetryInfo says when grants resume");
    assert!(retry > Duration::from_secs(50), "{retry:?}");
    assert!(
        refused.message().contains("recovery_window_ms"),
        "{}",
        refused.message()
    );
    assert!(h.status("p").await.recovering_until_ms > 0);
    // One holder re-registers by renewing with its key; the other has not renewed yet.
    let back = renew_with_key(&h, &a).await.unwrap();
    assert_eq!(back.key_id, a.key_id);
    assert_eq!(h.status("p").await.in_flight, 1);
    // Renewing twice counts once.
    renew_with_key(&h, &a).await.unwrap();
    assert_eq!(h.status("p").await.in_flight, 1);
    renew_with_key(&h, &c).await.unwrap();
    assert_eq!(h.status("p").await.in_flight, 2);
    // A re-registered lease lives at most the default lease TTL (30 s), whatever it asked:
    // its holder renews every half window anyway.
    let s = h.status("p").await;
    assert!(
        back.expires_at_ms <= s.now_ms + 30_000,
        "{back:?} at {}",
        s.now_ms
    );
    h.advance("p", 29_000).await;
    renew_with_key(&h, &a).await.unwrap();
    renew_with_key(&h, &c).await.unwrap();
    // The window ends: exactly the slot nobody holds is granted.
    h.advance("p", 31_000).await;
    h.acquire("p").await.expect("the free slot");
    assert_eq!(
        h.acquire("p").await.unwrap_err().code(),
        Code::ResourceExhausted,
        "re-registered leases count against the cap"
    );
    assert!(
        h.release(&a.lease_id).await,
        "a re-registered lease releases normally"
    );
}

async fn a_waiting_acquire_waits_out_the_recovery_window(b: Backend) {
    let h = recovering_harness(b, &uniform_pool(1, 1, 1)).await;
    h.store.forget_pool("p").await.unwrap();
    h.store
        .seed(&voxpool_scheduler::model::PoolSpec::from_config(&h.config))
        .await
        .unwrap();
    let mut c = h.client();
    let waiter = tokio::spawn(async move {
        c.acquire(pb::AcquireRequest {
            pool: "p".into(),
            // Longer than the window (60 s), so the wait is worth it; `advance` ends it.
            wait_timeout_ms: 90_000,
            ..Default::default()
        })
        .await
    });
    h.wait_until("p", "the waiter joined the line", |s| s.waiters == 1)
        .await;
    h.advance("p", 60_000).await;
    let lease = waiter
        .await
        .unwrap()
        .expect("granted once the window ended");
    assert_eq!(lease.into_inner().key_id, "u0/k0");
    // A window longer than the wait answers at once.
    h.store.forget_pool("p").await.unwrap();
    let started = std::time::Instant::now();
    let refused = h
        .acquire_with(pb::AcquireRequest {
            pool: "p".into(),
            wait_timeout_ms: 20_000,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered without waiting"
    );
}

async fn a_lost_lease_is_not_re_registered_after_the_window(b: Backend) {
    let h = recovering_harness(b, &uniform_pool(1, 1, 2)).await;
    let a = h.acquire("p").await.unwrap();
    h.store.forget_pool("p").await.unwrap();
    h.store
        .seed(&voxpool_scheduler::model::PoolSpec::from_config(&h.config))
        .await
        .unwrap();
    h.advance("p", 60_000).await;
    let late = renew_with_key(&h, &a).await.unwrap_err();
    assert_eq!(late.code(), Code::FailedPrecondition, "{late:?}");
    assert_eq!(h.status("p").await.in_flight, 0);
    // Outside any window a renew with key_id never resurrects a released lease either.
    let c = h.acquire("p").await.unwrap();
    assert!(h.release(&c.lease_id).await);
    assert_eq!(
        renew_with_key(&h, &c).await.unwrap_err().code(),
        Code::FailedPrecondition
    );
    assert_eq!(h.status("p").await.in_flight, 0);
}

async fn renew_naming_a_foreign_key_is_invalid_argument(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 2)).await;
    let a = h.acquire("p").await.unwrap();
    let bad = h
        .client()
        .renew(pb::RenewRequest {
            lease_id: a.lease_id.clone(),
            lease_ttl_ms: 1_000,
            key_id: "u9/nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert!(bad.message().contains("key_id"), "{}", bad.message());
    assert_eq!(h.status("p").await.in_flight, 1, "nothing changed");
}

async fn a_renew_that_finds_the_pool_gone_re_seeds_and_re_registers(b: Backend) {
    let h = recovering_harness(b, &uniform_pool(1, 1, 2)).await;
    let a = h.acquire("p").await.unwrap();
    h.store.forget_pool("p").await.unwrap();
    // No Acquire ran since the loss: the holder's renewal is what finds it.
    renew_with_key(&h, &a).await.expect("re-registered");
    let s = h.status("p").await;
    assert!(s.recovering_until_ms > 0, "the re-seed opened the window");
    assert_eq!(s.in_flight, 1);
}

async fn a_replayed_idempotent_acquire_counts_its_ttl_from_the_retry(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let request = || pb::AcquireRequest {
        pool: "p".into(),
        lease_ttl_ms: 1_000,
        idempotency_key: "b3c1d7e2-5f7a-4c59-9a51-2f0d8e6b1c11".into(),
        ..Default::default()
    };
    let first = h.acquire_with(request()).await.unwrap();
    // The answer was lost; the retry comes late (a store failover took most of the TTL).
    h.advance("p", 900).await;
    let replay = h.acquire_with(request()).await.unwrap();
    assert_eq!(replay.lease_id, first.lease_id);
    assert!(
        replay.expires_at_ms >= first.expires_at_ms + 800,
        "the replay's TTL counts from the retry: {} vs {}",
        replay.expires_at_ms,
        first.expires_at_ms
    );
    // Past the first answer's expiry the lease is still live: its holder was told 1 s.
    h.advance("p", 500).await;
    assert_eq!(h.status("p").await.in_flight, 1);
}

async fn re_registration_never_takes_a_key_past_its_capacity(b: Backend) {
    let h = recovering_harness(b, &uniform_pool(1, 1, 2)).await;
    let (a, c) = (h.acquire("p").await.unwrap(), h.acquire("p").await.unwrap());
    h.store.forget_pool("p").await.unwrap();
    h.store
        .seed(&voxpool_scheduler::model::PoolSpec::from_config(&h.config))
        .await
        .unwrap();
    // Made-up ids (40 of them, with the key and the longest TTL) re-register nothing.
    for _ in 0..40 {
        let invented = pb::Lease {
            lease_id: made_up_id("p", "u0/k0"),
            key_id: "u0/k0".into(),
            ..Default::default()
        };
        let refused = renew_with_key(&h, &invented).await.unwrap_err();
        assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    }
    assert_eq!(h.status("p").await.in_flight, 0);
    // Genuine leases re-register, never past the key's capacity (lowered meanwhile to 1).
    h.client()
        .set_key_capacity(admin(pb::SetKeyCapacityRequest {
            pool: "p".into(),
            key_id: "u0/k0".into(),
            capacity: 1,
        }))
        .await
        .unwrap();
    renew_with_key(&h, &a).await.expect("room for one");
    let refused = renew_with_key(&h, &c).await.unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert_eq!(
        h.status("p").await.in_flight,
        1,
        "never above the capacity of 1"
    );
}

/// One pool "p" of one key with capacity `capacity` and `batch_max_share = share`.
fn shared_pool(capacity: u32, share: f64) -> String {
    pool_toml("p", &[vec![capacity]]).replacen(
        "provider = \"espeak\"\n",
        &format!("provider = \"espeak\"\nbatch_max_share = {share}\n"),
        1,
    )
}

fn classed(priority: pb::Priority, tenant: &str, wait_ms: i64) -> pb::AcquireRequest {
    pb::AcquireRequest {
        pool: "p".into(),
        priority: priority as i32,
        tenant: tenant.into(),
        wait_timeout_ms: wait_ms,
        ..Default::default()
    }
}

/// Starts a waiting Acquire named `name` and returns once the pool counts `queued` waiters.
async fn spawn_classed_waiter(
    h: &Harness,
    name: &'static str,
    priority: pb::Priority,
    tenant: &'static str,
    queued: i32,
) -> tokio::task::JoinHandle<(&'static str, pb::Lease)> {
    let mut c = h.client();
    let task = tokio::spawn(async move {
        let lease = c
            .acquire(classed(priority, tenant, 20_000))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e:?}"))
            .into_inner();
        (name, lease)
    });
    h.wait_until("p", name, |s| s.waiters == queued).await;
    task
}

async fn batch_leases_stop_at_the_batch_share_while_interactive_takes_the_rest(b: Backend) {
    let h = start(b, &shared_pool(10, 0.6)).await;
    let mut batch = Vec::new();
    for _ in 0..6 {
        batch.push(
            h.acquire_with(classed(pb::Priority::Batch, "", 0))
                .await
                .expect("within the share"),
        );
    }
    let err = h
        .acquire_with(classed(pb::Priority::Batch, "", 0))
        .await
        .expect_err("a 7th BATCH lease is over 0.6 of 10");
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    let info = err
        .get_error_details()
        .error_info()
        .expect("ErrorInfo")
        .clone();
    assert_eq!(info.reason, "BATCH_SHARE_FULL");
    assert_eq!(
        (
            info.metadata["batch_limit"].as_str(),
            info.metadata["batch_in_flight"].as_str()
        ),
        ("6", "6")
    );
    assert!(
        err.message().contains("batch_max_share"),
        "{}",
        err.message()
    );
    for _ in 0..4 {
        h.acquire_with(classed(pb::Priority::Interactive, "", 0))
            .await
            .expect("live traffic finds the headroom");
    }
    let s = h.status("p").await;
    assert_eq!((s.in_flight, s.batch_in_flight, s.batch_limit), (10, 6, 6));
    assert!(h.release(&batch[0].lease_id).await);
    assert_eq!(
        h.status("p").await.batch_in_flight,
        5,
        "a released BATCH lease leaves the count"
    );
    h.acquire_with(classed(pb::Priority::Batch, "", 0))
        .await
        .expect("room in the share again");
}

async fn a_batch_waiter_waits_for_a_batch_slot_even_while_slots_are_free(b: Backend) {
    let h = start(b, &shared_pool(4, 0.5)).await;
    let held = h
        .acquire_with(classed(pb::Priority::Batch, "", 0))
        .await
        .expect("1 of 2");
    h.acquire_with(classed(pb::Priority::Batch, "", 0))
        .await
        .expect("2 of 2");
    let waiter = spawn_classed_waiter(&h, "batch", pb::Priority::Batch, "", 1).await;
    assert_eq!(
        h.status("p").await.in_flight,
        2,
        "two slots stay free for live traffic"
    );
    assert!(!waiter.is_finished());
    h.acquire_with(classed(pb::Priority::Standard, "", 0))
        .await
        .expect("STANDARD takes a free slot at once");
    assert!(h.release(&held.lease_id).await);
    let (_, lease) = waiter
        .await
        .expect("the BATCH waiter gets the freed BATCH slot");
    assert!(!lease.lease_id.is_empty());
    assert_eq!(h.status("p").await.batch_in_flight, 2);
}

async fn an_interactive_waiter_is_served_before_earlier_batch_waiters(b: Backend) {
    let h = start(b, &shared_pool(1, 1.0)).await;
    let held = h.acquire("p").await.expect("the only slot");
    let b1 = spawn_classed_waiter(&h, "b1", pb::Priority::Batch, "", 1).await;
    let b2 = spawn_classed_waiter(&h, "b2", pb::Priority::Batch, "", 2).await;
    let live = spawn_classed_waiter(&h, "live", pb::Priority::Interactive, "", 3).await;
    let s = h.status("p").await;
    let counts: Vec<(i32, i32)> = s
        .class_waiters
        .iter()
        .map(|c| (c.priority, c.waiters))
        .collect();
    assert_eq!(
        counts,
        [
            (pb::Priority::Interactive as i32, 1),
            (pb::Priority::Standard as i32, 0),
            (pb::Priority::Batch as i32, 2)
        ]
    );
    assert!(h.release(&held.lease_id).await);
    let (name, lease) = live.await.expect("served");
    assert_eq!(name, "live", "INTERACTIVE first although it came last");
    assert!(!b1.is_finished() && !b2.is_finished());
    assert!(h.release(&lease.lease_id).await);
    let (name, lease) = b1.await.expect("served");
    assert_eq!(name, "b1", "then BATCH in arrival order");
    assert!(h.release(&lease.lease_id).await);
    let (_, lease) = b2.await.expect("served");
    assert!(h.release(&lease.lease_id).await);
}

async fn a_tenants_backlog_does_not_hold_back_another_tenants_request(b: Backend) {
    let h = start(b, &shared_pool(1, 1.0)).await;
    let mut held = h.acquire("p").await.expect("the only slot");
    let mut waiters = Vec::new();
    for (i, name) in ["heavy1", "heavy2", "heavy3", "heavy4", "heavy5"]
        .into_iter()
        .enumerate()
    {
        waiters.push(
            spawn_classed_waiter(&h, name, pb::Priority::Standard, "heavy", i as i32 + 1).await,
        );
    }
    waiters.push(spawn_classed_waiter(&h, "light", pb::Priority::Standard, "light", 6).await);
    let mut order = Vec::new();
    for _ in 0..6 {
        assert!(h.release(&held.lease_id).await);
        // Exactly one waiter is granted per released slot: find it.
        let done = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Some(i) = waiters
                    .iter()
                    .position(tokio::task::JoinHandle::is_finished)
                {
                    break i;
                }
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("a waiter is granted the released slot");
        let (name, lease) = waiters.remove(done).await.expect("served");
        order.push(name);
        held = lease;
    }
    assert!(h.release(&held.lease_id).await);
    assert_eq!(
        order[..2],
        ["heavy1", "light"],
        "the other tenant's one request goes second: {order:?}"
    );
}

async fn priority_and_tenant_are_checked_and_reported_per_class(b: Backend) {
    let h = start(b, &shared_pool(1, 1.0)).await;
    let err = h
        .acquire_with(pb::AcquireRequest {
            pool: "p".into(),
            priority: 9,
            ..Default::default()
        })
        .await
        .expect_err("unknown priority");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("priority"), "{}", err.message());
    let err = h
        .acquire_with(classed(pb::Priority::Standard, &"t".repeat(65), 0))
        .await
        .expect_err("tenant too long");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("tenant"), "{}", err.message());
    let held = h
        .acquire_with(pb::AcquireRequest {
            pool: "p".into(),
            ..Default::default()
        })
        .await
        .expect("PRIORITY_UNSPECIFIED is STANDARD");
    let waiter = spawn_classed_waiter(&h, "s", pb::Priority::Standard, "app", 1).await;
    h.wait_until("p", "the oldest wait grows", |s| {
        s.class_waiters
            .get(1)
            .is_some_and(|c| c.waiters == 1 && c.oldest_wait_ms > 0)
    })
    .await;
    assert!(h.release(&held.lease_id).await);
    let (_, lease) = waiter.await.expect("served");
    assert!(h.release(&lease.lease_id).await);
    let s = h.status("p").await;
    assert!(
        s.class_waiters
            .iter()
            .all(|c| c.waiters == 0 && c.oldest_wait_ms == 0),
        "{s:?}"
    );
}

async fn release_by_idempotency_key_frees_the_lease_that_key_was_granted(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 2)).await;
    let by_key = |key: &str| pb::ReleaseRequest {
        pool: "p".into(),
        idempotency_key: key.into(),
        ..Default::default()
    };
    let lease = h
        .acquire_with(pb::AcquireRequest {
            pool: "p".into(),
            idempotency_key: "caller-gave-up-1".into(),
            ..Default::default()
        })
        .await
        .expect("granted");
    let mut c = h.client();
    let first = c
        .release(by_key("caller-gave-up-1"))
        .await
        .expect("release")
        .into_inner();
    assert!(first.released, "the key's lease is freed");
    assert_eq!(h.status("p").await.in_flight, 0);
    let again = c
        .release(by_key("caller-gave-up-1"))
        .await
        .expect("release")
        .into_inner();
    assert!(!again.released, "idempotent");
    let never = c
        .release(by_key("never-acquired"))
        .await
        .expect("release")
        .into_inner();
    assert!(!never.released, "a key without a lease frees nothing");
    assert!(
        !h.release(&lease.lease_id).await,
        "the same lease, already free"
    );
    for bad in [
        pb::ReleaseRequest::default(),
        pb::ReleaseRequest {
            lease_id: lease.lease_id.clone(),
            idempotency_key: "k".into(),
            pool: "p".into(),
        },
        pb::ReleaseRequest {
            idempotency_key: "k".into(),
            ..Default::default()
        },
    ] {
        let err = c.release(bad.clone()).await.expect_err("refused");
        assert_eq!(err.code(), Code::InvalidArgument, "{bad:?}: {err:?}");
    }
}

async fn a_waiter_no_free_key_suits_lets_the_next_waiter_take_that_key(b: Backend) {
    let h = start(b, &uniform_pool(1, 2, 1)).await;
    let (first, second) = (h.acquire("p").await.unwrap(), h.acquire("p").await.unwrap());
    let (on_k0, on_k1) = if first.key_id == "u0/k0" {
        (first, second)
    } else {
        (second, first)
    };
    // The head of the line wants any key but k0; the waiter behind it takes any key.
    let mut c = h.client();
    let picky = tokio::spawn(async move {
        c.acquire(pb::AcquireRequest {
            pool: "p".into(),
            exclude_keys: vec!["u0/k0".into()],
            wait_timeout_ms: 20_000,
            ..Default::default()
        })
        .await
    });
    h.wait_until("p", "picky waiter queued", |s| s.waiters == 1)
        .await;
    let mut c = h.client();
    let any = tokio::spawn(async move {
        c.acquire(pb::AcquireRequest {
            pool: "p".into(),
            wait_timeout_ms: 20_000,
            ..Default::default()
        })
        .await
    });
    h.wait_until("p", "second waiter queued", |s| s.waiters == 2)
        .await;
    assert!(h.release(&on_k0.lease_id).await);
    let got = any
        .await
        .unwrap()
        .expect("k0 goes to the waiter behind, which can use it")
        .into_inner();
    assert_eq!(got.key_id, "u0/k0");
    assert!(
        !picky.is_finished(),
        "the picky head still waits for another key"
    );
    assert!(h.release(&on_k1.lease_id).await);
    let got = picky
        .await
        .unwrap()
        .expect("then k1 goes to the head")
        .into_inner();
    assert_eq!(got.key_id, "u0/k1");
}

/// (capacity, effective capacity, state) of `u0/k0`.
async fn learned(h: &Harness) -> (i32, i32, KeyState) {
    let k = h.key("p", "u0/k0").await;
    (k.capacity, k.effective_capacity, k.state())
}

async fn a_concurrency_refusal_lowers_the_effective_capacity_toward_what_the_vendor_accepted(
    b: Backend,
) {
    let h = start(b, &uniform_pool(1, 1, 10)).await;
    let mut held = Vec::new();
    for _ in 0..6 {
        held.push(h.acquire("p").await.unwrap());
    }
    // The vendor refused the 6th: it accepted 5. Halving 10 gives 5 too.
    let refused = held.pop().unwrap();
    let r = h
        .report(&refused.lease_id, Outcome::ConcurrencyLimited, 0, true)
        .await;
    assert_eq!(r.key_state(), KeyState::Available, "no cooldown");
    assert_eq!(learned(&h).await, (10, 5, KeyState::Available));
    assert_eq!(
        h.acquire("p").await.unwrap_err().code(),
        Code::ResourceExhausted,
        "5 in flight at an effective capacity of 5: full"
    );
    // A burst of refusals walks down one lease at a time, to what the vendor accepted.
    let again = held.pop().unwrap();
    h.report(&again.lease_id, Outcome::ConcurrencyLimited, 0, true)
        .await;
    assert_eq!(learned(&h).await.1, 4, "5 in flight: the vendor accepted 4");
    let third = held.pop().unwrap();
    h.report(&third.lease_id, Outcome::ConcurrencyLimited, 0, true)
        .await;
    assert_eq!(learned(&h).await.1, 3);
    let status = h.status("p").await;
    assert_eq!(
        status.capacity, 3,
        "the pool's capacity counts effective capacities"
    );
    // Never below 1.
    for l in held.drain(..) {
        h.report(&l.lease_id, Outcome::ConcurrencyLimited, 0, true)
            .await;
    }
    for _ in 0..3 {
        let l = h.acquire("p").await.unwrap();
        h.report(&l.lease_id, Outcome::ConcurrencyLimited, 0, true)
            .await;
    }
    assert_eq!(learned(&h).await, (10, 1, KeyState::Available));
}

async fn sustained_success_raises_the_effective_capacity_one_slot_per_interval_to_the_ceiling(
    b: Backend,
) {
    let h = start(b, &uniform_pool(1, 1, 4)).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(h.acquire("p").await.unwrap());
    }
    h.report(&held[3].lease_id, Outcome::ConcurrencyLimited, 0, true)
        .await;
    assert_eq!(learned(&h).await.1, 3);
    for l in &held[..3] {
        h.report(&l.lease_id, Outcome::Success, 0, true).await;
    }
    assert_eq!(learned(&h).await.1, 3, "no increase before the interval");
    for expected in [4, 4] {
        h.advance("p", 3_001).await;
        let l = h.acquire("p").await.unwrap();
        h.report(&l.lease_id, Outcome::Success, 0, true).await;
        let l = h.acquire("p").await.unwrap();
        h.report(&l.lease_id, Outcome::Success, 0, true).await;
        assert_eq!(
            learned(&h).await,
            (4, expected, KeyState::Available),
            "one slot per interval, never above the capacity"
        );
    }
}

async fn a_pool_with_adaptive_off_grants_against_its_capacity_whatever_the_refusals(b: Backend) {
    let toml = uniform_pool(1, 1, 4).replace(
        "provider = \"espeak\"\n",
        "provider = \"espeak\"\nadaptive = false\n",
    );
    let h = start(b, &toml).await;
    for _ in 0..3 {
        let l = h.acquire("p").await.unwrap();
        h.report(&l.lease_id, Outcome::ConcurrencyLimited, 0, true)
            .await;
        h.advance("p", 300).await;
    }
    assert_eq!(learned(&h).await, (4, 4, KeyState::Available));
    for _ in 0..4 {
        h.acquire("p").await.unwrap();
    }
}

/// Every overload signal teaches the effective capacity: a RATE_LIMITED report (a plain HTTP
/// 429, as self-hosted and proxy-fronted servers send) lowers it as CONCURRENCY_LIMITED does,
/// besides the cooldown the vendor asked for; without Retry-After the key cools only when it
/// ran no other lease. A pool with adaptive off keeps today's cooldown and capacity.
async fn a_rate_limit_on_an_adaptive_pool_lowers_the_effective_capacity_and_cools_only_as_asked(
    b: Backend,
) {
    let h = start(b, &uniform_pool(1, 1, 10)).await;
    let mut held = Vec::new();
    for _ in 0..6 {
        held.push(h.acquire("p").await.unwrap());
    }
    // A plain 429 on the 6th: the vendor accepted 5. No cooldown was asked for.
    let refused = held.pop().unwrap();
    let r = h
        .report(&refused.lease_id, Outcome::RateLimited, 0, true)
        .await;
    assert_eq!(r.key_state(), KeyState::Available, "no cooldown");
    assert_eq!(learned(&h).await, (10, 5, KeyState::Available));
    assert_eq!(
        h.acquire("p").await.unwrap_err().code(),
        Code::ResourceExhausted,
        "5 in flight at an effective capacity of 5: full"
    );
    // With Retry-After: lowered again, and cooling as long as the vendor asked.
    let asked = held.pop().unwrap();
    let r = h
        .report(&asked.lease_id, Outcome::RateLimited, 2_000, true)
        .await;
    assert_eq!(r.key_state(), KeyState::Cooling);
    assert_eq!(learned(&h).await, (10, 4, KeyState::Cooling));
    let remaining = r.cooldown_until_ms - h.status("p").await.now_ms;
    assert!(
        (1_000..=2_000).contains(&remaining),
        "the vendor's 2 s, got {remaining}"
    );
    for l in held.drain(..) {
        h.report(&l.lease_id, Outcome::Success, 0, true).await;
    }
    h.advance("p", 2_001).await;
    // A lone request refused: no concurrency of ours explains it, the default cooldown applies.
    let lone = h.acquire("p").await.unwrap();
    let r = h
        .report(&lone.lease_id, Outcome::RateLimited, 0, true)
        .await;
    assert_eq!(r.key_state(), KeyState::Cooling, "a lone request refused");
    let remaining = r.cooldown_until_ms - h.status("p").await.now_ms;
    assert!(
        (1..=1_000).contains(&remaining),
        "default 1000 ms, got {remaining}"
    );
    assert_eq!(learned(&h).await.1, 2);

    let fixed = uniform_pool(1, 1, 4).replace(
        "provider = \"espeak\"\n",
        "provider = \"espeak\"\nadaptive = false\n",
    );
    let h = start(b, &fixed).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(h.acquire("p").await.unwrap());
    }
    let r = h
        .report(&held[2].lease_id, Outcome::RateLimited, 0, true)
        .await;
    assert_eq!(r.key_state(), KeyState::Cooling, "adaptive off: as before");
    assert_eq!(learned(&h).await, (4, 4, KeyState::Cooling));
}

async fn set_key_capacity_sets_a_new_ceiling_and_learning_starts_from_it(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 10)).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(h.acquire("p").await.unwrap());
    }
    h.report(&held[3].lease_id, Outcome::ConcurrencyLimited, 0, true)
        .await;
    assert_eq!(learned(&h).await.1, 5);
    let k = h
        .client()
        .set_key_capacity(admin(pb::SetKeyCapacityRequest {
            pool: "p".into(),
            key_id: "u0/k0".into(),
            capacity: 8,
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((k.capacity, k.effective_capacity), (8, 8));
    h.advance("p", 300).await;
    h.report(&held[2].lease_id, Outcome::ConcurrencyLimited, 0, true)
        .await;
    assert_eq!(learned(&h).await, (8, 4, KeyState::Available));
}

async fn a_refusal_right_after_a_probe_lowers_it_again(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 8)).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(h.acquire("p").await.unwrap());
    }
    h.report(&held[3].lease_id, Outcome::ConcurrencyLimited, 0, true)
        .await;
    assert_eq!(learned(&h).await.1, 4);
    // The probe: one slot more after the interval...
    h.advance("p", 3_001).await;
    h.report(&held[2].lease_id, Outcome::Success, 0, true).await;
    assert_eq!(learned(&h).await.1, 5);
    // ...is refused at once: the hold after a decrease does not shield it.
    let mut more = Vec::new();
    for _ in 0..3 {
        more.push(h.acquire("p").await.unwrap());
    }
    h.report(&more[2].lease_id, Outcome::ConcurrencyLimited, 0, true)
        .await;
    assert_eq!(learned(&h).await.1, 4);
    // A refused probe doubles the wait for the next one (base 2000 ms here, then 4000).
    for l in more.drain(..2) {
        h.report(&l.lease_id, Outcome::Success, 0, true).await;
    }
    async fn success(h: &Harness) {
        let l = h.acquire("p").await.unwrap();
        h.report(&l.lease_id, Outcome::Success, 0, true).await;
    }
    h.advance("p", 3_001).await;
    success(&h).await;
    assert_eq!(
        learned(&h).await.1,
        4,
        "3 s after a refused probe: still waiting"
    );
    h.advance("p", 1_000).await;
    success(&h).await;
    assert_eq!(learned(&h).await.1, 5);
    // Probes that hold bring the pace back to the base.
    h.advance("p", 4_001).await;
    success(&h).await;
    assert_eq!(learned(&h).await.1, 6);
    h.advance("p", 2_001).await;
    success(&h).await;
    assert_eq!(learned(&h).await.1, 7);
}

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
        .acquire_with(pb::AcquireRequest {
            pool: "p".into(),
            upstream_ids: vec!["u0".into()],
            exclude_keys: (1..4).map(|k| format!("u0/k{k}")).collect(),
            characters,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(lease.key_id, "u0/k0");
    h.client()
        .report(pb::ReportRequest {
            lease_id: lease.lease_id,
            outcome: Outcome::Success as i32,
            release: true,
            characters,
            ..Default::default()
        })
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
    let reserve = |characters: i64| {
        h.acquire_with(pb::AcquireRequest {
            pool: "p".into(),
            characters,
            ..Default::default()
        })
    };
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
                .report(pb::ReportRequest {
                    lease_id: lease.lease_id.clone(),
                    outcome: Outcome::Success as i32,
                    release: true,
                    characters: reported,
                    ..Default::default()
                })
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
        .report(pb::ReportRequest {
            lease_id: last.lease_id,
            outcome: Outcome::Success as i32,
            release: true,
            characters: 50,
            ..Default::default()
        })
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
        .report(pb::ReportRequest {
            lease_id: free.lease_id,
            outcome: Outcome::Success as i32,
            release: true,
            characters: 5_000,
            ..Default::default()
        })
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
        .report(pb::ReportRequest {
            lease_id: lease.lease_id,
            outcome: Outcome::Success as i32,
            characters: -1,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("characters"), "{}", err.message());
}

async fn a_refusal_from_a_lease_above_the_effective_capacity_is_stale(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 10)).await;
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(h.acquire("p").await.unwrap());
    }
    // Reported without release: 8 leases stay at an effective capacity of 7.
    h.report(&held[7].lease_id, Outcome::ConcurrencyLimited, 0, false)
        .await;
    assert_eq!(learned(&h).await.1, 7);
    h.report(&held[6].lease_id, Outcome::ConcurrencyLimited, 0, true)
        .await;
    assert_eq!(
        learned(&h).await.1,
        7,
        "8 leases at 7: they predate the decrease, nothing new is learned"
    );
}

async fn refusals_within_the_hold_do_not_lower_it_again(b: Backend) {
    let h = start_with(b, &uniform_pool(1, 1, 10), "adaptive_hold_ms = 1000\n").await;
    let mut held = Vec::new();
    for _ in 0..6 {
        held.push(h.acquire("p").await.unwrap());
    }
    h.report(&held[5].lease_id, Outcome::ConcurrencyLimited, 0, true)
        .await;
    assert_eq!(learned(&h).await.1, 5);
    h.report(&held[4].lease_id, Outcome::ConcurrencyLimited, 0, true)
        .await;
    assert_eq!(learned(&h).await.1, 5, "within the hold");
    h.advance("p", 1_001).await;
    h.report(&held[3].lease_id, Outcome::ConcurrencyLimited, 0, true)
        .await;
    assert_eq!(
        learned(&h).await.1,
        3,
        "after the hold: 4 in flight, the vendor accepted 3"
    );
}
