//! What every clone flow shares: the context and one step's inputs (the task, the key it runs
//! with), the clips read from the blob store (checked against their digests), the names and
//! media types they are uploaded with, and the mapping of a [`VendorFailure`] onto a report.

use std::{sync::Arc, time::Duration};

use reqwest::Client;
use voxpool_domain::{
    contract::Outcome as Verdict, provider::Provider, reference::Reference, snapshot::Snapshot,
};

use super::{Outcome, ScopeKeys, Task};
use crate::{
    adapters::{
        AudioFormat, KeyCredential, ReferenceAudio, UpstreamTarget, Utterance, VendorFailure,
        VendorRequest, gate::Gate, registry::Registry,
    },
    error::SynthesisError,
    references::ReferenceClips,
};

/// What every flow needs besides the task.
#[derive(Clone)]
pub struct Context {
    /// The shared vendor HTTP client.
    pub http: Client,
    /// Reference clips from the blob store (`None`: no store, CREATE retries saying so).
    pub clips: Option<Arc<ReferenceClips>>,
    /// The adapters (MiniMax's keep-alive speaks through its adapter).
    pub adapters: Arc<Registry>,
    /// When to poll a training clone again.
    pub poll_after: Duration,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("poll_after", &self.poll_after)
            .finish_non_exhaustive()
    }
}

/// One step's inputs: the task, the key it runs with, and how long the vendor may take.
#[derive(Clone, Copy, Debug)]
pub struct Step<'a> {
    /// The task.
    pub task: &'a Task,
    /// The scope.
    pub scope: &'a ScopeKeys,
    /// The key.
    pub key: &'a KeyCredential,
    /// Its upstream.
    pub upstream: &'a UpstreamTarget,
    /// Per vendor call.
    pub timeout: Duration,
}

impl Step<'_> {
    /// The vendor voice id a POLL, DELETE or KEEPALIVE needs, or the failure saying it is
    /// missing.
    pub fn voice_id(&self) -> Result<&str, Outcome> {
        self.task.vendor_voice_id.as_deref().ok_or_else(|| {
            Outcome::Failed(format!(
                "{} of the clone of {} in scope {} without a vendor voice id",
                self.task.work.as_str(),
                self.task.pack_id,
                self.task.scope
            ))
        })
    }
}

/// A vendor failure as a report: the request's fault (`CLIENT_ERROR`) is for good; everything
/// else (rate, overload, timeouts, a refused key or spent quota) is tried again.
pub fn from_failure(f: VendorFailure) -> Outcome {
    match f.outcome {
        Verdict::ClientError => Outcome::Failed(f.message),
        _ => Outcome::Retry {
            after: Duration::from_millis(f.retry_after_ms.unwrap_or(0)),
            error: f.message,
        },
    }
}

/// The task's clips with their bytes, checked against their digests, in recipe order.
pub async fn clips(ctx: &Context, task: &Task) -> Result<Vec<Arc<ReferenceAudio>>, Outcome> {
    let Some(store) = &ctx.clips else {
        return Err(Outcome::Retry {
            after: Duration::ZERO,
            error: "this synthesis replica has no blob store to read reference clips from".into(),
        });
    };
    if task.samples.is_empty() {
        return Err(Outcome::Failed(format!(
            "pack {} has no reference clips to clone from",
            task.pack_id
        )));
    }
    let mut out = Vec::with_capacity(task.samples.len());
    for sample in &task.samples {
        let reference = Reference {
            digest: sample.digest.clone(),
            transcript: sample.transcript.clone(),
            language: sample.language.clone(),
            emotion: String::new(),
            weight: 1,
            duration_ms: 0,
        };
        match store.fetch(&reference).await {
            Ok(clip) => out.push(clip),
            Err(e @ SynthesisError::ReferenceCorrupt { .. }) => {
                return Err(Outcome::Failed(e.to_string()));
            }
            // Missing (another blob store?) or the store failing: may be fixed, so again.
            Err(e) => {
                return Err(Outcome::Retry {
                    after: Duration::ZERO,
                    error: e.to_string(),
                });
            }
        }
    }
    Ok(out)
}

/// The file name a clip is uploaded as (`sample-1.wav`).
pub fn file_name(i: usize, clip: &ReferenceAudio) -> String {
    format!("sample-{}.{}", i + 1, extension(clip))
}

/// The clip's extension and the vendors' `audio_format` (`wav`, `mp3`, `flac`).
pub fn extension(clip: &ReferenceAudio) -> &'static str {
    use voxpool_domain::audio::clip::ClipFormat;
    match clip.format {
        ClipFormat::Wav => "wav",
        ClipFormat::Mp3 => "mp3",
        ClipFormat::Flac => "flac",
    }
}

/// The clip's media type (`audio/wav`, …).
pub fn media_type(clip: &ReferenceAudio) -> &'static str {
    clip.format.media_type()
}

/// What a keep-alive speaks.
const KEEPALIVE_TEXT: &str = "Hi.";

/// One real synthesis of a short text with the clone `voice_id` of `provider` enrolled for
/// `model`, through this build's adapter (a vendor keeps a clone that is used): the adapter's
/// answer. `Err`: no adapter for `provider` (retried), or the clone cannot be described.
pub(super) async fn speak_once(
    ctx: &Context,
    step: &Step<'_>,
    provider: Provider,
    model: &str,
    voice_id: &str,
) -> Result<Result<(), VendorFailure>, Outcome> {
    let Some(adapter) = ctx.adapters.get(&provider) else {
        return Err(Outcome::Retry {
            after: Duration::ZERO,
            // `MiniMax`, `DashScope`: the vendor's own spelling.
            error: format!("this build has no {provider:?} adapter to keep the clone alive with"),
        });
    };
    let doc = serde_json::json!({
        "packId": step.task.pack_id,
        "packVersion": "1",
        "provider": provider.as_str(),
        "model": model,
        "voiceId": voice_id,
        "ttsModelId": step.task.pool,
        "tier": "STANDARD",
        "kind": "CLONED",
        "frozenAt": "2026-01-01T00:00:00Z",
        "digest": "",
    });
    let voice = serde_json::from_value::<Snapshot>(doc)
        .map(Snapshot::seal)
        .map_err(|e| Outcome::Failed(format!("cannot describe the clone to the adapter: {e}")))?;
    let utterance = Utterance {
        text: KEEPALIVE_TEXT.to_owned(),
        voice: Arc::new(voice),
        pool_model: step.scope.pool_model.clone(),
        format: AudioFormat::Mp3,
        sample_rate_hz: None,
        reference: None,
        seed: None,
    };
    let attempt_id = format!("clone-keepalive-{}", rand::random::<u64>());
    let request = VendorRequest {
        utterance: &utterance,
        key: step.key,
        upstream: step.upstream,
        timeout: step.timeout,
        attempt_id: &attempt_id,
        gate: Gate::default(),
    };
    Ok(adapter.synthesize(request).await.map(drop))
}
