//! `voxctl synth --pack ID "text" -o out.wav`: one text to one file, with the batch's retries,
//! splitting of long text and atomic write.
//!
//! A text longer than one part shows progress on stderr (the batch's bar or lines), and the
//! audio is held to a budget checked after every part ([`AudioBudget`]): the format's own
//! limit (WAV: 4 GiB), and [`MEMORY_BUDGET`] unless `--force`, since the parts are held in
//! memory until the file is written.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, atomic::Ordering::Relaxed},
    time::Duration,
};

use voxpool_proto::synthesis::v1::synthesis_client::SynthesisClient;

use super::OpError;
use crate::{
    breaker::{Breaker, BreakerConfig},
    call::{AudioBudget, Caller, PartLimit},
    connect,
    format::Format,
    join::join,
    manifest::Voice,
    output,
    progress::{Progress, ProgressMode},
    request::CallSettings,
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
    /// How the calls use the audio cache.
    pub cache_policy: voxpool_proto::synthesis::v1::CachePolicy,
    /// Client token sent with every call (`--token`).
    pub token: voxpool_runtime::auth::ClientToken,
    /// Write audio past [`MEMORY_BUDGET`] (the format's own limit still holds).
    pub force: bool,
    /// How progress is shown while a text of several parts is spoken.
    pub progress: ProgressMode,
    /// The clip tag asked for (voices with reference clips); empty = none.
    pub emotion: String,
    /// The seed every part is sent with.
    pub seed: u64,
}

/// Most audio `voxctl synth` collects without `--force`, in bytes (1 GiB).
pub const MEMORY_BUDGET: u64 = 1 << 30;

fn budget(format: Format, force: bool) -> Option<AudioBudget> {
    let memory = (!force).then(|| AudioBudget {
        bytes: MEMORY_BUDGET,
        what: format!(
            "{MEMORY_BUDGET} bytes, the most voxctl synth holds in memory: pass --force to go on, or split the text (voxctl batch writes one file per manifest item)"
        ),
    });
    match (AudioBudget::for_format(format), memory) {
        (Some(f), Some(m)) => Some(if f.bytes < m.bytes { f } else { m }),
        (f, m) => f.or(m),
    }
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
        audio_budget: budget(job.format, job.force),
    };
    let chars = job.text.chars().count();
    caller.stats.total.store(1, Relaxed);
    caller.stats.chars_total.store(chars as u64, Relaxed);
    let progress = (chars > job.max_chars).then(|| {
        Progress::start(
            job.progress,
            Arc::clone(&caller.stats),
            Arc::clone(&caller.breaker),
        )
    });
    let _in_flight = caller.stats.in_flight_guard();
    let settings = CallSettings {
        format: job.format,
        sample_rate_hz: job.sample_rate_hz,
        priority: job.priority,
        tenant: job.tenant.clone(),
        cache_policy: job.cache_policy,
    };
    let template = settings.template(&job.voice, &job.emotion, job.seed);
    // One id per run (its parts are `#1`, `#2`, …): runs stay apart in logs and the ledger.
    let request_id = format!("voxctl-synth-{:016x}", rand::random::<u64>());
    let spoken = caller
        .speak(
            &template,
            &job.text,
            &PartLimit::new(job.max_chars),
            &request_id,
        )
        .await;
    if let Some(progress) = progress {
        progress.finish().await;
    }
    if let Some((error, part, parts)) = spoken.error {
        let at = if parts > 1 {
            format!(" (part {part} of {parts})")
        } else {
            String::new()
        };
        return Err(OpError::failed(format!("Synthesize{at}: {error}")));
    }
    let cache = crate::report::cache_line(spoken.cached_chunks, spoken.chunks);
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
        "voxctl: wrote {} ({} bytes, {} part(s)) via {} in {calls} call(s); {cache}",
        job.out.display(),
        bytes.len(),
        parts,
        keys.join(", ")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_the_smaller_of_the_memory_and_the_format_limit() {
        assert_eq!(
            budget(Format::Wav, false).map(|b| b.bytes),
            Some(MEMORY_BUDGET)
        );
        assert_eq!(
            budget(Format::Wav, true).map(|b| b.bytes),
            Some(u64::from(u32::MAX)),
            "--force lifts the memory budget, never the format's limit"
        );
        assert_eq!(
            budget(Format::Pcm, false).map(|b| b.bytes),
            Some(MEMORY_BUDGET)
        );
        assert!(budget(Format::Pcm, true).is_none());
    }

    #[test]
    fn a_text_whose_first_parts_extrapolate_past_the_budget_stops_early_naming_the_way_out() {
        let wav = budget(Format::Wav, true).expect("WAV has a limit");
        // 1.1 M characters at 2,500 bytes per character: about 2.75 GB, under 4 GiB.
        assert!(wav.check(50_000_000, 20_000, 1_100_000).is_none());
        // At 5,000 bytes per character the same text would pass 4 GiB: refused after part 1.
        let refused = wav
            .check(100_000_000, 20_000, 1_100_000)
            .expect("over the WAV limit");
        assert_eq!(refused.code, tonic::Code::OutOfRange);
        assert!(!refused.retryable());
        assert!(
            refused.message.contains("about 5500000000 bytes")
                && refused.message.contains("--format pcm"),
            "{}",
            refused.message
        );
        let memory = budget(Format::Wav, false).expect("memory budget");
        let refused = memory
            .check(50_000_000, 20_000, 1_100_000)
            .expect("2.75 GB is over 1 GiB");
        assert!(refused.message.contains("--force"), "{}", refused.message);
    }
}
