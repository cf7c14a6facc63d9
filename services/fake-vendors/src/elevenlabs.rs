//! Fake ElevenLabs `POST /v1/text-to-speech/{voice_id}?output_format=…` and its streaming twin
//! `POST /v1/text-to-speech/{voice_id}/stream?output_format=…` (same key, query, body and
//! errors): key in `xi-api-key`;
//! `output_format` `mp3_22050_32`, `mp3_44100_{32,64,96,128,192}` or `pcm_{8000,16000,22050,
//! 24000,44100,48000}` (default `mp3_44100_128`); JSON body `text`, `model_id`,
//! `voice_settings` {stability, similarity_boost, style 0–1, use_speaker_boost bool, speed
//! 0.7–1.2} plus the vendor's other documented top-level fields; unknown fields are a 422 (no
//! pitch, no volume). Errors: `{"detail":{"type","code","message","status"}}`: 429
//! `too_many_concurrent_requests` over the cap (with `current-concurrent-requests` /
//! `maximum-concurrent-requests`), 429 `system_busy`, 401 `invalid_api_key` / `quota_exceeded`.
//!
//! Every 200 answer (both routes) also carries `current-concurrent-requests` (the key's admitted
//! requests now, this one included) and `maximum-concurrent-requests` (the cap; left out when the
//! cap is 0 = unlimited). With [`Streaming`](crate::Streaming) on, `/stream` sends the audio
//! body chunked in paced pieces (slices of the unstreamed bytes), while the non-stream route
//! waits `first_byte + rest` and answers at once; a mid-stream break aborts the body. Facts
//! relied on: the stream route, its `output_format` query and raw audio stream
//! (<https://elevenlabs.io/docs/api-reference/text-to-speech/stream>); the 429 codes and plan
//! limits (<https://help.elevenlabs.io/hc/en-us/articles/19571824571921-API-Error-Code-429>);
//! the two concurrency headers (docs/VENDORS.md, "Streaming" and "elevenlabs"; when the real API
//! sends them on success is unverified).

use std::sync::Arc;

use axum::{
    Router,
    body::Bytes,
    extract::{Path, RawQuery, State},
    http::{HeaderMap, HeaderValue, StatusCode, Uri},
    response::Response,
    routing::post,
};
use serde_json::Value;

use super::{
    audio::Encoding,
    control::{Admission, Mode, Shared},
    knobs::Fault,
    stream::{self, Framed},
    wire,
};

pub(super) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/v1/text-to-speech/{voice_id}", post(convert))
        .route("/v1/text-to-speech/{voice_id}/stream", post(convert_stream))
        .merge(crate::cloning::elevenlabs::routes())
}

fn fault_response(fault: &Fault, cap: u32) -> Response {
    match fault {
        Fault::RateLimited { retry_after_secs } => {
            let mut response = super::with_retry_after(
                wire::elevenlabs_detail(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limit_error",
                    "too_many_concurrent_requests",
                    "Too many concurrent requests for this plan",
                ),
                *retry_after_secs,
            );
            response
                .headers_mut()
                .insert("current-concurrent-requests", HeaderValue::from(cap));
            response
                .headers_mut()
                .insert("maximum-concurrent-requests", HeaderValue::from(cap));
            response
        }
        Fault::Busy => wire::elevenlabs_detail(
            StatusCode::TOO_MANY_REQUESTS,
            "service_unavailable",
            "system_busy",
            "The system is busy",
        ),
        Fault::ServerError => super::bare_503(),
        Fault::Unauthorized => wire::elevenlabs_detail(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid_api_key",
            "Invalid API key",
        ),
        Fault::QuotaExhausted => wire::elevenlabs_detail(
            StatusCode::UNAUTHORIZED,
            "quota_error",
            "quota_exceeded",
            "This request exceeds your quota",
        ),
        Fault::InvalidText => wire::elevenlabs_detail(
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_error",
            "invalid_text",
            "text is invalid",
        ),
        Fault::ErrorIn200 => wire::elevenlabs_detail(
            StatusCode::OK,
            "rate_limit_error",
            "too_many_concurrent_requests",
            "Too many concurrent requests for this plan",
        ),
    }
}

/// `(encoding, rate, content type)` of an `output_format`.
fn output_format(query: Option<&str>) -> Result<(Encoding, u32, &'static str), String> {
    let format = query
        .unwrap_or_default()
        .split('&')
        .find_map(|pair| pair.strip_prefix("output_format="))
        .unwrap_or("mp3_44100_128");
    match format {
        "mp3_22050_32" => Ok((Encoding::Mp3, 22_050, "audio/mpeg")),
        "mp3_44100_32" | "mp3_44100_64" | "mp3_44100_96" | "mp3_44100_128" | "mp3_44100_192" => {
            Ok((Encoding::Mp3, 44_100, "audio/mpeg"))
        }
        pcm => match pcm.strip_prefix("pcm_").and_then(|r| r.parse::<u32>().ok()) {
            Some(r @ (8_000 | 16_000 | 22_050 | 24_000 | 44_100 | 48_000)) => {
                Ok((Encoding::Pcm, r, "audio/pcm"))
            }
            _ => Err(format!("output_format {format:?} is not supported")),
        },
    }
}

/// The `text` of a valid body.
fn validate(body: &[u8]) -> Result<String, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    super::only_fields(
        &v,
        "body",
        &[
            "text",
            "model_id",
            "voice_settings",
            "language_code",
            "seed",
            "previous_text",
            "next_text",
            "pronunciation_dictionary_locators",
            "apply_text_normalization",
        ],
    )?;
    let text = super::required_str(&v, "text")?.to_owned();
    if let Some(settings) = v.get("voice_settings") {
        super::only_fields(
            settings,
            "voice_settings",
            &[
                "stability",
                "similarity_boost",
                "style",
                "use_speaker_boost",
                "speed",
            ],
        )?;
        for field in ["stability", "similarity_boost", "style"] {
            super::number_in(settings, field, 0.0, 1.0)?;
        }
        super::number_in(settings, "speed", 0.7, 1.2)?;
        if settings
            .get("use_speaker_boost")
            .is_some_and(|b| !b.is_boolean())
        {
            return Err("voice_settings.use_speaker_boost must be a boolean".into());
        }
    }
    Ok(text)
}

async fn convert(
    State(shared): State<Arc<Shared>>,
    Path(voice_id): Path<String>,
    RawQuery(query): RawQuery,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = Speech {
        mode: Mode::Document,
        voice_id,
        query,
        uri,
        headers,
        body,
    };
    speech(shared, request).await
}

async fn convert_stream(
    State(shared): State<Arc<Shared>>,
    Path(voice_id): Path<String>,
    RawQuery(query): RawQuery,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = Speech {
        mode: Mode::Stream,
        voice_id,
        query,
        uri,
        headers,
        body,
    };
    speech(shared, request).await
}

/// A request of either route: `mode` is how it delivers its audio.
struct Speech {
    mode: Mode,
    voice_id: String,
    query: Option<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
}

async fn speech(shared: Arc<Shared>, request: Speech) -> Response {
    let Speech {
        mode,
        voice_id,
        query,
        uri,
        headers,
        body,
    } = request;
    let Some(key) = super::header_str(&headers, "xi-api-key").map(str::to_owned) else {
        return wire::elevenlabs_detail(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "missing_api_key",
            "xi-api-key is required",
        );
    };
    if !shared.key_allowed(&key) {
        return fault_response(&Fault::Unauthorized, 0);
    }
    let cap = shared.settings().cap;
    let slot = match shared.enter(&key) {
        Admission::OverCap(_slot, fault) => return fault_response(&fault, cap),
        Admission::Admitted(slot) => slot,
    };
    super::record(&shared, &key, &uri, &headers, &body);
    if let Some(refused) = crate::cloning::elevenlabs::refusal(&shared, &key, &voice_id) {
        return refused;
    }
    let (encoding, rate, content_type) = match output_format(query.as_deref()) {
        Ok(f) => f,
        Err(m) => {
            return wire::elevenlabs_detail(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "invalid_output_format",
                &m,
            );
        }
    };
    let text = match validate(&body) {
        Ok(t) => t,
        Err(m) => {
            return wire::elevenlabs_detail(
                StatusCode::UNPROCESSABLE_ENTITY,
                "validation_error",
                "invalid_request",
                &m,
            );
        }
    };
    slot.bill(&crate::billing::elevenlabs_voice(uri.path()), &text);
    let delivery = match shared.proceed(&slot, mode).await {
        Ok(d) => d,
        Err(fault) => return fault_response(&fault, cap),
    };
    let current = shared.key_stats(&key).admitted_in_flight;
    match super::render(&shared, encoding, rate, &text) {
        Ok(bytes) => {
            let framed = Framed::raw(&delivery.cut(&bytes, 1));
            let mut response =
                stream::respond(Arc::clone(&shared), slot, delivery, content_type, framed);
            let h = response.headers_mut();
            h.insert("current-concurrent-requests", HeaderValue::from(current));
            // What ElevenLabs bills the call: one credit per character of its text.
            h.insert(
                "character-cost",
                HeaderValue::from(text.chars().count() as u64),
            );
            if cap > 0 {
                h.insert("maximum-concurrent-requests", HeaderValue::from(cap));
            }
            response
        }
        Err(e) => super::internal(e),
    }
}
