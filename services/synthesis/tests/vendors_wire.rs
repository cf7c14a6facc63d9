//! What each adapter actually puts on the wire, read back from the fake vendor's request log:
//! converted params, auth placement, paths, formats. Also: a param the vendor cannot apply is
//! refused before anything is sent (invariant 8 of docs/ARCHITECTURE.md), and credentials are never logged by the fake.

use std::{sync::Arc, time::Duration};

use serde_json::{Value, json};
use voxpool_domain::contract::Outcome;
use voxpool_domain::{secret::Secret, snapshot::Snapshot};
use voxpool_fake_vendors::{FakeConfig, FakeVendor, RecordedRequest, VendorKind};
use voxpool_synthesis::adapters::{
    AudioFormat, KeyCredential, UpstreamTarget, Utterance, VendorAdapter, VendorAudio,
    VendorFailure, VendorRequest, azure::Azure, dashscope::DashScope, elevenlabs::ElevenLabs, http,
    minimax::MiniMax, openai::OpenAi, volcengine::Volcengine,
};

const SECRET: &str = "sk-wire-test-0123456789abcdef";

fn credential() -> KeyCredential {
    KeyCredential {
        key_id: "acct/app-7".into(),
        app_id: "app-7".into(),
        secret: Some(Secret::new(SECRET)),
    }
}

async fn call(
    fake: &FakeVendor,
    adapter: &dyn VendorAdapter,
    voice: &Snapshot,
    format: AudioFormat,
    sample_rate_hz: Option<u32>,
    attempt_id: &str,
) -> Result<VendorAudio, VendorFailure> {
    let upstream = UpstreamTarget {
        id: "acct".into(),
        base_url: Some(fake.base_url()),
        ..UpstreamTarget::default()
    };
    let key = credential();
    adapter
        .synthesize(VendorRequest {
            utterance: &Utterance {
                text: "hello world".to_owned(),
                voice: Arc::new(voice.clone()),
                pool_model: "pool-model".to_owned(),
                format,
                sample_rate_hz,
                reference: None,
                seed: None,
            },
            key: &key,
            upstream: &upstream,
            timeout: Duration::from_secs(10),
            attempt_id,
            gate: Default::default(),
        })
        .await
}

fn only_request(fake: &FakeVendor) -> RecordedRequest {
    let mut requests = fake.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    let request = requests.remove(0);
    assert!(
        !request.headers.values().any(|v| v.contains(SECRET)),
        "the fake logged an auth header: {:?}",
        request.headers
    );
    assert!(
        !request.body.contains(SECRET),
        "the credential is in the body: {}",
        request.body
    );
    request
}

fn body_json(request: &RecordedRequest) -> Value {
    serde_json::from_str(&request.body).expect("JSON body")
}

fn client() -> reqwest::Client {
    http::build_client().expect("client")
}

#[tokio::test]
async fn openai_sends_speed_and_instructions_and_takes_the_snapshot_model() {
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::OpenAi))
        .await
        .expect("fake");
    let mut voice = voxpool_fake_vendors::snapshot("openai", "tts-1-hd", "nova");
    voice.params.rate = Some(0.75);
    voice.extra.insert("instructions".into(), "whisper".into());
    let audio = call(
        &fake,
        &OpenAi::new(client()),
        &voice,
        AudioFormat::Pcm,
        Some(24_000),
        "a1",
    )
    .await
    .expect("audio");
    assert_eq!(audio.sample_rate_hz, Some(24_000));
    let request = only_request(&fake);
    assert_eq!(request.uri, "/v1/audio/speech");
    assert_eq!(
        body_json(&request),
        json!({"model": "tts-1-hd", "input": "hello world", "voice": "nova", "response_format": "pcm", "speed": 0.75, "instructions": "whisper"})
    );
}

#[tokio::test]
async fn openai_refuses_pitch_before_sending_anything() {
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::OpenAi))
        .await
        .expect("fake");
    let mut voice = voxpool_fake_vendors::snapshot("openai", "tts-1", "alloy");
    voice.params.pitch_pct = Some(5.0);
    let adapter = OpenAi::new(client());
    let refusal = adapter
        .check(&voice, AudioFormat::Mp3, None)
        .expect_err("pitch refused");
    assert_eq!(refusal.param, "params.pitchPct");
    let failure = call(&fake, &adapter, &voice, AudioFormat::Mp3, None, "a1")
        .await
        .expect_err("refused");
    assert_eq!(failure.outcome, Outcome::ClientError);
    assert!(failure.message.contains("params.pitchPct"), "{failure:?}");
    assert!(fake.requests().is_empty());
    assert!(fake.stats().is_empty());
}

#[tokio::test]
async fn azure_sends_escaped_ssml_with_prosody_and_the_output_format_header() {
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::Azure))
        .await
        .expect("fake");
    let mut voice = voxpool_fake_vendors::snapshot("azure", "neural", "de-DE-KatjaNeural");
    voice.locales.clear();
    voice.params.pitch_pct = Some(-10.0);
    voice.params.rate = Some(0.8);
    voice.params.volume_pct = Some(25.0);
    let audio = call(
        &fake,
        &Azure::new(client()),
        &voice,
        AudioFormat::Wav,
        Some(16_000),
        "a1",
    )
    .await
    .expect("audio");
    assert_eq!(audio.sample_rate_hz, Some(16_000));
    let request = only_request(&fake);
    assert_eq!(request.uri, "/cognitiveservices/v1");
    assert_eq!(
        request
            .headers
            .get("x-microsoft-outputformat")
            .map(String::as_str),
        Some("riff-16khz-16bit-mono-pcm")
    );
    assert_eq!(
        request.headers.get("content-type").map(String::as_str),
        Some("application/ssml+xml")
    );
    assert!(
        request
            .headers
            .get("user-agent")
            .is_some_and(|ua| ua.starts_with("voxpool"))
    );
    assert!(
        request.body.contains("xml:lang='de-DE'"),
        "{}",
        request.body
    );
    assert!(
        request
            .body
            .contains("<prosody pitch='-10%' rate='-20%' volume='+25%'>hello world</prosody>"),
        "{}",
        request.body
    );
}

#[tokio::test]
async fn volcengine_sends_appid_cluster_reqid_and_a_semicolon_bearer() {
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::Volcengine))
        .await
        .expect("fake");
    let mut voice =
        voxpool_fake_vendors::snapshot("volcengine", "", "zh_female_shuangkuaisisi_moon_bigtts");
    voice.params.rate = Some(1.5);
    voice.params.volume_pct = Some(-20.0);
    let adapter = Volcengine::new(client());
    call(&fake, &adapter, &voice, AudioFormat::Mp3, None, "attempt-1")
        .await
        .expect("audio");
    let request = only_request(&fake);
    assert_eq!(request.key, "app-7", "counted per appid");
    let body = body_json(&request);
    assert_eq!(body["app"]["appid"], "app-7");
    assert_eq!(body["app"]["cluster"], "volcano_tts");
    assert_eq!(
        body["app"]["token"], "access_token",
        "the token travels in the header only"
    );
    assert_eq!(body["request"]["reqid"], "attempt-1");
    assert_eq!(
        body["audio"],
        json!({"voice_type": "zh_female_shuangkuaisisi_moon_bigtts", "encoding": "mp3", "rate": 24000, "speed_ratio": 1.5, "loudness_ratio": 0.8})
    );
    // A reused reqid is the vendor's 3006: a client error, not a key problem.
    let failure = call(&fake, &adapter, &voice, AudioFormat::Mp3, None, "attempt-1")
        .await
        .expect_err("duplicate");
    assert_eq!(failure.outcome, Outcome::ClientError, "{failure:?}");
    assert!(failure.message.contains("3006"), "{failure:?}");
}

#[tokio::test]
async fn volcengine_large_model_voice_refuses_pitch() {
    let mut voice = voxpool_fake_vendors::snapshot("volcengine", "seed-tts-1.0", "my_voice");
    voice.params.pitch_pct = Some(10.0);
    let e = Volcengine::new(client())
        .check(&voice, AudioFormat::Mp3, None)
        .expect_err("no pitch");
    assert_eq!(e.param, "params.pitchPct");
    assert!(e.reason.contains("large-model"), "{e}");
}

#[tokio::test]
async fn elevenlabs_puts_voice_in_the_path_and_wraps_pcm_into_wav() {
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::ElevenLabs))
        .await
        .expect("fake");
    let mut voice = voxpool_fake_vendors::snapshot("elevenlabs", "eleven_flash_v2_5", "voice 1");
    voice.params.rate = Some(0.9);
    voice
        .extra
        .insert("use_speaker_boost".into(), "false".into());
    let audio = call(
        &fake,
        &ElevenLabs::new(client()),
        &voice,
        AudioFormat::Wav,
        Some(22_050),
        "a1",
    )
    .await
    .expect("audio");
    let wav = hound::WavReader::new(std::io::Cursor::new(exact_wav(&audio))).expect("a WAV");
    assert_eq!(wav.spec().sample_rate, 22_050);
    assert_eq!(
        wav.len(),
        22_050 / 5,
        "200 ms of samples, header sizes match"
    );
    let request = only_request(&fake);
    assert_eq!(
        request.uri,
        "/v1/text-to-speech/voice%201/stream?output_format=pcm_22050"
    );
    assert_eq!(
        body_json(&request),
        json!({"text": "hello world", "model_id": "eleven_flash_v2_5", "voice_settings": {"speed": 0.9, "use_speaker_boost": false}})
    );
}

#[tokio::test]
async fn minimax_sends_whole_semitones_gain_and_decodes_hex_audio() {
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::MiniMax))
        .await
        .expect("fake");
    let mut voice = voxpool_fake_vendors::snapshot("minimax", "", "female-shaonv");
    voice.params.pitch_pct = Some(-10.911);
    voice.params.volume_pct = Some(50.0);
    voice.params.rate = Some(1.5);
    let audio = call(
        &fake,
        &MiniMax::new(client()),
        &voice,
        AudioFormat::Pcm,
        Some(16_000),
        "a1",
    )
    .await
    .expect("audio");
    assert_eq!(
        audio.bytes.len(),
        16_000 / 5 * 2,
        "200 ms of 16-bit samples"
    );
    let body = body_json(&only_request(&fake));
    assert_eq!(
        body["model"], "pool-model",
        "the pool's model when the snapshot has none"
    );
    assert_eq!(
        body["voice_setting"],
        json!({"voice_id": "female-shaonv", "speed": 1.5, "vol": 1.5, "pitch": -2})
    );
    assert_eq!(
        body["audio_setting"],
        json!({"sample_rate": 16000, "bitrate": 128000, "format": "pcm", "channel": 1})
    );
}

#[tokio::test]
async fn dashscope_streams_sse_and_sends_pitch_multiplier_and_integer_volume() {
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::DashScope))
        .await
        .expect("fake");
    let mut voice = voxpool_fake_vendors::snapshot("dashscope", "cosyvoice-v2", "longxiaochun_v2");
    voice.params.pitch_pct = Some(-20.0);
    voice.params.volume_pct = Some(30.0);
    voice.params.rate = Some(0.8);
    let audio = call(
        &fake,
        &DashScope::new(client()),
        &voice,
        AudioFormat::Wav,
        None,
        "a1",
    )
    .await
    .expect("audio");
    let wav = hound::WavReader::new(std::io::Cursor::new(exact_wav(&audio)))
        .expect("a WAV from the joined chunks");
    assert_eq!(wav.spec().sample_rate, 22_050);
    assert_eq!(wav.len(), 22_050 / 5);
    let request = only_request(&fake);
    assert_eq!(
        request.headers.get("x-dashscope-sse").map(String::as_str),
        Some("enable")
    );
    assert_eq!(
        body_json(&request),
        json!({"model": "cosyvoice-v2", "input": {"text": "hello world", "voice": "longxiaochun_v2", "format": "pcm", "sample_rate": 22050, "rate": 0.8, "pitch": 0.8, "volume": 65}})
    );
}

#[tokio::test]
async fn the_fake_rejects_a_bad_body_with_the_vendors_client_error() {
    // A raw request with a field OpenAI does not know: the fake answers 400 like the vendor.
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::OpenAi))
        .await
        .expect("fake");
    let response = client()
        .post(format!("{}/v1/audio/speech", fake.base_url()))
        .bearer_auth("k")
        .json(&json!({"model": "m", "input": "x", "voice": "v", "pitch": 2}))
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.expect("JSON");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("pitch")),
        "{body}"
    );
}

#[tokio::test]
async fn the_stats_endpoint_reports_per_key_counters() {
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::MiniMax))
        .await
        .expect("fake");
    let voice = voxpool_fake_vendors::snapshot("minimax", "speech-02-hd", "male-qn-qingse");
    call(
        &fake,
        &MiniMax::new(client()),
        &voice,
        AudioFormat::Mp3,
        None,
        "a1",
    )
    .await
    .expect("audio");
    let stats: Value = client()
        .get(format!("{}/_fake/stats", fake.base_url()))
        .send()
        .await
        .expect("answer")
        .json()
        .await
        .expect("JSON");
    assert_eq!(stats[SECRET]["total_requests"], 1);
    assert_eq!(stats[SECRET]["peak_concurrency"], 1);
    assert_eq!(stats[SECRET]["successes"], 1);
}

#[test]
fn the_builtin_registry_serves_every_cloud_adapter_under_its_provider_id() {
    use voxpool_synthesis::adapters::registry::{AdapterOptions, builtin};
    let registry = builtin(&AdapterOptions::default());
    for kind in VendorKind::ALL {
        let adapter = registry
            .get(&kind.as_str().parse().expect("a provider id"))
            .unwrap_or_else(|| panic!("{kind} not registered"));
        assert_eq!(adapter.provider().as_str(), kind.as_str());
    }
}

/// The caller's view of an adapter's WAV: a streaming adapter's header may carry unknown
/// sizes (the vendor streamed PCM, or espeak-ng wrote placeholders); the service's joiner gives
/// callers one header whose sizes match the bytes.
fn exact_wav(audio: &VendorAudio) -> Vec<u8> {
    let mut joiner = voxpool_synthesis::audio::Joiner::new(AudioFormat::Wav);
    let mut out = joiner.push(audio).expect("a WAV piece");
    out.extend(joiner.finish().expect("a WAV"));
    out
}
