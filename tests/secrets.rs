//! Secrets never leak: after a run where the vendor rejects the key (401) and an admin call
//! carries a wrong token, neither the vendor credential, the admin token nor the client tokens
//! appear in any service log (at debug level), error message or error detail, while the
//! callers' identities (`token:voxctl`, `token:synthesis`) do appear in the logs.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
};

use voxpool_e2e::{Service, binary, start_with_stderr, voice};
use voxpool_proto::{
    scheduler::v1 as spb,
    synthesis::v1::{SynthesizeRequest, synthesize_request::Voice},
};

const VENDOR_KEY: &str = "sk-SECRET-vendor-key-123456";
const ADMIN_TOKEN: &str = "admin-SECRET-token-456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credential_or_admin_token_in_logs_or_errors_after_failing_vendors() {
    let dir = tempfile::tempdir().unwrap();
    // A fake OpenAI-compatible vendor that accepts only another key: ours gets 401.
    let mut vendor = Command::new(binary("voxpool-fake-vendor"))
        .args([
            "--vendor",
            "openai",
            "--listen",
            "127.0.0.1:0",
            "--key",
            "the-only-accepted-key",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut url = String::new();
    BufReader::new(vendor.stdout.take().unwrap())
        .read_line(&mut url)
        .unwrap();
    let url = url.trim().to_owned();
    let vendor = Service {
        child: vendor,
        addr: url.clone(),
    };
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[[pools]]\nid = \"openai-test\"\nprovider = \"openai\"\nmodel = \"gpt-4o-mini-tts\"\n\
             [[pools.upstreams]]\nid = \"acct\"\nbase_url = \"{url}\"\n\
             [[pools.upstreams.keys]]\nid = \"k1\"\ncapacity = 2\ncredential = {{ env = \"VOXPOOL_E2E_VENDOR_KEY\" }}\n\
             [[pools.upstreams.keys]]\nid = \"k2\"\ncapacity = 2\ncredential = {{ env = \"VOXPOOL_E2E_VENDOR_KEY\" }}\n"
        ) + voxpool_e2e::CLIENT_TOKENS_TOML,
    )
    .unwrap();
    let log = |name: &str| std::fs::File::create(dir.path().join(name)).unwrap();
    let mut cmd = Command::new(binary("voxpool-scheduler"));
    cmd.arg("--config")
        .arg(&config)
        .args(["--listen", "127.0.0.1:0"]);
    cmd.env("VOXPOOL_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("RUST_LOG", "debug");
    let scheduler = start_with_stderr(cmd, log("scheduler.log").into());
    let mut cmd = Command::new(binary("voxpool-synthesis"));
    cmd.arg("--config").arg(&config).args([
        "--listen",
        "127.0.0.1:0",
        "--scheduler",
        &format!("http://{}", scheduler.addr),
    ]);
    cmd.env("VOXPOOL_E2E_VENDOR_KEY", VENDOR_KEY)
        .env("RUST_LOG", "debug");
    let synthesis = start_with_stderr(cmd, log("synthesis.log").into());

    let mut client = voxpool_e2e::synthesis_client(&synthesis.addr).await;
    let snap = voice::snapshot("openai", "gpt-4o-mini-tts", "alloy", "openai-test");
    let mut errors = Vec::new();
    for _ in 0..3 {
        let err = client
            .synthesize(SynthesizeRequest {
                voice: Some(Voice::Snapshot(snap.to_pb())),
                text: "Hello.".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        errors.push(format!(
            "{err:?} {}",
            String::from_utf8_lossy(err.details())
        ));
    }
    assert!(
        errors[0].contains("KEY_INVALID") || errors[0].contains("401"),
        "the vendor's 401 reached the caller: {}",
        errors[0]
    );
    let mut sched = voxpool_e2e::scheduler_client(&scheduler.addr).await;
    let mut wrong = tonic::Request::new(spb::DisableKeyRequest {
        pool: "openai-test".into(),
        key_id: "acct/k1".into(),
    });
    let almost = &ADMIN_TOKEN[..ADMIN_TOKEN.len() - 1];
    wrong
        .metadata_mut()
        .insert("authorization", format!("Bearer {almost}").parse().unwrap());
    let err = sched.disable_key(wrong).await.unwrap_err();
    errors.push(format!("{err:?}"));

    drop((synthesis, scheduler, vendor));
    let logs = ["scheduler.log", "synthesis.log"]
        .map(|f| std::fs::read_to_string(dir.path().join(f)).unwrap());
    assert!(
        logs[1].contains("vendor call failed"),
        "synthesis logged the failures at all"
    );
    assert!(
        logs[0].contains("token:synthesis") && logs[1].contains("token:voxctl"),
        "each service logged who called it"
    );
    for (what, text) in logs
        .iter()
        .map(|l| ("log", l.as_str()))
        .chain(errors.iter().map(|e| ("error", e.as_str())))
    {
        for secret in [
            VENDOR_KEY,
            ADMIN_TOKEN,
            almost,
            &VENDOR_KEY[..20],
            voxpool_e2e::SYNTHESIS_TOKEN,
            voxpool_e2e::VOXCTL_TOKEN,
        ] {
            assert!(
                !text.contains(secret),
                "a secret appeared in a {what}: {text}"
            );
        }
    }
}
