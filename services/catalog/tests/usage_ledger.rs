//! The ledger's tables on SQLite and PostgreSQL: a record delivered twice counts once, an
//! unsettled charge counts after the grace and a late settle corrects it, retention deletes
//! raw records only, two replicas applying the same batch at once count it once, totals in two
//! currencies are two rows, and a request refused before any vendor counts as refused.

mod common;
mod usage;

use std::sync::Arc;

use common::Backend;
use usage::{AT_MS, by_tenant, charge, context, done, request, settle, tenant_row};
use voxpool_catalog::{
    repo::PackRepository,
    usage::{Group, UsageFilter, UsageStore},
};
use voxpool_domain::usage::{DoneUsage, UsageContext, UsageEvent};

async fn store(backend: Backend) -> (UsageStore, common::TestDb) {
    let (repo, db) = common::repo(backend).await;
    (UsageStore::new(repo.database().expect("open")), db)
}

async fn a_record_delivered_twice_counts_once(backend: Backend) {
    let (store, _db) = store(backend).await;
    let c = context("r1", "acme", "openai-tts");
    let events = request(&c, 120);
    let first = store.apply(&events, AT_MS).await.expect("apply");
    assert_eq!((first.new, first.repeated), (5, 0));
    // Redelivered whole, and again inside a batch holding it twice with a new request.
    let again = store.apply(&events, AT_MS).await.expect("apply again");
    assert_eq!((again.new, again.repeated), (0, 5));
    let mut mixed = events.clone();
    mixed.extend(request(&context("r2", "acme", "openai-tts"), 30));
    mixed.extend(events.clone());
    store.apply(&mixed, AT_MS).await.expect("mixed");
    let row = tenant_row(&store, "acme").await.expect("acme row");
    assert_eq!(row.requests, 2);
    assert_eq!(
        row.characters, 150,
        "only the attempts that spoke are charged"
    );
    assert_eq!(row.audio_ms, 1500, "audio from the Done only");
    assert_eq!(row.failed_attempts, 2);
    assert_eq!(row.cost_micros, 150 * 15);
    assert_eq!(row.currency, "USD");
}
db_test!(a_record_delivered_twice_counts_once);

async fn an_unsettled_charge_counts_after_the_grace_and_a_late_settle_corrects_it(
    backend: Backend,
) {
    let (store, _db) = store(backend).await;
    let c = context("r1", "acme", "openai-tts");
    store
        .apply(&[charge(&c, 0, 100)], AT_MS)
        .await
        .expect("charge");
    assert_eq!(store.sweep(AT_MS, AT_MS).await.expect("sweep"), 0);
    assert!(
        tenant_row(&store, "acme").await.is_none(),
        "within the grace a charge counts nothing"
    );
    assert_eq!(store.sweep(AT_MS + 1, AT_MS + 1).await.expect("sweep"), 1);
    assert_eq!(store.sweep(AT_MS + 2, AT_MS + 2).await.expect("again"), 0);
    let row = tenant_row(&store, "acme").await.expect("swept");
    assert_eq!((row.requests, row.characters), (1, 100));
    assert_eq!(
        (row.unsettled_characters, row.unsettled_cost_micros),
        (100, 100 * 15),
        "the swept charge is all unsettled"
    );
    // The replica was not dead after all: the vendor refused, and the request ended.
    store
        .apply(&[settle(&c, 0, 0), done(&c, 0, 0, 1)], AT_MS + 3)
        .await
        .expect("late settle");
    let row = tenant_row(&store, "acme").await.expect("corrected");
    assert_eq!((row.requests, row.characters, row.cost_micros), (1, 0, 0));
    assert_eq!(row.failed_attempts, 1);
    assert_eq!(
        (row.unsettled_characters, row.unsettled_cost_micros),
        (0, 0),
        "a late settle takes its swept charge out of the unsettled figure"
    );
    // Redelivered, the late settle changes nothing more.
    store
        .apply(&[settle(&c, 0, 0)], AT_MS + 4)
        .await
        .expect("again");
    let row = tenant_row(&store, "acme").await.expect("once");
    assert_eq!((row.characters, row.unsettled_characters), (0, 0));
    // A settle that comes first leaves its later charge nothing to sweep.
    let d = context("r2", "acme", "openai-tts");
    store
        .apply(&[settle(&d, 0, 40)], AT_MS)
        .await
        .expect("settle");
    store
        .apply(&[charge(&d, 0, 40)], AT_MS)
        .await
        .expect("charge");
    assert_eq!(store.sweep(AT_MS + 10, AT_MS + 10).await.expect("sweep"), 0);
    let row = tenant_row(&store, "acme").await.expect("row");
    assert_eq!((row.characters, row.unsettled_characters), (40, 0));
    // A late settle for a different amount: the difference, and nothing left unsettled.
    let e = context("r3", "acme", "openai-tts");
    store
        .apply(&[charge(&e, 0, 60)], AT_MS)
        .await
        .expect("charge");
    assert_eq!(store.sweep(AT_MS + 11, AT_MS + 11).await.expect("sweep"), 1);
    let row = tenant_row(&store, "acme").await.expect("row");
    assert_eq!((row.characters, row.unsettled_characters), (100, 60));
    store
        .apply(&[settle(&e, 0, 50)], AT_MS + 12)
        .await
        .expect("late settle");
    let row = tenant_row(&store, "acme").await.expect("row");
    assert_eq!((row.characters, row.unsettled_characters), (90, 0));
    assert_eq!((row.cost_micros, row.unsettled_cost_micros), (90 * 15, 0));
}
db_test!(an_unsettled_charge_counts_after_the_grace_and_a_late_settle_corrects_it);

async fn retention_deletes_raw_records_only(backend: Backend) {
    let (store, _db) = store(backend).await;
    store
        .apply(&request(&context("r1", "acme", "p"), 10), AT_MS)
        .await
        .expect("old");
    store
        .apply(&request(&context("r2", "acme", "p"), 20), AT_MS + 1000)
        .await
        .expect("new");
    assert_eq!(store.raw_count().await.expect("count"), 10);
    assert_eq!(store.expire(AT_MS + 1).await.expect("expire"), 5);
    assert_eq!(store.raw_count().await.expect("count"), 5);
    let row = tenant_row(&store, "acme").await.expect("totals stay");
    assert_eq!((row.requests, row.characters), (2, 30));
}
db_test!(retention_deletes_raw_records_only);

async fn two_replicas_applying_one_batch_at_once_count_it_once(backend: Backend) {
    let (store, _db) = store(backend).await;
    let mut events = Vec::new();
    for i in 0..200 {
        events.extend(request(&context(&format!("r{i}"), "acme", "p"), 10));
    }
    let events = Arc::new(events);
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (store, events) = (store.clone(), events.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                // PostgreSQL may pick one of two writers racing for rows as a deadlock
                // victim: the batch is not acknowledged and is applied again.
                match store.apply(&events, AT_MS).await {
                    Ok(applied) => return applied.new,
                    Err(e) if e.to_string().contains("deadlock") => continue,
                    Err(e) => panic!("apply: {e}"),
                }
            }
        }));
    }
    let mut new = 0;
    for t in tasks {
        new += t.await.expect("task");
    }
    assert_eq!(new, 1000, "every record stored by exactly one replica");
    let rows = by_tenant(&store).await;
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].requests, rows[0].characters), (200, 2000));
}
db_test!(two_replicas_applying_one_batch_at_once_count_it_once);

async fn totals_in_two_currencies_are_two_rows_each_with_its_own_cost(backend: Backend) {
    let (store, _db) = store(backend).await;
    // The same tenant, pack, pool and day, before and after `[usage] currency` changed.
    let usd = context("r1", "acme", "p");
    let mut eur = context("r2", "acme", "p");
    eur.currency = "EUR".to_owned();
    let mut events = request(&usd, 120);
    events.extend(request(&eur, 30));
    store.apply(&events, AT_MS).await.expect("apply");
    // And once more in a later batch: added to the row of its own currency.
    let mut eur_later = context("r3", "acme", "p");
    eur_later.currency = "EUR".to_owned();
    store
        .apply(&request(&eur_later, 10), AT_MS)
        .await
        .expect("apply later");
    let figures = |rows: &[voxpool_catalog::usage::UsageRow]| {
        rows.iter()
            .map(|r| (r.currency.clone(), r.requests, r.characters, r.cost_micros))
            .collect::<Vec<_>>()
    };
    let want = vec![
        ("EUR".to_owned(), 2, 40, 40 * 15),
        ("USD".to_owned(), 1, 120, 120 * 15),
    ];
    assert_eq!(figures(&by_tenant(&store).await), want, "grouped by tenant");
    for group_by in [
        vec![Group::Tenant, Group::Pack],
        vec![Group::Tenant, Group::Month],
        vec![
            Group::Tenant,
            Group::Tier,
            Group::Pack,
            Group::Pool,
            Group::Day,
        ],
    ] {
        let filter = UsageFilter {
            tenant: Some("acme".to_owned()),
            group_by: group_by.clone(),
            ..UsageFilter::default()
        };
        let rows = store.rows(&filter, None, 100).await.expect("rows");
        assert_eq!(figures(&rows), want, "grouped by {group_by:?}");
        // A page boundary between the two currencies skips and repeats nothing.
        let first = store.rows(&filter, None, 1).await.expect("page 1");
        let key = first[0].key();
        let second = store.rows(&filter, Some(&key), 1).await.expect("page 2");
        let paged: Vec<_> = first.into_iter().chain(second).collect();
        assert_eq!(figures(&paged), want, "paged, grouped by {group_by:?}");
    }
}
db_test!(totals_in_two_currencies_are_two_rows_each_with_its_own_cost);

fn ended(c: &UsageContext, ok: bool, failed: u32) -> UsageEvent {
    UsageEvent::Done {
        context: c.clone(),
        done: DoneUsage {
            cached_characters: 0,
            audio_ms: 0,
            cached_cost_micros: 0,
            failed_attempts: failed,
            ok,
        },
    }
}

async fn a_request_no_vendor_was_sent_counts_as_refused_not_as_failed(backend: Backend) {
    let (store, _db) = store(backend).await;
    // Refused by a budget: no attempt, no audio.
    let refused = context("r1", "acme", "p");
    // Every vendor attempt failed: not a refusal, a failure.
    let failed = context("r2", "acme", "p");
    // Charged, then cut off before any audio: a vendor was sent its text.
    let cut = context("r3", "acme", "p");
    let mut events = vec![ended(&refused, false, 0)];
    events.extend([charge(&failed, 0, 10), settle(&failed, 0, 0)]);
    events.push(ended(&failed, false, 1));
    events.extend([charge(&cut, 0, 10), ended(&cut, false, 0)]);
    events.extend(request(&context("r4", "acme", "p"), 20));
    store.apply(&events, AT_MS).await.expect("apply");
    // Delivered again: counted once.
    store
        .apply(&[ended(&refused, false, 0)], AT_MS)
        .await
        .expect("again");
    let row = tenant_row(&store, "acme").await.expect("acme row");
    assert_eq!(row.requests, 4, "every request that reached metering");
    assert_eq!(row.refused_requests, 1, "only the one no vendor was sent");
    assert_eq!(
        row.failed_attempts, 2,
        "vendor attempts that failed, never refusals"
    );
}
db_test!(a_request_no_vendor_was_sent_counts_as_refused_not_as_failed);
