//! Fake self-hosted zero-shot servers, one wire profile each (docs/VENDORS.md,
//! "selfhosted"): vLLM-Omni `POST /v1/audio/speech` (`ref_audio` as a `data:` URI +
//! `ref_text`, or a server-side `voice`), CosyVoice `POST /inference_zero_shot` (multipart
//! `tts_text`, `prompt_text`, file `prompt_wav`; answers headerless 16-bit PCM at 22050 Hz),
//! Fish Speech `POST /v1/tts` (JSON `references: [{audio: base64, text}]` or `reference_id`),
//! index-tts-vllm `POST /tts_url` (`spk_audio_path`, a file on this machine), GPT-SoVITS
//! `POST /tts` (`ref_audio_path` of a 3..10 s clip, `prompt_text`, `text_lang`, …; every
//! failure an HTTP 400, like the real server).
//!
//! Each checks that the reference arrived the way its profile sends it: the clip decodes
//! (`voxpool_domain::audio::clip::inspect`) and its transcript is there. The SHA-256 of the
//! clip it received is recorded as the request header `x-fake-reference-sha256` (see
//! [`crate::FakeVendor::requests`]), so a test can tell which clip a call spoke with.
//!
//! A server is one key: the cap ([`crate::FakeConfig::cap`]) is per server, counted under the
//! key `server` whatever credential is presented (a bearer token, when the fake has
//! [`crate::FakeConfig::valid_keys`], must be one of them). Over the cap it answers 503 (a
//! loaded server). Faults: scripted or random [`Fault::ServerError`] is a 500 with a traceback
//! (GPT-SoVITS: a 400 naming CUDA); [`crate::FakeVendor::set_down`] makes every route,
//! health included, answer 503 (a model reloading); [`crate::FakeVendor::pause`] stalls
//! admitted requests (a backed-up queue). Health: `/health` (vLLM-Omni, index-tts-vllm),
//! `/v1/health` (Fish Speech); CosyVoice and GPT-SoVITS have none (their `/` answers 404).
//!
//! Streaming, as each server does it when asked: vLLM-Omni `stream_format: "audio"` (a WAV
//! header with `0xFFFFFFFF` sizes), Fish Speech `streaming: true` and GPT-SoVITS
//! `streaming_mode` true or 1..3 (a WAV header whose sizes are 0, as Python's `wave` writes
//! it), then the 16-bit samples, paced on the [`crate::Streaming`] timeline (first piece after
//! `first_byte`). An unstreamed answer is whole: it waits [`crate::FakeConfig::per_char`] per
//! character of its text on top of its latency (or of `first_byte + rest`), as a GPU server's
//! generation time grows with its text. CosyVoice and index-tts-vllm never stream.

mod handlers;

use std::sync::Arc;

use axum::{
    Router,
    extract::State,
    http::{HeaderMap, StatusCode, Uri},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use base64::Engine as _;
use serde_json::{Value, json};
use voxpool_domain::{
    audio::{
        clip::{self, ClipLimits},
        wav,
    },
    reference::clip_digest,
};

use crate::{
    audio::Encoding,
    control::{Admission, Mode, Shared},
    knobs::Fault,
};

/// The recorded header that carries the digest of the clip a request brought.
pub const REFERENCE_HEADER: &str = "x-fake-reference-sha256";

/// The key every request of a server is counted under.
pub const SERVER_KEY: &str = "server";

/// A self-hosted server's wire profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ServerProfile {
    /// vLLM-Omni's speech route.
    VllmOmni,
    /// CosyVoice's FastAPI server.
    CosyVoice,
    /// Fish Speech's API server.
    FishSpeech,
    /// index-tts-vllm.
    IndexTtsVllm,
    /// GPT-SoVITS `api_v2.py`.
    GptSovits,
}

impl ServerProfile {
    /// Every profile.
    pub const ALL: [ServerProfile; 5] = [
        ServerProfile::VllmOmni,
        ServerProfile::CosyVoice,
        ServerProfile::FishSpeech,
        ServerProfile::IndexTtsVllm,
        ServerProfile::GptSovits,
    ];

    /// The profile name as synthesis's config spells it (`vllm-omni`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ServerProfile::VllmOmni => "vllm-omni",
            ServerProfile::CosyVoice => "cosyvoice",
            ServerProfile::FishSpeech => "fish-speech",
            ServerProfile::IndexTtsVllm => "index-tts-vllm",
            ServerProfile::GptSovits => "gpt-sovits",
        }
    }
}

/// What a fake answers at: the profile's synthesis route and health route.
pub(super) fn routes(profile: ServerProfile) -> Router<Arc<Shared>> {
    match profile {
        ServerProfile::VllmOmni => Router::new()
            .route(
                "/v1/audio/speech",
                handlers::json(profile, handlers::vllm_omni_request, 24_000),
            )
            .route("/health", get(health)),
        ServerProfile::CosyVoice => {
            Router::new().route("/inference_zero_shot", post(handlers::cosyvoice))
        }
        ServerProfile::FishSpeech => Router::new()
            .route(
                "/v1/tts",
                handlers::json(profile, handlers::fish_request, 44_100),
            )
            .route("/v1/health", get(health)),
        ServerProfile::IndexTtsVllm => Router::new()
            .route(
                "/tts_url",
                handlers::json(profile, handlers::index_tts_request, 24_000),
            )
            .route("/health", get(health)),
        ServerProfile::GptSovits => Router::new().route(
            "/tts",
            handlers::json(profile, handlers::gpt_sovits_request, 32_000),
        ),
    }
}

fn down_answer() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        axum::Json(json!({"detail": "model is loading"})),
    )
        .into_response()
}

async fn health(State(shared): State<Arc<Shared>>) -> Response {
    if shared.is_down() {
        return down_answer();
    }
    (StatusCode::OK, axum::Json(json!({"status": "ok"}))).into_response()
}

pub(super) fn bad(profile: ServerProfile, message: &str) -> Response {
    let status = StatusCode::BAD_REQUEST;
    let body = match profile {
        ServerProfile::GptSovits => json!({"message": message, "exception": message}),
        _ => json!({"detail": message}),
    };
    (status, axum::Json(body)).into_response()
}

fn fault_answer(profile: ServerProfile, fault: &Fault) -> Response {
    match (profile, fault) {
        (ServerProfile::GptSovits, _) => bad(profile, "tts failed: CUDA out of memory"),
        (_, Fault::Unauthorized) => (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"detail": "Invalid token"})),
        )
            .into_response(),
        _ => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "Traceback (most recent call last):\n  RuntimeError: CUDA error: device-side assert triggered",
        )
            .into_response(),
    }
}

/// The clip bytes checked like the profile's server would use them: they decode and last
/// `window_ms`. Answers the clip's digest.
pub(super) fn checked_clip(bytes: &[u8], window_ms: (u32, u32)) -> Result<String, String> {
    let info =
        clip::inspect(bytes, ClipLimits::CATALOG).map_err(|e| format!("reference audio {e}"))?;
    if info.duration_ms < window_ms.0 || info.duration_ms > window_ms.1 {
        return Err(format!(
            "reference audio is {} ms, outside {}..{} ms",
            info.duration_ms, window_ms.0, window_ms.1
        ));
    }
    Ok(clip_digest(bytes))
}

pub(super) fn decode_base64(field: &str, raw: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(raw)
        .map_err(|e| format!("{field} is not base64: {e}"))
}

/// Where a request is in its life: admitted under the server's cap, or already answered.
pub(super) async fn admit(
    shared: &Arc<Shared>,
    profile: ServerProfile,
    headers: &HeaderMap,
) -> Result<super::control::Slot, Response> {
    if let Some(token) = crate::wire::bearer(headers)
        && !shared.key_allowed(&token)
    {
        return Err(fault_answer(profile, &Fault::Unauthorized));
    }
    if crate::wire::bearer(headers).is_none() && shared.settings().valid_keys.is_some() {
        return Err(fault_answer(profile, &Fault::Unauthorized));
    }
    match shared.enter(SERVER_KEY) {
        Admission::OverCap(_slot, _) => Err((
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"detail": "server busy"})),
        )
            .into_response()),
        // A server that is down still saw the request (it counts), then fails it.
        Admission::Admitted(_slot) if shared.is_down() => Err(down_answer()),
        Admission::Admitted(slot) => Ok(slot),
    }
}

/// Records the request (with the clip's digest as `x-fake-reference-sha256`), waits its
/// latency or fault, and answers audio in `encoding` at `rate` Hz, streamed when asked.
pub(super) async fn answer(
    shared: &Arc<Shared>,
    profile: ServerProfile,
    slot: super::control::Slot,
    request: (&Uri, &HeaderMap, &[u8]),
    ask: &handlers::Ask,
    (encoding, rate): (Encoding, u32),
) -> Response {
    let (uri, headers, body) = request;
    let text = ask.text.as_str();
    let mut recorded = headers.clone();
    if let Ok(value) = ask.sha.parse() {
        recorded.insert(REFERENCE_HEADER, value);
    }
    crate::wire::record(shared, SERVER_KEY, uri, &recorded, body);
    let mode = if ask.stream {
        Mode::Stream
    } else {
        let chars = u32::try_from(text.chars().count()).unwrap_or(u32::MAX);
        tokio::time::sleep(shared.settings().per_char.saturating_mul(chars)).await;
        Mode::Document
    };
    slot.bill("", text);
    let delivery = match shared.proceed(&slot, mode).await {
        Ok(delivery) => delivery,
        Err(fault) => return fault_answer(profile, &fault),
    };
    if shared.is_down() {
        slot.unbill();
        return down_answer();
    }
    if ask.stream {
        return streamed(shared, profile, slot, delivery, (rate, text));
    }
    match crate::wire::render(shared, encoding, rate, text) {
        Ok(bytes) => {
            shared.synthesized(&slot);
            shared.served(&slot);
            let content_type = if encoding == Encoding::Pcm {
                "application/octet-stream"
            } else {
                "audio/wav"
            };
            (StatusCode::OK, [("content-type", content_type)], bytes).into_response()
        }
        Err(e) => crate::wire::internal(e),
    }
}

/// A streamed answer (module doc): the profile's WAV header, then the samples in paced pieces.
fn streamed(
    shared: &Arc<Shared>,
    profile: ServerProfile,
    slot: super::control::Slot,
    delivery: crate::stream::Delivery,
    (rate, text): (u32, &str),
) -> Response {
    let spec = wav::WavSpec {
        channels: 1,
        sample_rate: rate,
        bits_per_sample: 16,
    };
    let header = match profile {
        ServerProfile::VllmOmni => wav::streaming_header(spec),
        _ => wav::write(spec, &[]),
    };
    let samples = crate::wire::render(shared, Encoding::Pcm, rate, text);
    match (header, samples) {
        (Ok(mut bytes), Ok(samples)) => {
            bytes.extend_from_slice(&samples);
            let framed = crate::stream::Framed::raw(&delivery.cut(&bytes, 1));
            crate::stream::respond(Arc::clone(shared), slot, delivery, "audio/wav", framed)
        }
        (Err(e), _) => crate::wire::internal(e.to_string()),
        (_, Err(e)) => crate::wire::internal(e),
    }
}

pub(super) fn json_body(body: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))
}
