//! Items as workers see them: taking, reclaiming, the delivery limit, paging.

use std::time::Duration;

use voxpool_jobs::{
    model::{ItemError, ItemResult, ItemState, JobState},
    store::Taken,
};

use crate::{Harness, Topology, items, job, new_id, suite};

suite!(
    taking_items_hands_them_out_in_order_and_moves_the_counts_together,
    an_ended_item_is_neither_taken_nor_reclaimed_again,
    a_held_item_is_not_reclaimed_before_its_visibility_timeout,
    a_silent_workers_item_is_reclaimed_then_failed_past_the_delivery_limit,
    items_page_in_submission_order_and_filter_by_state,
);

fn limit_reached() -> ItemResult {
    ItemResult {
        error: Some(ItemError {
            code: "ABORTED".into(),
            reason: "DELIVERY_LIMIT".into(),
            message: "taken too often".into(),
            ..ItemError::default()
        }),
        ..ItemResult::default()
    }
}

fn taken(t: Taken) -> voxpool_jobs::store::Claimed {
    match t {
        Taken::Item(c) => c,
        other => panic!("expected an item, got {other:?}"),
    }
}

async fn taking_items_hands_them_out_in_order_and_moves_the_counts_together(t: Topology) {
    let h = Harness::start(t).await;
    let id = new_id();
    h.store
        .create(&id, &job("team-a", ""), &items(3))
        .await
        .expect("create");
    let first = taken(h.store.take(&id, "c1").await.expect("take"));
    assert_eq!((first.id.as_str(), first.deliveries), ("a0", 1));
    assert_eq!(first.spec, b"spec of a0", "the spec as it was stored");
    let r = h.store.record(&id).await.expect("read").expect("job");
    assert_eq!(r.state, JobState::Running);
    assert_eq!((r.queued, r.running), (2, 1));
    assert!(r.start_ms.is_some(), "started with its first item");
    for want in ["a1", "a2"] {
        assert_eq!(taken(h.store.take(&id, "c1").await.expect("take")).id, want);
    }
    assert!(matches!(
        h.store.take(&id, "c1").await.expect("take"),
        Taken::Empty
    ));
    let r = h.store.record(&id).await.expect("read").expect("job");
    assert_eq!((r.queued, r.running, r.total), (0, 3, 3));
}

async fn an_ended_item_is_neither_taken_nor_reclaimed_again(t: Topology) {
    let h = Harness::start(t).await;
    let id = new_id();
    h.store
        .create(&id, &job("team-a", ""), &items(1))
        .await
        .expect("create");
    let c = taken(h.store.take(&id, "c1").await.expect("take"));
    let result = ItemResult {
        output: format!("{id}/a0.wav"),
        ..ItemResult::default()
    };
    let ended = h
        .store
        .finish(&c, ItemState::Succeeded, &result, 10, false)
        .await
        .expect("finish");
    assert_eq!(
        ended,
        Some(JobState::Succeeded),
        "its last item ends the job"
    );
    let again = h
        .store
        .finish(&c, ItemState::Failed, &limit_reached(), 0, false)
        .await
        .expect("finish twice");
    assert_eq!(again, None, "a second end changes nothing");
    let reclaimed = h
        .store
        .claim(&id, "c2", Duration::ZERO, 5, &limit_reached())
        .await
        .expect("claim");
    assert!(reclaimed.is_none(), "{reclaimed:?}");
    assert!(matches!(
        h.store.take(&id, "c2").await.expect("take"),
        Taken::Closed { running: 0 }
    ));
    let r = h.store.record(&id).await.expect("read").expect("job");
    assert_eq!((r.succeeded, r.failed, r.characters_succeeded), (1, 0, 10));
    assert!(r.end_ms.is_some() && r.expire_ms.is_some());
}

async fn a_held_item_is_not_reclaimed_before_its_visibility_timeout(t: Topology) {
    let h = Harness::start(t).await;
    let id = new_id();
    h.store
        .create(&id, &job("team-a", ""), &items(1))
        .await
        .expect("create");
    taken(h.store.take(&id, "c1").await.expect("take"));
    let reclaimed = h
        .store
        .claim(&id, "c2", Duration::from_secs(60), 5, &limit_reached())
        .await
        .expect("claim");
    assert!(reclaimed.is_none(), "its holder was heard from just now");
}

async fn a_silent_workers_item_is_reclaimed_then_failed_past_the_delivery_limit(t: Topology) {
    let h = Harness::start(t).await;
    let id = new_id();
    h.store
        .create(&id, &job("team-a", ""), &items(1))
        .await
        .expect("create");
    taken(h.store.take(&id, "c1").await.expect("take"));
    let second = h
        .store
        .claim(&id, "c2", Duration::ZERO, 2, &limit_reached())
        .await
        .expect("claim")
        .expect("reclaimed from the silent c1");
    assert_eq!((second.id.as_str(), second.deliveries), ("a0", 2));
    let third = h
        .store
        .claim(&id, "c3", Duration::ZERO, 2, &limit_reached())
        .await
        .expect("claim");
    assert!(third.is_none(), "a third delivery is past the limit of 2");
    let r = h.store.record(&id).await.expect("read").expect("job");
    assert_eq!((r.running, r.failed, r.state), (0, 1, JobState::Failed));
    let (rows, _) = h.store.list_items(&id, 0, 10, None).await.expect("list");
    assert_eq!(rows[0].state, ItemState::Failed);
    assert_eq!(rows[0].result, Some(limit_reached()));
}

async fn items_page_in_submission_order_and_filter_by_state(t: Topology) {
    let h = Harness::start(t).await;
    let id = new_id();
    h.store
        .create(&id, &job("team-a", ""), &items(5))
        .await
        .expect("create");
    let c = taken(h.store.take(&id, "c1").await.expect("take"));
    h.store
        .finish(&c, ItemState::Succeeded, &ItemResult::default(), 3, true)
        .await
        .expect("finish");
    h.store.count_attempt(&id, "a0").await.expect("count");
    let ids = |rows: &[voxpool_jobs::store::ItemRow]| -> Vec<String> {
        rows.iter().map(|r| r.id.clone()).collect()
    };
    let (page, next) = h.store.list_items(&id, 0, 2, None).await.expect("list");
    assert_eq!(
        (ids(&page), next),
        (vec!["a0".into(), "a1".into()], Some(2))
    );
    assert_eq!((page[0].state, page[0].attempts), (ItemState::Succeeded, 1));
    assert_eq!(page[0].spec, b"spec of a0");
    let (page, next) = h.store.list_items(&id, 2, 2, None).await.expect("list");
    assert_eq!(
        (ids(&page), next),
        (vec!["a2".into(), "a3".into()], Some(4))
    );
    let (page, next) = h.store.list_items(&id, 4, 2, None).await.expect("list");
    assert_eq!((ids(&page), next), (vec!["a4".into()], None));
    let (queued, _) = h
        .store
        .list_items(&id, 0, 10, Some(ItemState::Queued))
        .await
        .expect("list");
    assert_eq!(ids(&queued), ["a1", "a2", "a3", "a4"]);
    assert_eq!(
        h.store.item(&id, "a0").await.expect("item").map(|(s, _)| s),
        Some(ItemState::Succeeded)
    );
    assert!(h.store.item(&id, "nope").await.expect("item").is_none());
    let r = h.store.record(&id).await.expect("read").expect("job");
    assert_eq!(r.cached_items, 1, "an item served wholly from the cache");
}
