//! `POST /v1/audio/speech`: OpenAI's speech request in, audio out, through the same job path
//! as `SynthesizeStream` (prepare, then the job's delivery, [`crate::job::delivery`]: chunks
//! side by side, leases held to the vendor's end, failover before the first byte only), its
//! pieces and errors mapped here and in [`super::error`], never through the gRPC edge.
//!
//! Body (JSON sent as `application/json`, at most [`super::Front::body_limit`] bytes, read by
//! [`super::body`]: a key sent twice or an unknown field, also inside an object `voice`, is
//! refused, never ignored): `input` (the text), `voice` (a voice-pack id, or `{"id": …}`), `model` (accepted,
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
//! leases released. The job's deadline is the client's (`X-Voxpool-Timeout`,
//! `X-Stainless-Timeout`: [`super::timeout`]) or `synthesis.default_deadline_ms`.

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
use serde_json::json;
use tokio::time::Instant;

use super::{
    Front,
    auth::Caller,
    body::{self, SpeechBody, StreamFormat},
    error::ApiError,
    timeout,
};
use crate::{
    adapters::AudioFormat,
    cache::Policy,
    job::{
        Request, VoiceSource,
        delivery::{self, Delivery, Piece},
    },
    metrics::{self, Via},
    usage::Totals,
};

/// The route, as metrics and spans name it.
pub const ROUTE: &str = "/v1/audio/speech";

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
    let checked = body::check_content_type(headers)
        .and_then(|()| {
            timeout::deadline(
                headers,
                Duration::from_millis(front.core.settings.default_deadline_ms),
                front.request_timeout,
            )
        })
        .and_then(|deadline| SpeechBody::parse(&body).map(|body| (body, deadline)));
    let (body, deadline) = match checked {
        Ok(checked) => checked,
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
        caller: caller.name,
        path: crate::usage::Path::Http,
    };
    let job = match core.prepare(request, deadline).await {
        Ok(job) => job,
        Err(e) => {
            tracing::info!(error = %e, "http speech refused");
            metrics::request(Via::Http(ROUTE), "-", e.code(), started.elapsed());
            let mut error = ApiError::of(&e);
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
    let (characters, cost_micros) = job.meter.up_front(&job.chunks);
    let currency = job.meter.context().currency.clone();
    let mut audio = delivery::start(core, job, started, Via::Http(ROUTE));
    // Nothing is answered before the first audio: until then a failure is still an HTTP error.
    let first = match audio.next().await {
        Some(Ok(piece)) => piece,
        Some(Err(e)) => return ApiError::of(&e).into_response(),
        None => Piece::default(),
    };
    let mut response = match body.stream_format {
        StreamFormat::Audio => {
            let bytes = futures::stream::once(async move { Ok(first) })
                .chain(audio)
                .map(|item| match item {
                    Ok(piece) => Ok(Bytes::from(piece.audio)),
                    Err(e) => Err(std::io::Error::other(e.to_string())),
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
    // Sent before the audio exists: what the text bills as counted up front, at the pool's
    // character price (the final figures are in the SSE `done` event's `usage`).
    let cost = format!("{:.6}", cost_micros as f64 / 1_000_000.0);
    for (name, value) in [
        ("x-request-id", request_id),
        ("x-voxpool-pool", pool),
        ("x-voxpool-characters", characters.to_string()),
        ("x-voxpool-cost", cost),
        ("x-voxpool-currency", currency),
    ] {
        if let Ok(v) = HeaderValue::from_str(&value) {
            response.headers_mut().insert(name, v);
        }
    }
    response
}

/// OpenAI's speech events: a delta per piece of audio, `done` after the last, `error` if the
/// stream fails after it began.
fn sse_events(
    first: Piece,
    rest: Delivery,
) -> impl Stream<Item = Result<Event, std::convert::Infallible>> {
    let delta = |piece: Piece| {
        let audio = base64::engine::general_purpose::STANDARD.encode(piece.audio);
        Event::default().data(json!({"type": "speech.audio.delta", "audio": audio}).to_string())
    };
    let pieces = futures::stream::once(async move { Ok(first) }).chain(rest);
    let state = (Box::pin(pieces), None::<Totals>);
    futures::stream::unfold(Some(state), move |state| async move {
        let (mut pieces, mut usage) = state?;
        match pieces.next().await {
            Some(Ok(mut piece)) => {
                if let Some(totals) = piece.usage.take() {
                    usage = Some(totals);
                }
                Some((Ok(delta(piece)), Some((pieces, usage))))
            }
            Some(Err(e)) => {
                let error = ApiError::of(&e).body();
                let event = Event::default()
                    .data(json!({"type": "error", "error": error["error"]}).to_string());
                Some((Ok(event), None))
            }
            None => {
                let mut done = json!({"type": "speech.audio.done"});
                if let Some(t) = usage {
                    done["usage"] = json!({
                        "characters": t.characters,
                        "billed_characters": t.billed_characters,
                        "cached_characters": t.cached_characters,
                        "audio_ms": t.audio_ms,
                        "cost": t.cost_micros as f64 / 1_000_000.0,
                        "currency": t.currency,
                    });
                }
                let done = Event::default().data(done.to_string());
                Some((Ok(done), None))
            }
        }
    })
}
