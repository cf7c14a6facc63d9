//! Creating jobs: what a created job reads back as, request ids, replica acknowledgements,
//! ListJobs' pages.

use voxpool_jobs::{
    model::JobState,
    store::{Created, StoreError},
};

use crate::{Harness, Topology, items, job, new_id, suite};

suite!(
    a_created_job_reads_back_as_created_with_every_item_queued,
    a_request_id_names_one_job_and_refuses_another_request_under_it,
    a_job_too_few_replicas_acknowledge_is_written_and_said_to_be_unreplicated,
    a_tenants_jobs_list_newest_first_page_by_page,
);

async fn a_created_job_reads_back_as_created_with_every_item_queued(t: Topology) {
    let h = Harness::start(t).await;
    let id = new_id();
    let spec = job("team-a", "");
    let created = h.store.create(&id, &spec, &items(3)).await.expect("create");
    assert_eq!(created, Created::New(id.clone()));
    let r = h.store.record(&id).await.expect("read").expect("the job");
    assert_eq!(r.spec, spec);
    assert_eq!(r.state, JobState::Queued);
    assert_eq!((r.total, r.queued, r.running), (3, 3, 0));
    assert_eq!((r.succeeded, r.failed, r.cancelled), (0, 0, 0));
    assert!(r.create_ms > 0, "created on the store's clock");
    assert_eq!((r.start_ms, r.end_ms, r.expire_ms), (None, None, None));
    assert!(h.store.active().await.expect("active").contains(&id));
}

async fn a_request_id_names_one_job_and_refuses_another_request_under_it(t: Topology) {
    let h = Harness::start(t).await;
    let first = new_id();
    let spec = job("team-a", "req-1");
    let created = h
        .store
        .create(&first, &spec, &items(2))
        .await
        .expect("create");
    assert_eq!(created, Created::New(first.clone()));
    let again = h
        .store
        .create(&new_id(), &spec, &items(2))
        .await
        .expect("retry");
    assert_eq!(again, Created::Existing(first.clone()), "the same request");
    let other = h
        .store
        .create(&new_id(), &spec, &items(3))
        .await
        .expect("other");
    assert_eq!(
        other,
        Created::Reused(first.clone()),
        "other items, same id"
    );
    let elsewhere = new_id();
    let theirs = h
        .store
        .create(&elsewhere, &job("team-b", "req-1"), &items(2))
        .await
        .expect("another tenant");
    assert_eq!(
        theirs,
        Created::New(elsewhere),
        "request ids are per tenant"
    );
}

async fn a_job_too_few_replicas_acknowledge_is_written_and_said_to_be_unreplicated(t: Topology) {
    // No topology of the suite has five replicas: the acknowledgement falls short.
    let h = Harness::with_acks(t, Some(5)).await;
    let id = new_id();
    let e = h
        .store
        .create(&id, &job("team-a", "req-1"), &items(1))
        .await
        .expect_err("five replicas cannot acknowledge");
    let StoreError::NotReplicated {
        job, acked, wanted, ..
    } = e
    else {
        panic!("expected NotReplicated, got {e:?}");
    };
    assert_eq!((job.as_str(), wanted), (id.as_str(), 5));
    assert!((0..5).contains(&acked), "{acked}");
    assert!(
        h.store.record(&id).await.expect("read").is_some(),
        "it runs"
    );
    assert!(h.store.active().await.expect("active").contains(&id));
}

async fn a_tenants_jobs_list_newest_first_page_by_page(t: Topology) {
    let h = Harness::start(t).await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        let id = new_id();
        h.store
            .create(&id, &job("team-a", ""), &items(1))
            .await
            .expect("create");
        ids.push(id);
    }
    let other = new_id();
    h.store
        .create(&other, &job("team-b", ""), &items(1))
        .await
        .expect("create");
    let (mut listed, mut after) = (Vec::new(), None);
    loop {
        let (page, next) = h
            .store
            .list_jobs("team-a", after.as_ref(), 2)
            .await
            .expect("list");
        assert!(page.len() <= 2);
        listed.extend(page);
        match next {
            Some(cursor) => after = Some(cursor),
            None => break,
        }
    }
    let mut got: Vec<String> = listed.iter().map(|r| r.id.clone()).collect();
    assert!(
        listed.windows(2).all(|w| w[0].create_ms >= w[1].create_ms),
        "newest first"
    );
    got.sort();
    ids.sort();
    assert_eq!(
        got, ids,
        "each of the tenant's jobs once, no other tenant's"
    );
}
