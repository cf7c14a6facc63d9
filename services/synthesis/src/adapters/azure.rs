//! Microsoft Azure Speech text to speech REST API: `POST
//! https://{region}.tts.speech.microsoft.com/cognitiveservices/v1` with an SSML body (Microsoft
//! Learn, "Text to speech REST API",
//! <https://learn.microsoft.com/azure/ai-services/speech-service/rest-text-to-speech>, and "SSML
//! voice and sound" / prosody, <https://learn.microsoft.com/azure/ai-services/speech-service/speech-synthesis-markup-voice>;
//! docs/VENDORS.md, "azure"). A configured `base_url` replaces
//! `https://{region}.tts.speech.microsoft.com`. Auth: `Ocp-Apim-Subscription-Key`.
//!
//! # SSML
//! `<speak version='1.0' xmlns=… xmlns:mstts=… xml:lang='L'><voice name='V'>[<mstts:express-as
//! style role styledegree>]<prosody pitch rate volume>TEXT</prosody>…</voice></speak>`, with
//! text and attribute values XML-escaped. `L` is the snapshot's first locale, else the voice
//! name's prefix (`en-US-JennyNeural` → `en-US`); neither → refused (`locales`).
//!
//! # Param conversion
//! | snapshot | SSML | rule |
//! |---|---|---|
//! | `params.pitchPct` p | `pitch="+p%"` | relative pitch, -50..+50 |
//! | `params.rate` r | `rate="+(r-1)·100%"` (1.5 → `+50%`) | 0.5..2.0 |
//! | `params.volumePct` v | `volume="+v%"` | relative volume, -100..+100 (Azure's default is its maximum, so a gain above it may not be audible: vendor behaviour) |
//! | `extra.style`, `extra.role` | `mstts:express-as style / role` | passed through |
//! | `extra.styledegree` | `styledegree` | 0.01..2, needs `extra.style` |
//! | `WAV`/`PCM`/`MP3`/`OGG_OPUS` + rate | `X-Microsoft-OutputFormat` | see [`output_format`]; default 24 kHz |
//!
//! Text limit: 2000 characters, conservative: the SSML document (escaped text can grow 6×) must
//! stay far below the service's 64 KB request limit.
//!
//! # Streaming
//! The REST answer is sent chunked while synthesis runs (docs/VENDORS.md "Streaming"; Azure's
//! "Text to speech REST API" documents the chunked transfer); each piece goes to the sink as
//! it arrives. `raw-*-pcm` and the MP3/Opus formats play from the first bytes.
//!
//! # Errors
//! Azure answers with bare statuses (body often empty): 429 → `RATE_LIMITED` (with
//! `Retry-After`), 401/403 → `KEY_INVALID` (Azure has no distinct quota error), 400/415 →
//! `CLIENT_ERROR`, 5xx → `UPSTREAM_ERROR`. A 200 that is not audio → `UPSTREAM_ERROR`.

use async_trait::async_trait;
use reqwest::Client;
use voxpool_domain::provider::Provider;
use voxpool_domain::snapshot::Snapshot;

use super::{
    AudioFormat, ParamError, StreamEnd, TextLimit, VendorFailure,
    cloud::{Call, CloudVendor, Mapping},
    http,
};

const PROVIDER: &str = Provider::Azure.as_str();
const DEFAULT_RATE: u32 = 24_000;

/// The Azure Speech REST adapter.
#[derive(Clone, Debug)]
pub struct Azure {
    client: Client,
}

impl Azure {
    /// An adapter sending through `client` (share one pooled client between adapters).
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

/// What a snapshot becomes on the wire.
#[derive(Clone, Debug, PartialEq)]
pub struct Wire {
    lang: String,
    pitch: Option<String>,
    rate: Option<String>,
    volume: Option<String>,
    style: Option<String>,
    styledegree: Option<String>,
    role: Option<String>,
    output_format: &'static str,
    sample_rate_hz: u32,
}

/// `+12%`, `-50%`, `+0%`: a signed percent rounded to 1/100 %.
fn signed_pct(v: f64) -> String {
    let v = (v * 100.0).round() / 100.0;
    if v >= 0.0 {
        format!("+{}%", http::num(v))
    } else {
        format!("{}%", http::num(v))
    }
}

/// The `X-Microsoft-OutputFormat` for a format and sample rate, or `None` when Azure has none.
pub fn output_format(format: AudioFormat, rate: u32) -> Option<&'static str> {
    Some(match (format, rate) {
        (AudioFormat::Wav, 8_000) => "riff-8khz-16bit-mono-pcm",
        (AudioFormat::Wav, 16_000) => "riff-16khz-16bit-mono-pcm",
        (AudioFormat::Wav, 22_050) => "riff-22050hz-16bit-mono-pcm",
        (AudioFormat::Wav, 24_000) => "riff-24khz-16bit-mono-pcm",
        (AudioFormat::Wav, 44_100) => "riff-44100hz-16bit-mono-pcm",
        (AudioFormat::Wav, 48_000) => "riff-48khz-16bit-mono-pcm",
        (AudioFormat::Pcm, 8_000) => "raw-8khz-16bit-mono-pcm",
        (AudioFormat::Pcm, 16_000) => "raw-16khz-16bit-mono-pcm",
        (AudioFormat::Pcm, 22_050) => "raw-22050hz-16bit-mono-pcm",
        (AudioFormat::Pcm, 24_000) => "raw-24khz-16bit-mono-pcm",
        (AudioFormat::Pcm, 44_100) => "raw-44100hz-16bit-mono-pcm",
        (AudioFormat::Pcm, 48_000) => "raw-48khz-16bit-mono-pcm",
        (AudioFormat::Mp3, 16_000) => "audio-16khz-128kbitrate-mono-mp3",
        (AudioFormat::Mp3, 24_000) => "audio-24khz-96kbitrate-mono-mp3",
        (AudioFormat::Mp3, 48_000) => "audio-48khz-192kbitrate-mono-mp3",
        (AudioFormat::OggOpus, 16_000) => "ogg-16khz-16bit-mono-opus",
        (AudioFormat::OggOpus, 24_000) => "ogg-24khz-16bit-mono-opus",
        (AudioFormat::OggOpus, 48_000) => "ogg-48khz-16bit-mono-opus",
        _ => return None,
    })
}

fn rates_for(format: AudioFormat) -> &'static [u32] {
    match format {
        AudioFormat::Wav | AudioFormat::Pcm => &[8_000, 16_000, 22_050, 24_000, 44_100, 48_000],
        AudioFormat::Mp3 | AudioFormat::OggOpus => &[16_000, 24_000, 48_000],
    }
}

/// `en-US` from `en-US-JennyNeural` (language of 2–3 letters, region of 2–4 letters/digits).
fn lang_from_voice(voice_id: &str) -> Option<String> {
    let mut parts = voice_id.split('-');
    let (lang, region, _) = (parts.next()?, parts.next()?, parts.next()?);
    let ok_lang = (2..=3).contains(&lang.len()) && lang.chars().all(|c| c.is_ascii_alphabetic());
    let ok_region =
        (2..=4).contains(&region.len()) && region.chars().all(|c| c.is_ascii_alphanumeric());
    (ok_lang && ok_region).then(|| format!("{lang}-{region}"))
}

fn wire(
    voice: &Snapshot,
    format: AudioFormat,
    sample_rate_hz: Option<u32>,
) -> Result<Wire, ParamError> {
    http::require_voice_id(PROVIDER, voice)?;
    http::refuse_unknown_extra(PROVIDER, voice, &["role", "style", "styledegree"])?;
    let lang = match voice.locales.first() {
        Some(locale) if !locale.trim().is_empty() => locale.trim().to_owned(),
        _ => lang_from_voice(&voice.voice_id).ok_or_else(|| {
            http::refuse(
                PROVIDER,
                "locales",
                "[]",
                format!("xml:lang is required: give the pack a locale or use a voice name like en-US-JennyNeural (got {:?})", voice.voice_id),
            )
        })?,
    };
    let p = &voice.params;
    let pitch = p
        .pitch_pct
        .map(|v| {
            http::require_range(
                PROVIDER,
                "params.pitchPct",
                v,
                v,
                -50.0,
                50.0,
                "relative pitch %",
            )
            .map(signed_pct)
        })
        .transpose()?;
    let rate = p
        .rate
        .map(|r| {
            http::require_range(PROVIDER, "params.rate", r, r, 0.5, 2.0, "rate multiplier")
                .map(|r| signed_pct((r - 1.0) * 100.0))
        })
        .transpose()?;
    let volume = p
        .volume_pct
        .map(|v| {
            http::require_range(
                PROVIDER,
                "params.volumePct",
                v,
                v,
                -100.0,
                100.0,
                "relative volume %",
            )
            .map(signed_pct)
        })
        .transpose()?;
    let styledegree = http::extra_f64(PROVIDER, voice, "styledegree", 0.01, 2.0)?;
    if styledegree.is_some() && !voice.extra.contains_key("style") {
        return Err(http::refuse(
            PROVIDER,
            "extra.styledegree",
            voice.extra.get("styledegree").map_or("", String::as_str),
            "needs extra.style",
        ));
    }
    let sample_rate_hz = http::require_sample_rate(
        PROVIDER,
        format,
        sample_rate_hz.unwrap_or(DEFAULT_RATE),
        rates_for(format),
    )?;
    let output_format = output_format(format, sample_rate_hz).ok_or_else(|| {
        http::refuse(
            PROVIDER,
            "sample_rate_hz",
            sample_rate_hz,
            "no Azure output format",
        )
    })?;
    Ok(Wire {
        lang,
        pitch,
        rate,
        volume,
        style: voice.extra.get("style").cloned(),
        styledegree: styledegree.map(http::num),
        role: voice.extra.get("role").cloned(),
        output_format,
        sample_rate_hz,
    })
}

/// XML-escapes text or an attribute value (`& < > " '`); drops characters XML 1.0 forbids.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}

fn ssml(text: &str, voice_name: &str, w: &Wire) -> String {
    let attr = |name: &str, v: &Option<String>| {
        v.as_ref()
            .map(|v| format!(" {name}='{}'", xml_escape(v)))
            .unwrap_or_default()
    };
    let mut inner = xml_escape(text);
    let prosody = format!(
        "{}{}{}",
        attr("pitch", &w.pitch),
        attr("rate", &w.rate),
        attr("volume", &w.volume)
    );
    if !prosody.is_empty() {
        inner = format!("<prosody{prosody}>{inner}</prosody>");
    }
    let express = format!(
        "{}{}{}",
        attr("style", &w.style),
        attr("styledegree", &w.styledegree),
        attr("role", &w.role)
    );
    if !express.is_empty() {
        inner = format!("<mstts:express-as{express}>{inner}</mstts:express-as>");
    }
    format!(
        "<speak version='1.0' xmlns='http://www.w3.org/2001/10/synthesis' xmlns:mstts='https://www.w3.org/2001/mstts' xml:lang='{}'><voice name='{}'>{inner}</voice></speak>",
        xml_escape(&w.lang),
        xml_escape(voice_name),
    )
}

fn endpoint(base_url: Option<&str>, region: Option<&str>) -> Result<String, String> {
    if let Some(base) = base_url {
        return Ok(format!(
            "{}/cognitiveservices/v1",
            http::base_url(Some(base), "")
        ));
    }
    match region.map(str::trim) {
        Some(region) if !region.is_empty() && region.chars().all(|c| c.is_ascii_alphanumeric()) => {
            Ok(format!(
                "https://{region}.tts.speech.microsoft.com/cognitiveservices/v1"
            ))
        }
        Some(region) => Err(format!(
            "upstream region {region:?} is not a valid Azure region"
        )),
        None => Err("the upstream has neither base_url nor region".to_owned()),
    }
}

#[async_trait]
impl CloudVendor for Azure {
    const PROVIDER: Provider = Provider::Azure;
    const TEXT_LIMIT: TextLimit = TextLimit::Chars(2000);
    const DEFAULT_RATE: u32 = DEFAULT_RATE;
    type Wire = Wire;
    const WIRE: Mapping<Wire> = wire;

    async fn call(&self, call: Call<'_, Wire>) -> Result<StreamEnd, VendorFailure> {
        let (request, wire, secret, sink) = call.parts();
        let url = endpoint(
            request.upstream.base_url.as_deref(),
            request.upstream.region.as_deref(),
        )
        .map_err(|m| http::upstream_config_failure(PROVIDER, m))?;
        let builder = self
            .client
            .post(url)
            .header("Ocp-Apim-Subscription-Key", secret.expose())
            .header(reqwest::header::CONTENT_TYPE, "application/ssml+xml")
            .header("X-Microsoft-OutputFormat", wire.output_format)
            .body(ssml(
                &request.utterance.text,
                &request.utterance.voice.voice_id,
                &wire,
            ));
        let opened = http::open(
            PROVIDER,
            builder,
            request.timeout,
            Some(secret),
            &request.gate,
        )
        .await?;
        http::stream_raw_audio(PROVIDER, opened, sink, Some(secret), |reply| {
            if reply.status.is_success() {
                let snippet =
                    String::from_utf8_lossy(&reply.body[..reply.body.len().min(200)]).into_owned();
                http::failure(
                    PROVIDER,
                    voxpool_domain::contract::Outcome::UpstreamError,
                    Some(reply.status.as_u16()),
                    None,
                    format!(
                        "HTTP 200 with a document instead of audio: {}",
                        snippet.trim()
                    ),
                    Some(secret),
                )
            } else {
                // Azure answers errors with a bare status and no document (docs/VENDORS.md).
                http::ErrorAnswer::of(reply, String::new(), "", None)
                    .failure(PROVIDER, Some(secret))
            }
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

    fn snapshot(
        voice_id: &str,
        locales: &[&str],
        params: Params,
        extra: &[(&str, &str)],
    ) -> Snapshot {
        let mut s = voxpool_fake_vendors::snapshot(PROVIDER, "neural", voice_id);
        s.locales = locales.iter().map(|l| (*l).to_owned()).collect();
        s.params = params;
        s.extra = extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        s
    }

    #[test]
    fn params_map_to_prosody_attributes() {
        let p = |pitch_pct, rate, volume_pct| Params {
            pitch_pct,
            rate,
            volume_pct,
        };
        let cases = [
            (p(Some(20.0), None, None), Some("+20%"), None, None),
            (
                p(Some(-12.5), Some(1.5), Some(-30.0)),
                Some("-12.5%"),
                Some("+50%"),
                Some("-30%"),
            ),
            (
                p(None, Some(0.5), Some(100.0)),
                None,
                Some("-50%"),
                Some("+100%"),
            ),
            (
                p(None, Some(1.2), Some(0.0)),
                None,
                Some("+20%"),
                Some("+0%"),
            ),
            (
                p(Some(50.0), Some(2.0), Some(-100.0)),
                Some("+50%"),
                Some("+100%"),
                Some("-100%"),
            ),
        ];
        for (params, pitch, rate, volume) in cases {
            let w = wire(
                &snapshot("en-US-JennyNeural", &[], params, &[]),
                AudioFormat::Wav,
                None,
            )
            .unwrap();
            assert_eq!(
                (w.pitch.as_deref(), w.rate.as_deref(), w.volume.as_deref()),
                (pitch, rate, volume),
                "{params:?}"
            );
        }
    }

    #[test]
    fn format_and_rate_pick_the_output_format_header() {
        let cases = [
            (AudioFormat::Wav, None, "riff-24khz-16bit-mono-pcm"),
            (AudioFormat::Wav, Some(16_000), "riff-16khz-16bit-mono-pcm"),
            (AudioFormat::Pcm, Some(44_100), "raw-44100hz-16bit-mono-pcm"),
            (AudioFormat::Mp3, None, "audio-24khz-96kbitrate-mono-mp3"),
            (
                AudioFormat::Mp3,
                Some(48_000),
                "audio-48khz-192kbitrate-mono-mp3",
            ),
            (
                AudioFormat::OggOpus,
                Some(16_000),
                "ogg-16khz-16bit-mono-opus",
            ),
        ];
        for (format, rate, header) in cases {
            let w = wire(
                &snapshot("en-US-JennyNeural", &[], Params::default(), &[]),
                format,
                rate,
            )
            .unwrap();
            assert_eq!(w.output_format, header);
        }
    }

    #[test]
    fn refusals_name_the_param() {
        let p = |pitch_pct, rate, volume_pct| Params {
            pitch_pct,
            rate,
            volume_pct,
        };
        let cases: Vec<(&str, &[&str], http::Refusal)> = vec![
            (
                "en-US-JennyNeural",
                &[],
                (
                    p(Some(60.0), None, None),
                    &[],
                    AudioFormat::Wav,
                    None,
                    "params.pitchPct",
                ),
            ),
            (
                "en-US-JennyNeural",
                &[],
                (
                    p(None, Some(2.5), None),
                    &[],
                    AudioFormat::Wav,
                    None,
                    "params.rate",
                ),
            ),
            (
                "en-US-JennyNeural",
                &[],
                (
                    p(None, Some(0.4), None),
                    &[],
                    AudioFormat::Wav,
                    None,
                    "params.rate",
                ),
            ),
            (
                "en-US-JennyNeural",
                &[],
                (
                    p(None, None, Some(-101.0)),
                    &[],
                    AudioFormat::Wav,
                    None,
                    "params.volumePct",
                ),
            ),
            (
                "en-US-JennyNeural",
                &[],
                (
                    Params::default(),
                    &[("emotion", "x")],
                    AudioFormat::Wav,
                    None,
                    "extra.emotion",
                ),
            ),
            (
                "en-US-JennyNeural",
                &[],
                (
                    Params::default(),
                    &[("styledegree", "1")],
                    AudioFormat::Wav,
                    None,
                    "extra.styledegree",
                ),
            ),
            (
                "en-US-JennyNeural",
                &[],
                (
                    Params::default(),
                    &[("style", "sad"), ("styledegree", "3")],
                    AudioFormat::Wav,
                    None,
                    "extra.styledegree",
                ),
            ),
            (
                "en-US-JennyNeural",
                &[],
                (
                    Params::default(),
                    &[],
                    AudioFormat::Mp3,
                    Some(44_100),
                    "sample_rate_hz",
                ),
            ),
            (
                "en-US-JennyNeural",
                &[],
                (
                    Params::default(),
                    &[],
                    AudioFormat::Wav,
                    Some(11_025),
                    "sample_rate_hz",
                ),
            ),
            (
                "Jenny",
                &[],
                (Params::default(), &[], AudioFormat::Wav, None, "locales"),
            ),
        ];
        for (voice_id, locales, (params, extra, format, rate, param)) in cases {
            let e = Azure::new(http::build_client().expect("client"))
                .check(&snapshot(voice_id, locales, params, extra), format, rate)
                .unwrap_err();
            assert_eq!(e.param, param, "{e}");
            assert!(e.to_string().starts_with("azure cannot apply"), "{e}");
        }
    }

    #[test]
    fn ssml_escapes_text_and_takes_the_language_from_locale_or_voice_name() {
        let voice = snapshot(
            "en-GB-SoniaNeural",
            &[],
            Params {
                pitch_pct: Some(10.0),
                ..Params::default()
            },
            &[("style", "cheerful"), ("styledegree", "1.5")],
        );
        let w = wire(&voice, AudioFormat::Wav, None).unwrap();
        assert_eq!(w.lang, "en-GB");
        assert_eq!(
            ssml("a < b & \"c\" 'd' >", &voice.voice_id, &w),
            "<speak version='1.0' xmlns='http://www.w3.org/2001/10/synthesis' xmlns:mstts='https://www.w3.org/2001/mstts' xml:lang='en-GB'><voice name='en-GB-SoniaNeural'><mstts:express-as style='cheerful' styledegree='1.5'><prosody pitch='+10%'>a &lt; b &amp; &quot;c&quot; &apos;d&apos; &gt;</prosody></mstts:express-as></voice></speak>"
        );
        let w = wire(
            &snapshot("zh-CN-XiaoxiaoNeural", &["zh-TW"], Params::default(), &[]),
            AudioFormat::Wav,
            None,
        )
        .unwrap();
        assert_eq!(w.lang, "zh-TW");
        let plain = ssml("hi", "zh-CN-XiaoxiaoNeural", &w);
        assert!(
            plain.contains("<voice name='zh-CN-XiaoxiaoNeural'>hi</voice>"),
            "{plain}"
        );
    }

    #[test]
    fn region_or_base_url_give_the_endpoint() {
        assert_eq!(
            endpoint(None, Some("westeurope")).unwrap(),
            "https://westeurope.tts.speech.microsoft.com/cognitiveservices/v1"
        );
        assert_eq!(
            endpoint(Some("http://127.0.0.1:1/"), Some("x")).unwrap(),
            "http://127.0.0.1:1/cognitiveservices/v1"
        );
        assert!(endpoint(None, Some("evil.example/")).is_err());
        assert!(endpoint(None, None).is_err());
    }
}
