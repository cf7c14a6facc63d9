//! CancelJob through the real RPC in every state a job can be in: items queued, running with
//! nothing left queued, already cancelled, SUCCEEDED, FAILED, and gone (never created, or
//! deleted). Each answer is the job as it is now, or the documented code with its typed reason.

use tonic::Code;
use voxpool_domain::contract::JobsReason;
use voxpool_proto::{jobs::v1 as jpb, jobs::v1::job::State};
use voxpool_testkit::RedisServer;

use super::stack::*;

async fn cancel(
    c: &mut jpb::jobs_client::JobsClient<tonic::transport::Channel>,
    name: &str,
) -> Result<jpb::Job, tonic::Status> {
    c.cancel_job(jpb::CancelJobRequest { name: name.into() })
        .await
        .map(tonic::Response::into_inner)
}

fn assert_refused(e: &tonic::Status, code: Code, reason: JobsReason, name: &str) {
    assert_eq!(e.code(), code, "{e:?}");
    assert_eq!(JobsReason::of(e), Some(reason), "{e:?}");
    assert!(e.message().contains(name), "names the job: {}", e.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_job_answers_every_state_of_a_job() {
    // Vendor calls take 2 s: items are seen running before they end.
    let stack = Stack::start(2000).await;
    let redis = RedisServer::start();
    let a = stack.jobs(&redis.url(), 4, &[], None);
    let mut c = client(&a).await;

    // Running with nothing left queued: both items are in flight on the 4 workers.
    let running = create(&mut c, request("cancel-running", 2)).await;
    wait(&mut c, &running.name, "both items running", |j| {
        counts(j).running == 2 && counts(j).queued == 0
    })
    .await;
    let answer = cancel(&mut c, &running.name)
        .await
        .expect("CancelJob of a running job with nothing queued");
    assert_eq!(state(&answer), State::Cancelled, "{answer:?}");
    assert_eq!(counts(&answer).queued, 0, "{answer:?}");
    assert_eq!(
        counts(&answer).cancelled,
        0,
        "no item was queued: {answer:?}"
    );
    let end = ended(&mut c, &running.name).await;
    assert_eq!(state(&end), State::Cancelled, "{end:?}");
    let e = counts(&end);
    assert_eq!((e.queued, e.running), (0, 0), "{end:?}");
    assert_eq!(e.succeeded + e.failed + e.cancelled, 2, "{end:?}");

    // Already cancelled (and ended): the job as it is, unchanged.
    let again = cancel(&mut c, &running.name)
        .await
        .expect("CancelJob of a cancelled job");
    assert_eq!(state(&again), State::Cancelled);
    assert_eq!(counts(&again), e, "a second cancel changes nothing");

    // Items queued: they end CANCELLED at once, those in flight at their boundary.
    let queued = create(&mut c, request("cancel-queued", 40)).await;
    let answer = cancel(&mut c, &queued.name)
        .await
        .expect("CancelJob with items queued");
    assert_eq!(state(&answer), State::Cancelled, "{answer:?}");
    let q = counts(&answer);
    assert_eq!(q.queued, 0, "queued items end at once: {q:?}");
    assert!(q.cancelled >= 40 - 4, "at most 4 were taken: {q:?}");
    let end = ended(&mut c, &queued.name).await;
    let e = counts(&end);
    assert_eq!(
        e.succeeded + e.failed + e.cancelled,
        40,
        "every item ended once: {e:?}"
    );

    // FAILED: refused, naming the job and its state.
    let mut bad = request("cancel-failed", 1);
    bad.items[0].voice = Some(jpb::job_item_spec::Voice::PackId("vp_no_such_pack".into()));
    let failed = create(&mut c, bad).await;
    assert_eq!(state(&ended(&mut c, &failed.name).await), State::Failed);
    let e = cancel(&mut c, &failed.name)
        .await
        .expect_err("cancel FAILED");
    assert_refused(
        &e,
        Code::FailedPrecondition,
        JobsReason::JobFinished,
        &failed.name,
    );
    assert!(e.message().contains("FAILED"), "{}", e.message());

    // SUCCEEDED: refused the same way.
    let mut short = request("cancel-succeeded", 1);
    short.items[0].text = "Short.".into();
    let done = create(&mut c, short).await;
    assert_eq!(state(&ended(&mut c, &done.name).await), State::Succeeded);
    let e = cancel(&mut c, &done.name)
        .await
        .expect_err("cancel SUCCEEDED");
    assert_refused(
        &e,
        Code::FailedPrecondition,
        JobsReason::JobFinished,
        &done.name,
    );
    assert!(e.message().contains("SUCCEEDED"), "{}", e.message());

    // Gone: deleted, or never created.
    c.delete_job(jpb::DeleteJobRequest {
        name: done.name.clone(),
    })
    .await
    .expect("DeleteJob");
    let e = cancel(&mut c, &done.name)
        .await
        .expect_err("cancel deleted");
    assert_refused(&e, Code::NotFound, JobsReason::JobNotFound, &done.name);
    let never = "jobs/j00000000000000000000";
    let e = cancel(&mut c, never).await.expect_err("cancel unknown");
    assert_refused(&e, Code::NotFound, JobsReason::JobNotFound, never);
}
