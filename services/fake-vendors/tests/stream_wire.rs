//! Vendor-specific details of the streamed wire formats: Volcengine V3 auth, errors and
//! end line, MiniMax stream options and refusals, ElevenLabs concurrency headers, DashScope
//! without streaming, the cap and the first-byte counting rule for streams, and a broken JSON
//! document.

#[macro_use]
mod common;

use std::time::Duration;

use common::{ACCESS_KEY, KEY, Wire, client, eventually, read_rest};
use serde_json::{Value, json};
use voxpool_fake_vendors::{FakeConfig, FakeVendor, Step, Streaming, VendorKind};

fn lines(body: &[u8]) -> Vec<Value> {
    std::str::from_utf8(body)
        .expect("UTF-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

#[tokio::test]
async fn volcengine_v3_refuses_a_key_off_the_allow_list_with_401_and_accepts_a_listed_app_id() {
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::Volcengine).valid_keys([KEY]))
        .await
        .expect("fake starts");
    let refused = Wire::VolcengineV3
        .request(&fake, "other-app", "Hi.")
        .send()
        .await
        .expect("sent");
    assert_eq!(refused.status(), 401);
    let line = &lines(&refused.bytes().await.expect("body"))[0];
    assert_eq!(line["code"], 45_000_000);
    assert!(line["data"].is_null());
    let accepted = Wire::VolcengineV3
        .request(&fake, KEY, "Hi.")
        .send()
        .await
        .expect("sent");
    assert_eq!(accepted.status(), 200);
    assert_eq!(accepted.headers()["x-tt-logid"], "fake");
    let missing = client()
        .post(format!("{}/api/v3/tts/unidirectional", fake.base_url()))
        .header("x-api-app-id", KEY)
        .json(&json!({}))
        .send()
        .await
        .expect("sent");
    assert_eq!(missing.status(), 401, "no access key");
    let recorded = fake.requests();
    assert_eq!(recorded.len(), 1, "refused keys are not recorded");
    assert_eq!(recorded[0].key, KEY);
    assert!(!recorded[0].headers.contains_key("x-api-access-key"));
    assert!(!recorded[0].body.contains(ACCESS_KEY));
}

#[tokio::test]
async fn volcengine_v3_ends_with_a_sentence_and_the_done_line_with_usage_when_asked() {
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::Volcengine))
        .await
        .expect("fake starts");
    let body = Wire::VolcengineV3
        .request(&fake, KEY, "你好，世界")
        .header("x-control-require-usage-tokens-return", "*")
        .send()
        .await
        .expect("sent")
        .bytes()
        .await
        .expect("body");
    let lines = lines(&body);
    assert_eq!(
        lines.len(),
        3,
        "one audio line (streaming off), sentence, done: {lines:?}"
    );
    assert_eq!(lines[0]["code"], 0);
    assert_eq!(lines[0]["message"], "");
    assert!(lines[0]["data"].is_string());
    assert_eq!(lines[1]["sentence"]["text"], "你好，世界");
    assert_eq!(
        lines[2],
        json!({"code": 20_000_000, "message": "ok", "data": null, "usage": {"text_words": 5}})
    );
}

#[tokio::test]
async fn volcengine_v3_refuses_bad_bodies_with_400_and_an_invalid_argument_line() {
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::Volcengine))
        .await
        .expect("fake starts");
    for (body, code) in [
        (
            json!({"req_params": {"text": "x", "audio_params": {}}}),
            45_000_001,
        ),
        (
            json!({"req_params": {"text": "x", "speaker": "s", "audio_params": {"format": "wav"}}}),
            45_000_001,
        ),
        (
            json!({"req_params": {"text": "x", "speaker": "s", "audio_params": {"speech_rate": 101}}}),
            45_000_001,
        ),
        (
            json!({"req_params": {"text": "x", "speaker": "s", "audio_params": {}, "additions": "{\"post_process\":{\"pitch\":13}}"}}),
            45_000_001,
        ),
        (
            json!({"req_params": {"speaker": "s", "audio_params": {}}}),
            45_000_001,
        ),
        (
            json!({"req_params": {"text": "x", "speaker": "s", "audio_params": {}}, "extra": 1}),
            45_000_001,
        ),
    ] {
        let response = client()
            .post(format!("{}/api/v3/tts/unidirectional", fake.base_url()))
            .header("x-api-app-id", KEY)
            .header("x-api-access-key", ACCESS_KEY)
            .header("x-api-resource-id", "seed-tts-2.0")
            .json(&body)
            .send()
            .await
            .expect("sent");
        assert_eq!(response.status(), 400, "{body}");
        let line = &lines(&response.bytes().await.expect("body"))[0];
        assert_eq!(line["code"], code, "{body}: {line}");
    }
}

#[tokio::test]
async fn streams_count_toward_the_cap_until_they_end_and_over_cap_answers_are_the_vendors() {
    for wire in [Wire::OpenAi, Wire::VolcengineV3, Wire::MiniMax] {
        let fake = FakeVendor::start(
            FakeConfig::new(wire.vendor())
                .cap(1)
                .streaming(Streaming::new(Duration::ZERO, Duration::from_secs(60), 3)),
        )
        .await
        .expect("fake starts");
        let mut first = wire.request(&fake, KEY, "One.").send().await.expect("sent");
        first.chunk().await.expect("chunk").expect("a first chunk");
        let second = wire.request(&fake, KEY, "Two.").send().await.expect("sent");
        let status = second.status();
        let body = second.bytes().await.expect("body");
        match wire {
            Wire::OpenAi => assert_eq!(status, 429),
            Wire::VolcengineV3 => {
                assert_eq!(status, 200);
                let line = &lines(&body)[0];
                assert_eq!(line["code"], 45_000_292);
                assert_eq!(line["message"], "quota exceeded for types: concurrency");
            }
            _ => {
                let v: Value = serde_json::from_slice(&body).expect("a JSON document, no stream");
                assert_eq!(v["base_resp"]["status_code"], 1002);
            }
        }
        let k = fake.key_stats(KEY);
        assert_eq!(
            (
                k.peak_concurrency,
                k.peak_admitted,
                k.rejected_over_cap,
                k.admitted_in_flight
            ),
            (2, 1, 1, 1),
            "{wire:?}: {k:?}"
        );
        drop(first);
        eventually("the stream is uncounted", || {
            fake.key_stats(KEY).in_flight == 0
        })
        .await;
    }
}

#[tokio::test]
async fn minimax_without_the_aggregate_ends_with_empty_audio_and_refuses_wav_streams() {
    let fake = FakeVendor::start(
        FakeConfig::new(VendorKind::MiniMax).streaming(Streaming::new(
            Duration::ZERO,
            Duration::from_millis(50),
            3,
        )),
    )
    .await
    .expect("fake starts");
    let request = |body: Value| {
        client()
            .post(format!("{}/v1/t2a_v2", fake.base_url()))
            .bearer_auth(KEY)
            .json(&body)
    };
    let body = request(json!({
        "model": "speech-02-hd", "text": "Hi.", "stream": true,
        "stream_options": {"exclude_aggregated_audio": true},
        "voice_setting": {"voice_id": "v"}, "audio_setting": {"format": "pcm"},
    }))
    .send()
    .await
    .expect("sent");
    assert_eq!(body.headers()["content-type"], "text/event-stream");
    let d = Wire::MiniMax.decode(&body.bytes().await.expect("body"));
    assert!(d.ended && d.pieces == 3 && !d.audio.is_empty(), "{d:?}");
    assert_eq!(d.aggregated.as_deref(), Some(&[][..]));
    let wav = request(json!({
        "model": "speech-02-hd", "text": "Hi.", "stream": true,
        "voice_setting": {"voice_id": "v"}, "audio_setting": {"format": "wav"},
    }))
    .send()
    .await
    .expect("sent");
    assert_eq!(wav.status(), 400);
    let v: Value = wav.json().await.expect("JSON");
    assert_eq!(v["base_resp"]["status_code"], 2013);
}

#[tokio::test]
async fn elevenlabs_sends_the_concurrency_headers_on_both_routes_with_the_same_audio() {
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::ElevenLabs).cap(5))
        .await
        .expect("fake starts");
    let mut audio = Vec::new();
    for path in ["voice1", "voice1/stream"] {
        let response = client()
            .post(format!(
                "{}/v1/text-to-speech/{path}?output_format=mp3_44100_128",
                fake.base_url()
            ))
            .header("xi-api-key", KEY)
            .json(&json!({"text": "Hi."}))
            .send()
            .await
            .expect("sent");
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["current-concurrent-requests"], "1");
        assert_eq!(response.headers()["maximum-concurrent-requests"], "5");
        audio.push(response.bytes().await.expect("body"));
    }
    assert_eq!(audio[0], audio[1]);
}

#[tokio::test]
async fn dashscope_sse_without_streaming_still_sends_two_events_at_once() {
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::DashScope))
        .await
        .expect("fake starts");
    let body = Wire::DashScope
        .request(&fake, KEY, "Hi.")
        .send()
        .await
        .expect("sent")
        .bytes()
        .await
        .expect("body");
    let d = Wire::DashScope.decode(&body);
    assert!(d.ended && d.pieces == 2, "{d:?}");
    assert!(
        std::str::from_utf8(&body)
            .expect("UTF-8")
            .starts_with("id:1\nevent:result\n")
    );
}

#[tokio::test]
async fn a_client_gone_before_the_first_byte_stays_counted_until_the_first_byte() {
    let fake = FakeVendor::start(
        FakeConfig::new(VendorKind::OpenAi).streaming(Streaming::new(
            Duration::from_secs(2),
            Duration::ZERO,
            2,
        )),
    )
    .await
    .expect("fake starts");
    let gone = Wire::OpenAi
        .request(&fake, KEY, "Too late.")
        .timeout(Duration::from_millis(100))
        .send()
        .await;
    assert!(gone.is_err_and(|e| e.is_timeout()));
    // The vendor is still working on it (2 s to its first byte)...
    assert_eq!(fake.key_stats(KEY).in_flight, 1);
    // ...and stops counting it once that work is over.
    eventually("the abandoned request is uncounted", || {
        fake.key_stats(KEY).in_flight == 0
    })
    .await;
}

#[tokio::test]
async fn a_broken_json_document_is_cut_and_the_connection_dropped() {
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::MiniMax))
        .await
        .expect("fake starts");
    fake.script([Step::BreakAfterFirstPiece]);
    let mut response = client()
        .post(format!("{}/v1/t2a_v2", fake.base_url()))
        .bearer_auth(KEY)
        .json(&json!({"model": "speech-02-hd", "text": "Hi.", "voice_setting": {"voice_id": "v"}, "audio_setting": {}}))
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), 200);
    let mut body = Vec::new();
    assert!(read_rest(&mut response, &mut body).await.is_err());
    assert!(
        serde_json::from_slice::<Value>(&body).is_err(),
        "half a document"
    );
    assert_eq!(fake.key_stats(KEY).faults_injected, 1);
}
