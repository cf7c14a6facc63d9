//! `voxctl synth --pack ID "text" -o out.wav`: one text to one file, with the batch's retries,
//! splitting of long text and atomic write.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use voxpool_proto::synthesis::v1::{SynthesizeRequest, synthesis_client::SynthesisClient};

use super::OpError;
use crate::{
    breaker::{Breaker, BreakerConfig},
    call::{Caller, PartLimit},
    connect,
    format::Format,
    join::join,
    manifest::Voice,
    output,
    retry::RetryPolicy,
    stats::Stats,
};

/// One synthesis job.
#[derive(Clone, Debug)]
pub struct SynthJob {
    /// The voice.
    pub voice: Voice,
    /// The text.
    pub text: String,
    /// Output file.
    pub out: PathBuf,
    /// Format.
    pub format: Format,
    /// Sample rate (0 = vendor default).
    pub sample_rate_hz: i32,
    /// Synthesis URL.
    pub synthesis: String,
    /// Per-call deadline.
    pub deadline: Duration,
    /// Retries.
    pub retry: RetryPolicy,
    /// Longest text per request.
    pub max_chars: usize,
    /// Traffic class of the calls.
    pub priority: voxpool_proto::scheduler::v1::Priority,
    /// Tenant of the calls.
    pub tenant: String,
    /// Client token sent with every call (`--token`).
    pub token: voxpool_shared::auth::ClientToken,
}

/// Synthesizes the job; prints where the audio went and which keys served it.
pub async fn synth(job: SynthJob) -> Result<(), OpError> {
    if job.text.trim().is_empty() {
        return Err(OpError::usage("the text is empty"));
    }
    // Refused before any synthesis: the audio would have nowhere to go.
    let target_dir = match job.out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !target_dir.is_dir() {
        return Err(OpError::usage(format!(
            "-o {}: directory {} does not exist",
            job.out.display(),
            target_dir.display()
        )));
    }
    let client = SynthesisClient::new(connect::authed(&job.synthesis, &job.token)?)
        .max_decoding_message_size(connect::MAX_MESSAGE_BYTES);
    let caller = Caller {
        client,
        url: job.synthesis.clone(),
        breaker: Arc::new(Breaker::new(BreakerConfig::default())),
        limiter: None,
        policy: job.retry,
        deadline: job.deadline,
        stats: Arc::new(Stats::default()),
    };
    let template = SynthesizeRequest {
        voice: Some(job.voice.to_pb()),
        text: String::new(),
        format: job.format.to_pb() as i32,
        sample_rate_hz: job.sample_rate_hz,
        request_id: String::new(),
        priority: job.priority as i32,
        tenant: job.tenant.clone(),
        // voxctl writes files whole: exact WAV sizes.
        wav_streaming_header: false,
    };
    let spoken = caller
        .speak(
            &template,
            &job.text,
            &PartLimit::new(job.max_chars),
            "voxctl-synth",
        )
        .await;
    if let Some((error, part, parts)) = spoken.error {
        let at = if parts > 1 {
            format!(" (part {part} of {parts})")
        } else {
            String::new()
        };
        return Err(OpError::failed(format!("Synthesize{at}: {error}")));
    }
    let (audio, keys, calls, parts) = (spoken.audio, spoken.keys, spoken.calls, spoken.parts);
    let bytes = join(job.format, audio).map_err(|e| OpError::failed(e.to_string()))?;
    let dir = match job.out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = job
        .out
        .file_name()
        .ok_or_else(|| OpError::usage("-o needs a file name"))?
        .to_string_lossy()
        .into_owned();
    output::write_atomic(dir, &name, &bytes)
        .map_err(|e| OpError::failed(format!("cannot write {}: {e}", job.out.display())))?;
    crate::say!(
        "voxctl: wrote {} ({} bytes, {} part(s)) via {} in {calls} call(s)",
        job.out.display(),
        bytes.len(),
        parts,
        keys.join(", ")
    );
    Ok(())
}
