//! The wire profiles of the self-hosted zero-shot servers: which route, which fields, how the
//! reference clip travels, what comes back. Facts from each project's server code and docs
//! (docs/VENDORS.md, "selfhosted", lists the sources and what a failure
//! looks like).
//!
//! | profile | route | the clip travels | answer |
//! |---|---|---|---|
//! | `vllm-omni` | `POST /v1/audio/speech` (OpenAI fields + `ref_audio`, `ref_text`, `task_type`, `language`, `seed`) | inline, a `data:` URI | WAV |
//! | `cosyvoice` | `POST /inference_zero_shot` multipart `tts_text`, `prompt_text`, file `prompt_wav` | uploaded per call (as 16-bit WAV) | headerless 16-bit mono PCM at the model's rate (`sample_rate_hz`, default 22050) |
//! | `fish-speech` | `POST /v1/tts` JSON `text`, `references: [{audio, text}]` (audio base64), `format`, `seed` | inline | WAV |
//! | `index-tts-vllm` | `POST /tts_url` JSON `text`, `spk_audio_path` | a path on the server: the adapter writes the clip into `clip_dir` (shared with the server), named by digest, and sends `server_clip_dir/<hex>.wav` | WAV |
//! | `gpt-sovits` | `POST /tts` JSON `text`, `text_lang`, `ref_audio_path`, `prompt_text`, `prompt_lang`, `media_type`, `streaming_mode` | a server path, as for index-tts-vllm; the clip must last 3..10 s | WAV |
//!
//! Streaming ([`Profile::can_stream`]): vLLM-Omni `stream: true` + `stream_format: "audio"`
//! (raw WAV bytes as decoded; only without `speed`), Fish Speech `streaming: true`, GPT-SoVITS
//! `streaming_mode: true`: each answers a WAV header (sizes 0 or placeholders) and then 16-bit
//! PCM as it is generated. CosyVoice's server and index-tts-vllm have no such switch.

use std::path::PathBuf;

use base64::Engine as _;
use serde_json::{Value, json};
use voxpool_domain::{audio::clip, contract::Outcome, secret::Secret};

use super::{PROVIDER, Target};
use crate::adapters::{ReferenceAudio, VendorFailure, VendorRequest, http};

/// A server's wire profile (the upstream's `params.profile`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// vLLM-Omni's OpenAI-style speech route (CosyVoice3, Fish S2, Qwen3-TTS, IndexTTS).
    VllmOmni,
    /// CosyVoice's FastAPI server.
    CosyVoice,
    /// Fish Speech's `tools/api_server.py`.
    FishSpeech,
    /// IndexTTS 2 behind index-tts-vllm.
    IndexTtsVllm,
    /// GPT-SoVITS `api_v2.py`.
    GptSovits,
}

impl Profile {
    /// Every profile, in docs order.
    pub const ALL: [Profile; 5] = [
        Profile::VllmOmni,
        Profile::CosyVoice,
        Profile::FishSpeech,
        Profile::IndexTtsVllm,
        Profile::GptSovits,
    ];

    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::VllmOmni => "vllm-omni",
            Profile::CosyVoice => "cosyvoice",
            Profile::FishSpeech => "fish-speech",
            Profile::IndexTtsVllm => "index-tts-vllm",
            Profile::GptSovits => "gpt-sovits",
        }
    }

    /// The profile `name` spells.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == name)
    }

    /// The server's health route, if it has one (the others are probed by asking `/` for any
    /// HTTP answer).
    pub fn health_path(self) -> Option<&'static str> {
        match self {
            Profile::VllmOmni | Profile::IndexTtsVllm => Some("/health"),
            Profile::FishSpeech => Some("/v1/health"),
            Profile::CosyVoice | Profile::GptSovits => None,
        }
    }

    /// Whether the server can speak only from a reference clip.
    pub fn needs_clip(self) -> bool {
        matches!(
            self,
            Profile::CosyVoice | Profile::IndexTtsVllm | Profile::GptSovits
        )
    }

    /// The clip durations the server accepts, in ms (docs/VENDORS.md).
    pub fn clip_window_ms(self) -> (u32, u32) {
        match self {
            Profile::GptSovits => (3_000, 10_000),
            Profile::IndexTtsVllm => (1_000, 15_000),
            _ => (1_000, 30_000),
        }
    }

    /// Whether the answer is headerless PCM (else WAV).
    pub fn answers_raw_pcm(self) -> bool {
        self == Profile::CosyVoice
    }

    /// Whether the server can be asked to send its audio as it generates it (module doc).
    pub fn can_stream(self) -> bool {
        matches!(
            self,
            Profile::VllmOmni | Profile::FishSpeech | Profile::GptSovits
        )
    }

    /// The rate (Hz) of a streamed answer that comes without a WAV header, unless the upstream
    /// sets `params.sample_rate_hz`: the model's usual rate.
    pub fn default_rate(self) -> u32 {
        match self {
            Profile::FishSpeech => 44_100,
            Profile::GptSovits => 32_000,
            Profile::CosyVoice => 22_050,
            Profile::VllmOmni | Profile::IndexTtsVllm => 24_000,
        }
    }
}

/// The language name vLLM-Omni expects (`English`, `Chinese`, …) for a BCP 47 tag; `Auto`
/// for the others.
fn language_name(tag: &str) -> &'static str {
    match tag.split('-').next().unwrap_or_default() {
        "en" => "English",
        "zh" => "Chinese",
        "ja" => "Japanese",
        "ko" => "Korean",
        "de" => "German",
        "fr" => "French",
        "es" => "Spanish",
        "it" => "Italian",
        "pt" => "Portuguese",
        "ru" => "Russian",
        _ => "Auto",
    }
}

/// GPT-SoVITS's language code (`zh`, `en`, `ja`, `ko`, `yue`, else `auto`).
fn sovits_language(tag: &str) -> &'static str {
    let lower = tag.to_ascii_lowercase();
    if lower.starts_with("yue") || lower == "zh-hk" {
        return "yue";
    }
    match lower.split('-').next().unwrap_or_default() {
        "zh" => "zh",
        "en" => "en",
        "ja" => "ja",
        "ko" => "ko",
        _ => "auto",
    }
}

fn data_uri(clip: &ReferenceAudio) -> String {
    format!(
        "data:{};base64,{}",
        clip.format.media_type(),
        base64::engine::general_purpose::STANDARD.encode(&clip.bytes)
    )
}

/// The language of the text to speak: the voice's first locale, else the clip's.
fn text_language<'a>(request: &'a VendorRequest<'_>, clip: Option<&'a ReferenceAudio>) -> &'a str {
    request
        .utterance
        .voice
        .locales
        .first()
        .map(String::as_str)
        .or(clip.map(|c| c.reference.language.as_str()))
        .unwrap_or("")
}

/// The JSON body of a profile that takes JSON (every one but `cosyvoice`); `clip_path` is the
/// clip's path on the server for the path profiles.
pub fn json_body(
    profile: Profile,
    request: &VendorRequest<'_>,
    target: &Target,
    clip: Option<&ReferenceAudio>,
    clip_path: Option<&str>,
) -> Value {
    let text = &request.utterance.text;
    match profile {
        Profile::VllmOmni => {
            let mut body = json!({
                "model": http::model_of(&request.utterance.voice, &request.utterance.pool_model),
                "input": text,
                "response_format": "wav",
            });
            if let Some(clip) = clip {
                body["task_type"] = json!("Base");
                body["ref_audio"] = json!(data_uri(clip));
                body["ref_text"] = json!(clip.reference.transcript);
            } else {
                body["voice"] = json!(request.utterance.voice.voice_id);
            }
            let language = text_language(request, clip);
            if !language.is_empty() {
                body["language"] = json!(language_name(language));
            }
            if let Some(speed) = target.speed {
                body["speed"] = json!(speed);
            }
            if target.stream {
                body["stream"] = json!(true);
                body["stream_format"] = json!("audio");
            }
            if let Some(seed) = request.utterance.seed {
                body["seed"] = json!(seed);
            }
            body
        }
        Profile::FishSpeech => {
            let mut body = json!({ "text": text, "format": "wav", "streaming": target.stream });
            match clip {
                Some(clip) => {
                    body["references"] = json!([{
                        "audio": base64::engine::general_purpose::STANDARD.encode(&clip.bytes),
                        "text": clip.reference.transcript,
                    }]);
                }
                None => body["reference_id"] = json!(request.utterance.voice.voice_id),
            }
            if let Some(seed) = request.utterance.seed {
                body["seed"] = json!(seed);
            }
            body
        }
        Profile::IndexTtsVllm => json!({
            "text": text,
            "spk_audio_path": clip_path.unwrap_or_default(),
        }),
        Profile::GptSovits => {
            let (prompt_text, prompt_lang) = clip.map_or(("", "auto"), |c| {
                (
                    c.reference.transcript.as_str(),
                    sovits_language(&c.reference.language),
                )
            });
            let mut body = json!({
                "text": text,
                "text_lang": sovits_language(text_language(request, clip)),
                "ref_audio_path": clip_path.unwrap_or_default(),
                "prompt_text": prompt_text,
                "prompt_lang": prompt_lang,
                "media_type": "wav",
                "streaming_mode": target.stream,
            });
            if let Some(speed) = target.speed {
                body["speed_factor"] = json!(speed);
            }
            if let Some(seed) = request.utterance.seed {
                body["seed"] = json!(seed);
            }
            body
        }
        Profile::CosyVoice => Value::Null,
    }
}

/// CosyVoice's multipart form: the text, the clip's transcript and the clip as 16-bit WAV.
/// Errors: a clip that cannot be turned into WAV (`CLIENT_ERROR`: the clip, not the server).
pub fn cosyvoice_form(
    request: &VendorRequest<'_>,
    clip: &ReferenceAudio,
) -> Result<reqwest::multipart::Form, VendorFailure> {
    let wav = clip::to_wav(&clip.bytes).map_err(|e| {
        http::failure(
            PROVIDER,
            voxpool_domain::contract::Outcome::ClientError,
            None,
            None,
            format!("reference clip {} {e}", clip.reference.digest),
            None,
        )
    })?;
    let part = reqwest::multipart::Part::bytes(wav)
        .file_name("prompt.wav")
        .mime_str("audio/wav")
        .map_err(|e| http::upstream_config_failure(PROVIDER, e.to_string()))?;
    Ok(reqwest::multipart::Form::new()
        .text("tts_text", request.utterance.text.clone())
        .text("prompt_text", clip.reference.transcript.clone())
        .part("prompt_wav", part))
}

/// The route of a profile under the server's base URL.
pub fn route(profile: Profile) -> &'static str {
    match profile {
        Profile::VllmOmni => "/v1/audio/speech",
        Profile::CosyVoice => "/inference_zero_shot",
        Profile::FishSpeech => "/v1/tts",
        Profile::IndexTtsVllm => "/tts_url",
        Profile::GptSovits => "/tts",
    }
}

/// Writes the clip (as 16-bit WAV) into the upstream's `clip_dir`, named by its digest, unless
/// there; answers its path as the server sees it (`server_clip_dir`, default `clip_dir`).
/// Errors: no `clip_dir` (the profile cannot be sent a clip: `UPSTREAM_ERROR` naming the
/// setting), a directory that cannot be written.
pub fn place_clip(
    upstream: &crate::adapters::UpstreamTarget,
    clip: &ReferenceAudio,
) -> Result<String, VendorFailure> {
    let dir = http::upstream_str(&upstream.params, "clip_dir").ok_or_else(|| {
        http::upstream_config_failure(
            PROVIDER,
            format!(
                "upstream {} takes its reference clip as a path on the server: set params.clip_dir (a directory this replica writes and the server reads) and, if the server mounts it elsewhere, params.server_clip_dir",
                upstream.id
            ),
        )
    })?;
    let hex = clip.reference.hex().unwrap_or("clip");
    let name = format!("{hex}.wav");
    let path = PathBuf::from(dir).join(&name);
    if !path.exists() {
        let wav = clip::to_wav(&clip.bytes).map_err(|e| {
            http::failure(
                PROVIDER,
                Outcome::ClientError,
                None,
                None,
                format!("reference clip {} {e}", clip.reference.digest),
                None,
            )
        })?;
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(dir)?;
            let temp = PathBuf::from(dir).join(format!(".{name}.{}", rand::random::<u64>()));
            std::fs::write(&temp, &wav)?;
            std::fs::rename(&temp, &path)
        };
        write().map_err(|e| {
            http::upstream_config_failure(
                PROVIDER,
                format!(
                    "cannot write the clip into upstream {}'s clip_dir {dir}: {e}",
                    upstream.id
                ),
            )
        })?;
    }
    let server_dir = http::upstream_str(&upstream.params, "server_clip_dir").unwrap_or(dir);
    Ok(format!("{}/{name}", server_dir.trim_end_matches('/')))
}

/// An error answer: 5xx the server's, 4xx the request's; GPT-SoVITS answers every failure 400,
/// so its message decides.
pub fn classify(
    profile: Profile,
    reply: &http::HttpReply,
    secret: Option<&Secret>,
) -> VendorFailure {
    let status = reply.status.as_u16();
    let text = String::from_utf8_lossy(&reply.body[..reply.body.len().min(2_000)]).to_lowercase();
    let server_side = [
        "cuda",
        "out of memory",
        "oom",
        "model not loaded",
        "loading",
        "traceback",
    ];
    let outcome = match status {
        400 if profile == Profile::GptSovits && server_side.iter().any(|w| text.contains(w)) => {
            Outcome::UpstreamError
        }
        401 | 403 => Outcome::KeyInvalid,
        400..=499 => Outcome::ClientError,
        _ => Outcome::UpstreamError,
    };
    let doc: serde_json::Value = serde_json::from_slice(&reply.body).unwrap_or_default();
    let message = doc["detail"]
        .as_str()
        .or_else(|| doc["message"].as_str())
        .or_else(|| doc["error"]["message"].as_str())
        .unwrap_or_default();
    http::ErrorAnswer::of(reply, String::new(), message, Some(outcome)).failure(PROVIDER, secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_round_trip_through_their_names() {
        for p in Profile::ALL {
            assert_eq!(Profile::parse(p.as_str()), Some(p));
        }
        assert_eq!(Profile::parse("vllm"), None);
    }

    #[test]
    fn languages_map_to_each_servers_spelling() {
        assert_eq!(language_name("en-US"), "English");
        assert_eq!(language_name("zh-CN"), "Chinese");
        assert_eq!(language_name("sw"), "Auto");
        assert_eq!(sovits_language("ja-JP"), "ja");
        assert_eq!(sovits_language("yue-HK"), "yue");
        assert_eq!(sovits_language("fr-FR"), "auto");
    }
}
