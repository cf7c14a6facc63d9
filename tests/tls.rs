//! TLS on our own hops: a scheduler serving TLS (rustls) and a synthesis replica reaching it
//! over `https://` with a private CA from `VOXPOOL_TLS_CA` produce speech; without the CA the
//! same synthesis cannot trust the scheduler and says UNAVAILABLE.

use std::{process::Command, time::Duration};

use tonic::{
    Code,
    transport::{Certificate, Channel, ClientTlsConfig, Identity},
};
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
use voxpool_domain::contract::AuthReason;
use voxpool_e2e::certs::{ca, leaf};

use voxpool_e2e::{binary, start, voice, workspace_root};
use voxpool_proto::synthesis::v1::{SynthesizeRequest, synthesize_request::Voice};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synthesis_reaches_a_tls_scheduler_with_a_private_ca() {
    let dir = tempfile::tempdir().unwrap();
    let cert =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .unwrap();
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).unwrap();
    let mut cmd = Command::new(binary("voxpool-scheduler"));
    cmd.current_dir(workspace_root())
        .args([
            "--config",
            "deploy/config/example.toml",
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
        ])
        .arg(&cert_path)
        .arg("--tls-key")
        .arg(&key_path);
    let scheduler = start(cmd);
    let synthesis_with = |ca: Option<&std::path::Path>| {
        let mut cmd = Command::new(binary("voxpool-synthesis"));
        cmd.current_dir(workspace_root())
            .args([
                "--config",
                "deploy/config/example.toml",
                "--listen",
                "127.0.0.1:0",
                "--scheduler",
            ])
            .arg(format!("https://{}", scheduler.addr));
        match ca {
            Some(ca) => cmd.env("VOXPOOL_TLS_CA", ca),
            None => cmd.env_remove("VOXPOOL_TLS_CA"),
        };
        start(cmd)
    };
    let request = || SynthesizeRequest {
        voice: Some(Voice::Snapshot(
            voice::snapshot("espeak", "espeak-ng", "en-us", "espeak-local").to_pb(),
        )),
        text: "Over TLS.".into(),
        ..Default::default()
    };
    let trusted = synthesis_with(Some(&cert_path));
    let mut client = voxpool_e2e::synthesis_client(&trusted.addr).await;
    let audio = client
        .synthesize(request())
        .await
        .expect("synthesized over TLS")
        .into_inner()
        .audio;
    assert_eq!(&audio[0..4], b"RIFF");

    let untrusted = synthesis_with(None);
    let mut client = voxpool_e2e::synthesis_client(&untrusted.addr).await;
    let err = client.synthesize(request()).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
}

/// A client certificate the server's `--tls-client-ca` did not sign gets its caller a prompt,
/// typed refusal every time: UNAUTHENTICATED `CLIENT_CERTIFICATE_REJECTED` naming the
/// certificate, from the server itself and, through a synthesis replica holding such a
/// certificate, FAILED_PRECONDITION for that replica's caller. The handshake used to fail
/// instead, after the client (TLS 1.3) had counted it done: the client saw its connection
/// vanish (CANCELLED, a broken pipe, or the alert, by turns) and a retrying caller, such as
/// synthesis, waited until its deadline (DEADLINE_EXCEEDED).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsigned_client_certificate_is_refused_by_name_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let ca = ca("voxpool tls test client CA");
    let (server_cert, server_key) = leaf("scheduler", None);
    let (signed_cert, signed_key) = leaf("synthesis", Some(&ca));
    let (rogue_cert, rogue_key) = leaf("rogue", None);
    let server_cert_path = write("server.pem", &server_cert);
    let mut cmd = Command::new(binary("voxpool-scheduler"));
    cmd.current_dir(workspace_root())
        .args([
            "--config",
            "deploy/config/example.toml",
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
        ])
        .arg(&server_cert_path)
        .arg("--tls-key")
        .arg(write("server.key", &server_key))
        .arg("--tls-client-ca")
        .arg(write("ca.pem", &ca.pem()));
    let scheduler = start(cmd);
    voxpool_runtime::limits::install_crypto_provider();
    let check = |identity: Option<(&str, &str)>| {
        let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&server_cert));
        if let Some((cert, key)) = identity {
            tls = tls.identity(Identity::from_pem(cert, key));
        }
        // A new connection each time.
        let channel = Channel::from_shared(format!("https://{}", scheduler.addr))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect_lazy();
        let mut request = tonic::Request::new(HealthCheckRequest::default());
        request.set_timeout(Duration::from_secs(10));
        async move { HealthClient::new(channel).check(request).await }
    };
    for attempt in 1..=10 {
        let refused = check(Some((&rogue_cert, &rogue_key)))
            .await
            .expect_err("an unsigned certificate is refused");
        assert_eq!(
            refused.code(),
            Code::Unauthenticated,
            "attempt {attempt}: {refused:?}"
        );
        assert_eq!(
            AuthReason::of(&refused),
            Some(AuthReason::ClientCertificateRejected),
            "attempt {attempt}: {refused:?}"
        );
        assert!(
            refused.message().contains("CN=rogue") && refused.message().contains("--tls-client-ca"),
            "{}",
            refused.message()
        );
    }
    // The others are served on the same listener: a signed certificate, and none at all.
    check(Some((&signed_cert, &signed_key)))
        .await
        .expect("a signed certificate is served");
    check(None).await.expect("health needs no certificate");

    // A synthesis replica holding the unsigned certificate: its caller is told at once.
    let mut cmd = Command::new(binary("voxpool-synthesis"));
    cmd.current_dir(workspace_root())
        .args([
            "--config",
            "deploy/config/example.toml",
            "--listen",
            "127.0.0.1:0",
            "--scheduler",
        ])
        .arg(format!("https://{}", scheduler.addr))
        .env("VOXPOOL_TLS_CA", &server_cert_path)
        .env("VOXPOOL_TLS_CLIENT_CERT", write("rogue.pem", &rogue_cert))
        .env("VOXPOOL_TLS_CLIENT_KEY", write("rogue.key", &rogue_key));
    let synthesis = start(cmd);
    let mut request = tonic::Request::new(SynthesizeRequest {
        voice: Some(Voice::Snapshot(
            voice::snapshot("espeak", "espeak-ng", "en-us", "espeak-local").to_pb(),
        )),
        text: "Over TLS.".into(),
        ..Default::default()
    });
    request.set_timeout(Duration::from_secs(30));
    let refused = voxpool_e2e::synthesis_client(&synthesis.addr)
        .await
        .synthesize(request)
        .await
        .expect_err("the scheduler refuses the replica's certificate");
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(
        refused.message().contains("--tls-client-ca"),
        "{}",
        refused.message()
    );
}
