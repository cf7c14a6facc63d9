//! Ending jobs: cancel, delete, and the finalize queue.

use std::time::Duration;

use voxpool_jobs::{
    model::{ItemResult, ItemState, JobState},
    store::{NotDeletable, Taken},
};

use crate::{Harness, Topology, items, job, new_id, suite};

suite!(
    cancel_ends_queued_items_at_once_and_the_job_once_running_ones_end,
    cancel_answers_an_ended_job_with_its_state_and_an_unknown_one_with_none,
    delete_waits_for_the_end_and_the_summary_then_leaves_nothing,
    an_ended_job_is_due_for_finalizing_once_and_leased_to_one_replica,
);

async fn cancel_ends_queued_items_at_once_and_the_job_once_running_ones_end(t: Topology) {
    let h = Harness::start(t).await;
    let id = new_id();
    h.store
        .create(&id, &job("team-a", ""), &items(3))
        .await
        .expect("create");
    let Taken::Item(running) = h.store.take(&id, "c1").await.expect("take") else {
        panic!("an item");
    };
    let cancelled = h.store.cancel(&id).await.expect("cancel");
    assert_eq!(
        cancelled,
        Some(Ok(None)),
        "one item still runs: not ended yet"
    );
    let r = h.store.record(&id).await.expect("read").expect("job");
    assert_eq!(r.state, JobState::Cancelled);
    assert_eq!((r.queued, r.running, r.cancelled), (0, 1, 2));
    assert_eq!(r.end_ms, None);
    assert!(matches!(
        h.store.take(&id, "c1").await.expect("take"),
        Taken::Closed { running: 1 }
    ));
    assert_eq!(
        h.store.job_state(&id).await.expect("state"),
        Some(JobState::Cancelled)
    );
    let ended = h
        .store
        .finish(
            &running,
            ItemState::Cancelled,
            &ItemResult::default(),
            0,
            false,
        )
        .await
        .expect("finish");
    assert_eq!(ended, Some(JobState::Cancelled));
    let r = h.store.record(&id).await.expect("read").expect("job");
    assert_eq!((r.running, r.cancelled), (0, 3));
    assert!(r.end_ms.is_some());
    assert_eq!(h.store.cancel(&id).await.expect("again"), Some(Ok(None)));
}

async fn cancel_answers_an_ended_job_with_its_state_and_an_unknown_one_with_none(t: Topology) {
    let h = Harness::start(t).await;
    let id = new_id();
    h.store
        .create(&id, &job("team-a", ""), &items(1))
        .await
        .expect("create");
    let Taken::Item(c) = h.store.take(&id, "c1").await.expect("take") else {
        panic!("an item");
    };
    h.store
        .finish(&c, ItemState::Failed, &ItemResult::default(), 0, false)
        .await
        .expect("finish");
    assert_eq!(
        h.store.cancel(&id).await.expect("cancel"),
        Some(Err(JobState::Failed))
    );
    assert_eq!(h.store.cancel(&new_id()).await.expect("cancel"), None);
}

async fn delete_waits_for_the_end_and_the_summary_then_leaves_nothing(t: Topology) {
    let h = Harness::start(t).await;
    let id = new_id();
    h.store
        .create(&id, &job("team-a", "req-1"), &items(1))
        .await
        .expect("create");
    assert_eq!(
        h.store.delete(&id).await.expect("delete"),
        Err(NotDeletable::Running(JobState::Queued))
    );
    let Taken::Item(c) = h.store.take(&id, "c1").await.expect("take") else {
        panic!("an item");
    };
    h.store
        .finish(&c, ItemState::Succeeded, &ItemResult::default(), 1, false)
        .await
        .expect("finish");
    assert_eq!(
        h.store.delete(&id).await.expect("delete"),
        Err(NotDeletable::Finishing),
        "ended, its summary not written yet"
    );
    h.store.mark(&id, "summary", "1").await.expect("mark");
    assert_eq!(h.store.delete(&id).await.expect("delete"), Ok(true));
    assert_eq!(h.store.record(&id).await.expect("read"), None);
    assert_eq!(h.store.delete(&id).await.expect("delete"), Ok(false));
    assert!(!h.store.active().await.expect("active").contains(&id));
    let (listed, _) = h.store.list_jobs("team-a", None, 10).await.expect("list");
    assert!(listed.is_empty(), "{listed:?}");
    let fresh = new_id();
    let created = h
        .store
        .create(&fresh, &job("team-a", "req-1"), &items(1))
        .await
        .expect("create");
    assert_eq!(
        created,
        voxpool_jobs::store::Created::New(fresh),
        "a deleted job's request id is free again"
    );
}

async fn an_ended_job_is_due_for_finalizing_once_and_leased_to_one_replica(t: Topology) {
    let h = Harness::start(t).await;
    let id = new_id();
    h.store
        .create(&id, &job("team-a", ""), &items(1))
        .await
        .expect("create");
    assert!(
        h.store
            .due_finalize(Duration::from_secs(60), 8)
            .await
            .expect("due")
            .is_empty()
    );
    let Taken::Item(c) = h.store.take(&id, "c1").await.expect("take") else {
        panic!("an item");
    };
    h.store
        .finish(&c, ItemState::Succeeded, &ItemResult::default(), 1, false)
        .await
        .expect("finish");
    let due = h
        .store
        .due_finalize(Duration::from_secs(60), 8)
        .await
        .expect("due");
    assert_eq!(due, std::slice::from_ref(&id));
    let again = h
        .store
        .due_finalize(Duration::from_secs(60), 8)
        .await
        .expect("due");
    assert!(again.is_empty(), "leased to the first replica: {again:?}");
    let r = h.store.record(&id).await.expect("read").expect("job");
    h.store
        .finalized(&id, r.expire_ms.expect("expiry"), "")
        .await
        .expect("finalized");
    assert!(!h.store.active().await.expect("active").contains(&id));
}
