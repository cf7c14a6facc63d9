//! Recovery after the store loses data: grants held back during the window, live leases re-registering, re-seeding.

use super::*;

conformance!(
    a_lost_pool_holds_grants_back_while_live_leases_re_register,
    a_waiting_acquire_waits_out_the_recovery_window,
    a_lost_lease_is_not_re_registered_after_the_window,
    renew_naming_a_foreign_key_is_invalid_argument,
    a_renew_that_finds_the_pool_gone_re_seeds_and_re_registers,
    re_registration_never_takes_a_key_past_its_capacity,
    reseeding_keeps_live_in_flight_counts,
    config_capacity_change_wins_over_admin_override_on_reseed,
);

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
        .set_key_capacity(admin(req::set_capacity("p", "u0/k0", 2)))
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
        .renew(
            req::renew(lease.lease_id.clone())
                // Outlives the `advance` that ends the window.
                .ttl_ms(120_000)
                .key_id(lease.key_id.clone()),
        )
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
        // Longer than the window (60 s), so the wait is worth it; `advance` ends it.
        c.acquire(req::acquire("p").wait_ms(90_000)).await
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
        .acquire_with(req::acquire("p").wait_ms(20_000))
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
        .renew(
            req::renew(a.lease_id.clone())
                .ttl_ms(1_000)
                .key_id("u9/nope"),
        )
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
        .set_key_capacity(admin(req::set_capacity("p", "u0/k0", 1)))
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
