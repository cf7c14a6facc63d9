//! Connection limits on the real binaries (docs/OPERATIONS.md, "Connections"): connections
//! that never send a request, trickle one, or sit idle are closed within the configured times
//! while a real caller on the same listener keeps being served; a connection over the cap is
//! refused with an answer that names the cap, on a gRPC listener and on the HTTP front.

use std::{
    process::Command,
    time::{Duration, Instant},
};

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
};
use voxpool_e2e::{binary, scheduler_client, start, start_http, workspace_root};
use voxpool_proto::scheduler::v1 as spb;

const CONFIG: &str = "deploy/config/example.toml";
/// What an HTTP/2 client sends first: the preface and an empty SETTINGS frame.
const H2_START: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

fn scheduler(extra: &[&str]) -> voxpool_e2e::Service {
    let mut cmd = Command::new(binary("voxpool-scheduler"));
    cmd.current_dir(workspace_root())
        .args(["--config", CONFIG, "--listen", "127.0.0.1:0"])
        .args(extra);
    start(cmd)
}

/// A synthesis with its HTTP front (key `sk-connections-test`) beside `scheduler`, with `extra`
/// flags: the process and the front's `host:port`.
fn synthesis_http(scheduler: &str, extra: &[&str]) -> (voxpool_e2e::Service, String) {
    let mut cmd = Command::new(binary("voxpool-synthesis"));
    cmd.current_dir(workspace_root())
        .args([
            "--config",
            CONFIG,
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
        ])
        .args(extra)
        .args([
            "--scheduler",
            &format!("http://{scheduler}"),
            "--catalog",
            "http://127.0.0.1:9",
        ])
        .env("VOXPOOL_HTTP_API_KEY", "sk-connections-test");
    let (synthesis, url) = start_http(cmd);
    let host = url
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_owned();
    (synthesis, host)
}

/// Reads until the server closes `tcp`; what it sent. Fails after 20 s.
async fn until_closed(mut tcp: TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(20), tcp.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return got,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!("the server kept a connection open for 20 s"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_trickling_and_idle_connections_are_closed_while_real_callers_are_served() {
    let scheduler = scheduler(&["--head-timeout", "1s", "--idle-timeout", "3s"]);
    let addr = scheduler.addr.clone();
    let opened = Instant::now();
    // 100 connections that send nothing, 20 that trickle the HTTP/2 preface a byte every
    // 300 ms, 20 that start HTTP/2 properly and then send no request.
    let mut silent = Vec::new();
    for _ in 0..100 {
        let tcp = TcpStream::connect(&addr).await.expect("connect");
        silent.push(tokio::spawn(async move {
            until_closed(tcp).await;
            opened.elapsed()
        }));
    }
    let mut trickling = Vec::new();
    for _ in 0..20 {
        let mut tcp = TcpStream::connect(&addr).await.expect("connect");
        trickling.push(tokio::spawn(async move {
            for byte in H2_START {
                if tcp.write_all(&[*byte]).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            until_closed(tcp).await;
            opened.elapsed()
        }));
    }
    let mut idle = Vec::new();
    for _ in 0..20 {
        let mut tcp = TcpStream::connect(&addr).await.expect("connect");
        tcp.write_all(H2_START).await.expect("preface");
        idle.push(tokio::spawn(async move {
            until_closed(tcp).await;
            opened.elapsed()
        }));
    }
    // A real caller keeps being served the whole time.
    let mut client = scheduler_client(&addr).await;
    let mut served = 0;
    while opened.elapsed() < Duration::from_secs(4) {
        client
            .get_pool_status(spb::GetPoolStatusRequest {
                pool: "espeak-local".into(),
            })
            .await
            .expect("a real caller is served beside the slow connections");
        served += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(served > 10, "{served} calls");
    for task in silent {
        let closed = task.await.expect("silent connection task");
        assert!(
            closed >= Duration::from_secs(1) && closed < Duration::from_secs(3),
            "a silent connection closed after {closed:?} (head timeout 1 s)"
        );
    }
    for task in trickling {
        let closed = task.await.expect("trickling connection task");
        // 33 bytes at 300 ms each would take ~10 s: cut off at the head timeout instead.
        assert!(
            closed < Duration::from_secs(3),
            "a trickling connection closed after {closed:?}"
        );
    }
    for task in idle {
        let closed = task.await.expect("idle connection task");
        assert!(
            closed >= Duration::from_secs(3) && closed < Duration::from_secs(6),
            "an idle HTTP/2 connection closed after {closed:?} (idle timeout 3 s)"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_over_the_cap_is_refused_naming_the_cap_on_grpc_and_http() {
    let scheduler = scheduler(&["--max-connections", "3"]);
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut tcp = TcpStream::connect(&scheduler.addr).await.expect("connect");
        tcp.write_all(H2_START).await.expect("preface");
        held.push(tcp);
    }
    let mut client = scheduler_client(&scheduler.addr).await;
    let err = client
        .get_pool_status(spb::GetPoolStatusRequest {
            pool: "espeak-local".into(),
        })
        .await
        .expect_err("a fourth connection is refused");
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    assert!(err.message().contains("--max-connections"), "{err:?}");
    assert!(err.message().contains("3 connections"), "{err:?}");
    drop(held);

    let (_synthesis, host) = synthesis_http(&scheduler.addr, &["--max-connections", "2"]);
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut tcp = TcpStream::connect(&host).await.expect("connect");
        tcp.write_all(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("request");
        let mut buf = [0u8; 4096];
        let n = tcp.read(&mut buf).await.expect("answer");
        assert!(n > 0);
        held.push(tcp);
    }
    let mut tcp = TcpStream::connect(&host).await.expect("connect");
    tcp.write_all(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("request");
    let answer = String::from_utf8_lossy(&until_closed(tcp).await).into_owned();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.contains("\"code\":\"too_many_connections\""),
        "{answer}"
    );
    assert!(answer.contains("--max-connections"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 1"),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_body_trickled_past_the_body_timeout_is_answered_408() {
    let scheduler = scheduler(&[]);
    let (_synthesis, host) = synthesis_http(&scheduler.addr, &["--body-timeout", "1s"]);
    let mut tcp = TcpStream::connect(&host).await.expect("connect");
    tcp.write_all(
        b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-connections-test\r\n\
          Content-Type: application/json\r\nContent-Length: 200\r\n\r\n{",
    )
    .await
    .expect("head");
    // A byte every 200 ms: no pause reaches the limit, the whole body would take 40 s.
    for _ in 0..20 {
        if tcp.write_all(b" ").await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let answer = String::from_utf8_lossy(&until_closed(tcp).await).into_owned();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"code\":\"body_timeout\""), "{answer}");
    assert!(answer.contains("--body-timeout"), "{answer}");
}
