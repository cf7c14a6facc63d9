//! Volcengine (ByteDance) speech synthesis, HTTP v1: `POST {base}/api/v1/tts` (Volcengine docs
//! "语音合成 HTTP 接口", <https://www.volcengine.com/docs/6561/79820>; the same protocol's
//! parameter table at BytePlus, <https://docs.byteplus.com/en/docs/speech/docs-request-parameters-2>;
//! docs/VENDORS.md, "volcengine" for codes and the large-model ranges). Default base
//! `https://openspeech.bytedance.com`.
//!
//! Header `Authorization: Bearer;<token>` (a semicolon, not a space): the only place the
//! credential goes. Body `app` {appid = [`KeyCredential::app_id`](super::KeyCredential), token =
//! the documented placeholder `access_token` (the body token is not checked), cluster = the upstream's
//! `params.cluster` or `volcano_tts`}, `user.uid`, `audio` {voice_type, encoding, rate, …},
//! `request` {reqid = the attempt id (fresh per attempt: a reused reqid is error 3006), text,
//! text_type `plain`, operation `query`}. The answer is JSON with base64 audio in `data` and
//! `code` 3000 on success; errors come in the same JSON, often with HTTP 200.
//!
//! # V3 unidirectional stream (upstream `params.api = "v3"`)
//! `POST {base}/api/v3/tts/unidirectional` (Volcengine docs "HTTP Chunked/SSE单向流式-V3",
//! <https://www.volcengine.com/docs/6561/1598757>): headers `X-Api-App-Id` (the key's app id),
//! `X-Api-Access-Key` (the credential), `X-Api-Resource-Id` (`params.resource_id`, default
//! `seed-tts-1.0`), `X-Api-Request-Id` (the attempt id); body `user.uid`, `req_params`
//! {`text`, `speaker` = voice id, `audio_params` {`format` mp3/ogg_opus/pcm (WAV: pcm behind a
//! header written here), `sample_rate`, `speech_rate` = (rate − 1)·100 and `loudness_rate` =
//! volumePct, both −50..100 (0.5×..2×)}}. No pitch ratio in V3: a pitch is refused for a V3
//! upstream. The answer is JSON lines, each written to the sink as it arrives: `{"code":0,
//! "data":"<base64 audio>"}`, lines with `data: null` (sentence info) skipped, the end line
//! code 20000000. Any other code fails the call: 45000292 "quota exceeded for types:
//! concurrency" → `CONCURRENCY_LIMITED` (other types → `RATE_LIMITED`, a `…_lifetime` quota in
//! the message → `QUOTA_EXHAUSTED`),
//! 55000000 (also a stream broken mid-way) → `UPSTREAM_ERROR`, 40402003 / 45000001 →
//! `CLIENT_ERROR`, "speaker permission denied" (a speaker the AppID does not hold, e.g. another
//! AppID's clone) → `CLIENT_ERROR`, other 45000000 by status (401/403 → `KEY_INVALID`). The codes of the concurrency
//! refusal and of auth failures are unverified (the vendor's table gives the message, not a
//! code of its own): classified by message first. V1 does not stream: its audio is written
//! once, whole.
//!
//! # Classic or large-model voice
//! `extra.family` = `classic` | `large` decides. Without it a voice is large-model when its
//! `voice_type` ends in `_bigtts` or the model id contains `seed-tts` or `bigtts` (the naming of
//! Volcengine's large-model catalogue); otherwise classic.
//!
//! # Param conversion
//! | snapshot | classic voice | large-model voice |
//! |---|---|---|
//! | `params.rate` r | `speed_ratio` = r, 0.2..3 | `speed_ratio` = r, 0.8..2 |
//! | `params.volumePct` v | `volume_ratio` = 1 + v/100, 0.1..3 | `loudness_ratio` = 1 + v/100, 0.5..2 |
//! | `params.pitchPct` p | `pitch_ratio` = 1 + p/100 (frequency multiplier), 0.1..3 | refused (no pitch) |
//! | `extra.family` | see above | |
//! | `WAV`/`MP3`/`OGG_OPUS`/`PCM` | `encoding` `wav`/`mp3`/`ogg_opus`/`pcm`, `rate` 8000/16000/24000 (default 24000) | |
//!
//! Unset params are not sent (vendor default 1.0). Text limit: 1024 UTF-8 bytes.
//!
//! # Errors (classified by the body, then the status)
//! "speaker permission denied" → `CLIENT_ERROR` (the speaker is not this AppID's);
//! A message containing "grant not found", or HTTP 401/403 → `KEY_INVALID`; a message naming a
//! `…lifetime` quota → `QUOTA_EXHAUSTED` (before the code: such a message may come with 3003);
//! 3003 (or any message naming `concurrency`) → `CONCURRENCY_LIMITED` (the appid runs its
//! concurrency limit: it drives the key's effective capacity); 3005/3030/3031/3032/3040 →
//! `UPSTREAM_ERROR`; 3001/3006/3010/3011/3050 →
//! `CLIENT_ERROR`; anything else by status, or `UPSTREAM_ERROR`. Code 3000 without decodable
//! audio → `UPSTREAM_ERROR`.

mod v3;

use async_trait::async_trait;
use base64::Engine as _;
use reqwest::Client;
use serde_json::{Value, json};
use voxpool_domain::{contract::Outcome, provider::Provider};
use voxpool_domain::{secret::Secret, snapshot::Snapshot};

use super::{
    AudioFormat, ParamError, StreamEnd, TextLimit, VendorFailure, VendorRequest,
    cloud::{Call, CloudVendor, Mapping},
    http::{self, HttpReply},
};

const PROVIDER: &str = Provider::Volcengine.as_str();
const DEFAULT_BASE: &str = "https://openspeech.bytedance.com";
const DEFAULT_CLUSTER: &str = "volcano_tts";
const DEFAULT_RATE: u32 = 24_000;
const RATES: &[u32] = &[8_000, 16_000, 24_000];
/// `app.token`: the vendor documents a fixed placeholder; the real token travels in the header.
const BODY_TOKEN: &str = "access_token";
/// V3: the stream's last line.
const V3_DONE: i64 = 20_000_000;
/// V3: "quota exceeded for types: …" (concurrency, or a `…_lifetime` quota by its message).
const V3_QUOTA: i64 = 45_000_292;
/// V3: invalid arguments.
const V3_INVALID_ARGUMENT: i64 = 45_000_001;
/// V3: text over the limit.
const V3_TEXT_LIMIT: i64 = 40_402_003;
/// V3: server error (also how a stream that breaks mid-way ends).
const V3_SERVER_ERROR: i64 = 55_000_000;
/// V3 `X-Api-Resource-Id` when the upstream sets no `params.resource_id`.
const V3_DEFAULT_RESOURCE: &str = "seed-tts-1.0";

/// The Volcengine v1 HTTP adapter.
#[derive(Clone, Debug)]
pub struct Volcengine {
    client: Client,
}

impl Volcengine {
    /// An adapter sending through `client` (share one pooled client between adapters).
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

/// Classic voices accept pitch; large-model ("bigtts") voices do not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Classic,
    Large,
}

fn family(voice: &Snapshot, pool_model: &str) -> Result<Family, ParamError> {
    match voice.extra.get("family").map(|s| s.trim()) {
        Some("classic") => return Ok(Family::Classic),
        Some("large") => return Ok(Family::Large),
        Some(other) => {
            return Err(http::refuse(
                PROVIDER,
                "extra.family",
                other,
                "expected classic or large",
            ));
        }
        None => {}
    }
    let model = http::model_of(voice, pool_model).to_ascii_lowercase();
    let large = voice.voice_id.ends_with("_bigtts")
        || model.contains("seed-tts")
        || model.contains("bigtts");
    Ok(if large {
        Family::Large
    } else {
        Family::Classic
    })
}

/// The `audio` object's adjustable fields.
#[derive(Clone, Debug, PartialEq)]
pub struct Wire {
    encoding: &'static str,
    rate: u32,
    speed_ratio: Option<f64>,
    volume_ratio: Option<f64>,
    loudness_ratio: Option<f64>,
    pitch_ratio: Option<f64>,
}

fn wire(
    voice: &Snapshot,
    pool_model: &str,
    format: AudioFormat,
    sample_rate_hz: Option<u32>,
) -> Result<Wire, ParamError> {
    http::require_voice_id(PROVIDER, voice)?;
    http::refuse_unknown_extra(PROVIDER, voice, &["family"])?;
    let family = family(voice, pool_model)?;
    let p = &voice.params;
    let (speed_lo, speed_hi) = match family {
        Family::Classic => (0.2, 3.0),
        Family::Large => (0.8, 2.0),
    };
    let speed_ratio = p
        .rate
        .map(|r| {
            http::require_range(
                PROVIDER,
                "params.rate",
                r,
                r,
                speed_lo,
                speed_hi,
                "speed_ratio",
            )
        })
        .transpose()?;
    let ratio = http::pct_to_ratio;
    let (volume_ratio, loudness_ratio) = match (family, p.volume_pct) {
        (_, None) => (None, None),
        (Family::Classic, Some(v)) => (
            Some(http::require_range(
                PROVIDER,
                "params.volumePct",
                v,
                ratio(v),
                0.1,
                3.0,
                "volume_ratio",
            )?),
            None,
        ),
        (Family::Large, Some(v)) => (
            None,
            Some(http::require_range(
                PROVIDER,
                "params.volumePct",
                v,
                ratio(v),
                0.5,
                2.0,
                "loudness_ratio",
            )?),
        ),
    };
    let pitch_ratio = match (family, p.pitch_pct) {
        (_, None) => None,
        (Family::Classic, Some(v)) => Some(http::require_range(
            PROVIDER,
            "params.pitchPct",
            v,
            ratio(v),
            0.1,
            3.0,
            "pitch_ratio",
        )?),
        (Family::Large, Some(0.0)) => None,
        (Family::Large, Some(v)) => {
            return Err(http::refuse(
                PROVIDER,
                "params.pitchPct",
                http::num(v),
                "large-model voices have no pitch control (set extra.family = classic only for a classic voice)",
            ));
        }
    };
    let encoding = match format {
        AudioFormat::Wav => "wav",
        AudioFormat::Mp3 => "mp3",
        AudioFormat::OggOpus => "ogg_opus",
        AudioFormat::Pcm => "pcm",
    };
    let rate = http::require_sample_rate(
        PROVIDER,
        format,
        sample_rate_hz.unwrap_or(DEFAULT_RATE),
        RATES,
    )?;
    Ok(Wire {
        encoding,
        rate,
        speed_ratio,
        volume_ratio,
        loudness_ratio,
        pitch_ratio,
    })
}

fn body(request: &VendorRequest<'_>, wire: &Wire) -> Value {
    let cluster =
        http::upstream_str(&request.upstream.params, "cluster").unwrap_or(DEFAULT_CLUSTER);
    let mut audio = json!({
        "voice_type": request.utterance.voice.voice_id,
        "encoding": wire.encoding,
        "rate": wire.rate,
    });
    for (name, v) in [
        ("speed_ratio", wire.speed_ratio),
        ("volume_ratio", wire.volume_ratio),
        ("loudness_ratio", wire.loudness_ratio),
        ("pitch_ratio", wire.pitch_ratio),
    ] {
        if let Some(v) = v {
            audio[name] = json!(v);
        }
    }
    json!({
        "app": {"appid": request.key.app_id, "token": BODY_TOKEN, "cluster": cluster},
        "user": {"uid": "voxpool"},
        "audio": audio,
        "request": {
            "reqid": request.attempt_id,
            "text": request.utterance.text,
            "text_type": "plain",
            "operation": "query",
        },
    })
}

/// The outcome of a Volcengine answer that is not a success (module doc, "Errors").
fn outcome_of(status: u16, code: Option<i64>, message: &str) -> Outcome {
    let lower = message.to_ascii_lowercase();
    // The AppID holds no such speaker (a clone bought by another AppID, expired, reclaimed):
    // the voice's fault, not the key's, whatever the status.
    if lower.contains(SPEAKER_NOT_HELD) {
        return Outcome::ClientError;
    }
    if status == 401 || status == 403 || lower.contains("grant not found") {
        return Outcome::KeyInvalid;
    }
    if lower.contains("quota") && lower.contains("lifetime") {
        return Outcome::QuotaExhausted;
    }
    if lower.contains("concurrency") {
        return Outcome::ConcurrencyLimited;
    }
    match code {
        Some(3003) => Outcome::ConcurrencyLimited,
        Some(V3_QUOTA) => Outcome::RateLimited,
        Some(3005 | 3030 | 3031 | 3032 | 3040 | V3_SERVER_ERROR) => Outcome::UpstreamError,
        Some(3001 | 3006 | 3010 | 3011 | 3050 | V3_TEXT_LIMIT | V3_INVALID_ARGUMENT) => {
            Outcome::ClientError
        }
        _ if status == 200 => Outcome::UpstreamError,
        _ => http::outcome_for_status(status),
    }
}

/// What V3 (and V1 with 3050) say of a speaker the AppID does not hold.
const SPEAKER_NOT_HELD: &str = "speaker permission denied";

/// Whether a failed call's answer says the AppID does not hold the speaker it was sent (V1
/// code 3050, V3 "speaker permission denied"): for a managed clone, its clone is gone from
/// this key's scope (`crate::job::clone_route`).
pub fn clone_gone(_http_status: Option<u16>, message: &str) -> bool {
    message.contains("code 3050:") || message.to_ascii_lowercase().contains(SPEAKER_NOT_HELD)
}

fn classify(reply: &HttpReply, secret: &Secret) -> Result<Vec<u8>, VendorFailure> {
    let status = reply.status.as_u16();
    let doc: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    let code = doc["code"].as_i64();
    let message = doc["message"].as_str().unwrap_or_default();
    if status == 200 && code == Some(3000) {
        let audio = doc["data"]
            .as_str()
            .and_then(|d| base64::engine::general_purpose::STANDARD.decode(d).ok())
            .filter(|a| !a.is_empty());
        return audio.ok_or_else(|| {
            http::failure(
                PROVIDER,
                Outcome::UpstreamError,
                Some(status),
                None,
                "code 3000 without decodable audio",
                Some(secret),
            )
        });
    }
    let label = code.map(|c| format!("code {c}")).unwrap_or_default();
    Err(http::ErrorAnswer::of(
        reply,
        label,
        message,
        Some(outcome_of(status, code, message)),
    )
    .failure(PROVIDER, Some(secret)))
}

#[async_trait]
impl CloudVendor for Volcengine {
    const PROVIDER: Provider = Provider::Volcengine;
    const TEXT_LIMIT: TextLimit = TextLimit::Utf8Bytes(1024);
    const DEFAULT_RATE: u32 = DEFAULT_RATE;
    type Wire = Wire;
    // Checked before a lease, without a pool model: family inference then relies on the
    // snapshot's model, the voice id or `extra.family`; the call maps again with it.
    const WIRE: Mapping<Wire> = |voice, format, rate| wire(voice, "", format, rate);

    fn wire_in_call(
        voice: &Snapshot,
        pool_model: &str,
        format: AudioFormat,
        sample_rate_hz: Option<u32>,
    ) -> Result<Wire, ParamError> {
        wire(voice, pool_model, format, sample_rate_hz)
    }

    async fn call(&self, call: Call<'_, Wire>) -> Result<StreamEnd, VendorFailure> {
        let (request, wire, secret, sink) = call.parts();
        if http::upstream_str(&request.upstream.params, "api") == Some("v3") {
            return self.stream_v3(request, &wire, secret, sink).await;
        }
        let url = format!(
            "{}/api/v1/tts",
            http::base_url(request.upstream.base_url.as_deref(), DEFAULT_BASE)
        );
        let builder = self
            .client
            .post(url)
            .header(
                reqwest::header::AUTHORIZATION,
                format!("Bearer;{}", secret.expose()),
            )
            .json(&body(request, &wire));
        let reply = http::send(
            PROVIDER,
            builder,
            request.timeout,
            Some(secret),
            &request.gate,
        )
        .await?;
        let bytes = classify(&reply, secret)?;
        if crate::audio::sniff(request.utterance.format, &bytes).is_err() {
            return Err(http::failure(
                PROVIDER,
                Outcome::UpstreamError,
                Some(reply.status.as_u16()),
                None,
                format!(
                    "code 3000 but data is not {} audio",
                    http::format_name(request.utterance.format)
                ),
                Some(secret),
            ));
        }
        sink.write(bytes);
        Ok(StreamEnd {
            sample_rate_hz: Some(wire.rate),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use voxpool_domain::snapshot::Params;

    use super::*;
    use crate::adapters::VendorAdapter as _;
    use crate::adapters::{KeyCredential, UpstreamTarget, Utterance};

    fn snapshot(model: &str, voice_id: &str, params: Params, extra: &[(&str, &str)]) -> Snapshot {
        let mut s = voxpool_fake_vendors::snapshot(PROVIDER, model, voice_id);
        s.params = params;
        s.extra = extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        s
    }

    const CLASSIC: (&str, &str) = ("", "BV001_streaming");
    const LARGE: (&str, &str) = ("", "zh_female_shuangkuaisisi_moon_bigtts");

    #[test]
    fn classic_and_large_voices_map_to_their_own_fields() {
        let p = |pitch_pct, rate, volume_pct| Params {
            pitch_pct,
            rate,
            volume_pct,
        };
        let w = |speed_ratio, volume_ratio, loudness_ratio, pitch_ratio| Wire {
            encoding: "mp3",
            rate: 24_000,
            speed_ratio,
            volume_ratio,
            loudness_ratio,
            pitch_ratio,
        };
        let cases: Vec<((&str, &str), Params, http::Extra, Wire)> = vec![
            (CLASSIC, p(None, None, None), &[], w(None, None, None, None)),
            (
                CLASSIC,
                p(Some(20.0), Some(1.5), Some(-50.0)),
                &[],
                w(Some(1.5), Some(0.5), None, Some(1.2)),
            ),
            (
                CLASSIC,
                p(Some(-50.0), Some(0.2), Some(100.0)),
                &[],
                w(Some(0.2), Some(2.0), None, Some(0.5)),
            ),
            (
                CLASSIC,
                p(None, Some(3.0), Some(-90.0)),
                &[],
                w(Some(3.0), Some(0.1), None, None),
            ),
            (
                LARGE,
                p(None, Some(0.8), Some(-50.0)),
                &[],
                w(Some(0.8), None, Some(0.5), None),
            ),
            (
                LARGE,
                p(Some(0.0), Some(2.0), Some(100.0)),
                &[],
                w(Some(2.0), None, Some(2.0), None),
            ),
            (
                ("seed-tts-1.0", "custom_voice"),
                p(None, None, Some(10.0)),
                &[],
                w(None, None, Some(1.1), None),
            ),
            (
                LARGE,
                p(Some(10.0), None, None),
                &[("family", "classic")],
                w(None, None, None, Some(1.1)),
            ),
            (
                CLASSIC,
                p(None, None, Some(10.0)),
                &[("family", "large")],
                w(None, None, Some(1.1), None),
            ),
        ];
        for ((model, voice_id), params, extra, expected) in cases {
            let got = wire(
                &snapshot(model, voice_id, params, extra),
                "",
                AudioFormat::Mp3,
                None,
            )
            .unwrap();
            assert_eq!(got, expected, "{voice_id} {params:?} {extra:?}");
        }
    }

    #[test]
    fn out_of_range_and_inexpressible_params_are_refused() {
        let p = |pitch_pct, rate, volume_pct| Params {
            pitch_pct,
            rate,
            volume_pct,
        };
        let cases: Vec<((&str, &str), http::Refusal)> = vec![
            (
                LARGE,
                (
                    p(Some(10.0), None, None),
                    &[],
                    AudioFormat::Mp3,
                    None,
                    "params.pitchPct",
                ),
            ),
            (
                LARGE,
                (
                    p(None, Some(0.5), None),
                    &[],
                    AudioFormat::Mp3,
                    None,
                    "params.rate",
                ),
            ),
            (
                LARGE,
                (
                    p(None, None, Some(-60.0)),
                    &[],
                    AudioFormat::Mp3,
                    None,
                    "params.volumePct",
                ),
            ),
            (
                CLASSIC,
                (
                    p(None, Some(3.5), None),
                    &[],
                    AudioFormat::Mp3,
                    None,
                    "params.rate",
                ),
            ),
            (
                CLASSIC,
                (
                    p(None, None, Some(-95.0)),
                    &[],
                    AudioFormat::Mp3,
                    None,
                    "params.volumePct",
                ),
            ),
            (
                CLASSIC,
                (
                    p(None, None, None),
                    &[("emotion", "happy")],
                    AudioFormat::Mp3,
                    None,
                    "extra.emotion",
                ),
            ),
            (
                CLASSIC,
                (
                    p(None, None, None),
                    &[("family", "huge")],
                    AudioFormat::Mp3,
                    None,
                    "extra.family",
                ),
            ),
            (
                CLASSIC,
                (
                    p(None, None, None),
                    &[],
                    AudioFormat::Wav,
                    Some(44_100),
                    "sample_rate_hz",
                ),
            ),
        ];
        for ((model, voice_id), (params, extra, format, rate, param)) in cases {
            let e = Volcengine::new(http::build_client().expect("client"))
                .check(&snapshot(model, voice_id, params, extra), format, rate)
                .unwrap_err();
            assert_eq!(e.param, param, "{e}");
            assert_eq!(e.provider, PROVIDER);
        }
    }

    #[test]
    fn body_has_appid_cluster_reqid_and_audio_settings() {
        let voice = snapshot(
            "",
            "BV001_streaming",
            Params {
                rate: Some(1.1),
                ..Params::default()
            },
            &[],
        );
        let key = KeyCredential {
            key_id: "acct/app-1".into(),
            app_id: "app-1".into(),
            secret: None,
        };
        let upstream = UpstreamTarget {
            params: [("cluster".to_owned(), json!("volcano_icl"))]
                .into_iter()
                .collect(),
            ..UpstreamTarget::default()
        };
        let request = VendorRequest {
            utterance: &Utterance {
                text: "你好".to_owned(),
                voice: Arc::new(voice.clone()),
                pool_model: "m".to_owned(),
                format: AudioFormat::Pcm,
                sample_rate_hz: Some(16_000),
                reference: None,
                seed: None,
            },
            key: &key,
            upstream: &upstream,
            timeout: Duration::from_secs(1),
            attempt_id: "att-7",
            gate: Default::default(),
        };
        let w = wire(&voice, "m", AudioFormat::Pcm, Some(16_000)).unwrap();
        assert_eq!(
            body(&request, &w),
            json!({
                "app": {"appid": "app-1", "token": "access_token", "cluster": "volcano_icl"},
                "user": {"uid": "voxpool"},
                "audio": {"voice_type": "BV001_streaming", "encoding": "pcm", "rate": 16000, "speed_ratio": 1.1},
                "request": {"reqid": "att-7", "text": "你好", "text_type": "plain", "operation": "query"},
            })
        );
    }

    #[test]
    fn body_codes_and_messages_classify_per_vendors_md() {
        let cases = [
            (
                200,
                Some(3003),
                "quota exceeded for types: concurrency",
                Outcome::ConcurrencyLimited,
            ),
            (200, Some(3003), "", Outcome::ConcurrencyLimited),
            (
                200,
                Some(V3_QUOTA),
                "quota exceeded for types: concurrency",
                Outcome::ConcurrencyLimited,
            ),
            (
                200,
                Some(V3_QUOTA),
                "quota exceeded for types: qps",
                Outcome::RateLimited,
            ),
            (
                200,
                Some(3003),
                "quota exceeded for types: text_words_lifetime",
                Outcome::QuotaExhausted,
            ),
            (200, Some(3005), "server busy", Outcome::UpstreamError),
            (200, Some(3030), "", Outcome::UpstreamError),
            (200, Some(3040), "", Outcome::UpstreamError),
            (200, Some(3001), "invalid request", Outcome::ClientError),
            (
                200,
                Some(3001),
                "[resource_id=volc.tts.default] requested grant not found",
                Outcome::KeyInvalid,
            ),
            (401, None, "", Outcome::KeyInvalid),
            (200, Some(3010), "text too long", Outcome::ClientError),
            (200, Some(3011), "invalid text", Outcome::ClientError),
            (200, Some(3050), "voice not found", Outcome::ClientError),
            (
                200,
                Some(45000000),
                "speaker permission denied: S_x is not a usable voice of this AppID",
                Outcome::ClientError,
            ),
            (200, Some(9999), "", Outcome::UpstreamError),
            (502, None, "", Outcome::UpstreamError),
            (429, None, "", Outcome::RateLimited),
        ];
        for (status, code, message, outcome) in cases {
            assert_eq!(
                outcome_of(status, code, message),
                outcome,
                "{status} {code:?} {message}"
            );
        }
    }
}
