//! ElevenLabs text to speech, streaming: `POST
//! {base}/v1/text-to-speech/{voice_id}/stream?output_format=…` (ElevenLabs API reference
//! "Stream speech", <https://elevenlabs.io/docs/api-reference/text-to-speech/stream>; docs/VENDORS.md
//! "elevenlabs" for the error codes and concurrency limits). Default base
//! `https://api.elevenlabs.io`; auth header `xi-api-key`. Body `text`, `model_id`,
//! `voice_settings` (the same as the non-streaming "Create speech"). The answer is raw audio,
//! sent as it is produced; each piece goes to the sink as it arrives (a WAV request: a header
//! with unknown sizes first, then the PCM).
//!
//! # Param conversion
//! | snapshot | wire | rule |
//! |---|---|---|
//! | `params.rate` | `voice_settings.speed` | same multiplier, 0.7..1.2 |
//! | `params.pitchPct` | — | no pitch control: refused unless 0 |
//! | `params.volumePct` | — | no volume control: refused unless 0 |
//! | `extra.stability`, `extra.similarity_boost`, `extra.style` | `voice_settings.*` | numbers 0..1 |
//! | `extra.use_speaker_boost` | `voice_settings.use_speaker_boost` | `true` / `false` |
//! | `MP3` + rate | `output_format` `mp3_22050_32` / `mp3_44100_128` | 22050 or 44100 Hz (default 44100) |
//! | `PCM` + rate | `pcm_<rate>` | 8000, 16000, 22050, 24000, 44100, 48000 (default 24000) |
//! | `WAV` + rate | `pcm_<rate>`, behind a RIFF header written here | as PCM |
//! | `OGG_OPUS` | — | refused: the Opus outputs' container is not documented |
//!
//! Text limit: 5000 characters, conservative (the multilingual v2 model takes 10000).
//!
//! # Errors
//! `{"detail":{"type","code","message","status"}}` (older answers carry the code in
//! `status`): `too_many_concurrent_requests`/`concurrent_limit_exceeded` →
//! `CONCURRENCY_LIMITED` (the plan's concurrency, which drives the key's effective capacity);
//! `rate_limit_exceeded` and `system_busy` (the service is loaded: back off) → `RATE_LIMITED`;
//! `quota_exceeded` → `QUOTA_EXHAUSTED` (ElevenLabs sends it as 401); `invalid_api_key` /
//! `missing_permissions` → `KEY_INVALID`; `voice_not_found` → `CLIENT_ERROR`; else by status.

use async_trait::async_trait;
use reqwest::{Client, Url};
use serde_json::{Map, Value, json};
use voxpool_domain::{contract::Outcome, provider::Provider};
use voxpool_domain::{secret::Secret, snapshot::Snapshot};

use super::{
    AudioFormat, ParamError, StreamEnd, TextLimit, VendorFailure, VendorRequest,
    cloud::{Call, CloudVendor, Mapping},
    http::{self, HttpReply},
};

const PROVIDER: &str = Provider::ElevenLabs.as_str();
const DEFAULT_BASE: &str = "https://api.elevenlabs.io";
const PCM_RATES: &[u32] = &[8_000, 16_000, 22_050, 24_000, 44_100, 48_000];

/// The ElevenLabs text-to-speech adapter.
#[derive(Clone, Debug)]
pub struct ElevenLabs {
    client: Client,
}

impl ElevenLabs {
    /// An adapter sending through `client` (share one pooled client between adapters).
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

/// The wire values a snapshot maps to.
#[derive(Clone, Debug, PartialEq)]
pub struct Wire {
    output_format: String,
    sample_rate_hz: u32,
    /// The vendor sends PCM that this adapter wraps into WAV.
    wrap_wav: bool,
    voice_settings: Map<String, Value>,
}

fn wire(
    voice: &Snapshot,
    format: AudioFormat,
    sample_rate_hz: Option<u32>,
) -> Result<Wire, ParamError> {
    http::require_voice_id(PROVIDER, voice)?;
    http::refuse_unknown_extra(
        PROVIDER,
        voice,
        &[
            "similarity_boost",
            "stability",
            "style",
            "use_speaker_boost",
        ],
    )?;
    http::refuse_if_set(
        PROVIDER,
        "params.pitchPct",
        voice.params.pitch_pct,
        "ElevenLabs has no pitch control",
    )?;
    http::refuse_if_set(
        PROVIDER,
        "params.volumePct",
        voice.params.volume_pct,
        "ElevenLabs has no volume control",
    )?;
    let mut settings = Map::new();
    for key in ["stability", "similarity_boost", "style"] {
        if let Some(v) = http::extra_f64(PROVIDER, voice, key, 0.0, 1.0)? {
            settings.insert(key.to_owned(), json!(v));
        }
    }
    if let Some(b) = http::extra_bool(PROVIDER, voice, "use_speaker_boost")? {
        settings.insert("use_speaker_boost".to_owned(), json!(b));
    }
    if let Some(r) = voice.params.rate {
        settings.insert(
            "speed".to_owned(),
            json!(http::require_range(
                PROVIDER,
                "params.rate",
                r,
                r,
                0.7,
                1.2,
                "speed"
            )?),
        );
    }
    let (output_format, rate, wrap_wav) = match format {
        AudioFormat::Mp3 => {
            let rate = http::require_sample_rate(
                PROVIDER,
                format,
                sample_rate_hz.unwrap_or(44_100),
                &[22_050, 44_100],
            )?;
            (
                if rate == 22_050 {
                    "mp3_22050_32".to_owned()
                } else {
                    "mp3_44100_128".to_owned()
                },
                rate,
                false,
            )
        }
        AudioFormat::Pcm | AudioFormat::Wav => {
            let rate = http::require_sample_rate(
                PROVIDER,
                format,
                sample_rate_hz.unwrap_or(24_000),
                PCM_RATES,
            )?;
            (format!("pcm_{rate}"), rate, format == AudioFormat::Wav)
        }
        AudioFormat::OggOpus => {
            return Err(http::refuse(
                PROVIDER,
                "format",
                "OGG_OPUS",
                "supported: MP3, PCM, WAV",
            ));
        }
    };
    Ok(Wire {
        output_format,
        sample_rate_hz: rate,
        wrap_wav,
        voice_settings: settings,
    })
}

fn body(request: &VendorRequest<'_>, wire: &Wire) -> Value {
    let mut body = json!({
        "text": request.utterance.text,
        "model_id": http::model_of(&request.utterance.voice, &request.utterance.pool_model),
    });
    if !wire.voice_settings.is_empty() {
        body["voice_settings"] = Value::Object(wire.voice_settings.clone());
    }
    body
}

fn endpoint(base_url: Option<&str>, voice_id: &str, output_format: &str) -> Result<Url, String> {
    let base = http::base_url(base_url, DEFAULT_BASE);
    let mut url = Url::parse(&base).map_err(|e| format!("upstream base_url is not a URL: {e}"))?;
    url.path_segments_mut()
        .map_err(|()| "upstream base_url cannot take a path".to_owned())?
        .pop_if_empty()
        .extend(["v1", "text-to-speech", voice_id, "stream"]);
    url.query_pairs_mut()
        .append_pair("output_format", output_format);
    Ok(url)
}

/// The outcome for an ElevenLabs error code (or `None` when unknown).
fn outcome_for_code(code: &str) -> Option<Outcome> {
    Some(match code {
        "too_many_concurrent_requests" | "concurrent_limit_exceeded" => Outcome::ConcurrencyLimited,
        "rate_limit_exceeded" => Outcome::RateLimited,
        // A 429 telling every caller to back off while the service is loaded: overload (the
        // key cools for the Retry-After or the default, an adaptive key's capacity drops), not
        // a failure of the key that would count toward its failure backoff.
        "system_busy" => Outcome::RateLimited,
        "quota_exceeded" => Outcome::QuotaExhausted,
        "invalid_api_key" | "missing_permissions" | "unauthorized" => Outcome::KeyInvalid,
        "voice_not_found" | "invalid_request" | "text_too_long" => Outcome::ClientError,
        _ => return None,
    })
}

/// Whether a failed call's answer says the workspace does not hold the voice id it was sent
/// (`voice_not_found`, a 404, or a 400 in older answers): for a managed clone, its clone is
/// gone from this key's scope (`crate::job::clone_route`), not a fault of the key.
pub fn clone_gone(http_status: Option<u16>, message: &str) -> bool {
    matches!(http_status, Some(400 | 404)) && message.contains("voice_not_found")
}

fn classify(reply: &HttpReply, secret: &Secret) -> VendorFailure {
    let doc: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    let detail = &doc["detail"];
    let code = detail["code"]
        .as_str()
        .or_else(|| detail["status"].as_str())
        .unwrap_or_default();
    let message = detail["message"]
        .as_str()
        .or_else(|| detail.as_str())
        .unwrap_or_default();
    http::ErrorAnswer::of(reply, code.to_owned(), message, outcome_for_code(code))
        .failure(PROVIDER, Some(secret))
}

#[async_trait]
impl CloudVendor for ElevenLabs {
    const PROVIDER: Provider = Provider::ElevenLabs;
    const TEXT_LIMIT: TextLimit = TextLimit::Chars(5000);
    const DEFAULT_RATE: u32 = 24_000;
    type Wire = Wire;
    const WIRE: Mapping<Wire> = wire;

    fn default_rate(format: AudioFormat) -> u32 {
        if format == AudioFormat::Mp3 {
            44_100
        } else {
            Self::DEFAULT_RATE
        }
    }

    async fn call(&self, call: Call<'_, Wire>) -> Result<StreamEnd, VendorFailure> {
        let (request, wire, secret, sink) = call.parts();
        let url = endpoint(
            request.upstream.base_url.as_deref(),
            &request.utterance.voice.voice_id,
            &wire.output_format,
        )
        .map_err(|m| http::upstream_config_failure(PROVIDER, m))?;
        let builder = self
            .client
            .post(url)
            .header("xi-api-key", secret.expose())
            .json(&body(request, &wire));
        let opened = http::open(
            PROVIDER,
            builder,
            request.timeout,
            Some(secret),
            &request.gate,
        )
        .await?;
        // What ElevenLabs billed the call, in characters (its `character-cost` header).
        if let Some(cost) = opened
            .headers
            .get("character-cost")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            sink.billed(cost);
        }
        if wire.wrap_wav && opened.status.is_success() {
            sink.write(http::pcm16_wav_header(PROVIDER, wire.sample_rate_hz)?);
        }
        http::stream_raw_audio(PROVIDER, opened, sink, Some(secret), |reply| {
            classify(reply, secret)
        })
        .await?;
        Ok(StreamEnd {
            sample_rate_hz: Some(wire.sample_rate_hz),
        })
    }
}

#[cfg(test)]
mod tests {
    use voxpool_domain::snapshot::Params;

    use super::*;
    use crate::adapters::VendorAdapter as _;

    fn snapshot(params: Params, extra: &[(&str, &str)]) -> Snapshot {
        let mut s = voxpool_fake_vendors::snapshot(
            PROVIDER,
            "eleven_multilingual_v2",
            "21m00Tcm4TlvDq8ikWAM",
        );
        s.params = params;
        s.extra = extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        s
    }

    #[test]
    fn rate_and_extra_map_to_voice_settings() {
        let cases: Vec<(Params, http::Extra, Value)> = vec![
            (Params::default(), &[], json!({})),
            (
                Params {
                    rate: Some(1.2),
                    ..Params::default()
                },
                &[],
                json!({"speed": 1.2}),
            ),
            (
                Params {
                    rate: Some(0.7),
                    pitch_pct: Some(0.0),
                    volume_pct: Some(0.0),
                },
                &[],
                json!({"speed": 0.7}),
            ),
            (
                Params::default(),
                &[
                    ("stability", "0.3"),
                    ("similarity_boost", "1"),
                    ("style", "0"),
                    ("use_speaker_boost", "true"),
                ],
                json!({"stability": 0.3, "similarity_boost": 1.0, "style": 0.0, "use_speaker_boost": true}),
            ),
        ];
        for (params, extra, expected) in cases {
            let w = wire(&snapshot(params, extra), AudioFormat::Mp3, None).unwrap();
            assert_eq!(
                Value::Object(w.voice_settings),
                expected,
                "{params:?} {extra:?}"
            );
        }
    }

    #[test]
    fn formats_pick_output_format() {
        let cases = [
            (AudioFormat::Mp3, None, "mp3_44100_128", 44_100, false),
            (
                AudioFormat::Mp3,
                Some(22_050),
                "mp3_22050_32",
                22_050,
                false,
            ),
            (AudioFormat::Pcm, None, "pcm_24000", 24_000, false),
            (AudioFormat::Pcm, Some(16_000), "pcm_16000", 16_000, false),
            (AudioFormat::Wav, Some(48_000), "pcm_48000", 48_000, true),
        ];
        for (format, rate, output_format, sample_rate_hz, wrap_wav) in cases {
            let w = wire(&snapshot(Params::default(), &[]), format, rate).unwrap();
            assert_eq!(
                (w.output_format.as_str(), w.sample_rate_hz, w.wrap_wav),
                (output_format, sample_rate_hz, wrap_wav)
            );
        }
    }

    #[test]
    fn inexpressible_params_are_refused_by_name() {
        let cases: Vec<http::Refusal> = vec![
            (
                Params {
                    pitch_pct: Some(5.0),
                    ..Params::default()
                },
                &[],
                AudioFormat::Mp3,
                None,
                "params.pitchPct",
            ),
            (
                Params {
                    volume_pct: Some(5.0),
                    ..Params::default()
                },
                &[],
                AudioFormat::Mp3,
                None,
                "params.volumePct",
            ),
            (
                Params {
                    rate: Some(1.3),
                    ..Params::default()
                },
                &[],
                AudioFormat::Mp3,
                None,
                "params.rate",
            ),
            (
                Params {
                    rate: Some(0.5),
                    ..Params::default()
                },
                &[],
                AudioFormat::Mp3,
                None,
                "params.rate",
            ),
            (
                Params::default(),
                &[("stability", "1.5")],
                AudioFormat::Mp3,
                None,
                "extra.stability",
            ),
            (
                Params::default(),
                &[("style", "happy")],
                AudioFormat::Mp3,
                None,
                "extra.style",
            ),
            (
                Params::default(),
                &[("use_speaker_boost", "yes")],
                AudioFormat::Mp3,
                None,
                "extra.use_speaker_boost",
            ),
            (
                Params::default(),
                &[("pitch", "1")],
                AudioFormat::Mp3,
                None,
                "extra.pitch",
            ),
            (Params::default(), &[], AudioFormat::OggOpus, None, "format"),
            (
                Params::default(),
                &[],
                AudioFormat::Mp3,
                Some(24_000),
                "sample_rate_hz",
            ),
        ];
        for (params, extra, format, rate, param) in cases {
            let e = ElevenLabs::new(http::build_client().expect("client"))
                .check(&snapshot(params, extra), format, rate)
                .unwrap_err();
            assert_eq!(e.param, param, "{e}");
            assert_eq!(e.provider, PROVIDER);
        }
    }

    #[test]
    fn voice_id_is_a_path_segment_and_format_a_query() {
        let url = endpoint(Some("http://127.0.0.1:7/"), "a/b c", "pcm_16000").unwrap();
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:7/v1/text-to-speech/a%2Fb%20c/stream?output_format=pcm_16000"
        );
    }

    #[test]
    fn codes_win_over_statuses() {
        for (code, outcome) in [
            ("too_many_concurrent_requests", Outcome::ConcurrencyLimited),
            ("concurrent_limit_exceeded", Outcome::ConcurrencyLimited),
            ("rate_limit_exceeded", Outcome::RateLimited),
            ("system_busy", Outcome::RateLimited),
            ("quota_exceeded", Outcome::QuotaExhausted),
            ("invalid_api_key", Outcome::KeyInvalid),
            ("voice_not_found", Outcome::ClientError),
        ] {
            assert_eq!(outcome_for_code(code), Some(outcome), "{code}");
        }
        assert_eq!(outcome_for_code("something_new"), None);
    }
}
