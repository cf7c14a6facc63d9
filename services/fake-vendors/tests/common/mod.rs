//! What the streaming tests share: one request per streaming wire format, a decoder that takes
//! each format's framing off, and a bounded poll.

#![allow(dead_code)]

use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use voxpool_fake_vendors::{FakeVendor, VendorKind};

/// The credential every test presents (for Volcengine V3: the app id, the counting key).
pub const KEY: &str = "key-1";
/// The Volcengine V3 access key.
pub const ACCESS_KEY: &str = "access-1";

/// A streaming wire format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// OpenAI `/v1/audio/speech`, WAV.
    OpenAi,
    /// Azure `/cognitiveservices/v1`, RIFF PCM.
    Azure,
    /// ElevenLabs `/v1/text-to-speech/{voice_id}/stream`, PCM.
    ElevenLabs,
    /// MiniMax `/v1/t2a_v2` with `stream: true`, MP3.
    MiniMax,
    /// DashScope SSE, PCM.
    DashScope,
    /// Volcengine `/api/v3/tts/unidirectional`, PCM.
    VolcengineV3,
}

impl Wire {
    /// The fake that speaks it.
    pub fn vendor(self) -> VendorKind {
        match self {
            Wire::OpenAi => VendorKind::OpenAi,
            Wire::Azure => VendorKind::Azure,
            Wire::ElevenLabs => VendorKind::ElevenLabs,
            Wire::MiniMax => VendorKind::MiniMax,
            Wire::DashScope => VendorKind::DashScope,
            Wire::VolcengineV3 => VendorKind::Volcengine,
        }
    }

    /// Audio bodies are raw bytes (no events or lines around them).
    pub fn is_raw(self) -> bool {
        matches!(self, Wire::OpenAi | Wire::Azure | Wire::ElevenLabs)
    }

    /// A streamed synthesis request of `text` with `key`.
    pub fn request(self, fake: &FakeVendor, key: &str, text: &str) -> reqwest::RequestBuilder {
        let http = client();
        let base = fake.base_url();
        match self {
            Wire::OpenAi => http
                .post(format!("{base}/v1/audio/speech"))
                .bearer_auth(key)
                .json(&json!({"model": "tts-1", "input": text, "voice": "alloy", "response_format": "wav"})),
            Wire::Azure => http
                .post(format!("{base}/cognitiveservices/v1"))
                .header("ocp-apim-subscription-key", key)
                .header("content-type", "application/ssml+xml")
                .header("x-microsoft-outputformat", "riff-24khz-16bit-mono-pcm")
                .body(format!(
                    "<speak version='1.0' xml:lang='en-US'><voice name='en-US-JennyNeural'>{}</voice></speak>",
                    text.replace('&', "&amp;").replace('<', "&lt;")
                )),
            Wire::ElevenLabs => http
                .post(format!("{base}/v1/text-to-speech/voice1/stream?output_format=pcm_24000"))
                .header("xi-api-key", key)
                .json(&json!({"text": text, "model_id": "eleven_flash_v2_5"})),
            Wire::MiniMax => http
                .post(format!("{base}/v1/t2a_v2"))
                .bearer_auth(key)
                .json(&json!({
                    "model": "speech-02-hd", "text": text, "stream": true,
                    "voice_setting": {"voice_id": "male-qn-qingse"},
                    "audio_setting": {"format": "mp3", "sample_rate": 32000},
                })),
            Wire::DashScope => http
                .post(format!("{base}/api/v1/services/audio/tts/SpeechSynthesizer"))
                .bearer_auth(key)
                .header("x-dashscope-sse", "enable")
                .json(&json!({"model": "cosyvoice-v2", "input": {"text": text, "voice": "longxiaochun_v2", "format": "pcm", "sample_rate": 16000}})),
            Wire::VolcengineV3 => http
                .post(format!("{base}/api/v3/tts/unidirectional"))
                .header("x-api-app-id", key)
                .header("x-api-access-key", ACCESS_KEY)
                .header("x-api-resource-id", "seed-tts-1.0")
                .json(&json!({
                    "user": {"uid": "u1"},
                    "req_params": {"text": text, "speaker": "zh_female_shuangkuaisisi_moon_bigtts",
                        "audio_params": {"format": "pcm", "sample_rate": 24000}},
                })),
        }
    }

    /// Takes the framing off a body of this wire format.
    pub fn decode(self, body: &[u8]) -> Decoded {
        if self.is_raw() {
            return Decoded {
                audio: body.to_vec(),
                pieces: 0,
                ended: true,
                failed: false,
                aggregated: None,
            };
        }
        let text = std::str::from_utf8(body).expect("an event or line body is UTF-8");
        let mut d = Decoded::default();
        match self {
            Wire::MiniMax => {
                for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
                    let data = block
                        .strip_prefix("data: ")
                        .expect("a MiniMax event is `data: …`");
                    let v: Value = serde_json::from_str(data).expect("event JSON");
                    if v["base_resp"]["status_code"] != 0 {
                        d.failed = true;
                        continue;
                    }
                    let audio =
                        hex::decode(v["data"]["audio"].as_str().expect("audio hex")).expect("hex");
                    match v["data"]["status"].as_i64() {
                        Some(1) => {
                            d.audio.extend(audio);
                            d.pieces += 1;
                        }
                        Some(2) => {
                            assert!(v["extra_info"].is_object(), "the last event has extra_info");
                            d.ended = true;
                            d.aggregated = Some(audio);
                        }
                        other => panic!("unexpected data.status {other:?}"),
                    }
                }
            }
            Wire::DashScope => {
                for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
                    let field = |name: &str| {
                        block
                            .lines()
                            .find_map(|l| l.strip_prefix(name))
                            .unwrap_or_default()
                    };
                    let v: Value = serde_json::from_str(field("data:")).expect("event JSON");
                    match field("event:") {
                        "result" => {
                            assert_eq!(field(":HTTP_STATUS/"), "200");
                            d.audio.extend(b64(&v["output"]["audio"]["data"]));
                            d.pieces += 1;
                            d.ended = v["output"]["finish_reason"] == "stop";
                        }
                        "error" => {
                            assert_eq!(field(":HTTP_STATUS/"), "500");
                            assert_eq!(v["code"], "InternalError");
                            d.failed = true;
                        }
                        other => panic!("unexpected event {other:?}"),
                    }
                }
            }
            Wire::VolcengineV3 => {
                for line in text.lines().filter(|l| !l.trim().is_empty()) {
                    let v: Value = serde_json::from_str(line).expect("line JSON");
                    match v["code"].as_i64() {
                        Some(0) if v["data"].is_string() => {
                            d.audio.extend(b64(&v["data"]));
                            d.pieces += 1;
                        }
                        Some(0) => assert!(v["data"].is_null() && v["sentence"].is_object()),
                        Some(20_000_000) => d.ended = true,
                        Some(55_000_000) => d.failed = true,
                        other => panic!("unexpected code {other:?} in {line}"),
                    }
                }
            }
            Wire::OpenAi | Wire::Azure | Wire::ElevenLabs => {
                unreachable!("raw bodies return above")
            }
        }
        d
    }
}

fn b64(v: &Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(v.as_str().expect("base64 string"))
        .expect("base64")
}

/// A body with its framing taken off.
#[derive(Debug, Default)]
pub struct Decoded {
    /// The audio pieces joined (MiniMax: the `status: 1` events only).
    pub audio: Vec<u8>,
    /// Audio events or lines seen (0 for raw bodies).
    pub pieces: usize,
    /// The end frame was seen (raw bodies: always true).
    pub ended: bool,
    /// The vendor's error event or line was seen.
    pub failed: bool,
    /// MiniMax: the audio of the `status: 2` event.
    pub aggregated: Option<Vec<u8>>,
}

/// A plain-HTTP client.
pub fn client() -> reqwest::Client {
    voxpool_runtime::limits::install_crypto_provider();
    reqwest::Client::new()
}

/// Polls `done` every 10 ms until it holds; panics after 10 s.
pub async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let bound = tokio::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(
            tokio::time::Instant::now() < bound,
            "never happened: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Reads the rest of `response`, appending to `body`; `Err` if the body broke.
pub async fn read_rest(
    response: &mut reqwest::Response,
    body: &mut Vec<u8>,
) -> reqwest::Result<()> {
    while let Some(chunk) = response.chunk().await? {
        body.extend_from_slice(&chunk);
    }
    Ok(())
}

/// Generates one `#[tokio::test]` per wire format calling `$test(wire)`.
#[allow(unused_macros)]
macro_rules! per_wire {
    ($test:ident) => {
        mod $test {
            use super::common::Wire;

            #[tokio::test]
            async fn openai() {
                super::$test(Wire::OpenAi).await;
            }
            #[tokio::test]
            async fn azure() {
                super::$test(Wire::Azure).await;
            }
            #[tokio::test]
            async fn elevenlabs() {
                super::$test(Wire::ElevenLabs).await;
            }
            #[tokio::test]
            async fn minimax() {
                super::$test(Wire::MiniMax).await;
            }
            #[tokio::test]
            async fn dashscope() {
                super::$test(Wire::DashScope).await;
            }
            #[tokio::test]
            async fn volcengine_v3() {
                super::$test(Wire::VolcengineV3).await;
            }
        }
    };
}
