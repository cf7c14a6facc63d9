//! Adaptive capacity: overload refusals lower the effective capacity, sustained success raises it back to the ceiling.

use super::*;

conformance!(
    a_concurrency_refusal_lowers_the_effective_capacity_toward_what_the_vendor_accepted,
    sustained_success_raises_the_effective_capacity_one_slot_per_interval_to_the_ceiling,
    a_pool_with_adaptive_off_grants_against_its_capacity_whatever_the_refusals,
    a_rate_limit_on_an_adaptive_pool_lowers_the_effective_capacity_and_cools_only_as_asked,
    set_key_capacity_sets_a_new_ceiling_and_learning_starts_from_it,
    a_refusal_right_after_a_probe_lowers_it_again,
    a_refusal_from_a_lease_above_the_effective_capacity_is_stale,
    refusals_within_the_hold_do_not_lower_it_again,
);

/// (capacity, effective capacity, state) of `u0/k0`.
async fn learned(h: &Harness) -> (i32, i32, KeyState) {
    let k = h.key("p", "u0/k0").await;
    (k.capacity, k.effective_capacity, k.state())
}

/// One key of capacity 10 holding 6 leases, the 6th refused by the vendor with `overload`
/// (and released): no cooldown, the effective capacity is 5, so the pool is full. Returns
/// the 5 leases still held.
async fn refused_at_the_sixth(b: Backend, overload: Outcome) -> (Harness, Vec<pb::Lease>) {
    let h = start(b, &uniform_pool(1, 1, 10)).await;
    let mut held = Vec::new();
    for _ in 0..6 {
        held.push(h.acquire("p").await.unwrap());
    }
    let refused = held.pop().unwrap();
    let r = h.report(&refused.lease_id, overload, 0, true).await;
    assert_eq!(r.key_state(), KeyState::Available, "no cooldown");
    assert_eq!(learned(&h).await, (10, 5, KeyState::Available));
    assert_eq!(
        h.acquire("p").await.unwrap_err().code(),
        Code::ResourceExhausted,
        "5 in flight at an effective capacity of 5: full"
    );
    (h, held)
}

async fn a_concurrency_refusal_lowers_the_effective_capacity_toward_what_the_vendor_accepted(
    b: Backend,
) {
    // The vendor refused the 6th: it accepted 5. Halving 10 gives 5 too.
    let (h, mut held) = refused_at_the_sixth(b, Outcome::ConcurrencyLimited).await;
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
    // A plain 429 on the 6th: the vendor accepted 5. No cooldown was asked for.
    let (h, mut held) = refused_at_the_sixth(b, Outcome::RateLimited).await;
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
        .set_key_capacity(admin(req::set_capacity("p", "u0/k0", 8)))
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
