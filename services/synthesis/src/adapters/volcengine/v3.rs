//! Volcengine's V3 unidirectional stream (the parent module's "V3"): `req_params` built from
//! the V1 wire values, the JSON lines read as they arrive, each line's audio written to the
//! sink and its code classified like V1's (`outcome_of`).

use base64::Engine as _;
use serde_json::{Value, json};
use voxpool_domain::{contract::Outcome, secret::Secret};

use super::{DEFAULT_BASE, PROVIDER, V3_DEFAULT_RESOURCE, V3_DONE, Volcengine, Wire, outcome_of};
use crate::adapters::{AudioSink, ParamError, StreamEnd, VendorFailure, VendorRequest, http};

/// V3 `req_params` from the request and its V1 wire values (module doc, "V3").
fn v3_body(request: &VendorRequest<'_>, wire: &Wire) -> Result<Value, ParamError> {
    let percent = |ratio: f64, param: &str, value: Option<f64>| {
        let pct = ((ratio - 1.0) * 100.0).round();
        if (-50.0..=100.0).contains(&pct) {
            Ok(pct)
        } else {
            Err(http::refuse(
                PROVIDER,
                param,
                http::num(value.unwrap_or(ratio)),
                "the V3 API takes 0.5x to 2x (speech_rate / loudness_rate -50..100)",
            ))
        }
    };
    if wire.pitch_ratio.is_some() {
        return Err(http::refuse(
            PROVIDER,
            "params.pitchPct",
            http::num(request.utterance.voice.params.pitch_pct.unwrap_or_default()),
            "the V3 API (upstream params.api = \"v3\") has no pitch ratio; serve this voice from a V1 upstream",
        ));
    }
    let format = if wire.encoding == "wav" {
        "pcm"
    } else {
        wire.encoding
    };
    let mut audio = json!({"format": format, "sample_rate": wire.rate});
    if let Some(r) = wire.speed_ratio {
        audio["speech_rate"] = json!(percent(
            r,
            "params.rate",
            request.utterance.voice.params.rate
        )?);
    }
    if let Some(v) = wire.volume_ratio.or(wire.loudness_ratio) {
        audio["loudness_rate"] = json!(percent(
            v,
            "params.volumePct",
            request.utterance.voice.params.volume_pct
        )?);
    }
    Ok(json!({
        "user": {"uid": "voxpool"},
        "req_params": {
            "text": request.utterance.text,
            "speaker": request.utterance.voice.voice_id,
            "audio_params": audio,
        },
    }))
}

/// Handles one V3 line: audio (base64 `data`) is written (a WAV request's header first), the
/// end code stops, any other code fails the call. Returns true at the end line.
fn v3_line(
    line: &[u8],
    (status, headers): (u16, &reqwest::header::HeaderMap),
    wire: &Wire,
    sink: &AudioSink,
    secret: &Secret,
) -> Result<bool, VendorFailure> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(false);
    }
    let doc: Value = serde_json::from_slice(line).unwrap_or(Value::Null);
    let code = doc["code"].as_i64();
    match code {
        Some(V3_DONE) => return Ok(true),
        Some(0) if (200..300).contains(&status) => {}
        _ => {
            let message = doc["message"].as_str().unwrap_or_default();
            let label = code.map(|c| format!("code {c}")).unwrap_or_default();
            return Err(http::ErrorAnswer {
                status,
                headers,
                body: line,
                code: label,
                message,
                outcome: Some(outcome_of(status, code, message)),
            }
            .failure(PROVIDER, Some(secret)));
        }
    }
    let Some(b64) = doc["data"].as_str().filter(|d| !d.is_empty()) else {
        return Ok(false);
    };
    let audio = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| {
            http::failure(
                PROVIDER,
                Outcome::UpstreamError,
                Some(status),
                None,
                format!("data is not base64: {e}"),
                Some(secret),
            )
        })?;
    if wire.encoding == "wav" && sink.written() == 0 {
        sink.write(http::pcm16_wav_header(PROVIDER, wire.rate)?);
    }
    sink.write(audio);
    Ok(false)
}

impl Volcengine {
    /// One V3 unidirectional stream (module doc, "V3").
    pub(super) async fn stream_v3(
        &self,
        request: &VendorRequest<'_>,
        wire: &Wire,
        secret: &Secret,
        sink: &AudioSink,
    ) -> Result<StreamEnd, VendorFailure> {
        let body = v3_body(request, wire).map_err(|e| http::param_failure(PROVIDER, &e))?;
        let resource = http::upstream_str(&request.upstream.params, "resource_id")
            .unwrap_or(V3_DEFAULT_RESOURCE);
        let url = format!(
            "{}/api/v3/tts/unidirectional",
            http::base_url(request.upstream.base_url.as_deref(), DEFAULT_BASE)
        );
        let builder = self
            .client
            .post(url)
            .header("X-Api-App-Id", &request.key.app_id)
            .header("X-Api-Access-Key", secret.expose())
            .header("X-Api-Resource-Id", resource)
            .header("X-Api-Request-Id", request.attempt_id)
            .json(&body);
        let mut opened = http::open(
            PROVIDER,
            builder,
            request.timeout,
            Some(secret),
            &request.gate,
        )
        .await?;
        let status = opened.status.as_u16();
        let mut lines = http::LineReader::default();
        let mut done = false;
        while !done {
            let Some(piece) = opened.chunk(PROVIDER, Some(secret)).await? else {
                break;
            };
            for line in lines.push(&piece) {
                done = v3_line(&line, (status, &opened.headers), wire, sink, secret)?;
                if done {
                    break;
                }
            }
        }
        if !done && let Some(line) = lines.finish() {
            done = v3_line(&line, (status, &opened.headers), wire, sink, secret)?;
        }
        if !done || sink.written() == 0 {
            let why = if done {
                "the stream ended without audio"
            } else {
                "the stream ended without its end line (code 20000000)"
            };
            return Err(http::failure(
                PROVIDER,
                Outcome::UpstreamError,
                Some(status),
                None,
                why,
                Some(secret),
            ));
        }
        Ok(StreamEnd {
            sample_rate_hz: Some(wire.rate),
        })
    }
}
