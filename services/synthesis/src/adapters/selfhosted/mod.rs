//! `selfhosted`: the team's own GPU servers running zero-shot TTS (vLLM-Omni, CosyVoice, Fish
//! Speech, IndexTTS via index-tts-vllm, GPT-SoVITS). Each server is a key of a pool (its
//! `capacity` the syntheses it runs at once); the upstream's `params.profile` names its wire
//! format ([`profiles`]), `base_url` where it listens. A credential is optional: only servers
//! started with an API key need one (sent as `Authorization: Bearer`).
//!
//! # What a voice is here
//! A pack of this provider speaks from its reference clips (the snapshot's `references`, one
//! picked per request by `crate::job::prepare` and handed over as
//! [`VendorRequest::reference`]), or, without clips, from a voice the server already knows by
//! name (`voiceId`: vLLM-Omni's `voice`, Fish Speech's `reference_id`). CosyVoice, IndexTTS and
//! GPT-SoVITS speak only from a clip; a clip outside the profile's duration window (GPT-SoVITS
//! 3..10 s, IndexTTS 1..15 s) is refused before the server sees it.
//!
//! # Param conversion
//! | snapshot | wire | rule |
//! |---|---|---|
//! | `params.rate` | `speed` (vLLM-Omni), `speed_factor` (GPT-SoVITS) | 0.5..2.0; refused by the other profiles |
//! | `params.pitchPct`, `params.volumePct` | — | none of these servers has them: refused unless 0 |
//! | `extra.*` | — | refused |
//! | `WAV` / `PCM` | the server's WAV (its header kept, or stripped for PCM); CosyVoice's raw PCM (a header added for WAV) | `MP3` / `OGG_OPUS` refused: the servers are asked for WAV |
//! | `sample_rate_hz` | — | the model's own rate: any explicit rate is refused |
//!
//! # Failures (GPU servers fail as GPU servers do)
//! No server sends 429s: 5xx while a model reloads, read timeouts while its queue backs up, a
//! refused connection when it died. So 5xx and timeouts are `UPSTREAM_ERROR` / `TIMEOUT` (the
//! key cools with backoff; mark the upstream `queueing = true` to have timeouts teach an
//! adaptive key its real concurrency instead), 4xx are `CLIENT_ERROR` (the request's fault:
//! never cools the key), except GPT-SoVITS, whose every failure is a 400: its message decides
//! (a CUDA / memory / model error is the server's). After a failure on a key, this replica
//! asks the server's health route ([`profiles::Profile::health_path`], else any HTTP answer
//! at `/`) before it sends the key the next request (half-open): a server still down is
//! reported `UPSTREAM_ERROR` again, without a synthesis sent to it.
//!
//! # Streaming
//! A profile whose server can send audio as it generates it ([`Profile::can_stream`]) is asked
//! to, unless the upstream sets `params.stream = false` or (vLLM-Omni, which streams only at
//! speed 1) the voice sets a rate ([`streams`]). The streamed answer is relayed piece by piece
//! ([`answer`]); the call, and so its lease, lasts until the server's last byte (invariant 1).
//! A profile that does not stream answers whole, and `crate::job` gives such pools a short
//! first chunk instead.

mod answer;
pub mod profiles;

use std::{
    collections::HashSet,
    sync::{Mutex, PoisonError},
    time::Duration,
};

use async_trait::async_trait;
use reqwest::Client;
use voxpool_domain::{contract::Outcome, provider::Provider, snapshot::Snapshot};

use self::profiles::Profile;
use super::{
    AudioFormat, AudioSink, ParamError, ReferenceAudio, StreamEnd, TextLimit, VendorAdapter,
    VendorFailure, VendorRequest, http,
};

const PROVIDER: &str = Provider::SelfHosted.as_str();
/// How long a half-open health probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What of the upstream a call needs, read from its config.
#[derive(Clone, Debug)]
pub struct Target {
    /// The wire profile.
    pub profile: Profile,
    /// `speed`, when the voice sets a rate and the profile takes one.
    pub speed: Option<f64>,
    /// The server is asked to stream its answer ([`streams`]).
    pub stream: bool,
}

/// Whether a call of `voice` to `upstream` asks the server to stream (module doc).
pub fn streams(upstream: &super::UpstreamTarget, voice: &Snapshot) -> bool {
    let Some(profile) = http::upstream_str(&upstream.params, "profile").and_then(Profile::parse)
    else {
        return false;
    };
    let turned_off = upstream
        .params
        .get("stream")
        .and_then(serde_json::Value::as_bool)
        == Some(false);
    let speed_set = profile == Profile::VllmOmni && voice.params.rate.is_some();
    profile.can_stream() && !turned_off && !speed_set
}

/// `params.stream`, when set, must be a boolean. Errors: anything else (`UPSTREAM_ERROR`).
fn check_stream_param(upstream: &super::UpstreamTarget) -> Result<(), VendorFailure> {
    match upstream.params.get("stream") {
        None | Some(serde_json::Value::Bool(_)) => Ok(()),
        Some(other) => Err(http::upstream_config_failure(
            PROVIDER,
            format!(
                "upstream {} has params.stream = {other}: use true (stream where the server can) or false",
                upstream.id
            ),
        )),
    }
}

/// The self-hosted adapter (module doc).
#[derive(Debug)]
pub struct SelfHosted {
    client: Client,
    /// Keys whose last call here failed as a server failure: probed before their next call.
    suspect: Mutex<HashSet<String>>,
}

impl SelfHosted {
    /// An adapter sending through `client`.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            suspect: Mutex::new(HashSet::new()),
        }
    }

    fn suspects(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.suspect.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Half-open: a suspect key's server must answer its health route first.
    async fn probe(
        &self,
        request: &VendorRequest<'_>,
        base: &str,
        profile: Profile,
    ) -> Result<(), VendorFailure> {
        let url = format!("{base}{}", profile.health_path().unwrap_or("/"));
        let secret = request.key.secret.as_ref();
        let mut builder = self.client.get(&url).timeout(PROBE_TIMEOUT);
        if let Some(secret) = secret.filter(|s| !s.is_empty()) {
            builder = builder.bearer_auth(secret.expose());
        }
        let answered = builder.send().await;
        let healthy = match &answered {
            Ok(reply) if profile.health_path().is_some() => reply.status().is_success(),
            // No health route: any HTTP answer means the server process is up.
            Ok(_) => true,
            Err(_) => false,
        };
        if healthy {
            self.suspects().remove(&request.key.key_id);
            return Ok(());
        }
        let why = match answered {
            Ok(reply) => format!("HTTP {}", reply.status().as_u16()),
            Err(e) => {
                if e.is_timeout() {
                    "no answer in time".to_owned()
                } else if http::connection_refused(&e) {
                    "connection refused: is the server running?".to_owned()
                } else {
                    "connection failed".to_owned()
                }
            }
        };
        Err(http::failure(
            PROVIDER,
            Outcome::UpstreamError,
            None,
            None,
            format!(
                "server {} failed before and its health check at {} still fails ({why}): not sent",
                request.key.key_id,
                profile.health_path().unwrap_or("/")
            ),
            secret,
        ))
    }

    async fn call(
        &self,
        request: &VendorRequest<'_>,
        sink: &AudioSink,
    ) -> Result<StreamEnd, VendorFailure> {
        let upstream = request.upstream;
        let profile = profile_of(upstream)?;
        let base = upstream
            .base_url
            .as_deref()
            .map(|b| b.trim_end_matches('/').to_owned())
            .ok_or_else(|| {
                http::upstream_config_failure(
                    PROVIDER,
                    format!(
                        "upstream {} has no base_url: set the server's address",
                        upstream.id
                    ),
                )
            })?;
        check_stream_param(upstream)?;
        let target = Target {
            profile,
            speed: speed_for(profile, &request.utterance.voice)
                .map_err(|e| http::param_failure(PROVIDER, &e))?,
            stream: streams(upstream, &request.utterance.voice),
        };
        let clip = request.utterance.reference.as_deref();
        check_clip(profile, clip, &request.utterance.voice)
            .map_err(|e| http::param_failure(PROVIDER, &e))?;
        if self.suspects().contains(&request.key.key_id) {
            self.probe(request, &base, profile).await?;
        }
        let clip_path = match (profile, clip) {
            (Profile::IndexTtsVllm | Profile::GptSovits, Some(clip)) => {
                Some(profiles::place_clip(upstream, clip)?)
            }
            _ => None,
        };
        let secret = request.key.secret.as_ref().filter(|s| !s.is_empty());
        let url = format!("{base}{}", profiles::route(profile));
        let mut builder = self.client.post(&url);
        if let Some(secret) = secret {
            builder = builder.bearer_auth(secret.expose());
        }
        builder = match (profile, clip) {
            (Profile::CosyVoice, Some(clip)) => {
                builder.multipart(profiles::cosyvoice_form(request, clip)?)
            }
            _ => builder.json(&profiles::json_body(
                profile,
                request,
                &target,
                clip,
                clip_path.as_deref(),
            )),
        };
        let result = answer::exchange(builder, request, &target, sink, secret).await;
        match &result {
            Err(f) if matches!(f.outcome, Outcome::UpstreamError | Outcome::Timeout) => {
                self.suspects().insert(request.key.key_id.clone());
            }
            _ => {}
        }
        result
    }
}

/// The upstream's profile. Errors: missing or unknown (`UPSTREAM_ERROR`, naming the choices).
fn profile_of(upstream: &super::UpstreamTarget) -> Result<Profile, VendorFailure> {
    let names = Profile::ALL.map(Profile::as_str).join(", ");
    let raw = http::upstream_str(&upstream.params, "profile").ok_or_else(|| {
        http::upstream_config_failure(
            PROVIDER,
            format!(
                "upstream {} sets no params.profile: use one of {names}",
                upstream.id
            ),
        )
    })?;
    Profile::parse(raw).ok_or_else(|| {
        http::upstream_config_failure(
            PROVIDER,
            format!(
                "upstream {} has params.profile {raw:?}, which is none of {names}",
                upstream.id
            ),
        )
    })
}

fn speed_for(profile: Profile, voice: &Snapshot) -> Result<Option<f64>, ParamError> {
    let Some(rate) = voice.params.rate else {
        return Ok(None);
    };
    match profile {
        Profile::VllmOmni | Profile::GptSovits => {
            http::require_range(PROVIDER, "params.rate", rate, rate, 0.5, 2.0, "speed").map(Some)
        }
        _ if (rate - 1.0).abs() < f64::EPSILON => Ok(None),
        other => Err(ParamError {
            param: "params.rate".into(),
            value: http::num(rate),
            provider: PROVIDER.into(),
            reason: format!("the {} server has no speed control", other.as_str()),
        }),
    }
}

/// Refuses a call whose clip the profile cannot use (none where one is needed, outside its
/// duration window).
fn check_clip(
    profile: Profile,
    clip: Option<&ReferenceAudio>,
    voice: &Snapshot,
) -> Result<(), ParamError> {
    let refuse = |value: String, reason: String| ParamError {
        param: "references".into(),
        value,
        provider: PROVIDER.into(),
        reason,
    };
    match clip {
        None if profile.needs_clip() => Err(refuse(
            "none".into(),
            format!(
                "the {} server speaks only from a reference clip: add one to pack {} (AddReference)",
                profile.as_str(),
                voice.pack_id
            ),
        )),
        None => Ok(()),
        Some(clip) => {
            let (min, max) = profile.clip_window_ms();
            let ms = clip.reference.duration_ms;
            if (min..=max).contains(&ms) {
                Ok(())
            } else {
                Err(refuse(
                    clip.reference.digest.clone(),
                    format!(
                        "the clip lasts {:.2} s and a {} server takes {}..{} s: add a clip of that length",
                        f64::from(ms) / 1000.0,
                        profile.as_str(),
                        min / 1000,
                        max / 1000
                    ),
                ))
            }
        }
    }
}

#[async_trait]
impl VendorAdapter for SelfHosted {
    fn provider(&self) -> Provider {
        Provider::SelfHosted
    }

    fn text_limit(&self) -> TextLimit {
        // Zero-shot models keep quality on sentence-sized inputs; longer text is split and
        // each chunk retried on its own.
        TextLimit::Chars(300)
    }

    fn takes_references(&self) -> bool {
        true
    }

    fn streams(&self, upstream: &super::UpstreamTarget, voice: &Snapshot) -> bool {
        streams(upstream, voice)
    }

    fn check(
        &self,
        voice: &Snapshot,
        format: AudioFormat,
        sample_rate_hz: Option<u32>,
    ) -> Result<(), ParamError> {
        http::refuse_unknown_extra(PROVIDER, voice, &[])?;
        http::refuse_if_set(
            PROVIDER,
            "params.pitchPct",
            voice.params.pitch_pct,
            "self-hosted zero-shot servers have no pitch control",
        )?;
        http::refuse_if_set(
            PROVIDER,
            "params.volumePct",
            voice.params.volume_pct,
            "self-hosted zero-shot servers have no volume control",
        )?;
        if let Some(rate) = voice.params.rate {
            http::require_range(PROVIDER, "params.rate", rate, rate, 0.5, 2.0, "speed")?;
        }
        if !matches!(format, AudioFormat::Wav | AudioFormat::Pcm) {
            return Err(ParamError {
                param: "format".into(),
                value: http::format_name(format).into(),
                provider: PROVIDER.into(),
                reason: "self-hosted servers are asked for WAV: use WAV or PCM".into(),
            });
        }
        if let Some(rate) = sample_rate_hz {
            return Err(ParamError {
                param: "sample_rate_hz".into(),
                value: rate.to_string(),
                provider: PROVIDER.into(),
                reason: "a self-hosted model speaks at its own rate: leave sample_rate_hz 0".into(),
            });
        }
        if voice.references.is_empty() && voice.voice_id.trim().is_empty() {
            return Err(ParamError {
                param: "voiceId".into(),
                value: String::new(),
                provider: PROVIDER.into(),
                reason: "a voice without reference clips needs the server's voice name".into(),
            });
        }
        Ok(())
    }

    async fn stream(
        &self,
        request: VendorRequest<'_>,
        sink: &AudioSink,
    ) -> Result<StreamEnd, VendorFailure> {
        self.call(&request, sink).await
    }
}
