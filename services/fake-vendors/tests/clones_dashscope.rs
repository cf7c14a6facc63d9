//! The DashScope fake's CosyVoice voice cloning over HTTP: the voice-enrollment wire format
//! (create, query, list, update, delete), a voice that deploys on the fake clock, serves only
//! its account and only through its `target_model`, slots that fill and free, a voice a year
//! unused that goes offline, and every call counted.

#[macro_use]
mod common;

use std::time::Duration;

use base64::Engine as _;
use common::client;
use serde_json::{Value, json};
use voxpool_fake_vendors::{CloneConfig, CloneState, FakeConfig, FakeVendor, VendorKind};

const DAY: u64 = 86_400;
const MODEL: &str = "cosyvoice-v2";

async fn start(clones: CloneConfig) -> FakeVendor {
    FakeVendor::start(FakeConfig::new(VendorKind::DashScope).clones(clones))
        .await
        .expect("fake starts")
}

/// Two accounts: keys k1 and k2 of account acct-a, key k3 of acct-b.
fn accounts() -> CloneConfig {
    CloneConfig::for_vendor(VendorKind::DashScope)
        .scope("k1", "acct-a")
        .scope("k2", "acct-a")
        .scope("k3", "acct-b")
}

async fn enroll(fake: &FakeVendor, key: &str, input: Value) -> (u16, Value) {
    let response = client()
        .post(format!(
            "{}/api/v1/services/audio/tts/customization",
            fake.base_url()
        ))
        .bearer_auth(key)
        .json(&json!({"model": "voice-enrollment", "input": input}))
        .send()
        .await
        .expect("sent");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON answer"))
}

fn data_uri() -> String {
    let bytes = base64::engine::general_purpose::STANDARD.encode(b"RIFF fake sample");
    format!("data:audio/wav;base64,{bytes}")
}

/// A new voice of `key`'s account for `model`; its id.
async fn create(fake: &FakeVendor, key: &str, model: &str) -> String {
    let (status, body) = enroll(
        fake,
        key,
        json!({"action": "create_voice", "target_model": model, "prefix": "vp0a1b2c3d",
               "url": data_uri(), "language_hints": ["en"]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["usage"]["count"], 1, "{body}");
    body["output"]["voice_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no output.voice_id in {body}"))
        .to_owned()
}

async fn query(fake: &FakeVendor, key: &str, voice_id: &str) -> (u16, Value) {
    enroll(
        fake,
        key,
        json!({"action": "query_voice", "voice_id": voice_id}),
    )
    .await
}

async fn speak(fake: &FakeVendor, key: &str, model: &str, voice: &str) -> (u16, Value) {
    let response = client()
        .post(format!(
            "{}/api/v1/services/audio/tts/SpeechSynthesizer",
            fake.base_url()
        ))
        .bearer_auth(key)
        .json(&json!({"model": model, "input": {"text": "hello", "voice": voice, "format": "pcm"}}))
        .send()
        .await
        .expect("sent");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON answer"))
}

fn assert_not_found(answer: &(u16, Value), voice_id: &str) {
    let (status, body) = answer;
    assert_eq!(*status, 400, "{body}");
    assert_eq!(body["code"], "InvalidParameter", "{body}");
    assert_eq!(
        body["message"],
        format!("voice not found: {voice_id}"),
        "{body}"
    );
}

#[tokio::test]
async fn a_voice_deploys_on_the_fake_clock_and_serves_its_account_through_its_model_only() {
    let fake = start(accounts()).await;
    let id = create(&fake, "k1", MODEL).await;
    assert!(id.starts_with("cosyvoice-v2-vp0a1b2c3d-"), "{id}");
    assert_eq!(id.len(), "cosyvoice-v2-vp0a1b2c3d-".len() + 32, "{id}");

    let (status, body) = query(&fake, "k2", &id).await;
    assert_eq!(status, 200, "{body}");
    let out = &body["output"];
    assert_eq!(
        (&out["status"], &out["target_model"]),
        (&json!("DEPLOYING"), &json!(MODEL)),
        "{body}"
    );
    assert!(out["gmt_create"].as_str().is_some_and(|t| t.len() == 19));
    // Not usable while deploying.
    assert_not_found(&speak(&fake, "k1", MODEL, &id).await, &id);

    fake.advance_clock(Duration::from_secs(61));
    let (_, body) = query(&fake, "k1", &id).await;
    assert_eq!(body["output"]["status"], "OK", "{body}");
    let (status, body) = speak(&fake, "k2", MODEL, &id).await;
    assert_eq!(status, 200, "a key of the same account speaks it: {body}");
    assert!(body["output"]["audio"]["data"].as_str().is_some());

    // Another account: DashScope's not-found for the id, also on enrollment calls.
    assert_not_found(&speak(&fake, "k3", MODEL, &id).await, &id);
    assert_not_found(&query(&fake, "k3", &id).await, &id);
    // Another model of the same account: refused naming both, not a missing voice.
    let (status, body) = speak(&fake, "k1", "cosyvoice-v3-flash", &id).await;
    assert_eq!((status, &body["code"]), (400, &json!("InvalidParameter")));
    let message = body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(MODEL) && message.contains("cosyvoice-v3-flash"),
        "{body}"
    );
    // The vendor's own voices are not clones: served as before.
    assert_eq!(speak(&fake, "k3", MODEL, "longxiaochun_v2").await.0, 200);

    let counts = fake.clone_counts();
    assert_eq!(
        (counts["acct-a"].create, counts["acct-a"].status),
        (1, 2),
        "{counts:?}"
    );
    assert_eq!(
        counts["acct-a"].not_found, 1,
        "the DEPLOYING try: {counts:?}"
    );
    assert_eq!(counts["acct-b"].not_found, 1, "{counts:?}");
}

#[tokio::test]
async fn list_update_and_delete_follow_the_account() {
    let fake = start(accounts()).await;
    let a = create(&fake, "k1", MODEL).await;
    let b = create(&fake, "k2", "cosyvoice-v3-flash").await;
    let other = create(&fake, "k3", MODEL).await;

    let (status, body) = enroll(
        &fake,
        "k1",
        json!({"action": "list_voice", "prefix": "vp0a1b2c3d", "page_index": 0, "page_size": 10}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let mut listed: Vec<&str> = body["output"]["voice_list"]
        .as_array()
        .map(|l| l.iter().filter_map(|v| v["voice_id"].as_str()).collect())
        .unwrap_or_default();
    listed.sort_unstable();
    let mut expected = vec![a.as_str(), b.as_str()];
    expected.sort_unstable();
    assert_eq!(listed, expected, "its account's voices only: {body}");
    let (_, none) = enroll(
        &fake,
        "k1",
        json!({"action": "list_voice", "prefix": "other"}),
    )
    .await;
    assert_eq!(none["output"]["voice_list"], json!([]), "{none}");

    fake.advance_clock(Duration::from_secs(61));
    let (status, body) = enroll(
        &fake,
        "k2",
        json!({"action": "update_voice", "voice_id": a, "url": "https://example.com/new.wav"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (_, body) = query(&fake, "k1", &a).await;
    assert_eq!(
        body["output"]["status"], "DEPLOYING",
        "enrolled again: {body}"
    );

    let delete = |key: &'static str, id: String| {
        let fake = &fake;
        async move { enroll(fake, key, json!({"action": "delete_voice", "voice_id": id})).await }
    };
    assert_not_found(&delete("k1", other.clone()).await, &other);
    let (status, body) = delete("k2", a.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_not_found(&delete("k1", a.clone()).await, &a);
    assert_not_found(&query(&fake, "k1", &a).await, &a);
    let held: Vec<_> = fake.clones().into_iter().map(|v| v.voice_id).collect();
    assert!(!held.contains(&a) && held.contains(&b) && held.contains(&other));
}

#[tokio::test]
async fn bad_bodies_are_refused_with_invalid_parameter() {
    let fake = start(accounts()).await;
    for input in [
        json!({"action": "create_voice", "target_model": MODEL, "prefix": "has_underscore", "url": data_uri()}),
        json!({"action": "create_voice", "target_model": MODEL, "prefix": "abc", "url": "data:audio/wav;base64,"}),
        json!({"action": "create_voice", "target_model": MODEL, "prefix": "abc", "url": "data:text/plain;base64,AAAA"}),
        json!({"action": "create_voice", "prefix": "abc", "url": data_uri()}),
        json!({"action": "create_voice", "target_model": MODEL, "prefix": "abc", "url": data_uri(), "name": "x"}),
        json!({"action": "rename_voice"}),
    ] {
        let (status, body) = enroll(&fake, "k1", input.clone()).await;
        assert_eq!(
            (status, &body["code"]),
            (400, &json!("InvalidParameter")),
            "{input}: {body}"
        );
    }
    let (status, body) = enroll(&fake, "", json!({"action": "list_voice"})).await;
    assert_eq!(
        (status, &body["code"]),
        (401, &json!("InvalidApiKey")),
        "{body}"
    );
    assert_eq!(fake.clone_counts()["acct-a"].refused, 5);
    assert!(fake.clones().is_empty());
}

#[tokio::test]
async fn a_full_account_is_refused_until_a_voice_is_deleted() {
    let fake = start(accounts().scope_slots("acct-a", 2)).await;
    create(&fake, "k1", MODEL).await;
    let second = create(&fake, "k2", MODEL).await;
    let input = json!({"action": "create_voice", "target_model": MODEL, "prefix": "third", "url": data_uri()});
    let (status, body) = enroll(&fake, "k1", input.clone()).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "InvalidParameter", "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("(2 / 2)")),
        "{body}"
    );
    // Another account has its own slots.
    create(&fake, "k3", MODEL).await;
    let (status, _) = enroll(
        &fake,
        "k2",
        json!({"action": "delete_voice", "voice_id": second}),
    )
    .await;
    assert_eq!(status, 200);
    let (status, body) = enroll(&fake, "k1", input).await;
    assert_eq!(status, 200, "a deletion frees the slot: {body}");
    let counts = fake.clone_counts()["acct-a"];
    assert_eq!((counts.create, counts.refused, counts.delete), (4, 1, 1));
}

#[tokio::test]
async fn a_voice_a_year_unused_goes_offline_and_a_use_keeps_it() {
    let fake = start(accounts().training(Duration::from_secs(1))).await;
    let used = create(&fake, "k1", MODEL).await;
    let idle = create(&fake, "k1", MODEL).await;
    fake.advance_clock(Duration::from_secs(200 * DAY));
    assert_eq!(speak(&fake, "k1", MODEL, &used).await.0, 200);
    fake.advance_clock(Duration::from_secs(200 * DAY));

    // 400 days after creation: the idle voice is offline, the one used 200 days ago is not.
    assert_not_found(&speak(&fake, "k1", MODEL, &idle).await, &idle);
    assert_not_found(&query(&fake, "k1", &idle).await, &idle);
    assert_eq!(speak(&fake, "k1", MODEL, &used).await.0, 200);
    let states: Vec<(String, CloneState)> = fake
        .clones()
        .into_iter()
        .map(|v| (v.voice_id, v.state))
        .collect();
    assert!(
        states.contains(&(idle.clone(), CloneState::Expired)),
        "{states:?}"
    );
    assert!(states.contains(&(used, CloneState::Active)), "{states:?}");
    // An offline voice holds no slot: the account's list no longer names it.
    let (_, body) = enroll(&fake, "k2", json!({"action": "list_voice"})).await;
    assert_eq!(
        body["output"]["voice_list"].as_array().map(Vec::len),
        Some(1),
        "{body}"
    );
}
