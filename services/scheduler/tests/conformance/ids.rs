//! Lease ids and idempotency keys: retried and concurrent idempotent Acquires, forged or ended ids, release by key.

use super::*;

conformance!(
    a_retried_acquire_with_its_idempotency_key_gets_the_same_lease,
    concurrent_acquires_with_one_idempotency_key_take_one_slot,
    a_replayed_idempotent_acquire_counts_its_ttl_from_the_retry,
    a_made_up_or_altered_lease_id_changes_nothing,
    an_ended_leases_id_never_reaches_a_later_lease_under_its_idempotency_key,
    a_report_naming_another_key_than_the_leases_is_refused,
    release_by_idempotency_key_frees_the_lease_that_key_was_granted,
);

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
            .report(req::report(forged.clone(), Outcome::KeyInvalid))
            .await
            .unwrap_err();
        assert_eq!(report.code(), Code::PermissionDenied, "{report:?}");
        assert_eq!(
            voxpool_domain::contract::SchedulerReason::of(&report),
            Some(voxpool_domain::contract::SchedulerReason::LeaseNotIssued)
        );
        let renew = c
            .renew(req::renew(forged.clone()).ttl_ms(600_000).key_id(other_key))
            .await
            .unwrap_err();
        assert_eq!(renew.code(), Code::PermissionDenied, "{renew:?}");
        let release = c.release(req::release(forged)).await.unwrap_err();
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
    let request = || req::acquire("p").idempotency_key("used-twice-0123456789");
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
        .renew(
            req::renew(first.lease_id.clone())
                .ttl_ms(1_000)
                .key_id(String::new()),
        )
        .await
        .unwrap_err();
    assert_eq!(renewed.code(), Code::FailedPrecondition, "{renewed:?}");
    let late = h
        .client()
        .report(req::report(first.lease_id.clone(), Outcome::ClientError).releasing())
        .await
        .unwrap()
        .into_inner();
    assert!(!late.released, "{late:?}");
    let own = h
        .client()
        .report(req::report(second.lease_id.clone(), Outcome::UpstreamError))
        .await
        .unwrap()
        .into_inner();
    assert!(
        own.outcome_applied,
        "the second lease's own first report counts: {own:?}"
    );
    assert!(h.release(&second.lease_id).await);
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
        .report(req::report(l.lease_id.clone(), Outcome::KeyInvalid).key_id(other))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("key_id"), "{}", err.message());
    assert_eq!(h.key("p", other).await.state(), KeyState::Available);
    assert_eq!(h.key("p", &l.key_id).await.state(), KeyState::Available);
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

async fn a_replayed_idempotent_acquire_counts_its_ttl_from_the_retry(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let request = || {
        req::acquire("p")
            .ttl_ms(1_000)
            .idempotency_key("b3c1d7e2-5f7a-4c59-9a51-2f0d8e6b1c11")
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

async fn release_by_idempotency_key_frees_the_lease_that_key_was_granted(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 2)).await;
    let by_key = |key: &str| req::release_by_key("p", key);
    let lease = h
        .acquire_with(req::acquire("p").idempotency_key("caller-gave-up-1"))
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
            ..Default::default()
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
