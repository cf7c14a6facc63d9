//! Traffic classes and tenants: the batch share, INTERACTIVE before BATCH, tenant round-robin.

use super::*;

conformance!(
    batch_leases_stop_at_the_batch_share_while_interactive_takes_the_rest,
    a_batch_waiter_waits_for_a_batch_slot_even_while_slots_are_free,
    an_interactive_waiter_is_served_before_earlier_batch_waiters,
    a_tenants_backlog_does_not_hold_back_another_tenants_request,
    priority_and_tenant_are_checked_and_reported_per_class,
);

/// One pool "p" of one key with capacity `capacity` and `batch_max_share = share`.
fn shared_pool(capacity: u32, share: f64) -> String {
    pool_toml("p", &[vec![capacity]]).replacen(
        "provider = \"espeak\"\n",
        &format!("provider = \"espeak\"\nbatch_max_share = {share}\n"),
        1,
    )
}

fn classed(priority: pb::Priority, tenant: &str, wait_ms: i64) -> pb::AcquireRequest {
    req::acquire("p")
        .class(priority)
        .tenant(tenant)
        .wait_ms(wait_ms)
}

/// Starts a waiting Acquire named `name` and returns once the pool counts `queued` waiters,
/// in this replica's queue and in the store's line.
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
    h.wait_in_line("p", name, queued).await;
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
        .acquire_with(req::acquire("p"))
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
