//! The edge's conversions, both ways: a `SynthesizeRequest` into the domain
//! [`Request`](crate::job::Request) (infallible: what needs refusing is refused by
//! `job::prepare`, in its order), and a job's results back into protobuf (the response, its
//! attempts, a delivery's pieces as streamed messages, the pools' readiness). With the scheduler and catalog clients, the only place
//! synthesis meets a prost type.

use voxpool_domain::snapshot::Snapshot;
use voxpool_proto::{
    scheduler::v1 as spb,
    synthesis::v1::{self as pb, synthesize_request::Voice},
};

use crate::{
    adapters::AudioFormat,
    cache::Policy,
    job::{Core, Overrides, Request, Synthesized, Unknown, VoiceSource, delivery::Piece},
    lease::Priority,
    record::AttemptRecord,
    usage::{Path, Totals},
};

/// The domain request of `r`, from `caller` (its authenticated name) through `path`.
pub fn request(r: pb::SynthesizeRequest, caller: String, path: Path) -> Request {
    Request {
        caller,
        path,
        request_id: r.request_id,
        priority: priority(r.priority),
        tenant: r.tenant,
        text: r.text,
        format: audio_format(r.format),
        wav_streaming_header: r.wav_streaming_header,
        sample_rate_hz: r.sample_rate_hz,
        cache_policy: cache_policy(r.cache_policy),
        overrides: Overrides::default(),
        emotion: r.emotion,
        seed: r.seed,
        voice: r.voice.map(|voice| match voice {
            Voice::Snapshot(pb) => match Snapshot::from_pb(&pb) {
                Ok(snapshot) => VoiceSource::Snapshot(Box::new(snapshot)),
                Err(e) => VoiceSource::Malformed(e),
            },
            Voice::SnapshotJson(json) => VoiceSource::Json(json),
            Voice::PackId(id) => VoiceSource::PackId(id),
        }),
    }
}

/// The proto cache policy; unspecified = USE.
fn cache_policy(raw: i32) -> Result<Policy, Unknown> {
    match pb::CachePolicy::try_from(raw) {
        Ok(pb::CachePolicy::Unspecified | pb::CachePolicy::Use) => Ok(Policy::Use),
        Ok(pb::CachePolicy::Refresh) => Ok(Policy::Refresh),
        Ok(pb::CachePolicy::Bypass) => Ok(Policy::Bypass),
        Err(_) => Err(Unknown(raw)),
    }
}

/// The proto traffic class; unspecified = STANDARD (as the scheduler reads it).
fn priority(raw: i32) -> Result<Priority, Unknown> {
    match spb::Priority::try_from(raw) {
        Ok(spb::Priority::Unspecified | spb::Priority::Standard) => Ok(Priority::Standard),
        Ok(spb::Priority::Interactive) => Ok(Priority::Interactive),
        Ok(spb::Priority::Batch) => Ok(Priority::Batch),
        Err(_) => Err(Unknown(raw)),
    }
}

/// The proto format as the adapters' enum; unspecified = WAV.
pub fn audio_format(raw: i32) -> Result<AudioFormat, Unknown> {
    match pb::AudioFormat::try_from(raw) {
        Ok(pb::AudioFormat::Unspecified | pb::AudioFormat::Wav) => Ok(AudioFormat::Wav),
        Ok(pb::AudioFormat::Mp3) => Ok(AudioFormat::Mp3),
        Ok(pb::AudioFormat::OggOpus) => Ok(AudioFormat::OggOpus),
        Ok(pb::AudioFormat::Pcm) => Ok(AudioFormat::Pcm),
        Err(_) => Err(Unknown(raw)),
    }
}

/// The adapters' format as the proto enum.
pub fn audio_format_pb(f: AudioFormat) -> pb::AudioFormat {
    match f {
        AudioFormat::Wav => pb::AudioFormat::Wav,
        AudioFormat::Mp3 => pb::AudioFormat::Mp3,
        AudioFormat::OggOpus => pb::AudioFormat::OggOpus,
        AudioFormat::Pcm => pb::AudioFormat::Pcm,
    }
}

/// The proto `Attempt`.
pub fn attempt(a: &AttemptRecord) -> pb::Attempt {
    pb::Attempt {
        key_id: a.key_id.clone(),
        outcome: spb::Outcome::from(a.outcome) as i32,
        http_status: a.http_status.map_or(0, i32::from),
        latency_ms: i64::try_from(a.latency_ms).unwrap_or(i64::MAX),
        message: a.message.clone(),
        upstream_id: a.upstream_id.clone(),
    }
}

/// One streamed message: a piece of a job's delivery.
pub fn audio_chunk(piece: Piece) -> pb::AudioChunk {
    pb::AudioChunk {
        audio: piece.audio,
        seq: i32::try_from(piece.seq).unwrap_or(i32::MAX),
        r#final: piece.last,
        cached_chunks: i32::try_from(piece.cached_chunks).unwrap_or(i32::MAX),
        reference_digest: piece.reference_digest,
        usage: piece.usage.as_ref().map(usage),
    }
}

/// The unary answer: a whole job's audio in `format`.
pub fn response(done: Synthesized, format: AudioFormat) -> pb::SynthesizeResponse {
    pb::SynthesizeResponse {
        audio: done.audio,
        format: audio_format_pb(format) as i32,
        sample_rate_hz: done
            .sample_rate_hz
            .and_then(|r| i32::try_from(r).ok())
            .unwrap_or(0),
        key_id: done.key_id,
        attempts: done.attempts.iter().map(attempt).collect(),
        cached_chunks: i32::try_from(done.cached_chunks).unwrap_or(i32::MAX),
        reference_digest: done.reference_digest,
        usage: Some(usage(&done.usage)),
    }
}

/// A request's usage, its cost in units of its currency.
pub fn usage(t: &Totals) -> pb::Usage {
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    pb::Usage {
        characters: n(t.characters),
        billed_characters: n(t.billed_characters),
        cached_characters: n(t.cached_characters),
        audio_ms: n(t.audio_ms),
        cost: t.cost_micros as f64 / 1_000_000.0,
        currency: t.currency.clone(),
        gpu_ms: n(t.gpu_ms),
        failed_attempts: i32::try_from(t.failed_attempts).unwrap_or(i32::MAX),
    }
}

/// What this replica can do with each pool (the `ListPools` answer).
pub fn readiness(core: &Core) -> pb::ListPoolsResponse {
    let mut pools: Vec<pb::PoolReadiness> = core
        .pools
        .iter()
        .map(|pool| {
            let adapter_available = core.adapters.contains_key(&pool.provider);
            pb::PoolReadiness {
                pool: pool.id.clone(),
                provider: pool.provider.as_str().to_owned(),
                adapter_available,
                serving: adapter_available && pool.has_usable_key(),
                keys: pool
                    .keys
                    .iter()
                    .map(|(id, key)| pb::KeyReadiness {
                        key_id: id.clone(),
                        usable: key.credential.is_ok(),
                        problem: key.credential.as_ref().err().cloned().unwrap_or_default(),
                    })
                    .collect(),
            }
        })
        .collect();
    pools.sort_by(|a, b| a.pool.cmp(&b.pool));
    pb::ListPoolsResponse { pools }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_map_both_ways() {
        assert_eq!(audio_format(0).unwrap(), AudioFormat::Wav);
        assert_eq!(audio_format(4).unwrap(), AudioFormat::Pcm);
        assert_eq!(
            audio_format_pb(AudioFormat::OggOpus),
            pb::AudioFormat::OggOpus
        );
        assert_eq!(audio_format(99), Err(Unknown(99)));
    }

    #[test]
    fn format_metric_labels_are_the_wire_enums_names() {
        for format in [
            AudioFormat::Wav,
            AudioFormat::Mp3,
            AudioFormat::OggOpus,
            AudioFormat::Pcm,
        ] {
            assert_eq!(
                crate::metrics::format_label(format),
                audio_format_pb(format).as_str_name()
            );
        }
    }

    #[test]
    fn priorities_map_with_unspecified_as_standard_and_unknown_kept() {
        assert_eq!(priority(0), Ok(Priority::Standard));
        assert_eq!(priority(spb::Priority::Batch as i32), Ok(Priority::Batch));
        assert_eq!(priority(42), Err(Unknown(42)));
    }
}
