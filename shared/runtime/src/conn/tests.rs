//! The gate on real sockets: a small HTTP server that serves its connections the way the HTTP
//! front does (the gRPC listeners share the same guard through tonic's incoming stream).

use std::time::Duration;

use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::conn::auto,
    service::TowerToHyperService,
};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
    time::Instant,
};

use super::*;

fn flags(head_ms: u64, idle_ms: u64, cap: usize) -> ConnFlags {
    ConnFlags {
        head_timeout: Duration::from_millis(head_ms),
        idle_timeout: Duration::from_millis(idle_ms),
        max_connections: Some(cap),
        ..ConnFlags::default()
    }
}

/// Serves `ok` to every request, or a body that streams for `stream_ms` on `/stream`.
async fn server(flags: ConnFlags) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let gate = Gate::new("test", &flags, false);
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let conn = match gate.admit(tcp) {
                Ok(conn) => conn,
                Err(refused) => {
                    let message = gate.refusal_message();
                    refused.answer(move || {
                        http::Response::builder()
                            .status(503)
                            .body(tonic::body::Body::new(message.clone()))
                            .unwrap()
                    });
                    continue;
                }
            };
            let app = tower::service_fn(|req: http::Request<tonic::body::Body>| async move {
                if req.uri().path() == "/read" {
                    // Reads the whole body: 200, or 408 when it did not arrive in time.
                    let status = match http_body_util::BodyExt::collect(req.into_body()).await {
                        Ok(_) => 200,
                        Err(e)
                            if std::error::Error::source(&e)
                                .is_some_and(<dyn std::error::Error>::is::<BodyTimeout>) =>
                        {
                            408
                        }
                        Err(_) => 400,
                    };
                    let mut answer = http::Response::new(tonic::body::Body::empty());
                    *answer.status_mut() = http::StatusCode::from_u16(status).unwrap();
                    return Ok::<_, std::convert::Infallible>(answer);
                }
                let body = if req.uri().path() == "/stream" {
                    let (tx, rx) = tokio::sync::mpsc::channel::<
                        Result<http_body::Frame<bytes::Bytes>, std::convert::Infallible>,
                    >(1);
                    tokio::spawn(async move {
                        for _ in 0..6 {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            if tx
                                .send(Ok(http_body::Frame::data(bytes::Bytes::from_static(b"x"))))
                                .await
                                .is_err()
                            {
                                return;
                            }
                        }
                    });
                    tonic::body::Body::new(http_body_util::StreamBody::new(
                        tokio_stream::wrappers::ReceiverStream::new(rx),
                    ))
                } else {
                    tonic::body::Body::new("ok".to_owned())
                };
                Ok::<_, std::convert::Infallible>(http::Response::new(body))
            });
            let service = TowerToHyperService::new(Tracked::for_connection(
                app,
                conn.state(),
                flags.body_timeout,
            ));
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                // As the HTTP front on plaintext: the gate bounds each head from its first
                // byte; hyper only bounds an idle keep-alive connection.
                .header_read_timeout(flags.idle_timeout);
            tokio::spawn(async move {
                let _ = builder.serve_connection(TokioIo::new(conn), service).await;
            });
        }
    });
    addr
}

/// Reads until the server closes the connection; returns what it sent and when it closed.
async fn until_closed(tcp: &mut TcpStream) -> (String, Instant) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => {
                return (String::from_utf8_lossy(&got).into_owned(), Instant::now());
            }
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!("the server kept the connection open for 10 s: {got:?}"),
        }
    }
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_at_the_head_timeout() {
    let addr = server(flags(300, 60_000, 100)).await;
    let opened = Instant::now();
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let (_, closed) = until_closed(&mut tcp).await;
    assert!(
        closed - opened >= Duration::from_millis(300),
        "closed before the head timeout"
    );
}

#[tokio::test]
async fn a_head_trickled_a_byte_at_a_time_is_cut_off() {
    let addr = server(flags(300, 60_000, 100)).await;
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    trickle_a_head(&mut tcp).await;
}

#[tokio::test]
async fn an_idle_connection_closes_after_the_idle_timeout_but_a_long_answer_is_never_idle() {
    let addr = server(flags(10_000, 300, 100)).await;
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    // An answer that streams for 600 ms, twice the idle timeout, arrives whole.
    tcp.write_all(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(b"0\r\n\r\n") {
        let n = tcp.read(&mut buf).await.unwrap();
        assert!(
            n > 0,
            "closed mid-answer: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(
        got.iter().filter(|b| **b == b'x').count(),
        6,
        "{}",
        String::from_utf8_lossy(&got)
    );
    let answered = Instant::now();
    let (rest, closed) = until_closed(&mut tcp).await;
    assert!(rest.is_empty(), "{rest}");
    assert!(
        closed - answered >= Duration::from_millis(250),
        "closed before the idle timeout"
    );
}

#[tokio::test]
async fn a_connection_over_the_cap_is_refused_with_a_reason() {
    let addr = server(flags(10_000, 60_000, 1)).await;
    let mut first = TcpStream::connect(addr).await.unwrap();
    first
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = first.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains("200 OK"));
    let mut second = TcpStream::connect(addr).await.unwrap();
    second
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (answer, _) = until_closed(&mut second).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("--max-connections"), "{answer}");
    // The first connection is still served.
    first
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let n = first.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains("200 OK"));
    drop(first);
}

#[tokio::test]
async fn a_body_trickled_slower_than_the_body_timeout_fails_its_request() {
    let mut short = flags(10_000, 60_000, 100);
    short.body_timeout = Duration::from_millis(400);
    let addr = server(short).await;
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"POST /read HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n\r\n")
        .await
        .unwrap();
    // A byte every 100 ms: never a pause as long as the limit, but 4 s for the whole body.
    let trickle = async {
        for _ in 0..40 {
            if tcp.write_all(b"x").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    trickle.await;
    let mut buf = [0u8; 1024];
    let n = tcp.read(&mut buf).await.unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
}

/// One `GET /` on `tcp`; its answer's first bytes.
async fn get(tcp: &mut TcpStream) -> String {
    tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = tcp.read(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test]
async fn an_idle_keep_alive_connection_outlives_the_head_timeout_and_serves_its_next_request() {
    let addr = server(flags(300, 10_000, 100)).await;
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    assert!(get(&mut tcp).await.contains("200 OK"));
    // Idle for well past the head timeout, within the idle timeout (a load balancer's pool).
    tokio::time::sleep(Duration::from_millis(900)).await;
    let second = get(&mut tcp).await;
    assert!(second.contains("200 OK"), "{second:?}");
}

#[tokio::test]
async fn a_later_head_trickled_is_cut_off_at_the_head_timeout() {
    let addr = server(flags(300, 10_000, 100)).await;
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    assert!(get(&mut tcp).await.contains("200 OK"));
    trickle_a_head(&mut tcp).await;
}

/// Sends a request head a byte every 20 ms (about 1.2 s in all) and checks the server closed
/// the connection before the head was whole, serving nothing.
async fn trickle_a_head(tcp: &mut TcpStream) {
    let head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let mut sent = 0;
    for byte in head {
        if tcp.write_all(&[*byte]).await.is_err() {
            break;
        }
        sent += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (answer, _) = until_closed(tcp).await;
    assert!(sent < head.len(), "the whole trickled head got through");
    assert!(
        !answer.contains("200 OK"),
        "a trickled head was served: {answer}"
    );
}
