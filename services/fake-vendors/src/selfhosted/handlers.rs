//! The five servers' synthesis routes (module doc of [`super`]): each parses its profile's
//! request, checks the clip arrived as that server takes it, then answers through
//! [`super::answer`].

use std::sync::Arc;

use axum::{
    body::Bytes,
    extract::{FromRequest, Multipart, Request, State},
    http::{HeaderMap, Uri},
    response::Response,
    routing::{MethodRouter, post},
};
use serde_json::Value;
use voxpool_domain::audio::clip;

use super::{ServerProfile, admit, answer, bad, checked_clip, decode_base64, json_body};
use crate::{audio::Encoding, control::Shared, wire as fields};

/// What a request asked for.
pub(crate) struct Ask {
    /// The text to speak.
    pub(crate) text: String,
    /// The digest of the clip it carried (empty for a server-side voice).
    pub(crate) sha: String,
    /// It asked for a streamed answer (vLLM-Omni `stream_format: "audio"`, Fish Speech
    /// `streaming`, GPT-SoVITS `streaming_mode`).
    pub(crate) stream: bool,
}

type Parsed = Result<Ask, String>;

/// The one path of the JSON profiles: admitted under the cap, parsed by `parse`, answered as
/// WAV at `rate`, or refused with the profile's 400.
async fn json_route(
    shared: Arc<Shared>,
    profile: ServerProfile,
    (uri, headers, body): (Uri, HeaderMap, Bytes),
    parse: fn(&Value) -> Parsed,
    rate: u32,
) -> Response {
    let slot = match admit(&shared, profile, &headers).await {
        Ok(slot) => slot,
        Err(r) => return r,
    };
    match json_body(&body).and_then(|v| parse(&v)) {
        Ok(ask) => {
            let request = (&uri, &headers, &body[..]);
            answer(&shared, profile, slot, request, &ask, (Encoding::Wav, rate)).await
        }
        Err(m) => bad(profile, &m),
    }
}

pub(super) fn vllm_omni_request(v: &Value) -> Parsed {
    let input = fields::required_str(v, "input")?.to_owned();
    if v["response_format"].as_str().unwrap_or("wav") != "wav" {
        return Err("this fake answers response_format wav only".to_owned());
    }
    let stream = v["stream_format"].as_str() == Some("audio");
    if !stream && (v["stream"].as_bool() == Some(true) || v.get("stream_format").is_some()) {
        return Err(
            "this fake streams with stream_format \"audio\" only (the SSE form is not served)"
                .to_owned(),
        );
    }
    if stream
        && v["speed"]
            .as_f64()
            .is_some_and(|s| (s - 1.0).abs() > f64::EPSILON)
    {
        return Err(
            "Speed adjustment is not supported when streaming. Set speed=1.0 or omit it."
                .to_owned(),
        );
    }
    let sha = match v.get("ref_audio").and_then(Value::as_str) {
        Some(uri) => {
            let (head, data) = uri
                .split_once(',')
                .ok_or("ref_audio must be a data: URI (data:<type>;base64,<bytes>)")?;
            if !head.starts_with("data:audio/") || !head.ends_with(";base64") {
                return Err(format!(
                    "ref_audio must be data:audio/...;base64, got {head:?}"
                ));
            }
            fields::required_str(v, "ref_text")?;
            checked_clip(&decode_base64("ref_audio", data)?, (1_000, 30_000))?
        }
        None => {
            fields::required_str(v, "voice")?;
            String::new()
        }
    };
    Ok(Ask {
        text: input,
        sha,
        stream,
    })
}

pub(super) fn fish_request(v: &Value) -> Parsed {
    let text = fields::required_str(v, "text")?.to_owned();
    let stream = v["streaming"].as_bool().unwrap_or(false);
    if stream && v["format"].as_str().unwrap_or("wav") != "wav" {
        return Err("Streaming only supports WAV format".to_owned());
    }
    let sha = match v.get("references").and_then(Value::as_array) {
        Some(refs) if !refs.is_empty() => {
            let first = &refs[0];
            fields::required_str(first, "text")?;
            let audio = fields::required_str(first, "audio")?;
            checked_clip(
                &decode_base64("references[0].audio", audio)?,
                (1_000, 30_000),
            )?
        }
        _ => {
            fields::required_str(v, "reference_id")?;
            String::new()
        }
    };
    Ok(Ask { text, sha, stream })
}

/// A clip named by a path on this machine (the path profiles).
fn clip_at(path: &str, window_ms: (u32, u32)) -> Result<String, String> {
    if path.is_empty() {
        return Err("the reference audio path is empty".into());
    }
    let bytes =
        std::fs::read(path).map_err(|e| format!("cannot read reference audio {path}: {e}"))?;
    checked_clip(&bytes, window_ms)
}

pub(super) fn index_tts_request(v: &Value) -> Parsed {
    let text = fields::required_str(v, "text")?.to_owned();
    let sha = clip_at(fields::required_str(v, "spk_audio_path")?, (1_000, 15_000))?;
    Ok(Ask {
        text,
        sha,
        stream: false,
    })
}

pub(super) fn gpt_sovits_request(v: &Value) -> Parsed {
    let text = fields::required_str(v, "text")?.to_owned();
    for field in ["text_lang", "prompt_lang", "prompt_text"] {
        fields::required_str(v, field)?;
    }
    if v["media_type"].as_str() != Some("wav") {
        return Err("this fake answers media_type wav only".to_owned());
    }
    let stream = match &v["streaming_mode"] {
        Value::Null | Value::Bool(false) => false,
        Value::Bool(true) => true,
        Value::Number(n) if n.as_u64().is_some_and(|m| m <= 3) => n.as_u64() != Some(0),
        _ => {
            return Err(
                "the value of streaming_mode must be 0, 1, 2, 3(int) or true/false(bool)"
                    .to_owned(),
            );
        }
    };
    let sha = clip_at(fields::required_str(v, "ref_audio_path")?, (3_000, 10_000)).map_err(|e| {
        format!("Reference audio is outside the 3~10 seconds range, please choose another one! ({e})")
    })?;
    Ok(Ask { text, sha, stream })
}

/// The route of a JSON profile: [`json_route`] with that profile's parser and answer rate.
pub(super) fn json(
    profile: ServerProfile,
    parse: fn(&Value) -> Parsed,
    rate: u32,
) -> MethodRouter<Arc<Shared>> {
    post(
        move |State(shared): State<Arc<Shared>>, uri: Uri, headers: HeaderMap, body: Bytes| {
            json_route(shared, profile, (uri, headers, body), parse, rate)
        },
    )
}

pub(super) async fn cosyvoice(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    request: Request,
) -> Response {
    let profile = ServerProfile::CosyVoice;
    let slot = match admit(&shared, profile, &headers).await {
        Ok(slot) => slot,
        Err(r) => return r,
    };
    let mut form = match Multipart::from_request(request, &()).await {
        Ok(form) => form,
        Err(e) => return bad(profile, &format!("not a multipart form: {e}")),
    };
    let (mut tts_text, mut prompt_text, mut prompt_wav) = (None, None, None);
    loop {
        match form.next_field().await {
            Ok(Some(field)) => {
                let name = field.name().unwrap_or_default().to_owned();
                let Ok(data) = field.bytes().await else {
                    return bad(profile, "a form field could not be read");
                };
                match name.as_str() {
                    "tts_text" => tts_text = Some(String::from_utf8_lossy(&data).into_owned()),
                    "prompt_text" => {
                        prompt_text = Some(String::from_utf8_lossy(&data).into_owned());
                    }
                    "prompt_wav" => prompt_wav = Some(data),
                    other => return bad(profile, &format!("unexpected form field {other:?}")),
                }
            }
            Ok(None) => break,
            Err(e) => return bad(profile, &format!("bad multipart body: {e}")),
        }
    }
    let (Some(text), Some(_), Some(wav)) = (
        tts_text,
        prompt_text.filter(|t| !t.trim().is_empty()),
        prompt_wav,
    ) else {
        return bad(profile, "tts_text, prompt_text and prompt_wav are required");
    };
    if clip::ClipFormat::sniff(&wav) != Some(clip::ClipFormat::Wav) {
        return bad(profile, "prompt_wav must be a WAV file");
    }
    let sha = match checked_clip(&wav, (1_000, 30_000)) {
        Ok(sha) => sha,
        Err(m) => return bad(profile, &m),
    };
    let ask = Ask {
        text,
        sha,
        stream: false,
    };
    answer(
        &shared,
        profile,
        slot,
        (&uri, &headers, &[]),
        &ask,
        (Encoding::Pcm, 22_050),
    )
    .await
}
