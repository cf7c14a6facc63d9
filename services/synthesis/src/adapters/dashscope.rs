//! Alibaba Cloud DashScope (Model Studio) speech synthesis, HTTP variant: `POST
//! {base}/api/v1/services/audio/tts/SpeechSynthesizer` (Alibaba Cloud Model Studio "TTS HTTP
//! API", <https://www.alibabacloud.com/help/en/model-studio/qwen-audio-tts-http-api>, and the
//! DashScope error code list, <https://www.alibabacloud.com/help/en/model-studio/error-code>;
//! docs/VENDORS.md, "dashscope"). Default base `https://dashscope.aliyuncs.com`; auth
//! `Authorization: Bearer <key>`. The WebSocket API is not used: one HTTP call per attempt keeps
//! the adapter's contract (one call, one key, no retries) simple.
//!
//! # SSE, not the plain response
//! The request sets `X-DashScope-SSE: enable` and reads `text/event-stream`: each event's `data`
//! is JSON with a base64 chunk in `output.audio.data`, written to the sink as its event
//! arrives (the audio streams as the vendor produces it). SSE rather than the WebSocket API:
//! both stream the audio piece by piece, and SSE keeps one HTTP call per attempt. Chosen
//! because the plain (non-SSE) answer may carry only an `output.audio.url` to download
//! separately (a second request outside the lease's key), while SSE always carries the bytes
//! inline and reports mid-synthesis failures as events (`event:error`, a `:HTTP_STATUS/<n>`
//! comment and `{"code","message"}` data) on an HTTP 200. A plain JSON answer is still
//! understood (success with `output.audio.data`, or an error document).
//!
//! # Param conversion (all fields inside `input`, next to `text` and `voice`)
//! | snapshot | wire | rule |
//! |---|---|---|
//! | `params.rate` r | `rate` = r | 0.5..2 |
//! | `params.pitchPct` p | `pitch` = 1 + p/100 (multiplier) | 0.5..2 |
//! | `params.volumePct` v | `volume` = 50 + v/2 (integer, 50 = default) | 0..100; an odd v (not a whole volume step) is refused, never rounded |
//! | `extra.target_model` | `model` | the model a cloned voice was enrolled for (a voice speaks only through it); wins over the pack's and the pool's model |
//! | other `extra.*` | — | refused |
//! | `PCM` / `MP3` | `format` `pcm` / `mp3` | |
//! | `WAV` | `pcm`, behind a RIFF header written here (sizes unknown while streaming) | |
//! | `OGG_OPUS` | — | refused: the `opus` output's container is not documented |
//! | rate | `sample_rate` | 8000, 16000, 22050, 24000, 44100, 48000 (default 22050, the vendor's) |
//!
//! Text limit: 2000 characters (the synchronous/SSE limit the vendor documents).
//!
//! # Errors (by `code`, then the status)
//! `Throttling*` → `RATE_LIMITED`; `ModelServingError`, `InternalError*`, `ServiceUnavailable`
//! → `UPSTREAM_ERROR`; `InvalidApiKey`, `AccessDenied*` → `KEY_INVALID`; `Arrearage` (account
//! in arrears) → `QUOTA_EXHAUSTED`; `InvalidParameter*`, `BadRequest*`, `DataInspectionFailed`
//! → `CLIENT_ERROR`; else by status (from `:HTTP_STATUS/` for events). A stream without audio →
//! `UPSTREAM_ERROR`. A cloned voice the key's account does not hold (400 `InvalidParameter`
//! `voice not found`) is a CLIENT_ERROR that [`clone_gone`] recognises.

use async_trait::async_trait;
use base64::Engine as _;
use reqwest::Client;
use serde_json::{Value, json};
use voxpool_domain::{contract::Outcome, provider::Provider};
use voxpool_domain::{secret::Secret, snapshot::Snapshot};

use super::{
    AudioFormat, AudioSink, ParamError, StreamEnd, TextLimit, VendorFailure, VendorRequest,
    cloud::{Call, CloudVendor, Mapping},
    http::{self, HttpReply, sse},
};

const PROVIDER: &str = Provider::DashScope.as_str();
const DEFAULT_BASE: &str = "https://dashscope.aliyuncs.com";
const PATH: &str = "/api/v1/services/audio/tts/SpeechSynthesizer";
const DEFAULT_RATE: u32 = 22_050;
const RATES: &[u32] = &[8_000, 16_000, 22_050, 24_000, 44_100, 48_000];

/// The DashScope HTTP (SSE) speech synthesis adapter.
#[derive(Clone, Debug)]
pub struct DashScope {
    client: Client,
}

impl DashScope {
    /// An adapter sending through `client` (share one pooled client between adapters).
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

/// The wire values a snapshot maps to.
#[derive(Clone, Debug, PartialEq)]
pub struct Wire {
    rate: Option<f64>,
    pitch: Option<f64>,
    volume: Option<i64>,
    format: &'static str,
    sample_rate: u32,
    wrap_wav: bool,
}

fn wire(
    voice: &Snapshot,
    format: AudioFormat,
    sample_rate_hz: Option<u32>,
) -> Result<Wire, ParamError> {
    http::require_voice_id(PROVIDER, voice)?;
    http::refuse_unknown_extra(PROVIDER, voice, &["target_model"])?;
    let p = &voice.params;
    let rate = p
        .rate
        .map(|r| http::require_range(PROVIDER, "params.rate", r, r, 0.5, 2.0, "rate"))
        .transpose()?;
    let pitch = p
        .pitch_pct
        .map(|v| {
            http::require_range(
                PROVIDER,
                "params.pitchPct",
                v,
                http::pct_to_ratio(v),
                0.5,
                2.0,
                "pitch multiplier",
            )
        })
        .transpose()?;
    let volume = match p.volume_pct {
        None => None,
        Some(v) => {
            let level = http::require_range(
                PROVIDER,
                "params.volumePct",
                v,
                50.0 + v / 2.0,
                0.0,
                100.0,
                "volume",
            )?;
            if level.fract() != 0.0 {
                return Err(http::refuse(
                    PROVIDER,
                    "params.volumePct",
                    http::num(v),
                    format!(
                        "volume = 50 + v/2 = {} is not a whole step of DashScope's 0..100 volume; use an even percent",
                        http::num(level)
                    ),
                ));
            }
            Some(level as i64)
        }
    };
    let (format_name, wrap_wav) = match format {
        AudioFormat::Pcm => ("pcm", false),
        AudioFormat::Mp3 => ("mp3", false),
        AudioFormat::Wav => ("pcm", true),
        AudioFormat::OggOpus => {
            return Err(http::refuse(
                PROVIDER,
                "format",
                "OGG_OPUS",
                "supported: MP3, PCM, WAV",
            ));
        }
    };
    let sample_rate = http::require_sample_rate(
        PROVIDER,
        format,
        sample_rate_hz.unwrap_or(DEFAULT_RATE),
        RATES,
    )?;
    Ok(Wire {
        rate,
        pitch,
        volume,
        format: format_name,
        sample_rate,
        wrap_wav,
    })
}

fn body(request: &VendorRequest<'_>, wire: &Wire) -> Value {
    let mut input = json!({
        "text": request.utterance.text,
        "voice": request.utterance.voice.voice_id,
        "format": wire.format,
        "sample_rate": wire.sample_rate,
    });
    if let Some(rate) = wire.rate {
        input["rate"] = json!(rate);
    }
    if let Some(pitch) = wire.pitch {
        input["pitch"] = json!(pitch);
    }
    if let Some(volume) = wire.volume {
        input["volume"] = json!(volume);
    }
    let voice = &request.utterance.voice;
    let model = voice.extra.get("target_model").map_or_else(
        || http::model_of(voice, &request.utterance.pool_model),
        String::as_str,
    );
    json!({"model": model, "input": input})
}

/// The outcome for a DashScope error code, when known.
pub fn outcome_for_code(code: &str) -> Option<Outcome> {
    let starts = |p: &str| code.starts_with(p);
    Some(if starts("Throttling") {
        Outcome::RateLimited
    } else if code == "ModelServingError" || code == "ServiceUnavailable" || starts("InternalError")
    {
        Outcome::UpstreamError
    } else if code == "InvalidApiKey" || starts("AccessDenied") {
        Outcome::KeyInvalid
    } else if code == "Arrearage" {
        Outcome::QuotaExhausted
    } else if starts("InvalidParameter") || starts("BadRequest") || starts("DataInspectionFailed") {
        Outcome::ClientError
    } else {
        return None;
    })
}

/// Whether a failed call's answer says the key's account does not hold the voice id it was
/// sent (HTTP 400 `InvalidParameter`, `voice not found`: another account's clone, a deleted
/// one, or one offline after a year unused): for a managed clone, its clone is gone from this
/// key's scope (`crate::job::clone_route`), not a fault of the key. A voice of the account
/// spoken through another model than its `target_model` is a plain CLIENT_ERROR.
pub fn clone_gone(http_status: Option<u16>, message: &str) -> bool {
    http_status == Some(400) && message.contains("InvalidParameter: voice not found")
}

/// One server-sent event.
fn error_failure(
    status: u16,
    doc: &Value,
    headers: &reqwest::header::HeaderMap,
    secret: &Secret,
) -> VendorFailure {
    let code = doc["code"].as_str().unwrap_or_default();
    let message = doc["message"].as_str().unwrap_or_default();
    http::ErrorAnswer {
        status,
        headers,
        body: &[],
        code: code.to_owned(),
        message,
        outcome: outcome_for_code(code),
    }
    .failure(PROVIDER, Some(secret))
}

fn has_error_code(doc: &Value) -> bool {
    doc["code"].as_str().is_some_and(|c| !c.is_empty())
}

/// Audio chunk of one answer document, if any.
fn audio_chunk(doc: &Value) -> Result<Option<Vec<u8>>, String> {
    match doc["output"]["audio"]["data"].as_str() {
        None | Some("") => Ok(None),
        Some(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map(Some)
            .map_err(|e| format!("output.audio.data is not base64: {e}")),
    }
}

/// The plain JSON answer (an error before any event, or a non-SSE success): its audio or a
/// classified failure.
fn plain_answer(reply: &HttpReply, secret: &Secret) -> Result<Vec<u8>, VendorFailure> {
    let status = reply.status.as_u16();
    let doc: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    if !reply.status.is_success() || has_error_code(&doc) {
        if doc.is_null() {
            return Err(http::ErrorAnswer::of(reply, String::new(), "", None)
                .failure(PROVIDER, Some(secret)));
        }
        return Err(error_failure(status, &doc, &reply.headers, secret));
    }
    audio_chunk(&doc)
        .map_err(|m| upstream(status, m, secret))?
        .ok_or_else(|| {
            upstream(
                status,
                "HTTP 200 without output.audio.data".to_owned(),
                secret,
            )
        })
}

fn upstream(status: u16, message: String, secret: &Secret) -> VendorFailure {
    http::failure(
        PROVIDER,
        Outcome::UpstreamError,
        Some(status),
        None,
        message,
        Some(secret),
    )
}

/// Writes the audio of one event (a WAV request's header before the first piece), or fails
/// on an error event.
fn on_event(
    event: &sse::Event,
    opened: &http::Opened,
    wire: &Wire,
    sink: &AudioSink,
    secret: &Secret,
) -> Result<(), VendorFailure> {
    let status = opened.status.as_u16();
    let doc: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
    if event.name.as_deref() == Some("error") || has_error_code(&doc) {
        return Err(error_failure(
            event.http_status.unwrap_or(status),
            &doc,
            &opened.headers,
            secret,
        ));
    }
    if let Some(chunk) = audio_chunk(&doc).map_err(|m| upstream(status, m, secret))? {
        if wire.wrap_wav && sink.written() == 0 {
            sink.write(http::pcm16_wav_header(PROVIDER, wire.sample_rate)?);
        }
        sink.write(chunk);
    }
    Ok(())
}

#[async_trait]
impl CloudVendor for DashScope {
    const PROVIDER: Provider = Provider::DashScope;
    const TEXT_LIMIT: TextLimit = TextLimit::Chars(2000);
    const DEFAULT_RATE: u32 = DEFAULT_RATE;
    type Wire = Wire;
    const WIRE: Mapping<Wire> = wire;

    async fn call(&self, call: Call<'_, Wire>) -> Result<StreamEnd, VendorFailure> {
        let (request, wire, secret, sink) = call.parts();
        let url = format!(
            "{}{PATH}",
            http::base_url(request.upstream.base_url.as_deref(), DEFAULT_BASE)
        );
        let builder = self
            .client
            .post(url)
            .bearer_auth(secret.expose())
            .header("X-DashScope-SSE", "enable")
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .json(&body(request, &wire));
        let mut opened = http::open(
            PROVIDER,
            builder,
            request.timeout,
            Some(secret),
            &request.gate,
        )
        .await?;
        let end = StreamEnd {
            sample_rate_hz: Some(wire.sample_rate),
        };
        let is_sse = http::media_type(&opened.headers).is_some_and(|m| m == "text/event-stream");
        if !opened.status.is_success() || !is_sse {
            let reply = opened.read_all(PROVIDER, Some(secret)).await?;
            let audio = plain_answer(&reply, secret)?;
            if wire.wrap_wav {
                sink.write(http::pcm16_wav_header(PROVIDER, wire.sample_rate)?);
            }
            sink.write(audio);
            return Ok(end);
        }
        let mut reader = sse::SseReader::default();
        while let Some(piece) = opened.chunk(PROVIDER, Some(secret)).await? {
            for event in reader.push(&piece) {
                on_event(&event, &opened, &wire, sink, secret)?;
            }
        }
        if let Some(event) = reader.finish() {
            on_event(&event, &opened, &wire, sink, secret)?;
        }
        if sink.written() == 0 {
            return Err(upstream(
                opened.status.as_u16(),
                "event stream ended without audio".to_owned(),
                secret,
            ));
        }
        Ok(end)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use voxpool_domain::snapshot::Params;

    use super::*;
    use crate::adapters::{KeyCredential, UpstreamTarget, Utterance, VendorAdapter as _};

    fn snapshot(params: Params, extra: &[(&str, &str)]) -> Snapshot {
        let mut s = voxpool_fake_vendors::snapshot(PROVIDER, "cosyvoice-v2", "longxiaochun_v2");
        s.params = params;
        s.extra = extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        s
    }

    #[test]
    fn params_map_to_rate_pitch_and_volume() {
        let p = |pitch_pct, rate, volume_pct| Params {
            pitch_pct,
            rate,
            volume_pct,
        };
        let w = |rate, pitch, volume| Wire {
            rate,
            pitch,
            volume,
            format: "mp3",
            sample_rate: 22_050,
            wrap_wav: false,
        };
        let cases = [
            (p(None, None, None), w(None, None, None)),
            (
                p(Some(20.0), Some(1.5), Some(-40.0)),
                w(Some(1.5), Some(1.2), Some(30)),
            ),
            (
                p(Some(-50.0), Some(0.5), Some(-100.0)),
                w(Some(0.5), Some(0.5), Some(0)),
            ),
            (
                p(Some(0.0), Some(2.0), Some(100.0)),
                w(Some(2.0), Some(1.0), Some(100)),
            ),
            (p(None, None, Some(0.0)), w(None, None, Some(50))),
        ];
        for (params, expected) in cases {
            assert_eq!(
                wire(&snapshot(params, &[]), AudioFormat::Mp3, None).unwrap(),
                expected,
                "{params:?}"
            );
        }
        let wav = wire(
            &snapshot(Params::default(), &[]),
            AudioFormat::Wav,
            Some(24_000),
        )
        .unwrap();
        assert_eq!(
            (wav.format, wav.sample_rate, wav.wrap_wav),
            ("pcm", 24_000, true)
        );
    }

    #[test]
    fn a_target_model_in_extra_is_the_model_a_cloned_voice_is_spoken_through() {
        let voice = Arc::new(snapshot(
            Params::default(),
            &[("target_model", "cosyvoice-v3-plus")],
        ));
        let utterance = Utterance {
            text: "Hi.".to_owned(),
            voice: Arc::clone(&voice),
            pool_model: "cosyvoice-v2".to_owned(),
            format: AudioFormat::Mp3,
            sample_rate_hz: None,
            reference: None,
            seed: None,
        };
        let key = KeyCredential {
            key_id: "u/k".to_owned(),
            app_id: "k".to_owned(),
            secret: None,
        };
        let upstream = UpstreamTarget::default();
        let request = VendorRequest {
            utterance: &utterance,
            key: &key,
            upstream: &upstream,
            timeout: std::time::Duration::from_secs(1),
            attempt_id: "a",
            gate: Default::default(),
        };
        let w = wire(&voice, AudioFormat::Mp3, None).expect("target_model is accepted");
        assert_eq!(body(&request, &w)["model"], "cosyvoice-v3-plus");
        let other = snapshot(Params::default(), &[("speaker", "x")]);
        assert!(wire(&other, AudioFormat::Mp3, None).is_err());
    }

    #[test]
    fn refusals_name_the_param() {
        let p = |pitch_pct, rate, volume_pct| Params {
            pitch_pct,
            rate,
            volume_pct,
        };
        let cases: Vec<http::Refusal> = vec![
            (
                p(None, Some(2.5), None),
                &[],
                AudioFormat::Mp3,
                None,
                "params.rate",
            ),
            (
                p(None, Some(0.3), None),
                &[],
                AudioFormat::Mp3,
                None,
                "params.rate",
            ),
            (
                p(Some(-60.0), None, None),
                &[],
                AudioFormat::Mp3,
                None,
                "params.pitchPct",
            ),
            (
                p(None, None, Some(5.0)),
                &[],
                AudioFormat::Mp3,
                None,
                "params.volumePct",
            ),
            (
                p(None, None, Some(-120.0)),
                &[],
                AudioFormat::Mp3,
                None,
                "params.volumePct",
            ),
            (
                p(None, None, None),
                &[("instruction", "x")],
                AudioFormat::Mp3,
                None,
                "extra.instruction",
            ),
            (
                p(None, None, None),
                &[],
                AudioFormat::OggOpus,
                None,
                "format",
            ),
            (
                p(None, None, None),
                &[],
                AudioFormat::Pcm,
                Some(32_000),
                "sample_rate_hz",
            ),
        ];
        for (params, extra, format, rate, param) in cases {
            let e = DashScope::new(http::build_client().expect("client"))
                .check(&snapshot(params, extra), format, rate)
                .unwrap_err();
            assert_eq!(e.param, param, "{e}");
            assert_eq!(e.provider, PROVIDER);
        }
    }

    #[test]
    fn codes_classify_per_vendors_md() {
        for (code, outcome) in [
            ("Throttling", Some(Outcome::RateLimited)),
            ("Throttling.RateQuota", Some(Outcome::RateLimited)),
            ("Throttling.BurstRate", Some(Outcome::RateLimited)),
            ("Throttling.AllocationQuota", Some(Outcome::RateLimited)),
            ("ModelServingError", Some(Outcome::UpstreamError)),
            ("InternalError.Algo", Some(Outcome::UpstreamError)),
            ("InvalidApiKey", Some(Outcome::KeyInvalid)),
            ("AccessDenied.Unpurchased", Some(Outcome::KeyInvalid)),
            ("Arrearage", Some(Outcome::QuotaExhausted)),
            ("InvalidParameter", Some(Outcome::ClientError)),
            ("DataInspectionFailed", Some(Outcome::ClientError)),
            ("Brand.New", None),
        ] {
            assert_eq!(outcome_for_code(code), outcome, "{code}");
        }
    }

    #[test]
    fn a_voice_the_account_does_not_hold_is_a_clone_gone_not_a_model_mismatch() {
        let gone = "dashscope: HTTP 400 InvalidParameter: voice not found: cosyvoice-v2-vp1-0a";
        assert!(clone_gone(Some(400), gone));
        assert!(!clone_gone(Some(500), gone));
        let other_model = "dashscope: HTTP 400 InvalidParameter: voice cosyvoice-v2-vp1-0a was \
                           enrolled for target_model cosyvoice-v2, not model cosyvoice-v3-flash";
        assert!(!clone_gone(Some(400), other_model));
        assert!(!clone_gone(
            Some(400),
            "dashscope: HTTP 400 InvalidParameter: input.text"
        ));
    }
}
