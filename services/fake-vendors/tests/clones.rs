//! The fakes' voice cloning over HTTP: a clone lives in the scope of the key that made it
//! (ElevenLabs workspace, MiniMax account), keys of another scope get the vendor's not-found
//! error, slots fill and free, MiniMax's unused clones expire on the fake clock, and every
//! clone call is counted per scope.

#[macro_use]
mod common;

use std::time::Duration;

use common::client;
use reqwest::multipart::{Form, Part};
use serde_json::{Value, json};
use voxpool_fake_vendors::{CloneConfig, CloneState, FakeConfig, FakeVendor, VendorKind};

const DAY: u64 = 86_400;

async fn start(vendor: VendorKind, clones: CloneConfig) -> FakeVendor {
    FakeVendor::start(FakeConfig::new(vendor).clones(clones))
        .await
        .expect("fake starts")
}

fn sample() -> Part {
    Part::bytes(b"RIFF fake sample".to_vec()).file_name("sample.wav")
}

async fn json_of(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON answer"))
}

// --- ElevenLabs --------------------------------------------------------------------------

async fn el_add(fake: &FakeVendor, key: &str, name: &str) -> (u16, Value) {
    let form = Form::new()
        .text("name", name.to_owned())
        .part("files", sample())
        .text("remove_background_noise", "false")
        .text("labels", r#"{"accent":"neutral"}"#);
    let response = client()
        .post(format!("{}/v1/voices/add", fake.base_url()))
        .header("xi-api-key", key)
        .multipart(form)
        .send()
        .await
        .expect("sent");
    json_of(response).await
}

async fn el_speak(fake: &FakeVendor, key: &str, voice_id: &str) -> reqwest::Response {
    client()
        .post(format!(
            "{}/v1/text-to-speech/{voice_id}?output_format=pcm_24000",
            fake.base_url()
        ))
        .header("xi-api-key", key)
        .json(&json!({"text": "hello", "model_id": "eleven_flash_v2_5"}))
        .send()
        .await
        .expect("sent")
}

async fn el_delete(fake: &FakeVendor, key: &str, voice_id: &str) -> (u16, Value) {
    let response = client()
        .delete(format!("{}/v1/voices/{voice_id}", fake.base_url()))
        .header("xi-api-key", key)
        .send()
        .await
        .expect("sent");
    json_of(response).await
}

async fn el_not_found(fake: &FakeVendor, key: &str, voice_id: &str) {
    let (status, body) = json_of(el_speak(fake, key, voice_id).await).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["detail"]["status"], "voice_not_found", "{body}");
}

#[tokio::test]
async fn an_elevenlabs_clone_serves_its_workspace_only_and_its_slots_fill_and_free() {
    let fake = start(
        VendorKind::ElevenLabs,
        CloneConfig::for_vendor(VendorKind::ElevenLabs)
            .scope("key-a1", "ws-a")
            .scope("key-a2", "ws-a")
            .scope("key-b", "ws-b")
            .slots(2),
    )
    .await;
    let (status, made) = el_add(&fake, "key-a1", "Narrator").await;
    assert_eq!(status, 200, "{made}");
    assert_eq!(made["requires_verification"], false);
    let voice = made["voice_id"].as_str().expect("a voice id").to_owned();

    // Another key of the workspace lists it and speaks with it; a key of another does not.
    let listed = client()
        .get(format!("{}/v1/voices", fake.base_url()))
        .header("xi-api-key", "key-a2")
        .send()
        .await
        .expect("sent");
    let (_, listed) = json_of(listed).await;
    let cloned: Vec<&Value> = listed["voices"]
        .as_array()
        .expect("voices")
        .iter()
        .filter(|v| v["category"] == "cloned")
        .collect();
    assert_eq!(cloned.len(), 1, "{listed}");
    assert_eq!(cloned[0]["voice_id"], voice.as_str());
    assert_eq!(cloned[0]["name"], "Narrator");
    let spoken = el_speak(&fake, "key-a2", &voice).await;
    assert_eq!(spoken.status(), 200);
    assert!(!spoken.bytes().await.expect("audio").is_empty());
    el_not_found(&fake, "key-b", &voice).await;
    // A voice that never was a clone is the vendor's own, served to any key.
    assert_eq!(el_speak(&fake, "key-b", "premade-adam").await.status(), 200);

    // Two slots: the third clone is refused with the count; a deletion frees one.
    assert_eq!(el_add(&fake, "key-a2", "Second").await.0, 200);
    let (status, full) = el_add(&fake, "key-a1", "Third").await;
    assert_eq!(status, 400, "{full}");
    assert_eq!(full["detail"]["status"], "voice_limit_reached");
    let message = full["detail"]["message"].as_str().expect("message");
    assert!(message.contains("(2 / 2)"), "{message}");
    assert_eq!(
        el_delete(&fake, "key-b", &voice).await.0,
        404,
        "not ws-b's voice"
    );
    let (status, deleted) = el_delete(&fake, "key-a1", &voice).await;
    assert_eq!((status, &deleted["status"]), (200, &json!("ok")));
    el_not_found(&fake, "key-a1", &voice).await;
    assert_eq!(el_add(&fake, "key-a1", "Third").await.0, 200);

    let counts = fake.clone_counts();
    let a = counts["ws-a"];
    assert_eq!((a.create, a.refused, a.list, a.delete), (4, 1, 1, 1));
    assert_eq!((a.not_found, counts["ws-b"].not_found), (1, 1));
    assert_eq!(counts["ws-b"].delete, 1);
    let stats: Value = client()
        .get(format!("{}/_fake/stats/clones", fake.base_url()))
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("JSON");
    assert_eq!(stats["scopes"]["ws-a"]["create"], 4, "{stats}");
    let held: Vec<&Value> = stats["voices"].as_array().expect("voices").iter().collect();
    assert_eq!(held.len(), 2, "{stats}");
    assert!(held.iter().all(|v| v["scope"] == "ws-a"), "{stats}");
}

#[tokio::test]
async fn an_elevenlabs_add_without_files_or_with_an_unknown_field_is_refused() {
    let fake = start(
        VendorKind::ElevenLabs,
        CloneConfig::for_vendor(VendorKind::ElevenLabs),
    )
    .await;
    for form in [
        Form::new().text("name", "x"),
        Form::new().part("files", sample()),
        Form::new()
            .text("name", "x")
            .part("files", sample())
            .text("pitch", "3"),
    ] {
        let response = client()
            .post(format!("{}/v1/voices/add", fake.base_url()))
            .header("xi-api-key", "k")
            .multipart(form)
            .send()
            .await
            .expect("sent");
        let (status, body) = json_of(response).await;
        assert_eq!(status, 422, "{body}");
    }
    assert_eq!(fake.clone_counts()["k"].refused, 3);
    assert!(fake.clones().is_empty());
}

// --- MiniMax -----------------------------------------------------------------------------

async fn mm_post(fake: &FakeVendor, key: &str, path: &str, body: Value) -> Value {
    client()
        .post(format!("{}{path}", fake.base_url()))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("JSON")
}

fn code(answer: &Value) -> i64 {
    answer["base_resp"]["status_code"]
        .as_i64()
        .unwrap_or_else(|| panic!("no base_resp in {answer}"))
}

async fn mm_upload(fake: &FakeVendor, key: &str) -> u64 {
    let form = Form::new()
        .text("purpose", "voice_clone")
        .part("file", sample());
    let answer: Value = client()
        .post(format!("{}/v1/files/upload", fake.base_url()))
        .bearer_auth(key)
        .multipart(form)
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("JSON");
    assert_eq!(code(&answer), 0, "{answer}");
    assert_eq!(answer["file"]["purpose"], "voice_clone");
    answer["file"]["file_id"]
        .as_u64()
        .expect("an integer file id")
}

async fn mm_clone(fake: &FakeVendor, key: &str, file_id: u64, voice_id: &str) -> Value {
    let body = json!({"file_id": file_id, "voice_id": voice_id, "need_noise_reduction": false});
    mm_post(fake, key, "/v1/voice_clone", body).await
}

async fn mm_speak(fake: &FakeVendor, key: &str, voice_id: &str) -> i64 {
    let body = json!({
        "model": "speech-02-hd", "text": "hello",
        "voice_setting": {"voice_id": voice_id},
        "audio_setting": {"format": "mp3", "sample_rate": 32000},
    });
    code(&mm_post(fake, key, "/v1/t2a_v2", body).await)
}

async fn mm_cloned(fake: &FakeVendor, key: &str) -> Vec<String> {
    let answer = mm_post(
        fake,
        key,
        "/v1/get_voice",
        json!({"voice_type": "voice_cloning"}),
    )
    .await;
    assert_eq!(code(&answer), 0, "{answer}");
    assert!(answer.get("system_voice").is_none(), "{answer}");
    answer["voice_cloning"]
        .as_array()
        .expect("voice_cloning")
        .iter()
        .map(|v| v["voice_id"].as_str().expect("voice_id").to_owned())
        .collect()
}

fn minimax(clones: CloneConfig) -> CloneConfig {
    clones.scope("key-a", "acct-a").scope("key-b", "acct-b")
}

#[tokio::test]
async fn a_minimax_clone_serves_its_account_only_until_deleted() {
    let fake = start(
        VendorKind::MiniMax,
        minimax(CloneConfig::for_vendor(VendorKind::MiniMax)),
    )
    .await;
    let file = mm_upload(&fake, "key-a").await;
    let foreign = mm_clone(&fake, "key-b", file, "VoxClone001").await;
    assert_eq!(code(&foreign), 2013, "another account's file: {foreign}");
    let made = mm_clone(&fake, "key-a", file, "VoxClone001").await;
    assert_eq!(code(&made), 0, "{made}");
    assert_eq!(made["demo_audio"], "");
    let again = mm_clone(&fake, "key-a", file, "VoxClone001").await;
    assert_eq!(code(&again), 2039, "a duplicate id: {again}");
    let bad_id = mm_clone(&fake, "key-a", file, "1short").await;
    assert_eq!(code(&bad_id), 2013, "{bad_id}");

    assert_eq!(mm_cloned(&fake, "key-a").await, ["VoxClone001"]);
    assert!(mm_cloned(&fake, "key-b").await.is_empty());
    assert_eq!(mm_speak(&fake, "key-b", "VoxClone001").await, 2054);
    assert_eq!(mm_speak(&fake, "key-a", "VoxClone001").await, 0);
    assert_eq!(mm_speak(&fake, "key-b", "male-qn-qingse").await, 0);

    let body = json!({"voice_type": "voice_cloning", "voice_id": "VoxClone001"});
    let deleted = mm_post(&fake, "key-a", "/v1/delete_voice", body.clone()).await;
    assert_eq!(code(&deleted), 0, "{deleted}");
    assert_eq!(deleted["voice_id"], "VoxClone001");
    let twice = mm_post(&fake, "key-a", "/v1/delete_voice", body).await;
    assert_eq!(code(&twice), 2054, "{twice}");
    assert_eq!(mm_speak(&fake, "key-a", "VoxClone001").await, 2054);

    let a = fake.clone_counts()["acct-a"];
    assert_eq!((a.upload, a.create, a.refused), (1, 3, 2));
    assert_eq!((a.list, a.delete, a.not_found), (1, 2, 1));
    let b = fake.clone_counts()["acct-b"];
    assert_eq!((b.create, b.refused, b.not_found), (1, 1, 1));
}

#[tokio::test]
async fn an_unused_minimax_clone_expires_after_seven_days_and_one_synthesis_keeps_it() {
    let fake = start(
        VendorKind::MiniMax,
        minimax(CloneConfig::for_vendor(VendorKind::MiniMax)),
    )
    .await;
    let file = mm_upload(&fake, "key-a").await;
    for id in ["KeptVoice01", "IdleVoice01"] {
        assert_eq!(code(&mm_clone(&fake, "key-a", file, id).await), 0);
    }
    fake.advance_clock(Duration::from_secs(DAY));
    assert_eq!(mm_speak(&fake, "key-a", "KeptVoice01").await, 0);
    // Seven more days over HTTP: eight since creation.
    let now = mm_post(
        &fake,
        "key-a",
        "/_fake/clock/advance",
        json!({"seconds": 7 * DAY}),
    )
    .await;
    assert!(now["now"].as_u64().is_some(), "{now}");

    assert_eq!(mm_speak(&fake, "key-a", "KeptVoice01").await, 0);
    assert_eq!(mm_speak(&fake, "key-a", "IdleVoice01").await, 2054);
    assert_eq!(mm_cloned(&fake, "key-a").await, ["KeptVoice01"]);
    let states: Vec<(String, CloneState)> = fake
        .clones()
        .into_iter()
        .map(|v| (v.voice_id, v.state))
        .collect();
    assert!(states.contains(&("IdleVoice01".into(), CloneState::Expired)));
    assert!(states.contains(&("KeptVoice01".into(), CloneState::Active)));

    // The expired clone freed its slot; its id can be cloned again.
    assert_eq!(
        code(&mm_clone(&fake, "key-a", file, "IdleVoice01").await),
        0
    );
    assert_eq!(mm_speak(&fake, "key-a", "IdleVoice01").await, 0);
}

#[tokio::test]
async fn a_test_can_expire_a_clone_and_the_clone_rate_limit_counts_per_scope_per_minute() {
    let fake = start(
        VendorKind::MiniMax,
        minimax(CloneConfig::for_vendor(VendorKind::MiniMax).max_clones_per_minute(Some(2))),
    )
    .await;
    let file = mm_upload(&fake, "key-a").await;
    let file_b = mm_upload(&fake, "key-b").await;
    assert_eq!(
        code(&mm_clone(&fake, "key-a", file, "RateVoice01").await),
        0
    );
    assert_eq!(
        code(&mm_clone(&fake, "key-a", file, "RateVoice02").await),
        0
    );
    assert_eq!(
        code(&mm_clone(&fake, "key-a", file, "RateVoice03").await),
        1002
    );
    assert_eq!(
        code(&mm_clone(&fake, "key-b", file_b, "RateVoice03").await),
        0
    );
    fake.advance_clock(Duration::from_secs(60));
    assert_eq!(
        code(&mm_clone(&fake, "key-a", file, "RateVoice03").await),
        0
    );

    let expire = json!({"scope": "acct-a", "voice_id": "RateVoice01", "state": "Expired"});
    let set = client()
        .post(format!("{}/_fake/clones/state", fake.base_url()))
        .json(&expire)
        .send()
        .await
        .expect("sent");
    assert_eq!(set.status(), 200);
    assert_eq!(mm_speak(&fake, "key-a", "RateVoice01").await, 2054);
    assert_eq!(mm_speak(&fake, "key-b", "RateVoice03").await, 0);
    let missing = json!({"scope": "acct-b", "voice_id": "RateVoice01", "state": "Expired"});
    let unknown = client()
        .post(format!("{}/_fake/clones/state", fake.base_url()))
        .json(&missing)
        .send()
        .await
        .expect("sent");
    assert_eq!(unknown.status(), 404);
    assert!(!fake.set_clone_state("acct-b", "RateVoice02", CloneState::Expired));
}

#[tokio::test]
async fn a_full_minimax_account_refuses_a_clone_naming_its_slots() {
    let fake = start(
        VendorKind::MiniMax,
        minimax(CloneConfig::for_vendor(VendorKind::MiniMax).scope_slots("acct-a", 1)),
    )
    .await;
    let file = mm_upload(&fake, "key-a").await;
    assert_eq!(
        code(&mm_clone(&fake, "key-a", file, "SlotVoice01").await),
        0
    );
    let full = mm_clone(&fake, "key-a", file, "SlotVoice02").await;
    assert_eq!(code(&full), 2013, "{full}");
    let message = full["base_resp"]["status_msg"].as_str().expect("message");
    assert!(message.contains("(1 / 1)"), "{message}");
}
