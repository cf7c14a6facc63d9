//! Items whose audio is larger than one gRPC message: a Synthesize answered
//! `RESPONSE_TOO_LARGE` (its `ErrorInfo` metadata `bytes` and `limit`: the audio's size and
//! synthesis's limit) is spoken again in parts, the text split at sentence boundaries
//! (`voxpool_domain::text::split`) so each part's audio fits with a 10 % margin, and the parts
//! joined into one object by the joiner synthesis uses for the chunks of one request
//! (`voxpool_domain::audio::Joiner`: one WAV header over every sample; PCM and MP3 frames
//! concatenate; Ogg Opus parts chain).
//!
//! A part's request id is the item's with `/pN` appended, so a retried item reuses its parts'
//! idempotency keys; a part that is still too large fails the item with the server's reason.
//! The job's state is looked at right before each part's call: once it is cancelled no part
//! is spoken any more, and the item ends CANCELLED (its parts' audio is not kept).

use voxpool_domain::{
    audio::{Audio, Joiner},
    text::{TextLimit, split},
};

use crate::{
    model::JobState,
    store::JobStore,
    synth::{ItemSpec, JobParams, Spoken, SynthError, Synthesizer},
};

/// How many parts of at most how many characters `chars` of text are split into so that
/// audio of `bytes` fits `limit` with a 10 % margin.
fn part_chars(chars: usize, bytes: usize, limit: usize) -> usize {
    let target = (limit / 10 * 9).max(1);
    let parts = bytes.div_ceil(target).max(2);
    chars.div_ceil(parts).max(1)
}

/// Speaks `spec` in one call or, when its audio is over the message limit, in parts (module
/// doc). The answer of a split item joins the parts' audio, counts every part's chunks, adds
/// up their usage and carries the last part's key; `None` when the job was cancelled before a
/// part's call.
pub(super) async fn speak(
    synth: &Synthesizer,
    store: &JobStore,
    params: &JobParams,
    id: &str,
    spec: &ItemSpec,
) -> Result<Option<Spoken>, SynthError> {
    let error = match synth.speak(params, id, spec).await {
        Ok(spoken) => return Ok(Some(spoken)),
        Err(error) => error,
    };
    let SynthError::Failed {
        too_large: Some((bytes, limit)),
        ..
    } = error
    else {
        return Err(error);
    };
    let max = part_chars(spec.text().chars().count(), bytes, limit);
    let texts: Vec<&str> = split(spec.text(), TextLimit::Chars(max))
        .into_iter()
        .filter(|t| !t.trim().is_empty())
        .collect();
    if texts.len() < 2 {
        return Err(error);
    }
    let format = params.format.audio();
    let mut joiner = Joiner::chaining_ogg(format);
    let mut joined = Spoken::default();
    for (i, text) in texts.iter().enumerate() {
        if cancelled(store, &params.job).await {
            return Ok(None);
        }
        let part = spec.with_text(text);
        let answer = synth
            .speak(params, &format!("{id}/p{}", i + 1), &part)
            .await?;
        let piece = Audio {
            bytes: answer.audio,
            format,
            sample_rate_hz: None,
        };
        let audio = joiner.push(&piece).map_err(|e| {
            SynthError::internal(format!(
                "part {} of {} of the item's text came back as audio that cannot be joined: {e}",
                i + 1,
                texts.len()
            ))
        })?;
        joined.audio.extend(audio);
        joined.spoken += answer.spoken;
        joined.cached += answer.cached;
        joined.key_id = answer.key_id;
        if let Some(usage) = &answer.usage {
            joined.usage.get_or_insert_default().add(usage);
        }
        if joined.reference_digest.is_empty() {
            joined.reference_digest = answer.reference_digest;
        }
    }
    let tail = joiner
        .finish()
        .map_err(|e| SynthError::internal(format!("joining the item's parts failed: {e}")))?;
    joined.audio.extend(tail);
    tracing::info!(
        job = %params.job,
        parts = texts.len(),
        bytes = joined.audio.len(),
        "an item over synthesis's message limit was spoken in parts"
    );
    Ok(Some(joined))
}

/// Whether job `job` is cancelled now (a store that does not answer says no: the call goes
/// ahead, as it would have a moment earlier).
pub(super) async fn cancelled(store: &JobStore, job: &str) -> bool {
    matches!(store.job_state(job).await, Ok(Some(JobState::Cancelled)))
}

#[cfg(test)]
mod tests {
    use super::part_chars;

    #[test]
    fn parts_fit_the_limit_with_a_margin() {
        // 35 MB of audio for 12,000 characters against a 32 MiB limit: 2 parts.
        assert_eq!(part_chars(12_000, 35_000_000, 33_488_896), 6_000);
        // Three times the limit: 4 parts (10 % margin).
        assert_eq!(part_chars(1_000, 300, 100), 250);
        // Never fewer than two parts, never an empty one.
        assert_eq!(part_chars(10, 101, 100), 5);
        assert_eq!(part_chars(1, 1_000, 10), 1);
    }
}
