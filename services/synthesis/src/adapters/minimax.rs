//! MiniMax T2A v2: `POST {base}/v1/t2a_v2` (MiniMax API reference "Speech T2A HTTP",
//! <https://platform.minimax.io/docs/api-reference/speech-t2a-http>, and its error code table;
//! docs/VENDORS.md, "minimax"). Default base `https://api.minimax.io`; bearer key. An upstream
//! `params.group_id` is sent as the `GroupId` query parameter (older accounts need it).
//! Streaming (`"stream": true`): the answer is `text/event-stream`, each event's `data` JSON
//! with a piece of the audio as **hex** in `data.audio` (`data.status` 1), written to the sink
//! as it arrives, and a closing event (`data.status` 2, with `extra_info`) whose audio repeats
//! the whole answer and is skipped; `base_resp.status_code` (0 = success) on every event. An
//! error before the stream starts is one JSON document with `base_resp`, usually HTTP 200.
//!
//! # Param conversion
//! | snapshot | wire | rule |
//! |---|---|---|
//! | `params.rate` r | `voice_setting.speed` = r | 0.5..2 |
//! | `params.volumePct` v | `voice_setting.vol` = 1 + v/100 (linear gain, default 1) | (0, 10]: -100 % is refused |
//! | `params.pitchPct` p | `voice_setting.pitch` = round(12·log2(1 + p/100)) semitones | see below; -12..12 |
//! | `extra.*` | — | refused (none supported) |
//! | `MP3` / `PCM` | `audio_setting.format` `mp3` / `pcm` | |
//! | `WAV` | `pcm`, behind a RIFF header written here | |
//! | `OGG_OPUS` | — | refused |
//! | rate | `audio_setting.sample_rate` | 8000, 16000, 22050, 24000, 32000, 44100 (default 32000) |
//!
//! **Pitch rule**: MiniMax takes whole semitones only. A percent is converted to
//! `s = 12·log2(1 + p/100)` and sent as `round(s)` only when `|s − round(s)| ≤ 0.05` semitone
//! (≈ 0.3 % of frequency, below what a listener hears); otherwise it is refused and the message
//! names the two nearest representable percents (e.g. `12.246` for +2 st). So 12.246 → 2,
//! -5.613 → -1, 10 → refused.
//!
//! Text limit: 5000 characters, conservative (the vendor documents fewer than 10000).
//!
//! # Errors (by `base_resp.status_code`, then the status)
//! 1002 (rate) / 1039 (token rate) → `RATE_LIMITED`; 1041 (connection limit) →
//! `CONCURRENCY_LIMITED`; 1000/1001 → `UPSTREAM_ERROR`; 1004 → `KEY_INVALID`;
//! 1008 → `QUOTA_EXHAUSTED`; 2013/20132 and 2054 (a voice id the account does not hold) →
//! `CLIENT_ERROR`; others → by status, or
//! `UPSTREAM_ERROR` with 200. Status 0 without decodable audio → `UPSTREAM_ERROR`.

use async_trait::async_trait;
use reqwest::{Client, Url};
use serde_json::{Value, json};
use voxpool_domain::{contract::Outcome, provider::Provider};
use voxpool_domain::{secret::Secret, snapshot::Snapshot};

use super::{
    AudioFormat, AudioSink, ParamError, StreamEnd, TextLimit, VendorFailure, VendorRequest,
    cloud::{Call, CloudVendor, Mapping},
    http::{self, sse},
};

const PROVIDER: &str = Provider::MiniMax.as_str();
const DEFAULT_BASE: &str = "https://api.minimax.io";
const DEFAULT_RATE: u32 = 32_000;
const RATES: &[u32] = &[8_000, 16_000, 22_050, 24_000, 32_000, 44_100];
/// Largest distance (in semitones) from a whole semitone that is still sent, rounded.
const SEMITONE_TOLERANCE: f64 = 0.05;

/// The MiniMax T2A v2 adapter.
#[derive(Clone, Debug)]
pub struct MiniMax {
    client: Client,
}

impl MiniMax {
    /// An adapter sending through `client` (share one pooled client between adapters).
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

/// The wire values a snapshot maps to.
#[derive(Clone, Debug, PartialEq)]
pub struct Wire {
    speed: Option<f64>,
    vol: Option<f64>,
    pitch: Option<i64>,
    format: &'static str,
    sample_rate: u32,
    wrap_wav: bool,
}

/// The percent that is exactly `semitones` (the inverse of the pitch rule).
fn pct_of_semitones(semitones: f64) -> f64 {
    (2f64.powf(semitones / 12.0) - 1.0) * 100.0
}

/// The pitch rule of the module doc.
fn semitones(pct: f64) -> Result<i64, ParamError> {
    let param = "params.pitchPct";
    if !pct.is_finite() || pct <= -100.0 {
        return Err(http::refuse(
            PROVIDER,
            param,
            http::num(pct),
            "not a pitch change (must be above -100%)",
        ));
    }
    let s = 12.0 * http::pct_to_ratio(pct).log2();
    let nearest = s.round();
    if !(-12.0..=12.0).contains(&nearest) {
        return Err(http::refuse(
            PROVIDER,
            param,
            http::num(pct),
            format!("{s:.2} semitones is outside MiniMax's -12..12 semitones"),
        ));
    }
    if (s - nearest).abs() > SEMITONE_TOLERANCE {
        let around = |st: f64| format!("{:.3} ({st:+} st)", pct_of_semitones(st));
        return Err(http::refuse(
            PROVIDER,
            param,
            http::num(pct),
            format!(
                "MiniMax takes whole semitones and this is {s:.2}; nearest representable pitchPct: {} or {}",
                around(s.floor()),
                around(s.ceil())
            ),
        ));
    }
    Ok(nearest as i64)
}

fn wire(
    voice: &Snapshot,
    format: AudioFormat,
    sample_rate_hz: Option<u32>,
) -> Result<Wire, ParamError> {
    http::require_voice_id(PROVIDER, voice)?;
    http::refuse_unknown_extra(PROVIDER, voice, &[])?;
    let p = &voice.params;
    let speed = p
        .rate
        .map(|r| http::require_range(PROVIDER, "params.rate", r, r, 0.5, 2.0, "speed"))
        .transpose()?;
    let vol = match p.volume_pct {
        None => None,
        Some(v) if http::pct_to_ratio(v) <= 0.0 => {
            return Err(http::refuse(
                PROVIDER,
                "params.volumePct",
                http::num(v),
                "vol = 1 + v/100 must be above 0",
            ));
        }
        Some(v) => Some(http::require_range(
            PROVIDER,
            "params.volumePct",
            v,
            http::pct_to_ratio(v),
            0.0,
            10.0,
            "vol",
        )?),
    };
    let pitch = p.pitch_pct.map(semitones).transpose()?;
    let (format_name, wrap_wav) = match format {
        AudioFormat::Mp3 => ("mp3", false),
        AudioFormat::Pcm => ("pcm", false),
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
        speed,
        vol,
        pitch,
        format: format_name,
        sample_rate,
        wrap_wav,
    })
}

fn body(request: &VendorRequest<'_>, wire: &Wire) -> Value {
    let mut voice_setting = json!({"voice_id": request.utterance.voice.voice_id});
    if let Some(speed) = wire.speed {
        voice_setting["speed"] = json!(speed);
    }
    if let Some(vol) = wire.vol {
        voice_setting["vol"] = json!(vol);
    }
    if let Some(pitch) = wire.pitch {
        voice_setting["pitch"] = json!(pitch);
    }
    json!({
        "model": http::model_of(&request.utterance.voice, &request.utterance.pool_model),
        "text": request.utterance.text,
        "stream": true,
        "voice_setting": voice_setting,
        "audio_setting": {"sample_rate": wire.sample_rate, "bitrate": 128_000, "format": wire.format, "channel": 1},
    })
}

/// The outcome of a nonzero `base_resp.status_code`, when known.
fn outcome_for_code(code: i64) -> Option<Outcome> {
    Some(match code {
        1002 | 1039 => Outcome::RateLimited,
        1041 => Outcome::ConcurrencyLimited,
        1000 | 1001 => Outcome::UpstreamError,
        1004 => Outcome::KeyInvalid,
        1008 => Outcome::QuotaExhausted,
        // 2054 "voice id not exist": the account holds no such voice (a clone of another
        // account, expired or deleted). Never the key's fault: not cooled, not failed over.
        2013 | 20132 | VOICE_NOT_HELD => Outcome::ClientError,
        _ => return None,
    })
}

/// `base_resp.status_code` of a voice id the account does not hold.
const VOICE_NOT_HELD: i64 = 2054;

/// Whether a failed call's answer says the account does not hold the voice id it was sent
/// (status_code 2054): for a managed clone, its clone is gone from this key's scope
/// (`crate::job::clone_route`).
pub fn clone_gone(_http_status: Option<u16>, message: &str) -> bool {
    message.contains(&format!("status_code {VOICE_NOT_HELD}:"))
}

/// Classifies an answer document or event (`base_resp` nonzero, or no usable status) into a
/// failure; `None` for status 0.
fn failure_of(
    status: u16,
    doc: &Value,
    headers: &reqwest::header::HeaderMap,
    body: &[u8],
    secret: &Secret,
) -> Option<VendorFailure> {
    let code = doc["base_resp"]["status_code"].as_i64();
    if (200..300).contains(&status) && code == Some(0) {
        return None;
    }
    let message = doc["base_resp"]["status_msg"].as_str().unwrap_or_default();
    let label = code.map(|c| format!("status_code {c}")).unwrap_or_default();
    Some(
        http::ErrorAnswer {
            status,
            headers,
            body,
            code: label,
            message,
            outcome: code.and_then(outcome_for_code),
        }
        .failure(PROVIDER, Some(secret)),
    )
}

/// The hex audio of a document or event, if any.
fn audio_of(doc: &Value) -> Result<Option<Vec<u8>>, String> {
    match doc["data"]["audio"].as_str() {
        None | Some("") => Ok(None),
        Some(h) => hex::decode(h)
            .map(Some)
            .map_err(|e| format!("data.audio is not hex: {e}")),
    }
}

/// Handles one streamed event: an error fails the call; audio of a `data.status` 1 event is
/// written; the closing `data.status` 2 event repeats the whole audio, so its audio is written
/// only when no piece came before it.
fn on_event(
    data: &str,
    (status, headers): (u16, &reqwest::header::HeaderMap),
    wire: &Wire,
    sink: &AudioSink,
    secret: &Secret,
) -> Result<(), VendorFailure> {
    let doc: Value = serde_json::from_str(data).unwrap_or(Value::Null);
    if let Some(failure) = failure_of(status, &doc, headers, data.as_bytes(), secret) {
        return Err(failure);
    }
    let upstream = |m: String| {
        http::failure(
            PROVIDER,
            Outcome::UpstreamError,
            Some(status),
            None,
            m,
            Some(secret),
        )
    };
    let Some(audio) = audio_of(&doc).map_err(upstream)? else {
        return Ok(());
    };
    let closing = doc["data"]["status"].as_i64() == Some(2);
    let wrote = sink.written() > 0;
    if closing && wrote {
        return Ok(());
    }
    if wire.wrap_wav && !wrote {
        sink.write(http::pcm16_wav_header(PROVIDER, wire.sample_rate)?);
    }
    sink.write(audio);
    Ok(())
}

fn endpoint(base_url: Option<&str>, group_id: Option<&str>) -> Result<Url, String> {
    let mut url = Url::parse(&format!(
        "{}/v1/t2a_v2",
        http::base_url(base_url, DEFAULT_BASE)
    ))
    .map_err(|e| format!("upstream base_url is not a URL: {e}"))?;
    if let Some(group) = group_id {
        url.query_pairs_mut().append_pair("GroupId", group);
    }
    Ok(url)
}

#[async_trait]
impl CloudVendor for MiniMax {
    const PROVIDER: Provider = Provider::MiniMax;
    const TEXT_LIMIT: TextLimit = TextLimit::Chars(5000);
    const DEFAULT_RATE: u32 = DEFAULT_RATE;
    type Wire = Wire;
    const WIRE: Mapping<Wire> = wire;

    async fn call(&self, call: Call<'_, Wire>) -> Result<StreamEnd, VendorFailure> {
        let (request, wire, secret, sink) = call.parts();
        let url = endpoint(
            request.upstream.base_url.as_deref(),
            http::upstream_str(&request.upstream.params, "group_id"),
        )
        .map_err(|m| http::upstream_config_failure(PROVIDER, m))?;
        let builder = self
            .client
            .post(url)
            .bearer_auth(secret.expose())
            .json(&body(request, &wire));
        let mut opened = http::open(
            PROVIDER,
            builder,
            request.timeout,
            Some(secret),
            &request.gate,
        )
        .await?;
        let status = opened.status.as_u16();
        let is_sse = http::media_type(&opened.headers).is_some_and(|m| m == "text/event-stream");
        if !opened.status.is_success() || !is_sse {
            // An error before streaming (or a vendor that ignored `stream`): one JSON document.
            let reply = opened.read_all(PROVIDER, Some(secret)).await?;
            let text = String::from_utf8_lossy(&reply.body).into_owned();
            let answer = (reply.status.as_u16(), &reply.headers);
            on_event(&text, answer, &wire, sink, secret)?;
        } else {
            let mut reader = sse::SseReader::default();
            while let Some(piece) = opened.chunk(PROVIDER, Some(secret)).await? {
                for event in reader.push(&piece) {
                    on_event(&event.data, (status, &opened.headers), &wire, sink, secret)?;
                }
            }
            if let Some(event) = reader.finish() {
                on_event(&event.data, (status, &opened.headers), &wire, sink, secret)?;
            }
        }
        if sink.written() == 0 {
            return Err(http::failure(
                PROVIDER,
                Outcome::UpstreamError,
                Some(status),
                None,
                "status 0 without decodable audio",
                Some(secret),
            ));
        }
        Ok(StreamEnd {
            sample_rate_hz: Some(wire.sample_rate),
        })
    }
}

#[cfg(test)]
mod tests {
    use voxpool_domain::snapshot::Params;

    use super::*;
    use crate::adapters::VendorAdapter as _;

    fn snapshot(params: Params, extra: &[(&str, &str)]) -> Snapshot {
        let mut s = voxpool_fake_vendors::snapshot(PROVIDER, "speech-02-hd", "male-qn-qingse");
        s.params = params;
        s.extra = extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        s
    }

    #[test]
    fn pitch_percent_converts_to_whole_semitones_or_is_refused() {
        let cases = [
            (0.0, Some(0)),
            (12.246, Some(2)),
            (12.25, Some(2)),
            (-5.613, Some(-1)),
            (5.946, Some(1)),
            (-50.0, Some(-12)),
            (41.421, Some(6)),
            (10.0, None),
            (1.0, None),
            (-30.0, None),
        ];
        for (pct, expected) in cases {
            let got = semitones(pct);
            match expected {
                Some(st) => assert_eq!(got.unwrap(), st, "{pct}"),
                None => {
                    let e = got.unwrap_err();
                    assert_eq!(e.param, "params.pitchPct");
                    assert!(e.reason.contains("nearest representable pitchPct"), "{e}");
                }
            }
        }
        assert!(semitones(-100.0).is_err());
    }

    #[test]
    fn params_map_to_voice_setting() {
        let p = |pitch_pct, rate, volume_pct| Params {
            pitch_pct,
            rate,
            volume_pct,
        };
        let w = |speed, vol, pitch| Wire {
            speed,
            vol,
            pitch,
            format: "mp3",
            sample_rate: 32_000,
            wrap_wav: false,
        };
        let cases = [
            (p(None, None, None), w(None, None, None)),
            (
                p(None, Some(0.5), Some(-50.0)),
                w(Some(0.5), Some(0.5), None),
            ),
            (
                p(Some(12.246), Some(2.0), Some(100.0)),
                w(Some(2.0), Some(2.0), Some(2)),
            ),
            (p(Some(0.0), None, Some(0.0)), w(None, Some(1.0), Some(0))),
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
            Some(16_000),
        )
        .unwrap();
        assert_eq!(
            (wav.format, wav.sample_rate, wav.wrap_wav),
            ("pcm", 16_000, true)
        );
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
                p(Some(10.0), None, None),
                &[],
                AudioFormat::Mp3,
                None,
                "params.pitchPct",
            ),
            (
                p(None, Some(2.5), None),
                &[],
                AudioFormat::Mp3,
                None,
                "params.rate",
            ),
            (
                p(None, Some(0.25), None),
                &[],
                AudioFormat::Mp3,
                None,
                "params.rate",
            ),
            (
                p(None, None, Some(-100.0)),
                &[],
                AudioFormat::Mp3,
                None,
                "params.volumePct",
            ),
            (
                p(None, None, None),
                &[("emotion", "happy")],
                AudioFormat::Mp3,
                None,
                "extra.emotion",
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
                AudioFormat::Mp3,
                Some(48_000),
                "sample_rate_hz",
            ),
        ];
        for (params, extra, format, rate, param) in cases {
            let e = MiniMax::new(http::build_client().expect("client"))
                .check(&snapshot(params, extra), format, rate)
                .unwrap_err();
            assert_eq!(e.param, param, "{e}");
            assert_eq!(e.provider, PROVIDER);
        }
    }

    #[test]
    fn status_codes_classify_per_vendors_md() {
        for (code, outcome) in [
            (1002, Some(Outcome::RateLimited)),
            (1039, Some(Outcome::RateLimited)),
            (1041, Some(Outcome::ConcurrencyLimited)),
            (1000, Some(Outcome::UpstreamError)),
            (1001, Some(Outcome::UpstreamError)),
            (1004, Some(Outcome::KeyInvalid)),
            (1008, Some(Outcome::QuotaExhausted)),
            (2013, Some(Outcome::ClientError)),
            (20132, Some(Outcome::ClientError)),
            (2054, Some(Outcome::ClientError)),
            (4242, None),
        ] {
            assert_eq!(outcome_for_code(code), outcome, "{code}");
        }
    }

    #[test]
    fn group_id_goes_into_the_query() {
        assert_eq!(
            endpoint(None, None).unwrap().as_str(),
            "https://api.minimax.io/v1/t2a_v2"
        );
        assert_eq!(
            endpoint(Some("http://h:1/"), Some("g 1")).unwrap().as_str(),
            "http://h:1/v1/t2a_v2?GroupId=g+1"
        );
    }
}
