//! Budgets (`[[budgets]]`): reserved at Acquire in the store, never exceeded under
//! concurrency, settled by Report, counted as spent when unreported; pooled and per-subject
//! rows, tiers, callers, idempotent retries, cost limits; and quota refusals naming the quota.

use voxpool_scheduler::model::{BudgetRow, QuotaPeriod};

use super::*;

conformance!(
    two_hundred_concurrent_acquires_spend_exactly_what_the_daily_budget_holds,
    a_failure_report_that_charged_nothing_gives_the_reservation_back,
    an_unreported_lease_counts_as_spent_once_its_reservation_expires,
    each_tenant_has_its_own_row_unless_the_budget_is_pooled,
    a_tiered_budget_covers_only_its_tiers,
    a_budget_can_cover_a_caller,
    an_idempotent_retry_reserves_once,
    a_cost_budget_refuses_past_its_cost,
    quota_refusals_name_the_key_its_use_and_reset,
);

const DAY: i64 = 86_400_000;

/// Pool `p` (one upstream of 10 keys of capacity 30) with `budgets` appended.
fn with_budgets(budgets: &str) -> String {
    format!("{}\n{budgets}\n", uniform_pool(1, 10, 30))
}

fn ask(tenant: &str, characters: i64) -> pb::AcquireRequest {
    req::acquire("p").tenant(tenant).characters(characters)
}

fn reason(s: &tonic::Status) -> (String, std::collections::HashMap<String, String>) {
    let info = s
        .get_error_details()
        .error_info()
        .cloned()
        .expect("error info");
    (info.reason, info.metadata)
}

fn assert_budget_refusal(s: &tonic::Status, budget: &str) {
    assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
    let (why, md) = reason(s);
    assert_eq!(why, "BUDGET_EXHAUSTED", "{s:?}");
    assert_eq!(md["budget"], budget);
    assert!(s.message().contains("resets at"), "{}", s.message());
    assert!(
        s.get_error_details().retry_info().is_some(),
        "retry at the reset"
    );
}

async fn spend(h: &Harness, r: pb::AcquireRequest, characters: i64) -> Result<(), tonic::Status> {
    let lease = h.acquire_with(r).await?;
    h.client()
        .report(
            req::report(lease.lease_id, Outcome::Success)
                .releasing()
                .characters(characters),
        )
        .await
        .map(|_| ())
}

async fn budgets(h: &Harness) -> Vec<pb::BudgetStatus> {
    h.client()
        .list_pools(pb::ListPoolsRequest {})
        .await
        .unwrap()
        .into_inner()
        .budgets
}

async fn two_hundred_concurrent_acquires_spend_exactly_what_the_daily_budget_holds(b: Backend) {
    let h = start(
        b,
        &with_budgets(
            "[[budgets]]\nid = \"acme-daily\"\ntenants = [\"acme\"]\ncharacters = 10000\nper = \"day\"\n",
        ),
    )
    .await;
    let h = Arc::new(h);
    let mut calls = Vec::new();
    for _ in 0..200 {
        let h = h.clone();
        calls.push(tokio::spawn(async move {
            spend(&h, ask("acme", 120), 120).await
        }));
    }
    let (mut granted, mut refused) = (0, 0);
    for c in calls {
        match c.await.unwrap() {
            Ok(()) => granted += 1,
            Err(s) => {
                assert_budget_refusal(&s, "acme-daily");
                let (_, md) = reason(&s);
                let resets: i64 = md["resets_at_ms"].parse().unwrap();
                assert_eq!(resets % DAY, 0, "the next UTC midnight");
                refused += 1;
            }
        }
    }
    assert_eq!((granted, refused), (83, 117), "83 x 120 = 9,960 of 10,000");
    let rows = budgets(&h).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[0];
    assert_eq!(
        (
            row.subject.as_str(),
            row.characters_used,
            row.characters_reserved
        ),
        ("acme", 9960, 0)
    );
    assert_eq!((row.characters_limit, row.per.as_str()), (10000, "day"));
    // Another tenant is not covered.
    spend(&h, ask("other", 120), 120).await.unwrap();
}

async fn a_failure_report_that_charged_nothing_gives_the_reservation_back(b: Backend) {
    let h = start(
        b,
        &with_budgets(
            "[[budgets]]\nid = \"b\"\ntenants = [\"t\"]\ncharacters = 240\nper = \"day\"\n",
        ),
    )
    .await;
    let first = h.acquire_with(ask("t", 120)).await.unwrap();
    let second = h.acquire_with(ask("t", 120)).await.unwrap();
    assert_budget_refusal(&h.acquire_with(ask("t", 120)).await.unwrap_err(), "b");
    h.client()
        .report(req::report(first.lease_id, Outcome::UpstreamError).releasing())
        .await
        .unwrap();
    let third = h.acquire_with(ask("t", 120)).await.expect("given back");
    for lease in [second, third] {
        h.client()
            .report(
                req::report(lease.lease_id, Outcome::Success)
                    .releasing()
                    .characters(100),
            )
            .await
            .unwrap();
    }
    let row = &budgets(&h).await[0];
    assert_eq!((row.characters_used, row.characters_reserved), (200, 0));
}

async fn an_unreported_lease_counts_as_spent_once_its_reservation_expires(b: Backend) {
    let h = start(
        b,
        &with_budgets(
            "[[budgets]]\nid = \"b\"\ntenants = [\"t\"]\ncharacters = 240\nper = \"day\"\n",
        ),
    )
    .await;
    h.acquire_with(ask("t", 120).ttl_ms(1000)).await.unwrap();
    let row = BudgetRow {
        budget: "b".into(),
        subject: "t".into(),
        per: QuotaPeriod::Day,
        characters: 240,
        cost_micros: 0,
    };
    // Past the lease and its reservation's margin, short of the day's end when possible.
    let now = h.status("p").await.now_ms;
    let to_midnight = u64::try_from((now / DAY + 1) * DAY - now).unwrap();
    let past = 1000 + 60_000 + 1;
    if to_midnight <= past {
        return; // the period would roll over: nothing to check this close to midnight
    }
    h.advance("p", past).await;
    h.store.advance_budget_clock(&row, past).await.unwrap();
    let r = &budgets(&h).await[0];
    assert_eq!(
        (r.characters_used, r.characters_reserved),
        (120, 0),
        "expiry counts as spent"
    );
    h.acquire_with(ask("t", 120)).await.unwrap();
    assert_budget_refusal(&h.acquire_with(ask("t", 1)).await.unwrap_err(), "b");
}

async fn each_tenant_has_its_own_row_unless_the_budget_is_pooled(b: Backend) {
    let h = start(
        b,
        &with_budgets(
            "[[budgets]]\nid = \"each\"\ntenants = [\"a\", \"b\"]\ncharacters = 120\nper = \"month\"\n\
             [[budgets]]\nid = \"shared\"\ntenants = [\"c\", \"d\"]\ncharacters = 120\nper = \"day\"\npooled = true\n",
        ),
    )
    .await;
    spend(&h, ask("a", 120), 120).await.unwrap();
    spend(&h, ask("b", 120), 120).await.unwrap();
    assert_budget_refusal(&spend(&h, ask("a", 1), 1).await.unwrap_err(), "each");
    spend(&h, ask("c", 120), 120).await.unwrap();
    let refused = spend(&h, ask("d", 1), 1).await.unwrap_err();
    assert_budget_refusal(&refused, "shared");
    assert_eq!(reason(&refused).1["subject"], "*");
    let rows: Vec<(String, String, i64)> = budgets(&h)
        .await
        .into_iter()
        .map(|r| (r.id, r.subject, r.characters_used))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("each".into(), "a".into(), 120),
            ("each".into(), "b".into(), 120),
            ("shared".into(), "*".into(), 120),
        ]
    );
}

async fn a_tiered_budget_covers_only_its_tiers(b: Backend) {
    let h = start(
        b,
        &with_budgets(
            "[[budgets]]\nid = \"pro\"\ntenants = [\"t\"]\ncharacters = 120\nper = \"day\"\ntiers = [\"PRO\"]\n",
        ),
    )
    .await;
    let tiered = |tier: voxpool_proto::catalog::v1::Tier| {
        let mut r = ask("t", 120);
        r.tier = tier as i32;
        r
    };
    use voxpool_proto::catalog::v1::Tier;
    for _ in 0..3 {
        spend(&h, ask("t", 120), 120)
            .await
            .expect("no tier: not covered");
        spend(&h, tiered(Tier::Lite), 120)
            .await
            .expect("another tier");
    }
    spend(&h, tiered(Tier::Pro), 120).await.unwrap();
    assert_budget_refusal(&spend(&h, tiered(Tier::Pro), 1).await.unwrap_err(), "pro");
}

async fn a_budget_can_cover_a_caller(b: Backend) {
    let h = start(
        b,
        &with_budgets(
            "[[budgets]]\nid = \"svc\"\ncallers = [\"svc-x\"]\ncharacters = 120\nper = \"day\"\n",
        ),
    )
    .await;
    let from = |caller: &str| {
        let mut r = ask("any", 120);
        r.caller = caller.into();
        r
    };
    spend(&h, from("svc-x"), 120).await.unwrap();
    let refused = spend(&h, from("svc-x"), 120).await.unwrap_err();
    assert_budget_refusal(&refused, "svc");
    assert_eq!(reason(&refused).1["subject"], "svc-x");
    spend(&h, from("svc-y"), 120).await.expect("another caller");
}

async fn an_idempotent_retry_reserves_once(b: Backend) {
    let h = start(
        b,
        &with_budgets(
            "[[budgets]]\nid = \"b\"\ntenants = [\"t\"]\ncharacters = 240\nper = \"day\"\n",
        ),
    )
    .await;
    let first = h
        .acquire_with(ask("t", 120).idempotency_key("k1"))
        .await
        .unwrap();
    let again = h
        .acquire_with(ask("t", 120).idempotency_key("k1"))
        .await
        .unwrap();
    assert_eq!(first.lease_id, again.lease_id);
    let row = &budgets(&h).await[0];
    assert_eq!(row.characters_reserved, 120, "reserved once");
    h.acquire_with(ask("t", 120)).await.unwrap();
    assert_budget_refusal(&h.acquire_with(ask("t", 1)).await.unwrap_err(), "b");
}

async fn a_cost_budget_refuses_past_its_cost(b: Backend) {
    let h = start(
        b,
        &with_budgets(
            "[[budgets]]\nid = \"money\"\ntenants = [\"t\"]\ncost = 0.001\nper = \"month\"\n",
        ),
    )
    .await;
    let costing = |micros: i64| {
        let mut r = ask("t", 10);
        r.cost_micros = micros;
        r
    };
    let lease = h.acquire_with(costing(600)).await.unwrap();
    let refused = h.acquire_with(costing(600)).await.unwrap_err();
    assert_budget_refusal(&refused, "money");
    assert!(refused.message().contains("USD"), "{}", refused.message());
    assert_eq!(reason(&refused).1["limit"], "1000");
    let mut report = req::report(lease.lease_id, Outcome::Success).releasing();
    report.cost_micros = 300;
    h.client().report(report).await.unwrap();
    h.acquire_with(costing(600))
        .await
        .expect("300 + 600 fit in 1000");
    let row = &budgets(&h).await[0];
    assert!((row.cost_used - 0.0003).abs() < 1e-9, "{row:?}");
    assert_eq!(row.currency, "USD");
}

async fn quota_refusals_name_the_key_its_use_and_reset(b: Backend) {
    let toml = uniform_pool(1, 1, 10).replacen(
        "capacity = 10\n",
        "capacity = 10\nquota = { characters = 300, per = \"day\" }\n",
        1,
    );
    let h = start(b, &toml).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(
            h.acquire_with(req::acquire("p").characters(100))
                .await
                .unwrap(),
        );
    }
    let full = h
        .acquire_with(req::acquire("p").characters(150))
        .await
        .unwrap_err();
    assert_eq!(full.code(), Code::ResourceExhausted, "{full:?}");
    for part in ["u0/k0", "0/300 characters", "150 characters", "resets at"] {
        assert!(full.message().contains(part), "{part}: {}", full.message());
    }
    // The period cannot hold it even with nothing reserved.
    for lease in held {
        h.client()
            .report(
                req::report(lease.lease_id, Outcome::Success)
                    .releasing()
                    .characters(100),
            )
            .await
            .unwrap();
    }
    let spent = h
        .acquire_with(req::acquire("p").characters(150))
        .await
        .unwrap_err();
    assert_eq!(spent.code(), Code::Unavailable, "{spent:?}");
    for part in ["u0/k0", "200/300 characters", "150 characters", "resets at"] {
        assert!(
            spent.message().contains(part),
            "{part}: {}",
            spent.message()
        );
    }
}
