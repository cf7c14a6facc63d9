//! TLS on our own hops: a scheduler serving TLS (rustls) and a synthesis replica reaching it
//! over `https://` with a private CA from `VOXPOOL_TLS_CA` produce speech; without the CA the
//! same synthesis cannot trust the scheduler and says UNAVAILABLE.

use std::process::Command;

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
