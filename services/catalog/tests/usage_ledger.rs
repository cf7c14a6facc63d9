//! The ledger's tables on SQLite and PostgreSQL: a record delivered twice counts once, an
//! unsettled charge counts after the grace and a late settle corrects it, retention deletes
//! raw records only, and two replicas applying the same batch at once count it once.

mod common;
mod usage;

use std::sync::Arc;

use common::Backend;
use usage::{AT_MS, by_tenant, charge, context, done, request, settle, tenant_row};
use voxpool_catalog::{repo::PackRepository, usage::UsageStore};

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
