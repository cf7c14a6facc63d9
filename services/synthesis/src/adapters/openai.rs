//! OpenAI-compatible speech: `POST {base}/v1/audio/speech` (OpenAI API reference, "Audio →
//! Create speech", <https://platform.openai.com/docs/api-reference/audio/createSpeech>; see
//! docs/VENDORS.md, "openai"). One adapter serves OpenAI and every relay or local server
//! that speaks this shape. Default base: `https://api.openai.com`; a configured `base_url`
//! ending in `/v1` is used as is (`{base_url}/audio/speech`).
//!
//! # Param conversion
//! | snapshot | wire | rule |
//! |---|---|---|
//! | `params.rate` | `speed` | same multiplier; 0.25..4.0 or refused |
//! | `params.pitchPct` | — | no pitch control: refused unless 0 |
//! | `params.volumePct` | — | no volume control: refused unless 0 |
//! | `extra.instructions` | `instructions` | passed through (gpt-4o-mini-tts style prompt) |
//! | other `extra.*` | — | refused |
//! | `WAV` / `MP3` / `OGG_OPUS` / `PCM` | `response_format` `wav` / `mp3` / `opus` / `pcm` | output is 24 kHz: any other `sample_rate_hz` is refused |
//!
//! Text limit: 4096 characters (`input`).
//!
//! # Streaming
//! The 200 body arrives chunked as the audio is produced (the API reference's "streaming
//! audio": the response is sent as it is generated); each piece goes to the sink as it
//! arrives. `pcm` (and `mp3`, `opus`) start playing from the first bytes; `wav` carries its
//! header first.
//!
//! # Errors
//! Body `{"error":{"message","type","param","code"}}`: `insufficient_quota` → `QUOTA_EXHAUSTED`
//! (even on 429), `invalid_api_key` → `KEY_INVALID`, any other 429 (`rate_limit_exceeded`, or
//! whatever body a self-hosted or proxy server sends) → `RATE_LIMITED`, an overload signal that
//! lowers an adaptive key's effective capacity (`http::classify`); `rate_limit_exceeded` →
//! `RATE_LIMITED`, `server_is_overloaded` → `UPSTREAM_ERROR` (`RATE_LIMITED` on a 503 with
//! `Retry-After`); otherwise by status. A 200 whose body is a JSON document is classified by its
//! code (or `UPSTREAM_ERROR`), never returned as audio.

use async_trait::async_trait;
use reqwest::Client;
use serde_json::{Value, json};
use voxpool_domain::{contract::Outcome, provider::Provider};
use voxpool_domain::{secret::Secret, snapshot::Snapshot};

use super::{
    AudioFormat, ParamError, StreamEnd, TextLimit, VendorFailure, VendorRequest,
    cloud::{Call, CloudVendor, Mapping},
    http::{self, HttpReply},
};

const PROVIDER: &str = Provider::OpenAi.as_str();
const DEFAULT_BASE: &str = "https://api.openai.com";
/// OpenAI speech output is always 24 kHz.
const SAMPLE_RATE: u32 = 24_000;

/// The OpenAI-compatible `/v1/audio/speech` adapter.
#[derive(Clone, Debug)]
pub struct OpenAi {
    client: Client,
}

impl OpenAi {
    /// An adapter sending through `client` (share one pooled client between adapters).
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

/// The wire values a snapshot maps to.
#[derive(Clone, Debug, PartialEq)]
pub struct Wire {
    speed: Option<f64>,
    response_format: &'static str,
    instructions: Option<String>,
}

fn wire(
    voice: &Snapshot,
    format: AudioFormat,
    sample_rate_hz: Option<u32>,
) -> Result<Wire, ParamError> {
    http::require_voice_id(PROVIDER, voice)?;
    http::refuse_unknown_extra(PROVIDER, voice, &["instructions"])?;
    http::refuse_if_set(
        PROVIDER,
        "params.pitchPct",
        voice.params.pitch_pct,
        "OpenAI speech has no pitch control",
    )?;
    http::refuse_if_set(
        PROVIDER,
        "params.volumePct",
        voice.params.volume_pct,
        "OpenAI speech has no volume control",
    )?;
    let speed = voice
        .params
        .rate
        .map(|r| http::require_range(PROVIDER, "params.rate", r, r, 0.25, 4.0, "speed"))
        .transpose()?;
    let response_format = match format {
        AudioFormat::Wav => "wav",
        AudioFormat::Mp3 => "mp3",
        AudioFormat::OggOpus => "opus",
        AudioFormat::Pcm => "pcm",
    };
    if let Some(rate) = sample_rate_hz {
        http::require_sample_rate(PROVIDER, format, rate, &[SAMPLE_RATE])?;
    }
    Ok(Wire {
        speed,
        response_format,
        instructions: voice.extra.get("instructions").cloned(),
    })
}

fn body(request: &VendorRequest<'_>, wire: &Wire) -> Value {
    let mut body = json!({
        "model": http::model_of(&request.utterance.voice, &request.utterance.pool_model),
        "input": request.utterance.text,
        "voice": request.utterance.voice.voice_id,
        "response_format": wire.response_format,
    });
    if let Some(speed) = wire.speed {
        body["speed"] = json!(speed);
    }
    if let Some(instructions) = &wire.instructions {
        body["instructions"] = json!(instructions);
    }
    body
}

fn endpoint(base_url: Option<&str>) -> String {
    let base = http::base_url(base_url, DEFAULT_BASE);
    if base.ends_with("/v1") {
        format!("{base}/audio/speech")
    } else {
        format!("{base}/v1/audio/speech")
    }
}

/// Classifies an OpenAI error document (any status, including 200).
fn classify(reply: &HttpReply, secret: &Secret) -> VendorFailure {
    let status = reply.status.as_u16();
    let doc: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    let error = &doc["error"];
    let code = error["code"]
        .as_str()
        .or_else(|| error["type"].as_str())
        .unwrap_or_default();
    let kind = error["type"].as_str().unwrap_or_default();
    let outcome = match (code, kind) {
        ("insufficient_quota", _) | (_, "insufficient_quota") => Outcome::QuotaExhausted,
        ("invalid_api_key", _) => Outcome::KeyInvalid,
        // Any other 429 is an overload signal, whatever its body (module doc).
        _ if status == 429 => Outcome::RateLimited,
        ("rate_limit_exceeded", _) => Outcome::RateLimited,
        ("server_is_overloaded" | "server_error", _) => Outcome::UpstreamError,
        _ if status == 200 => Outcome::UpstreamError,
        _ => http::outcome_for_status(status),
    };
    let text = error["message"].as_str().unwrap_or_default();
    http::ErrorAnswer::of(reply, code.to_owned(), text, Some(outcome))
        .failure(PROVIDER, Some(secret))
}

#[async_trait]
impl CloudVendor for OpenAi {
    const PROVIDER: Provider = Provider::OpenAi;
    const TEXT_LIMIT: TextLimit = TextLimit::Chars(4096);
    const DEFAULT_RATE: u32 = SAMPLE_RATE;
    type Wire = Wire;
    const WIRE: Mapping<Wire> = wire;

    async fn call(&self, call: Call<'_, Wire>) -> Result<StreamEnd, VendorFailure> {
        let (request, wire, secret, sink) = call.parts();
        let builder = self
            .client
            .post(endpoint(request.upstream.base_url.as_deref()))
            .bearer_auth(secret.expose())
            .json(&body(request, &wire));
        let opened = http::open(
            PROVIDER,
            builder,
            request.timeout,
            Some(secret),
            &request.gate,
        )
        .await?;
        http::stream_raw_audio(PROVIDER, opened, sink, Some(secret), |reply| {
            classify(reply, secret)
        })
        .await?;
        Ok(StreamEnd {
            sample_rate_hz: Some(SAMPLE_RATE),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use voxpool_domain::snapshot::Params;

    use super::*;
    use crate::adapters::{KeyCredential, UpstreamTarget, Utterance, VendorAdapter};

    fn snapshot(params: Params, extra: &[(&str, &str)]) -> Snapshot {
        let mut s = voxpool_fake_vendors::snapshot(PROVIDER, "tts-1", "alloy");
        s.params = params;
        s.extra = extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        s
    }

    #[test]
    fn params_map_to_wire_values() {
        let p = |pitch_pct, rate, volume_pct| Params {
            pitch_pct,
            rate,
            volume_pct,
        };
        let cases: Vec<(Params, http::Extra, AudioFormat, Wire)> = vec![
            (
                p(None, None, None),
                &[],
                AudioFormat::Mp3,
                Wire {
                    speed: None,
                    response_format: "mp3",
                    instructions: None,
                },
            ),
            (
                p(None, Some(1.5), None),
                &[],
                AudioFormat::Wav,
                Wire {
                    speed: Some(1.5),
                    response_format: "wav",
                    instructions: None,
                },
            ),
            (
                p(Some(0.0), Some(0.25), Some(0.0)),
                &[],
                AudioFormat::Pcm,
                Wire {
                    speed: Some(0.25),
                    response_format: "pcm",
                    instructions: None,
                },
            ),
            (
                p(None, Some(4.0), None),
                &[("instructions", "calm")],
                AudioFormat::OggOpus,
                Wire {
                    speed: Some(4.0),
                    response_format: "opus",
                    instructions: Some("calm".into()),
                },
            ),
        ];
        for (params, extra, format, expected) in cases {
            assert_eq!(
                wire(&snapshot(params, extra), format, None).unwrap(),
                expected,
                "{params:?}"
            );
        }
    }

    #[test]
    fn inexpressible_params_are_refused_by_name() {
        let p = |pitch_pct, rate, volume_pct| Params {
            pitch_pct,
            rate,
            volume_pct,
        };
        let cases: Vec<http::Refusal> = vec![
            (
                p(Some(10.0), None, None),
                &[],
                AudioFormat::Mp3,
                None,
                "params.pitchPct",
            ),
            (
                p(None, None, Some(-20.0)),
                &[],
                AudioFormat::Mp3,
                None,
                "params.volumePct",
            ),
            (
                p(None, Some(4.5), None),
                &[],
                AudioFormat::Mp3,
                None,
                "params.rate",
            ),
            (
                p(None, Some(0.2), None),
                &[],
                AudioFormat::Mp3,
                None,
                "params.rate",
            ),
            (
                p(None, None, None),
                &[("style", "x")],
                AudioFormat::Mp3,
                None,
                "extra.style",
            ),
            (
                p(None, None, None),
                &[],
                AudioFormat::Wav,
                Some(16_000),
                "sample_rate_hz",
            ),
        ];
        for (params, extra, format, rate, param) in cases {
            let e = OpenAi::new(http::build_client().expect("client"))
                .check(&snapshot(params, extra), format, rate)
                .unwrap_err();
            assert_eq!(e.param, param, "{e}");
            assert_eq!(e.provider, PROVIDER);
            assert!(e.to_string().contains(param), "{e}");
        }
    }

    #[test]
    fn body_carries_model_voice_speed_and_format() {
        let voice = snapshot(
            Params {
                rate: Some(1.25),
                ..Params::default()
            },
            &[],
        );
        let key = KeyCredential {
            key_id: "u/k".into(),
            app_id: "k".into(),
            secret: None,
        };
        let upstream = UpstreamTarget::default();
        let request = VendorRequest {
            utterance: &Utterance {
                text: "hello".to_owned(),
                voice: Arc::new(voice.clone()),
                pool_model: "pool-model".to_owned(),
                format: AudioFormat::Wav,
                sample_rate_hz: None,
                reference: None,
                seed: None,
            },
            key: &key,
            upstream: &upstream,
            timeout: Duration::from_secs(1),
            attempt_id: "a1",
            gate: Default::default(),
        };
        let w = wire(&voice, AudioFormat::Wav, None).unwrap();
        assert_eq!(
            body(&request, &w),
            json!({"model": "tts-1", "input": "hello", "voice": "alloy", "response_format": "wav", "speed": 1.25})
        );
    }

    #[test]
    fn a_plain_429_is_a_rate_limit_never_a_spent_quota() {
        let secret = Secret::new("sk-test-0123456789abcdef");
        let reply = |status: u16, body: &'static str| HttpReply {
            status: reqwest::StatusCode::from_u16(status).expect("status"),
            headers: reqwest::header::HeaderMap::new(),
            body: bytes::Bytes::from_static(body.as_bytes()),
        };
        for (status, body, outcome) in [
            // Self-hosted and proxy-fronted servers: no OpenAI document at all.
            (429, "Too Many Requests", Outcome::RateLimited),
            (429, "", Outcome::RateLimited),
            (429, r#"{"detail":"server busy"}"#, Outcome::RateLimited),
            (
                429,
                r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#,
                Outcome::RateLimited,
            ),
            (
                429,
                r#"{"error":{"message":"over capacity","type":"server_error","code":null}}"#,
                Outcome::RateLimited,
            ),
            (
                503,
                r#"{"error":{"code":"server_is_overloaded"}}"#,
                Outcome::UpstreamError,
            ),
            (
                429,
                r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#,
                Outcome::QuotaExhausted,
            ),
        ] {
            let f = classify(&reply(status, body), &secret);
            assert_eq!(f.outcome, outcome, "{status} {body}");
            assert_eq!(f.http_status, Some(status));
        }
    }

    #[test]
    fn endpoint_accepts_bases_with_and_without_v1() {
        assert_eq!(endpoint(None), "https://api.openai.com/v1/audio/speech");
        assert_eq!(
            endpoint(Some("http://relay/v1/")),
            "http://relay/v1/audio/speech"
        );
        assert_eq!(
            endpoint(Some("http://127.0.0.1:9")),
            "http://127.0.0.1:9/v1/audio/speech"
        );
    }
}
