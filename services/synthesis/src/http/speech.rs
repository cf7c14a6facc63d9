//! `POST /v1/audio/speech`: OpenAI's speech request in, audio out, through the same job path
//! as `SynthesizeStream` ([`crate::stream`]: prepare, chunks side by side, leases held to the
//! vendor's end, failover before the first byte only).
//!
//! Body (JSON, at most [`super::Front::body_limit`] bytes; an unknown field is refused, never
//! ignored): `input` (the text), `voice` (a voice-pack id, or `{"id": …}`), `model` (accepted,
//! does not route: the pack pins its pool), `response_format` (`mp3` default | `opus` | `wav` |
//! `pcm`; `aac` and `flac` are refused: no pool gives them), `speed` (0.25–4.0, multiplies the
//! pack's rate; refused naming `speed` where the pack's vendor cannot apply the result),
//! `instructions` (a style prompt, refused where the vendor takes none), `stream_format`
//! (`audio` default | `sse`).
//!
//! The answer waits for the first audio (so a refusal, a full pool or exhausted keys is an
//! HTTP error with its status), then streams: chunked audio bytes (`wav` with the streaming
//! header: sizes unknown), or with `sse` one `speech.audio.delta` event per piece (base64
//! `audio`) and `speech.audio.done` last. A failure after the first byte cuts the body off
//! (SSE: an `error` event) — the client sees an incomplete answer, never a silent short one.
//! A client that disconnects cancels the job: streaming vendor calls are cut off and their
//! leases released.

use std::{sync::Arc, time::Duration};

use axum::{
    body::{Body, Bytes},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{
        IntoResponse, Response,
        sse::{Event, Sse},
    },
};
use base64::Engine as _;
use futures::{Stream, StreamExt};
use serde_json::{Map, Value, json};
use tokio::time::Instant;
use tonic::Status;
use voxpool_proto::synthesis::v1::AudioChunk;

use super::{Front, auth::Caller, error::ApiError};
use crate::{
    adapters::AudioFormat,
    cache::Policy,
    deadline::Deadline,
    job::{Overrides, Request, VoiceSource},
    metrics::{self, Via},
    stream::{self, AudioStream},
};

/// The route, as metrics and spans name it.
pub const ROUTE: &str = "/v1/audio/speech";

/// Slowest and fastest `speed` accepted (OpenAI's bounds).
const SPEED_RANGE: std::ops::RangeInclusive<f64> = 0.25..=4.0;

/// Longest `instructions`, in characters (OpenAI's bound).
const MAX_INSTRUCTIONS_CHARS: usize = 4096;

/// Longest `model`, in characters (it is only checked, never used).
const MAX_MODEL_CHARS: usize = 256;

/// How the audio goes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StreamFormat {
    Audio,
    Sse,
}

/// A parsed body.
#[derive(Clone, Debug, PartialEq)]
struct SpeechBody {
    input: String,
    voice: String,
    format: AudioFormat,
    /// No `response_format` was sent: `format` is OpenAI's default, mp3.
    format_defaulted: bool,
    overrides: Overrides,
    stream_format: StreamFormat,
}

fn string(body: &Map<String, Value>, field: &str) -> Result<Option<String>, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(ApiError::invalid(
            field,
            format!("must be a string, got {}", kind(other)),
        )),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl SpeechBody {
    /// Parses and checks the body (module doc); errors are 400 naming the field.
    fn parse(bytes: &[u8]) -> Result<Self, ApiError> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| {
            ApiError::invalid(
                "body",
                format!("is not JSON ({e}): send {{\"model\": …, \"input\": …, \"voice\": …}}"),
            )
        })?;
        let Value::Object(body) = value else {
            return Err(ApiError::invalid("body", "must be a JSON object"));
        };
        const KNOWN: [&str; 7] = [
            "model",
            "input",
            "voice",
            "response_format",
            "speed",
            "instructions",
            "stream_format",
        ];
        if let Some(unknown) = body.keys().find(|k| !KNOWN.contains(&k.as_str())) {
            let name = voxpool_domain::untrusted::quote(unknown);
            return Err(ApiError {
                param: Some(unknown.chars().take(64).collect()),
                ..ApiError::invalid(
                    "body",
                    format!(
                        "unknown field {name}: this server applies model, input, voice, response_format, speed, instructions and stream_format, and refuses what it would not apply"
                    ),
                )
            });
        }
        if let Some(model) = string(&body, "model")?
            && model.chars().count() > MAX_MODEL_CHARS
        {
            return Err(ApiError::invalid(
                "model",
                format!("longer than {MAX_MODEL_CHARS} characters"),
            ));
        }
        let input = string(&body, "input")?
            .ok_or_else(|| ApiError::invalid("input", "missing: the text to speak"))?;
        let voice = match body.get("voice") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Object(o)) => match o.get("id") {
                Some(Value::String(s)) => s.clone(),
                _ => {
                    return Err(ApiError::invalid(
                        "voice",
                        "an object voice must be {\"id\": \"<voice pack id>\"}",
                    ));
                }
            },
            None | Some(Value::Null) => {
                return Err(ApiError::invalid(
                    "voice",
                    "missing: a voice pack id from GET /v1/audio/voices",
                ));
            }
            Some(other) => {
                return Err(ApiError::invalid(
                    "voice",
                    format!("must be a voice pack id (a string), got {}", kind(other)),
                ));
            }
        };
        if voice.trim().is_empty() {
            return Err(ApiError::invalid(
                "voice",
                "empty: a voice pack id from GET /v1/audio/voices",
            ));
        }
        let response_format = string(&body, "response_format")?;
        let format_defaulted = response_format.is_none();
        let format = match response_format.as_deref() {
            None | Some("mp3") => AudioFormat::Mp3,
            Some("opus") => AudioFormat::OggOpus,
            Some("wav") => AudioFormat::Wav,
            Some("pcm") => AudioFormat::Pcm,
            Some(f @ ("aac" | "flac")) => {
                return Err(ApiError::invalid(
                    "response_format",
                    format!(
                        "{f} is not available here: no pool's vendor gives it; use mp3, opus, wav or pcm"
                    ),
                ));
            }
            Some(other) => {
                return Err(ApiError::invalid(
                    "response_format",
                    format!(
                        "{} is not a format: use mp3, opus, wav or pcm",
                        voxpool_domain::untrusted::quote(other)
                    ),
                ));
            }
        };
        let rate_scale = match body.get("speed") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => {
                let speed = n.as_f64().unwrap_or(f64::NAN);
                if !SPEED_RANGE.contains(&speed) {
                    return Err(ApiError::invalid(
                        "speed",
                        format!("must be 0.25 to 4.0, got {n}"),
                    ));
                }
                Some(speed)
            }
            Some(other) => {
                return Err(ApiError::invalid(
                    "speed",
                    format!("must be a number 0.25 to 4.0, got {}", kind(other)),
                ));
            }
        };
        let instructions = string(&body, "instructions")?.filter(|i| !i.is_empty());
        if let Some(i) = &instructions
            && i.chars().count() > MAX_INSTRUCTIONS_CHARS
        {
            return Err(ApiError::invalid(
                "instructions",
                format!("longer than {MAX_INSTRUCTIONS_CHARS} characters"),
            ));
        }
        let stream_format = match string(&body, "stream_format")?.as_deref() {
            None | Some("audio") => StreamFormat::Audio,
            Some("sse") => StreamFormat::Sse,
            Some(other) => {
                return Err(ApiError::invalid(
                    "stream_format",
                    format!(
                        "{} is not a stream format: use audio or sse",
                        voxpool_domain::untrusted::quote(other)
                    ),
                ));
            }
        };
        Ok(Self {
            input,
            voice,
            format,
            format_defaulted,
            overrides: Overrides {
                rate_scale,
                instructions,
            },
            stream_format,
        })
    }
}

/// The `Content-Type` of audio in `format`.
fn content_type(format: AudioFormat) -> &'static str {
    match format {
        AudioFormat::Mp3 => "audio/mpeg",
        AudioFormat::OggOpus => "audio/ogg",
        AudioFormat::Wav => "audio/wav",
        AudioFormat::Pcm => "audio/pcm",
    }
}

/// Handles one speech request from `caller` (module doc).
pub async fn speech(
    front: &Arc<Front>,
    caller: Caller,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    let started = Instant::now();
    let body = match SpeechBody::parse(&body) {
        Ok(b) => b,
        Err(e) => {
            metrics::request(
                Via::Http(ROUTE),
                "-",
                tonic::Code::InvalidArgument,
                started.elapsed(),
            );
            return e.into_response();
        }
    };
    let request_id = headers
        .get("x-request-id")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let format_defaulted = body.format_defaulted;
    let core = front.core.clone();
    let request = Request {
        request_id,
        priority: Ok(caller.priority),
        tenant: caller.tenant,
        text: body.input,
        format: Ok(body.format),
        // WAV goes out as it is produced: a header with sizes unknown, then the samples.
        wav_streaming_header: body.format == AudioFormat::Wav,
        sample_rate_hz: 0,
        voice: Some(VoiceSource::PackId(body.voice)),
        cache_policy: Ok(Policy::Use),
        overrides: body.overrides,
        // OpenAI's speech API has neither: a voice with several clips rolls per request.
        emotion: String::new(),
        seed: None,
    };
    let deadline = Deadline::after(Duration::from_millis(core.settings.default_deadline_ms));
    let job = match core.prepare(request, deadline).await {
        Ok(job) => job,
        Err(e) => {
            tracing::info!(error = %e, "http speech refused");
            let status = Status::from(e);
            metrics::request(Via::Http(ROUTE), "-", status.code(), started.elapsed());
            let mut error = ApiError::from_status(&status);
            if format_defaulted && error.param.as_deref() == Some("response_format") {
                error.message.push_str(
                    " (response_format was not sent and defaults to mp3, as in OpenAI's API: send one this voice's vendor gives, such as \"wav\")",
                );
            }
            return error.into_response();
        }
    };
    tracing::Span::current().record("pool", job.pool.id.as_str());
    let (format, request_id, pool) = (job.format, job.request_id.clone(), job.pool.id.clone());
    let mut audio = stream::start(core, job, started, Via::Http(ROUTE));
    // Nothing is answered before the first audio: until then a failure is still an HTTP error.
    let first = match audio.next().await {
        Some(Ok(chunk)) => chunk,
        Some(Err(status)) => return ApiError::from_status(&status).into_response(),
        None => AudioChunk::default(),
    };
    let mut response = match body.stream_format {
        StreamFormat::Audio => {
            let bytes = futures::stream::once(async move { Ok(first) })
                .chain(audio)
                .map(|item| match item {
                    Ok(chunk) => Ok(Bytes::from(chunk.audio)),
                    Err(status) => Err(std::io::Error::other(status.message().to_owned())),
                });
            let mut r = Response::new(Body::from_stream(bytes));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(content_type(format)),
            );
            r
        }
        StreamFormat::Sse => Sse::new(sse_events(first, audio)).into_response(),
    };
    *response.status_mut() = StatusCode::OK;
    for (name, value) in [("x-request-id", request_id), ("x-voxpool-pool", pool)] {
        if let Ok(v) = HeaderValue::from_str(&value) {
            response.headers_mut().insert(name, v);
        }
    }
    response
}

/// OpenAI's speech events: a delta per piece of audio, `done` after the last, `error` if the
/// stream fails after it began.
fn sse_events(
    first: AudioChunk,
    rest: AudioStream,
) -> impl Stream<Item = Result<Event, std::convert::Infallible>> {
    let delta = |chunk: AudioChunk| {
        let audio = base64::engine::general_purpose::STANDARD.encode(chunk.audio);
        Event::default().data(json!({"type": "speech.audio.delta", "audio": audio}).to_string())
    };
    let pieces = futures::stream::once(async move { Ok(first) }).chain(rest);
    futures::stream::unfold(Some(Box::pin(pieces)), move |state| async move {
        let mut pieces = state?;
        match pieces.next().await {
            Some(Ok(chunk)) => Some((Ok(delta(chunk)), Some(pieces))),
            Some(Err(status)) => {
                let error = ApiError::from_status(&status).body();
                let event = Event::default()
                    .data(json!({"type": "error", "error": error["error"]}).to_string());
                Some((Ok(event), None))
            }
            None => {
                let done = Event::default().data(json!({"type": "speech.audio.done"}).to_string());
                Some((Ok(done), None))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<SpeechBody, ApiError> {
        SpeechBody::parse(json.as_bytes())
    }

    #[test]
    fn an_openai_body_parses_with_its_defaults() {
        let b = parse(r#"{"model":"tts-1","input":"Hello.","voice":"pack-1"}"#).unwrap();
        assert_eq!(b.format, AudioFormat::Mp3, "OpenAI's default");
        assert!(b.format_defaulted);
        assert_eq!(b.stream_format, StreamFormat::Audio);
        assert_eq!(b.overrides, Overrides::default());
        let b = parse(r#"{"input":"x","voice":{"id":"pack-2"},"response_format":"opus","speed":1.5,"instructions":"calm","stream_format":"sse"}"#).unwrap();
        assert_eq!(
            (b.voice.as_str(), b.format),
            ("pack-2", AudioFormat::OggOpus)
        );
        assert!(!b.format_defaulted);
        assert_eq!(b.overrides.rate_scale, Some(1.5));
        assert_eq!(b.overrides.instructions.as_deref(), Some("calm"));
        assert_eq!(b.stream_format, StreamFormat::Sse);
    }

    #[test]
    fn bad_fields_are_refused_by_name() {
        for (body, param) in [
            (r#"{"voice":"p"}"#, "input"),
            (r#"{"input":"x"}"#, "voice"),
            (r#"{"input":"x","voice":7}"#, "voice"),
            (
                r#"{"input":"x","voice":"p","response_format":"aac"}"#,
                "response_format",
            ),
            (
                r#"{"input":"x","voice":"p","response_format":"ogg"}"#,
                "response_format",
            ),
            (r#"{"input":"x","voice":"p","speed":9}"#, "speed"),
            (r#"{"input":"x","voice":"p","speed":"fast"}"#, "speed"),
            (
                r#"{"input":"x","voice":"p","stream_format":"ws"}"#,
                "stream_format",
            ),
            (
                r#"{"input":"x","voice":"p","temperature":0.2}"#,
                "temperature",
            ),
            (r#"[1]"#, "body"),
            (r#"{"#, "body"),
        ] {
            let e = parse(body).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
        }
    }
}
