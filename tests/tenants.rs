//! Tenant bindings on real processes (the jobs test stack, `jobs/stack.rs`, with three more
//! `[[client_tokens]]`: `team-a-app` bound to team-a, `both-teams` bound to team-a and team-b,
//! `jobs-team-a` a worker token bound to team-a; the tests' own `voxctl` token is unbound).
//!
//! A token bound to team-a can neither read, list the items of, download, cancel nor delete a
//! team-b job (each RPC is PERMISSION_DENIED `TENANT_NOT_ALLOWED` naming the job's tenant, and
//! the job is untouched), cannot create or list for team-b, and lists team-a's jobs when it
//! names no tenant; an unbound token still acts for every tenant, and the jobs workers'
//! unbound token runs the items of every tenant. Synthesis refuses a tenant outside the
//! caller's binding before any lease or vendor call and gives an empty one the caller's only
//! tenant (seen in the scheduler's grants by tenant). A worker token bound to one tenant fails
//! the items of another by name and keeps working.
//!
//! Synchronisation is by polling (GetJob, the OTLP receiver), bounded by `stack::DEADLINE`.

#[allow(dead_code)]
#[path = "jobs/stack.rs"]
mod stack;

use std::time::Instant;

use stack::*;
use tonic::{Code, Status, service::interceptor::InterceptedService, transport::Channel};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};
use voxpool_domain::{contract::AuthReason, secret::Secret};
use voxpool_e2e::otlp;
use voxpool_proto::{
    jobs::v1::{self as jpb, job::State, jobs_client::JobsClient},
    synthesis::v1::{SynthesizeRequest, synthesis_client::SynthesisClient, synthesize_request},
};
use voxpool_runtime::auth::ClientToken;
use voxpool_testkit::RedisServer;

const TEAM_A_TOKEN: &str = "team-a-app-token-0123456789";
const BOTH_TOKEN: &str = "both-teams-token-0123456789";
const JOBS_TEAM_A_TOKEN: &str = "jobs-team-a-token-0123456789";

/// Token files and the `[[client_tokens]]` that read them.
struct Tokens {
    _dir: tempfile::TempDir,
    toml: String,
}

fn tokens() -> Tokens {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut toml = String::new();
    for (name, token, services, tenants) in [
        (
            "team-a-app",
            TEAM_A_TOKEN,
            r#"["synthesis", "jobs"]"#,
            r#"["team-a"]"#,
        ),
        (
            "both-teams",
            BOTH_TOKEN,
            r#"["synthesis", "jobs"]"#,
            r#"["team-a", "team-b"]"#,
        ),
        (
            "jobs-team-a",
            JOBS_TEAM_A_TOKEN,
            r#"["synthesis"]"#,
            r#"["team-a"]"#,
        ),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("{token}\n")).expect("token file");
        toml.push_str(&format!(
            "\n[[client_tokens]]\nname = \"{name}\"\ntoken = {{ file = \"{}\" }}\nservices = {services}\ntenants = {tenants}\n",
            path.display()
        ));
    }
    Tokens { _dir: dir, toml }
}

type Authed = InterceptedService<Channel, ClientToken>;

fn bearer(token: &str) -> ClientToken {
    ClientToken::new(&Secret::new(token)).expect("a header value")
}

async fn jobs_as(service: &voxpool_e2e::Service, token: &str) -> JobsClient<Authed> {
    JobsClient::with_interceptor(voxpool_e2e::connect(&service.addr).await, bearer(token))
}

/// A jobs replica that authenticates its callers with the stack's config, its workers
/// presenting `worker_token` to synthesis.
fn jobs_replica(stack: &Stack, redis: &RedisServer, worker_token: &str) -> voxpool_e2e::Service {
    let config = stack.dir.path().join("config.toml");
    let config = config.to_str().expect("a UTF-8 path");
    stack.jobs(
        &redis.url(),
        2,
        &[
            ("VOXPOOL_CONFIG", config),
            ("VOXPOOL_CLIENT_TOKEN", worker_token),
        ],
        None,
    )
}

/// Asserts `e` is PERMISSION_DENIED `TENANT_NOT_ALLOWED` with each of `says` in its message.
fn assert_not_allowed(e: &Status, says: &[&str]) {
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert_eq!(
        AuthReason::of(e),
        Some(AuthReason::TenantNotAllowed),
        "{e:?}"
    );
    for part in says {
        assert!(e.message().contains(part), "{part:?} in {:?}", e.message());
    }
}

async fn get_as(c: &mut JobsClient<Authed>, name: &str) -> Result<jpb::Job, Status> {
    c.get_job(jpb::GetJobRequest { name: name.into() })
        .await
        .map(tonic::Response::into_inner)
}

async fn list_as(c: &mut JobsClient<Authed>, tenant: &str) -> Result<Vec<jpb::Job>, Status> {
    c.list_jobs(jpb::ListJobsRequest {
        tenant: tenant.into(),
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner().jobs)
}

async fn create_as(c: &mut JobsClient<Authed>, tenant: &str, n: usize) -> Result<jpb::Job, Status> {
    c.create_job(request(tenant, n))
        .await
        .map(tonic::Response::into_inner)
}

/// The audio of `item` of job `name`, all of it.
async fn read_as(c: &mut JobsClient<Authed>, name: &str, item: &str) -> Result<Vec<u8>, Status> {
    let mut stream = c
        .read_job_item_audio(jpb::ReadJobItemAudioRequest {
            name: format!("{name}/items/{item}"),
        })
        .await?
        .into_inner();
    let mut audio = Vec::new();
    while let Some(message) = stream.message().await? {
        audio.extend(message.data);
    }
    Ok(audio)
}

/// Polls GetJob (as an unbound caller) until job `name` has ended.
async fn ended_as(c: &mut JobsClient<Authed>, name: &str) -> jpb::Job {
    let until = Instant::now() + DEADLINE;
    loop {
        let job = get_as(c, name).await.expect("GetJob");
        if job.end_time.is_some() {
            return job;
        }
        assert!(Instant::now() < until, "{name} never ended: {job:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_bound_to_team_a_can_neither_read_download_cancel_nor_delete_a_team_b_job() {
    let tokens = tokens();
    // 8 items of 300 ms on 2 workers: the job runs for over a second after CreateJob answers.
    let stack = Stack::start_with_tokens(300, &[], &tokens.toml, &[]).await;
    let redis = RedisServer::start();
    let jobs = jobs_replica(&stack, &redis, voxpool_e2e::VOXCTL_TOKEN);
    let mut anyone = jobs_as(&jobs, voxpool_e2e::VOXCTL_TOKEN).await;
    let mut team_a = jobs_as(&jobs, TEAM_A_TOKEN).await;
    let theirs = create_as(&mut anyone, "team-b", 8)
        .await
        .expect("CreateJob for team-b");
    let name = theirs.name.as_str();
    let says = [
        name,
        "\"team-b\"",
        "token:team-a-app",
        "[[client_tokens]] entry \"team-a-app\"",
    ];

    // Cancelled while it runs, it would end CANCELLED: it ends SUCCEEDED, every item done.
    let e = team_a
        .cancel_job(jpb::CancelJobRequest { name: name.into() })
        .await
        .expect_err("CancelJob of team-b's job");
    assert_not_allowed(&e, &says);
    let done = ended_as(&mut anyone, name).await;
    assert_eq!(state(&done), State::Succeeded, "{done:?}");
    assert_eq!(counts(&done).succeeded, 8, "{done:?}");

    let e = get_as(&mut team_a, name)
        .await
        .expect_err("GetJob of team-b's job");
    assert_not_allowed(&e, &says);
    let e = team_a
        .list_job_items(jpb::ListJobItemsRequest {
            name: name.into(),
            ..Default::default()
        })
        .await
        .expect_err("ListJobItems of team-b's job");
    assert_not_allowed(&e, &says);
    let e = read_as(&mut team_a, name, "item-00000")
        .await
        .expect_err("ReadJobItemAudio of team-b's job");
    assert_not_allowed(&e, &says);
    let e = team_a
        .delete_job(jpb::DeleteJobRequest { name: name.into() })
        .await
        .expect_err("DeleteJob of team-b's job");
    assert_not_allowed(&e, &says);

    // Untouched: its record and audio are all there for a caller that may act for team-b.
    let mut both = jobs_as(&jobs, BOTH_TOKEN).await;
    let seen = get_as(&mut both, name).await.expect("GetJob as both-teams");
    assert_eq!(counts(&seen).succeeded, 8, "{seen:?}");
    let audio = read_as(&mut both, name, "item-00000")
        .await
        .expect("its audio");
    assert!(audio.starts_with(b"RIFF"), "{} bytes", audio.len());

    // team-a's own job: every RPC answers.
    let ours = create_as(&mut team_a, "team-a", 1)
        .await
        .expect("CreateJob for team-a");
    let done = ended_as(&mut anyone, &ours.name).await;
    assert_eq!(state(&done), State::Succeeded, "{done:?}");
    get_as(&mut team_a, &ours.name)
        .await
        .expect("GetJob of its own");
    let items = team_a
        .list_job_items(jpb::ListJobItemsRequest {
            name: ours.name.clone(),
            ..Default::default()
        })
        .await
        .expect("ListJobItems of its own")
        .into_inner()
        .items;
    assert_eq!(items.len(), 1);
    read_as(&mut team_a, &ours.name, "item-00000")
        .await
        .expect("its own audio");
    team_a
        .delete_job(jpb::DeleteJobRequest {
            name: ours.name.clone(),
        })
        .await
        .expect("DeleteJob of its own");

    // The unbound token acts on team-b's job as before.
    anyone
        .delete_job(jpb::DeleteJobRequest { name: name.into() })
        .await
        .expect("DeleteJob as the unbound token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_bound_to_team_a_creates_and_lists_for_team_a_only_and_an_unbound_token_sees_every_tenant()
 {
    let tokens = tokens();
    let stack = Stack::start_with_tokens(20, &[], &tokens.toml, &[]).await;
    let redis = RedisServer::start();
    // The workers' token is unbound (as make run's and deploy/'s): it runs every tenant's items.
    let jobs = jobs_replica(&stack, &redis, voxpool_e2e::VOXCTL_TOKEN);
    let mut anyone = jobs_as(&jobs, voxpool_e2e::VOXCTL_TOKEN).await;
    let mut team_a = jobs_as(&jobs, TEAM_A_TOKEN).await;
    let mut both = jobs_as(&jobs, BOTH_TOKEN).await;
    let theirs = create_as(&mut anyone, "team-b", 1)
        .await
        .expect("CreateJob for team-b");

    let e = create_as(&mut team_a, "team-b", 1)
        .await
        .expect_err("CreateJob for team-b");
    assert_not_allowed(
        &e,
        &["\"team-b\"", "token:team-a-app", "tenant \"team-a\" only"],
    );
    let e = list_as(&mut team_a, "team-b")
        .await
        .expect_err("ListJobs of team-b");
    assert_not_allowed(&e, &["\"team-b\"", "token:team-a-app"]);
    let b = list_as(&mut anyone, "team-b")
        .await
        .expect("ListJobs of team-b");
    assert_eq!(
        b.iter().map(|j| j.name.as_str()).collect::<Vec<_>>(),
        [theirs.name.as_str()],
        "the refused CreateJob created nothing"
    );

    // Naming no tenant, a caller bound to one acts for it.
    let implicit = create_as(&mut team_a, "", 1)
        .await
        .expect("CreateJob naming no tenant");
    assert_eq!(implicit.tenant, "team-a", "{implicit:?}");
    let explicit = create_as(&mut team_a, "team-a", 1)
        .await
        .expect("CreateJob for team-a");
    let mut listed: Vec<String> = list_as(&mut team_a, "")
        .await
        .expect("ListJobs naming no tenant")
        .into_iter()
        .map(|j| j.name)
        .collect();
    listed.sort();
    let mut want = vec![implicit.name.clone(), explicit.name.clone()];
    want.sort();
    assert_eq!(listed, want, "team-a's jobs, and only those");
    assert_eq!(
        list_as(&mut team_a, "team-a")
            .await
            .expect("ListJobs")
            .len(),
        2
    );

    // Bound to two tenants, naming none is the shared tenant, which is not one of them.
    let e = list_as(&mut both, "")
        .await
        .expect_err("ListJobs naming no tenant");
    assert_not_allowed(
        &e,
        &["token:both-teams", "\"team-a\", \"team-b\"", "name one"],
    );
    let e = create_as(&mut both, "", 1)
        .await
        .expect_err("CreateJob naming no tenant");
    assert_not_allowed(&e, &["token:both-teams", "name one"]);
    assert_eq!(
        list_as(&mut both, "team-b").await.expect("ListJobs").len(),
        1
    );

    // The unbound token sees every tenant's jobs, and the workers ran them all.
    assert_eq!(
        list_as(&mut anyone, "team-a")
            .await
            .expect("ListJobs")
            .len(),
        2
    );
    assert!(list_as(&mut anyone, "").await.expect("ListJobs").is_empty());
    for name in [&theirs.name, &implicit.name, &explicit.name] {
        let done = ended_as(&mut anyone, name).await;
        assert_eq!(state(&done), State::Succeeded, "{done:?}");
    }
}

fn speak(tenant: &str) -> SynthesizeRequest {
    let voice = voxpool_fake_vendors::snapshot("openai", "tts-1", "alloy");
    SynthesizeRequest {
        voice: Some(synthesize_request::Voice::Snapshot(voice.to_pb())),
        text: format!("Spoken for {tenant:?}."),
        tenant: tenant.into(),
        ..Default::default()
    }
}

/// The scheduler's `voxpool.scheduler.grants` points of the latest export as (tenant, count).
fn grants_by_tenant(received: &otlp::Received) -> Vec<(String, f64)> {
    let latest = received
        .metrics()
        .into_iter()
        .rfind(|m| m.metric.name == "voxpool.scheduler.grants");
    latest
        .map(|m| otlp::points(&m.metric))
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(count, attrs)| {
            let tenant = attrs.iter().find_map(|a| a.strip_prefix("tenant="))?;
            Some((tenant.to_owned(), count))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synthesis_refuses_a_tenant_outside_the_callers_binding_and_gives_an_empty_one_its_only_tenant()
 {
    let tokens = tokens();
    let (endpoint, received) = otlp::start().await;
    let scheduler_env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
    ];
    let stack = Stack::start_with_tokens(20, &[], &tokens.toml, &scheduler_env).await;
    let channel = voxpool_e2e::connect(&stack.synthesis.addr).await;
    let mut team_a = SynthesisClient::with_interceptor(channel.clone(), bearer(TEAM_A_TOKEN));
    let mut both = SynthesisClient::with_interceptor(channel.clone(), bearer(BOTH_TOKEN));
    let mut anyone = SynthesisClient::with_interceptor(channel, bearer(voxpool_e2e::VOXCTL_TOKEN));

    let says = [
        "\"team-b\"",
        "token:team-a-app",
        "[[client_tokens]] entry \"team-a-app\"",
    ];
    let e = team_a
        .synthesize(speak("team-b"))
        .await
        .expect_err("Synthesize for team-b");
    assert_not_allowed(&e, &says);
    let e = team_a
        .synthesize_stream(speak("team-b"))
        .await
        .expect_err("SynthesizeStream for team-b");
    assert_not_allowed(&e, &says);
    let e = both
        .synthesize(speak(""))
        .await
        .expect_err("Synthesize naming no tenant");
    assert_not_allowed(&e, &["token:both-teams", "name one"]);
    assert_eq!(stack.vendor_calls(), 0, "refused before any vendor call");

    // Allowed: team-a's token naming no tenant (it speaks as team-a), both-teams for team-b,
    // the unbound token for any tenant.
    team_a
        .synthesize(speak(""))
        .await
        .expect("Synthesize naming no tenant");
    let mut stream = team_a
        .synthesize_stream(speak(""))
        .await
        .expect("SynthesizeStream naming no tenant")
        .into_inner();
    while stream.message().await.expect("audio").is_some() {}
    both.synthesize(speak("team-b"))
        .await
        .expect("Synthesize for team-b");
    anyone
        .synthesize(speak("team-z"))
        .await
        .expect("Synthesize for any tenant");
    assert_eq!(stack.vendor_calls(), 4);

    // The scheduler granted team-a's two leases as team-a, none as the shared tenant.
    let until = Instant::now() + DEADLINE;
    let mut grants = grants_by_tenant(&received);
    while grants.iter().map(|(_, n)| n).sum::<f64>() < 4.0 {
        assert!(Instant::now() < until, "grants never exported: {grants:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        grants = grants_by_tenant(&received);
    }
    grants.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        grants,
        [
            ("team-a".to_owned(), 2.0),
            ("team-b".to_owned(), 1.0),
            ("team-z".to_owned(), 1.0)
        ],
        "grants by tenant"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_worker_token_bound_to_one_tenant_fails_another_tenants_items_by_name_and_keeps_working()
 {
    let tokens = tokens();
    let stack = Stack::start_with_tokens(20, &[], &tokens.toml, &[]).await;
    let redis = RedisServer::start();
    let jobs = jobs_replica(&stack, &redis, JOBS_TEAM_A_TOKEN);
    let mut anyone = jobs_as(&jobs, voxpool_e2e::VOXCTL_TOKEN).await;
    let foreign = create_as(&mut anyone, "team-b", 2)
        .await
        .expect("CreateJob for team-b");
    let own = create_as(&mut anyone, "team-a", 2)
        .await
        .expect("CreateJob for team-a");

    let done = ended_as(&mut anyone, &foreign.name).await;
    assert_eq!(state(&done), State::Failed, "{done:?}");
    let items = anyone
        .list_job_items(jpb::ListJobItemsRequest {
            name: foreign.name.clone(),
            ..Default::default()
        })
        .await
        .expect("ListJobItems")
        .into_inner()
        .items;
    assert_eq!(items.len(), 2);
    for item in &items {
        let error = item.error.as_ref().expect("a failed item's error");
        assert_eq!(error.code, "PERMISSION_DENIED", "{item:?}");
        assert_eq!(error.reason, "TENANT_NOT_ALLOWED", "{item:?}");
        assert!(
            error.message.contains("token:jobs-team-a") && error.message.contains("\"team-b\""),
            "names the worker token and the tenant: {item:?}"
        );
        assert_eq!(item.attempts, 1, "not retried: {item:?}");
    }
    let done = ended_as(&mut anyone, &own.name).await;
    assert_eq!(state(&done), State::Succeeded, "{done:?}");
    assert_eq!(
        stack.vendor_calls(),
        2,
        "only team-a's items reached the vendor"
    );
    // Never paused as a replica that cannot work (that would have turned it NOT_SERVING and
    // handed the items back until their delivery limit).
    let mut health = HealthClient::new(voxpool_e2e::connect(&jobs.addr).await);
    let now = health
        .check(HealthCheckRequest::default())
        .await
        .expect("health")
        .into_inner();
    assert_eq!(now.status, ServingStatus::Serving as i32, "{now:?}");
}
