//! The waiting line: FIFO hand-over of freed slots, wait timeouts and gRPC deadlines, cancelled waits, waits that cannot end in a grant, `max_waiters`.

use super::*;

conformance!(
    waiters_get_released_slots_in_fifo_order,
    wait_timeout_ends_with_resource_exhausted,
    grpc_deadline_bounds_the_wait,
    cancelled_wait_leaves_nothing_behind,
    a_wait_that_cannot_end_in_a_grant_answers_at_once,
    a_waiter_gets_a_key_whose_cooldown_ends_within_the_wait,
    waiters_beyond_max_waiters_are_resource_exhausted_naming_it,
    a_wait_that_never_reached_the_head_reports_the_real_counts,
    a_waiter_no_free_key_suits_lets_the_next_waiter_take_that_key,
);

async fn waiters_get_released_slots_in_fifo_order(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let first = h.acquire("p").await.unwrap();
    let spawn_waiter = |name: &'static str| {
        let mut c = h.client();
        tokio::spawn(async move {
            let lease = c
                .acquire(req::acquire("p").wait_ms(10_000).request_id(name))
                .await
                .unwrap()
                .into_inner();
            (name, lease)
        })
    };
    let w1 = spawn_waiter("w1");
    h.wait_in_line("p", "w1 queued", 1).await;
    let w2 = spawn_waiter("w2");
    h.wait_in_line("p", "w2 queued", 2).await;
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
        .acquire_with(req::acquire("p").wait_ms(100))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("after waiting"), "{}", err.message());
    assert_eq!(h.status("p").await.waiters, 0);
}

async fn grpc_deadline_bounds_the_wait(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    h.acquire("p").await.unwrap();
    let mut req = tonic::Request::new(req::acquire("p").wait_ms(60_000));
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
    let waiter = tokio::spawn(async move { c.acquire(req::acquire("p").wait_ms(60_000)).await });
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

async fn a_wait_that_cannot_end_in_a_grant_answers_at_once(b: Backend) {
    let h = start(b, &uniform_pool(1, 2, 1)).await;
    for key in ["u0/k0", "u0/k1"] {
        h.client()
            .disable_key(admin(req::disable("p", key)))
            .await
            .unwrap();
    }
    let started = std::time::Instant::now();
    let err = h
        .acquire_with(req::acquire("p").wait_ms(60_000))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "answered without sitting out the 60 s wait"
    );
    // A cooldown that ends after the wait is just as hopeless.
    h.client()
        .enable_key(admin(req::enable("p", "u0/k0")))
        .await
        .unwrap();
    let l = h
        .acquire_with(req::acquire("p").ttl_ms(600_000))
        .await
        .unwrap();
    h.report(&l.lease_id, Outcome::RateLimited, 3_600_000, true)
        .await;
    let err = h
        .acquire_with(req::acquire("p").wait_ms(60_000))
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
    let waiter = tokio::spawn(async move { c.acquire(req::acquire("p").wait_ms(30_000)).await });
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
            tokio::spawn(async move { c.acquire(req::acquire("p").wait_ms(60_000)).await })
        })
        .collect();
    h.wait_until("p", "three waiters queued", |s| s.waiters == 3)
        .await;
    let err = h
        .acquire_with(req::acquire("p").wait_ms(60_000))
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
    let head = tokio::spawn(async move { c.acquire(req::acquire("p").wait_ms(60_000)).await });
    h.wait_until("p", "head queued", |s| s.waiters == 1).await;
    let err = h
        .acquire_with(req::acquire("p").wait_ms(200))
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
        c.acquire(
            req::acquire("p")
                .exclude_keys(vec!["u0/k0".into()])
                .wait_ms(20_000),
        )
        .await
    });
    h.wait_until("p", "picky waiter queued", |s| s.waiters == 1)
        .await;
    let mut c = h.client();
    let any = tokio::spawn(async move { c.acquire(req::acquire("p").wait_ms(20_000)).await });
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
