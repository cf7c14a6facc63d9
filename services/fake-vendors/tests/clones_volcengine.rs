//! The Volcengine fake's voice cloning over HTTP: a speaker id trains on the fake clock, serves
//! only the AppID that bought its slot (V1 and V3 speech), slots and retrains run out with the
//! vendor's refusals, a test can reclaim a clone, and every call is counted.

#[macro_use]
mod common;

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use base64::Engine as _;
use common::client;
use serde_json::{Value, json};
use voxpool_fake_vendors::{CloneConfig, CloneState, FakeConfig, FakeVendor, VendorKind};

async fn start(clones: CloneConfig) -> FakeVendor {
    FakeVendor::start(FakeConfig::new(VendorKind::Volcengine).clones(clones))
        .await
        .expect("fake starts")
}

async fn post(fake: &FakeVendor, path: &str, body: Value) -> (u16, Value) {
    let response = client()
        .post(format!("{}{path}", fake.base_url()))
        .header("authorization", "Bearer;token-1")
        .header("resource-id", "seed-icl-2.0")
        .json(&body)
        .send()
        .await
        .expect("sent");
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON"))
}

async fn upload(fake: &FakeVendor, appid: &str, speaker: &str) -> (u16, Value) {
    let audio = base64::engine::general_purpose::STANDARD.encode(b"RIFF fake sample");
    let body = json!({
        "appid": appid, "speaker_id": speaker, "source": 2, "model_type": 1,
        "audios": [{"audio_bytes": audio, "audio_format": "wav"}],
    });
    post(fake, "/api/v1/mega_tts/audio/upload", body).await
}

fn status_code(answer: &Value) -> i64 {
    answer["BaseResp"]["StatusCode"]
        .as_i64()
        .unwrap_or_else(|| panic!("no BaseResp in {answer}"))
}

async fn status(fake: &FakeVendor, appid: &str, speaker: &str) -> Value {
    let (http, answer) = post(
        fake,
        "/api/v1/mega_tts/status",
        json!({"appid": appid, "speaker_id": speaker}),
    )
    .await;
    assert_eq!((http, status_code(&answer)), (200, 0), "{answer}");
    answer
}

/// A V1 speech request's `code` (3000 = audio).
async fn speak_v1(fake: &FakeVendor, appid: &str, speaker: &str) -> i64 {
    static REQ: AtomicU64 = AtomicU64::new(0);
    let reqid = format!("req-{}", REQ.fetch_add(1, Ordering::SeqCst));
    let body = json!({
        "app": {"appid": appid, "token": "token-1", "cluster": "volcano_icl"},
        "user": {"uid": "u1"},
        "audio": {"voice_type": speaker, "encoding": "mp3"},
        "request": {"reqid": reqid, "text": "你好", "operation": "query"},
    });
    let response = client()
        .post(format!("{}/api/v1/tts", fake.base_url()))
        .header("authorization", "Bearer;token-1")
        .json(&body)
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.expect("JSON");
    answer["code"].as_i64().expect("code")
}

/// The `code` of the first line of a V3 stream.
async fn speak_v3(fake: &FakeVendor, appid: &str, speaker: &str) -> i64 {
    let body = json!({
        "user": {"uid": "u1"},
        "req_params": {"text": "你好", "speaker": speaker,
            "audio_params": {"format": "pcm", "sample_rate": 24000}},
    });
    let text = client()
        .post(format!("{}/api/v3/tts/unidirectional", fake.base_url()))
        .header("x-api-app-id", appid)
        .header("x-api-access-key", "access-1")
        .header("x-api-resource-id", "seed-icl-2.0")
        .json(&body)
        .send()
        .await
        .expect("sent")
        .text()
        .await
        .expect("body");
    let first: Value = serde_json::from_str(text.lines().next().expect("a line")).expect("JSON");
    first["code"].as_i64().expect("code")
}

#[tokio::test]
async fn a_speaker_trains_on_the_fake_clock_and_serves_only_its_appid() {
    let fake =
        start(CloneConfig::for_vendor(VendorKind::Volcengine).training(Duration::from_secs(120)))
            .await;
    let (http, made) = upload(&fake, "app-a", "S_one").await;
    assert_eq!((http, status_code(&made)), (200, 0), "{made}");
    assert_eq!(made["speaker_id"], "S_one");
    let training = status(&fake, "app-a", "S_one").await;
    assert_eq!(
        (training["status"].as_i64(), &training["state"]),
        (Some(1), &json!("Training"))
    );
    assert_eq!(
        speak_v1(&fake, "app-a", "S_one").await,
        3050,
        "not trained yet"
    );

    fake.advance_clock(Duration::from_secs(120));
    assert_eq!(status(&fake, "app-a", "S_one").await["status"], 2);
    assert_eq!(speak_v1(&fake, "app-a", "S_one").await, 3000);
    assert_eq!(
        status(&fake, "app-a", "S_one").await["status"],
        4,
        "Active after use"
    );
    assert_eq!(
        speak_v1(&fake, "app-b", "S_one").await,
        3050,
        "another AppID"
    );
    assert_eq!(speak_v3(&fake, "app-b", "S_one").await, 45_000_000);
    assert_eq!(speak_v3(&fake, "app-a", "S_one").await, 0);
    // A voice that never was a clone is the vendor's own, for any AppID.
    assert_eq!(
        speak_v1(&fake, "app-b", "zh_female_shuangkuaisisi_moon_bigtts").await,
        3000
    );
    let unknown = status(&fake, "app-b", "S_one").await;
    assert_eq!(
        (unknown["status"].as_i64(), &unknown["state"]),
        (Some(0), &json!("NotFound"))
    );

    // The vendor takes the slot back: the speaker is gone for synthesis.
    assert!(fake.set_clone_state("app-a", "S_one", CloneState::Reclaimed));
    let reclaimed = status(&fake, "app-a", "S_one").await;
    assert_eq!(
        (reclaimed["status"].as_i64(), &reclaimed["state"]),
        (Some(0), &json!("Reclaimed"))
    );
    assert_eq!(speak_v1(&fake, "app-a", "S_one").await, 3050);

    let a = fake.clone_counts()["app-a"];
    assert_eq!((a.create, a.refused, a.status, a.not_found), (1, 0, 4, 2));
    assert_eq!(fake.clone_counts()["app-b"].not_found, 2);
}

#[tokio::test]
async fn bought_slots_and_retrains_run_out_with_the_vendors_refusals() {
    let mut clones = CloneConfig::for_vendor(VendorKind::Volcengine).slots(1);
    clones.trainings_per_slot = 2;
    let fake = start(clones).await;
    assert_eq!(status_code(&upload(&fake, "app-a", "S_one").await.1), 0);
    let (_, full) = upload(&fake, "app-a", "S_two").await;
    assert_eq!(status_code(&full), 1107, "{full}");
    let message = full["BaseResp"]["StatusMessage"].as_str().expect("message");
    assert!(
        message.contains("app-a") && message.contains(" 1 "),
        "{message}"
    );
    // The same speaker trains again, up to its cap.
    assert_eq!(status_code(&upload(&fake, "app-a", "S_one").await.1), 0);
    let (_, capped) = upload(&fake, "app-a", "S_one").await;
    assert_eq!(status_code(&capped), 1105, "{capped}");
    assert_eq!(
        status(&fake, "app-a", "S_one").await["available_training_times"],
        0
    );
    // Another AppID has slots of its own.
    assert_eq!(status_code(&upload(&fake, "app-b", "S_two").await.1), 0);
    let (http, bad) = post(
        &fake,
        "/api/v1/mega_tts/audio/upload",
        json!({"appid": "app-b", "speaker_id": "S_three", "source": 1, "audios": []}),
    )
    .await;
    assert_eq!((http, status_code(&bad)), (400, 1001), "{bad}");
    let a = fake.clone_counts()["app-a"];
    assert_eq!((a.create, a.refused), (4, 2));
    assert_eq!(fake.clone_counts()["app-b"].refused, 1);
}
