//! `voxpool-jobs` end to end on real processes (the stack: `jobs/stack.rs`): a job completes on
//! two replicas without an item written twice, completes the items the audio cache holds
//! without a vendor call, survives a SIGKILLed replica and a Sentinel or Cluster failover,
//! cancels in every state (`jobs/cancel.rs`), fails only its bad items, refuses bad input and
//! reads manifests within their limits (`jobs/manifest.rs`), shares the workers between
//! tenants, delivers signed webhooks concurrently and only where allowed (`jobs/webhooks.rs`),
//! is idempotent per request id, fails no item for a replica's own fault, and answers
//! NOT_REPLICATED (the job named, indexed, run) when no replica acknowledges a create.
//!
//! Synchronisation is by polling GetJob (bounded by `stack::DEADLINE`); the one fixed wait is
//! the webhook case's look for a duplicate delivery (documented there).

#[path = "jobs/stack.rs"]
mod stack;

#[path = "jobs/cancel.rs"]
mod cancel;

#[path = "jobs/manifest.rs"]
mod manifest;

#[path = "jobs/webhooks.rs"]
mod webhooks;

use std::time::{Duration, Instant};

use stack::*;
use tonic::Code;
use voxpool_proto::{jobs::v1 as jpb, jobs::v1::job::State, scheduler::v1::Priority};
use voxpool_testkit::{RedisSentinel, RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_item_job_on_two_replicas_succeeds_with_every_item_written_once() {
    let stack = Stack::start(60).await;
    let redis = RedisServer::start();
    let a = stack.jobs(&redis.url(), 8, &[], None);
    let _b = stack.jobs(&redis.url(), 8, &[], None);
    let mut c = client(&a).await;
    let job = create(&mut c, request("t1", 500)).await;
    assert_eq!(job.total_items, 500);
    assert_all_succeeded(&mut c, &stack, &job.name, 500).await;
    assert_eq!(stack.vendor_calls(), 500, "one vendor call per item");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_whose_audio_is_in_the_audio_cache_complete_without_a_vendor_call() {
    const N: usize = 30;
    // Synthesis with its audio cache on, in a blob store of the test's own (no earlier hits).
    let cache_dir = tempfile::tempdir().expect("tempdir");
    let store = format!("file://{}", cache_dir.path().display());
    let stack = Stack::start_with(20, &["--cache", "on", "--blob-store", &store]).await;
    let redis = RedisServer::start();
    let a = stack.jobs(&redis.url(), 4, &[], None);
    let mut c = client(&a).await;
    let first = create(&mut c, request("cached", N)).await;
    assert_all_succeeded(&mut c, &stack, &first.name, N).await;
    let first = get(&mut c, &first.name).await;
    assert_eq!(
        first.cached_items, 0,
        "a cold cache serves nothing: {first:?}"
    );
    assert_eq!(
        stack.vendor_calls(),
        N as u64,
        "one vendor call per new item"
    );
    // The same texts on the same voice again, as a new job (no request id: not a replay).
    let mut again = request("cached", N);
    // One new text: its item alone reaches the vendor.
    again.items[N - 1].text = "A sentence this job says for the first time.".into();
    let second = create(&mut c, again).await;
    assert_ne!(second.name, first.name);
    assert_all_succeeded(&mut c, &stack, &second.name, N).await;
    let second = get(&mut c, &second.name).await;
    assert_eq!(
        second.cached_items,
        (N - 1) as i32,
        "every repeated item served by the cache: {second:?}"
    );
    assert_eq!(
        stack.vendor_calls(),
        N as u64 + 1,
        "only the new text reached the vendor"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_cannot_work_fails_no_item() {
    const N: usize = 40;
    let stack = Stack::start(20).await;
    let redis = RedisServer::start();
    let synthesis = format!("http://{}", stack.synthesis.addr);
    // Synthesis refuses this one's worker token from the start.
    let refused = stack.jobs(
        &redis.url(),
        4,
        &[("VOXPOOL_CLIENT_TOKEN", "not-a-token-synthesis-knows")],
        None,
    );
    // This one cannot reach synthesis at all (nothing listens there).
    let unreached_log = stack.dir.path().join("unreached.log");
    let unreached = stack.jobs_on(
        &redis.url(),
        4,
        &[],
        Some(&unreached_log),
        &stack.blob_dir(),
        "http://127.0.0.1:1",
    );
    until_health(&refused, false).await;
    until_logged(&unreached_log, "synthesis cannot be reached").await;
    let healthy = stack.jobs(&redis.url(), 4, &[], None);
    let mut c = client(&healthy).await;
    let job = create(&mut c, request("faults", N)).await;
    assert_all_succeeded(&mut c, &stack, &job.name, N).await;
    until_health(&refused, false).await;
    // An unreachable synthesis pauses the workers, not the API: health stays SERVING.
    until_health(&unreached, true).await;

    // A replica whose blob store breaks while it runs, with a job on that store: the items
    // it took go back, it pauses, and once the store is repaired the job completes.
    let broken = tempfile::tempdir().expect("tempdir");
    let results = broken.path().join("jobs");
    let log = stack.dir.path().join("broken.log");
    let writes_fail = stack.jobs_on(&redis.url(), 4, &[], Some(&log), broken.path(), &synthesis);
    until_logged(&log, "workers ready").await;
    // (The start-up write check removed its emptied folder already, or not: either way.)
    match std::fs::remove_dir_all(&results) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("remove the results folder: {e}"),
    }
    std::fs::write(&results, b"not a folder").expect("a file in its place");
    let mut b = client(&writes_fail).await;
    let stranded = create(&mut b, request("faults-b", N)).await;
    until_logged(&log, "workers paused").await;
    until_health(&writes_fail, false).await;
    let paused = get(&mut b, &stranded.name).await;
    assert_eq!(counts(&paused).failed, 0, "no item failed: {paused:?}");
    std::fs::remove_file(&results).expect("repair: remove the file");
    until_logged(&log, "workers resumed").await;
    let end = ended(&mut b, &stranded.name).await;
    assert_eq!(state(&end), State::Succeeded, "{end:?}");
    assert_eq!(counts(&end).succeeded as usize, N, "{end:?}");
    let id = stranded.name.trim_start_matches("jobs/");
    for it in items(&mut b, &stranded.name, "").await {
        assert!(it.attempts >= 1, "{it:?}");
        let object = results.join(id).join(format!("{}.wav", it.id));
        assert!(object.exists(), "{} not written", object.display());
    }
    until_health(&writes_fail, true).await;
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !logged.contains("could not hand an item back"),
        "items handed back at once: {logged}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_sigkilled_mid_job_loses_no_item() {
    const CONCURRENCY: u32 = 8;
    const N: usize = 400;
    let stack = Stack::start(80).await;
    let redis = RedisServer::start();
    let mut victim = stack.jobs(&redis.url(), CONCURRENCY, &[], None);
    let log = stack.dir.path().join("survivor.log");
    let survivor = stack.jobs(&redis.url(), CONCURRENCY, &[], Some(&log));
    let mut c = client(&survivor).await;
    let job = create(&mut c, request("t1", N)).await;
    wait(&mut c, &job.name, "100 succeeded with items running", |j| {
        counts(j).succeeded >= 100 && counts(j).running > 0
    })
    .await;
    let running: Vec<String> = items(&mut c, &job.name, "state = RUNNING")
        .await
        .into_iter()
        .map(|i| i.id)
        .collect();
    victim.child.kill().expect("SIGKILL");
    let killed = Instant::now();
    victim.child.wait().expect("reaped");
    // Until every item running at the kill (the victim's among them) has ended elsewhere.
    let until = killed + DEADLINE;
    let mut first_reclaim = None;
    let reclaimed = |log: &std::path::Path| {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .contains("reclaimed an item")
    };
    let reclaimed_all = loop {
        if first_reclaim.is_none() && reclaimed(&log) {
            first_reclaim = Some(killed.elapsed());
        }
        let now = items(&mut c, &job.name, "state = RUNNING").await;
        if !now.iter().any(|i| running.contains(&i.id)) {
            break killed.elapsed();
        }
        assert!(
            Instant::now() < until,
            "items running at the kill never ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_all_succeeded(&mut c, &stack, &job.name, N).await;
    let completed = killed.elapsed();
    if first_reclaim.is_none() && reclaimed(&log) {
        first_reclaim = Some(killed.elapsed());
    }
    let calls = stack.vendor_calls();
    eprintln!(
        "JOBS-FIGURE: replica SIGKILL (visibility-timeout 2s, concurrency {CONCURRENCY}, {N} items of ~80ms): \
         kill -> job SUCCEEDED {completed:?}; kill -> every item running at the kill ended elsewhere {reclaimed_all:?}; \
         kill -> survivor's first reclaim (log) {first_reclaim:?}; vendor calls {calls} for {N} items"
    );
    assert!(
        first_reclaim.is_some(),
        "the survivor reclaimed none of the victim's items"
    );
    assert!(
        calls <= (N as u64) + u64::from(CONCURRENCY),
        "{calls} vendor calls for {N} items"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_failover_of_the_jobs_slot_mid_job_loses_no_item() {
    const N: usize = 200;
    let stack = Stack::start(60).await;
    let cluster = voxpool_testkit::RedisCluster::start(3, 1);
    let a = stack.jobs(&cluster.url(), 8, &[], None);
    let _b = stack.jobs(&cluster.url(), 8, &[], None);
    let mut c = client(&a).await;
    let job = create(&mut c, request("t1", N)).await;
    wait(&mut c, &job.name, "40 succeeded", |j| {
        counts(j).succeeded >= 40
    })
    .await;
    // The master of the job's one slot (every key of a job carries the hash tag {job}).
    let id = job.name.trim_start_matches("jobs/").to_owned();
    let old = cluster.primary_port_for_key(&format!("vj:{{{id}}}"));
    cluster.kill_node(old);
    let t = Instant::now();
    let (promoted, cluster) =
        tokio::task::spawn_blocking(move || (cluster.wait_promoted(old), cluster))
            .await
            .expect("failover");
    let mut c = answering(&a, &job.name, t).await;
    assert_all_succeeded(&mut c, &stack, &job.name, N).await;
    eprintln!(
        "JOBS-FIGURE: cluster failover of the job's slot ({old} -> {promoted}): kill -> job SUCCEEDED {:?}; vendor calls {} for {N}",
        t.elapsed(),
        stack.vendor_calls()
    );
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_mid_job_loses_no_item() {
    const N: usize = 300;
    let stack = Stack::start(60).await;
    let sentinel = RedisSentinel::start();
    let a = stack.jobs(&sentinel.url(), 8, &[], None);
    let _b = stack.jobs(&sentinel.url(), 8, &[], None);
    let mut c = client(&a).await;
    let job = create(&mut c, request("t1", N)).await;
    wait(&mut c, &job.name, "50 succeeded", |j| {
        counts(j).succeeded >= 50
    })
    .await;
    let old = sentinel.kill_primary();
    let t = Instant::now();
    let promoted = tokio::task::spawn_blocking(move || (sentinel.wait_failover(old), sentinel))
        .await
        .expect("failover");
    let mut c = answering(&a, &job.name, t).await;
    assert_all_succeeded(&mut c, &stack, &job.name, N).await;
    eprintln!(
        "JOBS-FIGURE: sentinel failover ({} -> {}): kill -> job SUCCEEDED {:?}; vendor calls {} for {N}",
        old,
        promoted.0,
        t.elapsed(),
        stack.vendor_calls()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_job_starts_no_item_and_ends_cancelled() {
    const CONCURRENCY: u32 = 4;
    let stack = Stack::start(300).await;
    let redis = RedisServer::start();
    let a = stack.jobs(&redis.url(), CONCURRENCY, &[], None);
    let mut c = client(&a).await;
    let job = create(&mut c, request("t1", 200)).await;
    wait(&mut c, &job.name, "8 succeeded", |j| {
        counts(j).succeeded >= 8
    })
    .await;
    let calls_before = stack.vendor_calls();
    let cancelled = c
        .cancel_job(jpb::CancelJobRequest {
            name: job.name.clone(),
        })
        .await
        .expect("CancelJob")
        .into_inner();
    assert_eq!(state(&cancelled), State::Cancelled);
    let at = counts(&cancelled);
    assert_eq!(at.queued, 0, "queued items end CANCELLED at once: {at:?}");
    assert!(at.cancelled >= 150, "{at:?}");
    let end = ended(&mut c, &job.name).await;
    assert_eq!(state(&end), State::Cancelled);
    let e = counts(&end);
    assert_eq!(e.running, 0);
    assert_eq!(
        e.queued + e.running + e.succeeded + e.failed + e.cancelled,
        200,
        "{e:?}"
    );
    let ended_after = (e.succeeded + e.failed) - (at.succeeded + at.failed);
    assert!(
        ended_after <= at.running.max(0) && at.running <= CONCURRENCY as i32,
        "only in-flight items end after the cancel: {at:?} -> {e:?}"
    );
    let calls = stack.vendor_calls();
    assert!(
        calls <= calls_before + u64::from(CONCURRENCY),
        "vendor calls {calls_before} -> {calls}"
    );
    let again = c
        .cancel_job(jpb::CancelJobRequest {
            name: job.name.clone(),
        })
        .await
        .expect("second CancelJob")
        .into_inner();
    assert_eq!(state(&again), State::Cancelled);
    // The other states (running with nothing queued, ended, gone): cancel.rs.
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_job_leaves_no_record_and_no_object() {
    let stack = Stack::start(200).await;
    let redis = RedisServer::start();
    let a = stack.jobs(&redis.url(), 2, &[], None);
    let mut c = client(&a).await;
    let job = create(&mut c, request("deleting", 20)).await;
    let delete = || jpb::DeleteJobRequest {
        name: job.name.clone(),
    };
    wait(&mut c, &job.name, "2 succeeded", |j| {
        counts(j).succeeded >= 2
    })
    .await;
    let running = c
        .delete_job(delete())
        .await
        .expect_err("delete while running");
    assert_eq!(running.code(), Code::FailedPrecondition, "{running:?}");
    c.cancel_job(jpb::CancelJobRequest {
        name: job.name.clone(),
    })
    .await
    .expect("CancelJob");
    ended(&mut c, &job.name).await;
    let folder = stack
        .blob_dir()
        .join("jobs")
        .join(job.name.trim_start_matches("jobs/"));
    assert!(
        folder.join("item-00000.wav").exists(),
        "written before the delete"
    );
    // An ended job is deleted once its summary is written (the finalizer wrote it into the
    // deleted job's folder before): DeleteJob waits that moment out.
    c.delete_job(delete()).await.expect("DeleteJob");
    let gone = c
        .get_job(jpb::GetJobRequest {
            name: job.name.clone(),
        })
        .await
        .expect_err("deleted");
    assert_eq!(gone.code(), Code::NotFound, "{gone:?}");
    assert_eq!(
        voxpool_domain::contract::JobsReason::of(&gone),
        Some(voxpool_domain::contract::JobsReason::JobNotFound)
    );
    assert!(
        !folder.exists(),
        "no objects nor folder left: {}",
        folder.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_items_fail_alone_and_bad_requests_queue_nothing() {
    let stack = Stack::start(20).await;
    let redis = RedisServer::start();
    let a = stack.jobs(&redis.url(), 4, &[], None);
    let mut c = client(&a).await;
    let mut req = request("bad", 10);
    req.items[3].voice = Some(jpb::job_item_spec::Voice::PackId("vp_no_such_pack".into()));
    let mut nowhere = voxpool_fake_vendors::snapshot("openai", "tts-1", "alloy");
    nowhere.tts_model_id = "no-such-pool".into();
    req.items[7].voice = Some(jpb::job_item_spec::Voice::Snapshot(nowhere.seal().to_pb()));
    let job = create(&mut c, req).await;
    let end = ended(&mut c, &job.name).await;
    assert_eq!(state(&end), State::Failed, "{end:?}");
    assert_eq!(
        (counts(&end).succeeded, counts(&end).failed),
        (8, 2),
        "{end:?}"
    );
    for it in items(&mut c, &job.name, "").await {
        if it.id == "item-00003" || it.id == "item-00007" {
            assert_eq!(item_state(&it), jpb::job_item::State::Failed, "{it:?}");
            let err = it.error.clone().expect("an error");
            // Synthesize's typed reason, NOT_FOUND's included (PACK_NOT_FOUND, POOL_NOT_FOUND).
            assert!(
                !err.code.is_empty() && !err.message.is_empty() && !err.reason.is_empty(),
                "{it:?}"
            );
            if it.id == "item-00003" {
                assert_eq!(
                    (err.code.as_str(), err.reason.as_str()),
                    ("NOT_FOUND", "PACK_NOT_FOUND")
                );
            }
            assert!(
                matches!(
                    err.code.as_str(),
                    "NOT_FOUND" | "INVALID_ARGUMENT" | "FAILED_PRECONDITION"
                ),
                "{err:?}"
            );
            eprintln!(
                "bad item {}: {} {} {}",
                it.id, err.code, err.reason, err.message
            );
        } else {
            assert_eq!(item_state(&it), jpb::job_item::State::Succeeded, "{it:?}");
        }
    }
    // Invalid input: INVALID_ARGUMENT naming the field, nothing created.
    let mut empty = request("refused", 3);
    empty.items[1].text = "  ".into();
    let mut dup = request("refused", 3);
    dup.items[2].id = dup.items[0].id.clone();
    let mut interactive = request("refused", 3);
    interactive.priority = Priority::Interactive as i32;
    let outside = jpb::CreateJobRequest {
        tenant: "refused".into(),
        manifest_uri: "../../etc/passwd".into(),
        ..Default::default()
    };
    for (req, field) in [
        (empty, "items[1].text"),
        (dup, "items[2].id"),
        (interactive, "priority"),
        (outside, "manifest_uri"),
    ] {
        let e = c.create_job(req).await.expect_err(field);
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains(field), "{field}: {}", e.message());
    }
    let listed = c
        .list_jobs(jpb::ListJobsRequest {
            tenant: "refused".into(),
            ..Default::default()
        })
        .await
        .expect("ListJobs")
        .into_inner();
    assert!(listed.jobs.is_empty(), "{listed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_progress_at_about_the_same_rate() {
    const N: usize = 120;
    let stack = Stack::start(60).await;
    let redis = RedisServer::start();
    let a = stack.jobs(&redis.url(), 4, &[], None);
    let mut c = client(&a).await;
    let first = create(&mut c, request("tenant-a", N)).await;
    let second = create(&mut c, request("tenant-b", N)).await;
    // Whichever finishes first: the other's progress then.
    let until = Instant::now() + DEADLINE;
    let (done, other) = loop {
        let (x, y) = (
            get(&mut c, &first.name).await,
            get(&mut c, &second.name).await,
        );
        if x.end_time.is_some() {
            break (x, y);
        }
        if y.end_time.is_some() {
            break (y, x);
        }
        assert!(Instant::now() < until, "neither job ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (d, o) = (
        counts(&done).succeeded as f64,
        counts(&other).succeeded as f64,
    );
    eprintln!(
        "JOBS-FIGURE: fairness: when {} ended with {d} succeeded, {} had {o}",
        done.tenant, other.tenant
    );
    let ratio = o / d;
    assert!(
        (0.6..=1.6).contains(&ratio),
        "tenants progressed unequally: {d} vs {o}"
    );
    ended(&mut c, &other.name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_job_is_idempotent_per_tenant_and_request_id() {
    let stack = Stack::start(20).await;
    let redis = RedisServer::start();
    let a = stack.jobs(&redis.url(), 4, &[], None);
    let mut c = client(&a).await;
    let mut req = request("idem", 20);
    req.request_id = "book-7".into();
    let first = create(&mut c, req.clone()).await;
    let second = create(&mut c, req.clone()).await;
    assert_eq!(first.name, second.name);
    assert_eq!(second.total_items, 20);
    // The same request id for other items: refused, naming the job it already created.
    let mut changed = request("idem", 3);
    changed.request_id = "book-7".into();
    let e = c
        .create_job(changed)
        .await
        .expect_err("a reused request id");
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    assert!(e.message().contains(&first.name), "{}", e.message());
    let mut repriced = req.clone();
    repriced.priority = Priority::Standard as i32;
    let again = create(&mut c, repriced).await;
    assert_eq!(
        again.name, first.name,
        "the priority changes no audio: the same job"
    );
    let mut other_tenant = req;
    other_tenant.tenant = "idem-2".into();
    let third = create(&mut c, other_tenant).await;
    assert_ne!(third.name, first.name, "the request id is per tenant");
    assert_all_succeeded(&mut c, &stack, &first.name, 20).await;
    assert_all_succeeded(&mut c, &stack, &third.name, 20).await;
    assert_eq!(stack.vendor_calls(), 40, "each job's items queued once");
}

/// The value of `name`'s newest point whose attributes include every `k=v` of `attrs`.
fn metric_value(received: &voxpool_e2e::otlp::Received, name: &str, attrs: &[&str]) -> Option<f64> {
    received
        .metrics()
        .iter()
        .filter(|m| m.service == "voxpool-jobs" && m.metric.name == name)
        .flat_map(|m| voxpool_e2e::otlp::points(&m.metric))
        .filter(|(_, have)| attrs.iter().all(|a| have.iter().any(|h| h == a)))
        .map(|(v, _)| v)
        .next_back()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jobs_metrics_count_jobs_items_and_calls_over_otlp() {
    let (endpoint, received) = voxpool_e2e::otlp::start().await;
    let stack = Stack::start(20).await;
    let redis = RedisServer::start();
    let a = stack.jobs(
        &redis.url(),
        4,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
        ],
        None,
    );
    let mut c = client(&a).await;
    let mut req = request("metered", 12);
    req.items[5].voice = Some(jpb::job_item_spec::Voice::PackId("vp_no_such_pack".into()));
    let job = create(&mut c, req).await;
    let end = ended(&mut c, &job.name).await;
    assert_eq!(state(&end), State::Failed, "{end:?}");
    let characters = end.characters_succeeded;
    assert!(characters > 0, "{end:?}");
    // Poll the receiver (the exports are the signal) until the summary is counted.
    let want: [(&str, &[&str], f64); 7] = [
        ("voxpool.jobs.created", &["priority=BATCH"], 1.0),
        ("voxpool.jobs.items", &["state=SUCCEEDED", "code=OK"], 11.0),
        (
            "voxpool.jobs.items",
            &["state=FAILED", "code=NOT_FOUND"],
            1.0,
        ),
        ("voxpool.jobs.attempts", &["code=OK"], 11.0),
        ("voxpool.jobs.attempts", &["code=NOT_FOUND"], 1.0),
        (
            "voxpool.jobs.characters",
            &["cached=false"],
            characters as f64,
        ),
        ("voxpool.jobs.finalized", &["state=FAILED"], 1.0),
    ];
    let until = Instant::now() + DEADLINE;
    loop {
        let seen: Vec<Option<f64>> = want
            .iter()
            .map(|(name, attrs, _)| metric_value(&received, name, attrs))
            .collect();
        if want.iter().zip(&seen).all(|((_, _, v), s)| *s == Some(*v)) {
            break;
        }
        assert!(
            Instant::now() < until,
            "metrics not as expected: want {want:?}, seen {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        metric_value(&received, "voxpool.jobs.items.in_flight", &[]),
        Some(0.0),
        "nothing held once the job ended"
    );
    for m in received.metrics() {
        if m.metric.name.starts_with("voxpool.jobs.") {
            for (_, attrs) in voxpool_e2e::otlp::points(&m.metric) {
                assert!(
                    attrs
                        .iter()
                        .all(|a| !a.contains("metered") && !a.contains("item-")),
                    "no tenant or item id as an attribute: {attrs:?}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_whose_audio_is_over_the_message_limit_is_spoken_in_parts_and_joined() {
    // A 100 KB message limit: a 20,000-character item (5 vendor chunks of 200 ms at 24 kHz,
    // about 48 KB of WAV) is refused whole with RESPONSE_TOO_LARGE; the worker splits it.
    let stack = Stack::start_with(20, &["--max-message-bytes", "102400"]).await;
    let redis = RedisServer::start();
    let a = stack.jobs(&redis.url(), 2, &[], None);
    let mut c = client(&a).await;
    let mut req = request("long", 2);
    let mut text = String::new();
    for i in 0.. {
        let sentence = format!("This is sentence {i:05} of a long chapter read aloud. ");
        if text.len() + sentence.len() > 20_000 {
            break;
        }
        text.push_str(&sentence);
    }
    req.items[1].text = text;
    let job = create(&mut c, req).await;
    assert_all_succeeded(&mut c, &stack, &job.name, 2).await;
    let object = stack
        .blob_dir()
        .join("jobs")
        .join(job.name.trim_start_matches("jobs/"))
        .join("item-00001.wav");
    let wav = std::fs::read(&object).expect("the long item's object");
    assert_eq!(&wav[..4], b"RIFF");
    let le =
        |at: usize| u32::from_le_bytes([wav[at], wav[at + 1], wav[at + 2], wav[at + 3]]) as usize;
    assert_eq!(
        le(4),
        wav.len() - 8,
        "one RIFF header whose size covers every part"
    );
    assert!(
        wav.len() > 40_000,
        "every chunk's audio is there: {} bytes",
        wav.len()
    );
    assert_eq!(
        wav.windows(4).filter(|w| *w == b"RIFF").count(),
        1,
        "the parts' own headers are gone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_jobs_pages_stay_put_while_jobs_are_created() {
    let stack = Stack::start(5).await;
    let redis = RedisServer::start();
    let a = stack.jobs(&redis.url(), 2, &[], None);
    let mut c = client(&a).await;
    let mut created = Vec::new();
    for _ in 0..3 {
        created.push(create(&mut c, request("pages", 1)).await.name);
    }
    let list = |token: String| jpb::ListJobsRequest {
        tenant: "pages".into(),
        page_size: 2,
        page_token: token,
    };
    let first = c
        .list_jobs(list(String::new()))
        .await
        .expect("page 1")
        .into_inner();
    let names =
        |r: &jpb::ListJobsResponse| r.jobs.iter().map(|j| j.name.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&first),
        vec![created[2].clone(), created[1].clone()],
        "newest first"
    );
    assert!(!first.next_page_token.is_empty());
    // Two jobs created between the pages do not shift the second page.
    for _ in 0..2 {
        create(&mut c, request("pages", 1)).await;
    }
    let second = c
        .list_jobs(list(first.next_page_token.clone()))
        .await
        .expect("page 2")
        .into_inner();
    assert_eq!(names(&second), vec![created[0].clone()], "{second:?}");
    assert!(second.next_page_token.is_empty(), "the last page");
    for bad in ["7", "x.y", "123.Not-A-Job"] {
        let e = c.list_jobs(list(bad.into())).await.expect_err(bad);
        assert_eq!(e.code(), Code::InvalidArgument, "{bad}: {e:?}");
        assert!(e.message().contains("page_token"), "{}", e.message());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_no_replica_acknowledges_is_refused_naming_it_and_still_runs() {
    let stack = Stack::start(20).await;
    let redis = RedisServer::start();
    // One acknowledgement asked of a store that has no replica: never given.
    let a = stack.jobs(&redis.url(), 4, &[], None);
    let strict = stack.jobs_on(
        &redis.url(),
        4,
        &[("VOXPOOL_JOBS_REPLICA_ACKS", "1")],
        None,
        &stack.blob_dir(),
        &format!("http://{}", stack.synthesis.addr),
    );
    let refused = client(&strict)
        .await
        .create_job(request("unacked", 5))
        .await
        .expect_err("no replica acknowledged it");
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert_eq!(
        voxpool_domain::contract::JobsReason::of(&refused),
        Some(voxpool_domain::contract::JobsReason::NotReplicated),
        "NOT_REPLICATED, not a store timeout: {refused:?}"
    );
    let name = refused
        .message()
        .split_whitespace()
        .find(|w| w.starts_with("jobs/"))
        .unwrap_or_else(|| panic!("the message names the job: {}", refused.message()))
        .to_owned();
    // Written, indexed and run: no orphan record.
    let mut c = client(&a).await;
    assert_all_succeeded(&mut c, &stack, &name, 5).await;
    let listed = c
        .list_jobs(jpb::ListJobsRequest {
            tenant: "unacked".into(),
            ..Default::default()
        })
        .await
        .expect("ListJobs")
        .into_inner();
    assert_eq!(
        listed
            .jobs
            .iter()
            .map(|j| j.name.as_str())
            .collect::<Vec<_>>(),
        [name.as_str()]
    );
}

/// A replica on its own blob store (another than the stack's), sharing `redis` and synthesis,
/// ready: the process, its store's folder and its log file.
async fn replica_elsewhere(
    stack: &Stack,
    redis: &RedisServer,
) -> (voxpool_e2e::Service, tempfile::TempDir, std::path::PathBuf) {
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let log = stack.dir.path().join("elsewhere.log");
    let b = stack.jobs_on(
        &redis.url(),
        4,
        &[],
        Some(&log),
        elsewhere.path(),
        &format!("http://{}", stack.synthesis.addr),
    );
    until_logged(&log, "workers ready").await;
    (b, elsewhere, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_on_another_blob_store_leaves_the_job_to_the_replicas_on_its_store() {
    const N: usize = 30;
    let stack = Stack::start(200).await;
    let redis = RedisServer::start();
    let a = stack.jobs(&redis.url(), 4, &[], None);
    let (b, elsewhere, log) = replica_elsewhere(&stack, &redis).await;
    let mut c = client(&a).await;
    let job = create(&mut c, request("stores", N)).await;
    // A job created on B wakes B's workers at once: they look at every active job now.
    let mut on_b = client(&b).await;
    let own = create(&mut on_b, request("stores-b", 1)).await;
    // Every object where the job's store is, none stranded in the other replica's.
    assert_all_succeeded(&mut c, &stack, &job.name, N).await;
    assert!(
        !elsewhere
            .path()
            .join("jobs")
            .join(job.name.trim_start_matches("jobs/"))
            .exists(),
        "no result written to the other store"
    );
    until_logged(&log, "another blob store").await;
    ended(&mut on_b, &own.name).await;
    let read = on_b
        .read_job_item_audio(jpb::ReadJobItemAudioRequest {
            name: format!("{}/items/item-00000", job.name),
        })
        .await;
    let Err(refused) = read else {
        panic!("a replica on another store served the audio")
    };
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert_eq!(
        voxpool_domain::contract::JobsReason::of(&refused),
        Some(voxpool_domain::contract::JobsReason::OtherBlobStore)
    );
}

/// The cause of the flake above ("no result written to the other store" under load): any
/// replica's finalizer could lease an ended job and write its summary to its own store. Here
/// only the replica on another store runs when the job ends, so before the fix it wrote the
/// summary there every time; now it leaves the job to a replica on the job's store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_job_is_summarized_only_by_a_replica_on_its_store() {
    let stack = Stack::start(50).await;
    let redis = RedisServer::start();
    // The job's replica, whose workers cannot reach synthesis: its items stay queued.
    let a = stack.jobs_on(
        &redis.url(),
        4,
        &[],
        None,
        &stack.blob_dir(),
        "http://127.0.0.1:1",
    );
    let job = create(&mut client(&a).await, request("summary-store", 3)).await;
    drop(a);
    let (b, elsewhere, log) = replica_elsewhere(&stack, &redis).await;
    let mut on_b = client(&b).await;
    on_b.cancel_job(jpb::CancelJobRequest {
        name: job.name.clone(),
    })
    .await
    .expect("CancelJob");
    // Several of B's finalizer rounds (every 250 ms) pass with the job due.
    let id = job.name.trim_start_matches("jobs/");
    for _ in 0..40 {
        assert!(
            !elsewhere.path().join("jobs").join(id).exists(),
            "no summary written to the other store"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    until_logged(&log, "its summary is left to the replicas on it").await;
    // A replica on the job's store comes back and writes it there.
    let _a = stack.jobs(&redis.url(), 4, &[], None);
    let summary = stack.blob_dir().join("jobs").join(id).join("summary.json");
    let until = Instant::now() + DEADLINE;
    while !summary.exists() {
        assert!(Instant::now() < until, "no summary in the job's store");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!elsewhere.path().join("jobs").join(id).exists());
}
