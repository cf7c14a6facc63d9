//! Callers that stop reading long answers (docs/SYNTHESIS.md, "Slow and stalled readers"): 50
//! HTTP clients and 20 gRPC stream readers each ask for about 30 MB of audio, read its first
//! bytes and stop. Synthesis's memory stays within 100 MB of its baseline through the wave
//! (its peak RSS, `VmHWM`), the vendor calls end and release their leases at the vendor's
//! pace, every stalled stream is cut off after `synthesis.stalled_reader_timeout_ms`, and the
//! memory is given back. A caller that reads again finds its answer cut short, never passed
//! off as whole: HTTP without the chunked body's end, gRPC with ABORTED `READER_STALLED`.
//!
//! Signals: the fake vendor's counters (calls answered), synthesis's log line for each cut
//! (`stream cut off`), the scheduler's lease count.

use std::time::Duration;

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
};
use tokio_stream::StreamExt as _;
use voxpool_e2e::{
    scheduler_client,
    speech::{HTTP_KEY, Options, POOL, SpeechStack, long_text},
    synthesis_client,
};
use voxpool_fake_vendors::{FakeConfig, FakeVendor, VendorKind};
use voxpool_proto::scheduler::v1 as spb;

const HTTP_READERS: usize = 50;
const GRPC_READERS: usize = 20;
/// 125 s of 24 kHz 16-bit PCM per vendor call: 6 MB.
const TONE_MS: u32 = 125_000;

fn status_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
}

/// Sends one HTTP speech request for `text` and reads until `want` bytes of the answer came.
async fn stalled_http(host: &str, voice: &str, text: &str, want: usize) -> TcpStream {
    let body = serde_json::json!({"model": "tts-1", "voice": voice, "input": text, "response_format": "pcm"})
        .to_string();
    let mut tcp = TcpStream::connect(host).await.expect("connect");
    let head = format!(
        "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {HTTP_KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.expect("head");
    tcp.write_all(body.as_bytes()).await.expect("body");
    let mut got = 0;
    let mut buf = vec![0u8; 16 * 1024];
    while got < want {
        let n = tcp.read(&mut buf).await.expect("read");
        assert!(n > 0, "closed after {got} bytes");
        got += n;
    }
    tcp
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_readers_hold_little_memory_release_their_leases_and_are_cut_off() {
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::OpenAi).cap(0).tone_ms(TONE_MS))
        .await
        .expect("fake vendor");
    let stack = SpeechStack::start(&Options {
        base_url: &fake.base_url(),
        keys: 10,
        capacity: 40,
        synthesis: "default_deadline_ms = 120000\nattempt_timeout_ms = 120000\nstalled_reader_timeout_ms = 3000",
        synthesis_log: "error,voxpool_synthesis::job::delivery=info",
    })
    .await;
    let pid = stack.synthesis.child.id();
    let host = stack.http_host();
    let pack = stack.pack.clone();
    let mut grpc = synthesis_client(&stack.synthesis.addr).await;
    let request = |text: &str| stack.request(text);
    // Warm up (connections, pools, allocator), then the baseline.
    let mut warm = grpc
        .synthesize_stream(request("Warm up."))
        .await
        .expect("warm-up call")
        .into_inner();
    while let Some(message) = warm.next().await {
        message.expect("warm-up audio");
    }
    let baseline_kb = status_kb(pid, "VmRSS:");

    let text = long_text(17_500);
    let mut http = Vec::new();
    for _ in 0..HTTP_READERS {
        http.push(stalled_http(&host, &pack, &text, 64 * 1024).await);
    }
    let mut streams = Vec::new();
    for _ in 0..GRPC_READERS {
        // A connection each: streams that share one HTTP/2 connection share its flow-control
        // window, and a stalled one would hold up the next.
        let mut stream = synthesis_client(&stack.synthesis.addr)
            .await
            .synthesize_stream(request(&text))
            .await
            .expect("stream starts")
            .into_inner();
        let first = stream
            .next()
            .await
            .expect("a first message")
            .expect("audio");
        assert!(!first.audio.is_empty());
        streams.push(stream);
    }
    // Every stalled stream is cut off (one log line each).
    let cut = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let lines = stack.log_lines("stream cut off");
            if lines >= HTTP_READERS + GRPC_READERS {
                return lines;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("every stalled reader cut off within 120 s");
    assert_eq!(cut, HTTP_READERS + GRPC_READERS);

    let peak_kb = status_kb(pid, "VmHWM:");
    eprintln!(
        "peak RSS {peak_kb} kB, baseline {baseline_kb} kB, rise {} kB",
        peak_kb.saturating_sub(baseline_kb)
    );
    let answered: u64 = fake.stats().values().map(|k| k.successes).sum();
    assert!(
        answered >= 70,
        "the vendor answered only {answered} calls: the wave did not happen"
    );
    assert!(
        peak_kb.saturating_sub(baseline_kb) <= 100 * 1024,
        "peak RSS {peak_kb} kB against a baseline of {baseline_kb} kB: more than 100 MB for {} stalled readers",
        HTTP_READERS + GRPC_READERS
    );
    // Every lease is back.
    let in_flight = scheduler_client(&stack.scheduler.addr)
        .await
        .get_pool_status(spb::GetPoolStatusRequest { pool: POOL.into() })
        .await
        .expect("pool status")
        .into_inner()
        .in_flight;
    assert_eq!(in_flight, 0, "leases still held after the cut");

    // A stalled caller that reads again finds its answer cut short.
    for mut tcp in http.drain(..3) {
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(20), tcp.read_to_end(&mut rest))
            .await
            .expect("the server closed the stalled connection");
        assert!(
            !rest.ends_with(b"0\r\n\r\n"),
            "a cut answer ended like a whole one"
        );
    }
    let mut stream = streams.remove(0);
    let ended = loop {
        match stream.next().await {
            Some(Ok(_)) => continue,
            Some(Err(status)) => break status,
            None => panic!("a cut stream ended as if whole"),
        }
    };
    assert_eq!(ended.code(), tonic::Code::Aborted, "{ended:?}");
    assert!(
        ended.message().contains("stalled_reader_timeout_ms"),
        "{ended:?}"
    );
    drop(http);
    drop(streams);
    // The memory is given back once the server has seen the callers go.
    let settled = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let now = status_kb(pid, "VmRSS:");
            if now.saturating_sub(baseline_kb) <= 50 * 1024 {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
    .await;
    assert!(
        settled.is_ok(),
        "RSS {} kB 30 s after the wave against a baseline of {baseline_kb} kB",
        status_kb(pid, "VmRSS:")
    );
}
