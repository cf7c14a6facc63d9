//! `open` with a closed gate, against a bare TCP server that reads what arrives.

use std::time::Duration;

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpListener,
};

use super::{Gate, open, shared_client};

/// Reads from `stream` into `buf` until it holds `needle`.
async fn read_until(stream: &mut tokio::net::TcpStream, buf: &mut Vec<u8>, needle: &[u8]) {
    let mut piece = [0u8; 4096];
    while !buf.windows(needle.len()).any(|w| w == needle) {
        let n = stream.read(&mut piece).await.expect("read");
        assert!(n > 0, "the connection closed before {needle:?} arrived");
        buf.extend_from_slice(&piece[..n]);
    }
}

/// What arrives on `stream` up to the end of a request's head. Bounded only so that a gate
/// holding the head too fails instead of hanging.
async fn head_of(stream: &mut tokio::net::TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    tokio::time::timeout(
        Duration::from_secs(30),
        read_until(stream, &mut got, b"\r\n\r\n"),
    )
    .await
    .expect("the head never came while the gate was closed");
    got
}

/// A bare server, and a client task posting `body` to it through `open` held at `gate`: the
/// server's side of the connection and the client's answer (its status).
async fn post_through(
    gate: &Gate,
    body: &'static str,
) -> (
    tokio::net::TcpStream,
    tokio::task::JoinHandle<Result<u16, super::VendorFailure>>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/speak", listener.local_addr().expect("addr"));
    let client = tokio::spawn({
        let gate = gate.clone();
        async move {
            let builder = shared_client()
                .expect("client")
                .post(url)
                .header("content-type", "application/json")
                .body(body);
            open("test", builder, Duration::from_secs(10), None, &gate)
                .await
                .map(|o| o.status.as_u16())
        }
    });
    let (stream, _) = listener.accept().await.expect("accept");
    (stream, client)
}

#[tokio::test]
async fn the_head_goes_at_once_and_the_body_only_once_the_gate_opens() {
    let (opener, gate) = Gate::closed();
    let body = r#"{"input":"held until the charge is written"}"#;
    let (mut stream, client) = post_through(&gate, body).await;
    let mut got = head_of(&mut stream).await;
    // The head arrived while the gate is closed, with the body's length and none of it.
    let head = String::from_utf8_lossy(&got).to_ascii_lowercase();
    assert!(!gate.is_open());
    assert!(
        head.contains(&format!("content-length: {}", body.len())),
        "{head}"
    );
    assert!(
        head.ends_with("\r\n\r\n"),
        "body bytes came with the head: {head}"
    );
    assert!(!gate.body_sent());
    opener.open();
    read_until(&mut stream, &mut got, body.as_bytes()).await;
    assert!(gate.body_sent(), "the connection took the body");
    stream
        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
        .await
        .expect("answer");
    assert_eq!(client.await.expect("client task").expect("answer"), 200);
}

#[tokio::test]
async fn a_refused_gate_never_sends_the_body_and_open_fails() {
    let (opener, gate) = Gate::closed();
    let body = r#"{"input":"never to be sent"}"#;
    let (mut stream, client) = post_through(&gate, body).await;
    let mut got = head_of(&mut stream).await;
    opener.refuse();
    let failure = client
        .await
        .expect("client task")
        .expect_err("a refused gate fails the request");
    assert!(failure.message.contains("usage record"), "{failure:?}");
    assert!(!gate.body_sent());
    // What reached the server is the head alone: the connection ends without the body.
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut rest)).await;
    got.extend_from_slice(&rest);
    let seen = String::from_utf8_lossy(&got);
    assert!(!seen.contains("never to be sent"), "the body went: {seen}");
}
