//! Joins the audio of the parts of a split item into one file.
//!
//! The parts go through the same joiner synthesis uses for the chunks of one request
//! (`voxpool_domain::audio::Joiner`): WAV parts get one RIFF header whose sizes cover every
//! sample (parts must share channels, sample rate and bit depth); PCM and MP3 frames
//! concatenate (later ID3 tags dropped); Ogg Opus parts concatenate into a chained Ogg
//! stream, which the Ogg specification allows.

use voxpool_domain::audio::{Audio, AudioError, Joiner};

use crate::format::Format;

/// Why parts could not be joined.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// A part is not usable audio of the format (e.g. not a readable WAV file).
    #[error("part {part} is not valid audio: {source}")]
    BadWav {
        /// 1-based part number.
        part: usize,
        /// What is wrong with it.
        #[source]
        source: AudioError,
    },
    /// A part's layout differs from the first part's.
    #[error("part {part} is {found}, part 1 is {expected}: cannot join")]
    Mismatch {
        /// 1-based part number.
        part: usize,
        /// Part 1's layout.
        expected: String,
        /// This part's layout.
        found: String,
    },
    /// Writing the joined file failed.
    #[error("cannot encode the joined audio: {0}")]
    Encode(#[source] AudioError),
}

/// Joins `parts` (in order) into one file of `format` with the service's one joiner
/// (`voxpool_domain::audio::Joiner`; Ogg parts chain). One part is returned as is.
pub fn join(format: Format, mut parts: Vec<Vec<u8>>) -> Result<Vec<u8>, JoinError> {
    if parts.len() == 1 {
        return Ok(parts.remove(0));
    }
    let format = format.to_audio();
    let mut joiner = Joiner::chaining_ogg(format);
    let mut out = Vec::new();
    for (i, bytes) in parts.into_iter().enumerate() {
        let piece = Audio {
            bytes,
            format,
            sample_rate_hz: None,
        };
        let bytes = joiner.push(&piece).map_err(|e| match e {
            AudioError::Mismatch { index, first, got } => JoinError::Mismatch {
                part: index + 1,
                expected: first,
                found: got,
            },
            source => JoinError::BadWav {
                part: i + 1,
                source,
            },
        })?;
        out.extend(bytes);
    }
    out.extend(joiner.finish().map_err(JoinError::Encode)?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use hound::{SampleFormat, WavReader, WavSpec, WavWriter};

    use super::*;

    fn wav(rate: u32, samples: &[i16]) -> Vec<u8> {
        let spec = WavSpec {
            channels: 1,
            sample_rate: rate,
            bits_per_sample: 16,
            sample_format: SampleFormat::Int,
        };
        let mut out = Cursor::new(Vec::new());
        let mut w = WavWriter::new(&mut out, spec).expect("writer");
        for s in samples {
            w.write_sample(*s).expect("sample");
        }
        w.finalize().expect("finalize");
        out.into_inner()
    }

    #[test]
    fn joined_wav_has_one_header_covering_every_sample_in_order() {
        let joined = join(
            Format::Wav,
            vec![wav(24_000, &[1, 2, 3]), wav(24_000, &[4, 5])],
        )
        .expect("join");
        let mut r = WavReader::new(Cursor::new(joined.as_slice())).expect("reader");
        assert_eq!(r.spec().sample_rate, 24_000);
        assert_eq!(r.duration(), 5);
        let samples: Vec<i16> = r.samples::<i16>().map(|s| s.expect("sample")).collect();
        assert_eq!(samples, [1, 2, 3, 4, 5]);
        assert_eq!(joined.len(), 44 + 10, "one 44-byte header plus 5 samples");
    }

    #[test]
    fn parts_with_different_sample_rates_are_refused() {
        let err = join(Format::Wav, vec![wav(24_000, &[1]), wav(16_000, &[2])]).unwrap_err();
        assert!(err.to_string().contains("part 2 is 16000 Hz"), "{err}");
    }

    #[test]
    fn a_non_wav_part_is_reported_by_number() {
        let err = join(Format::Wav, vec![wav(8_000, &[1]), b"garbage".to_vec()]).unwrap_err();
        assert!(matches!(err, JoinError::BadWav { part: 2, .. }), "{err}");
    }

    #[test]
    fn raw_formats_concatenate_and_a_single_part_is_untouched() {
        assert_eq!(
            join(Format::Pcm, vec![vec![1, 2], vec![3]]).expect("pcm"),
            [1, 2, 3]
        );
        assert_eq!(
            join(Format::Wav, vec![b"as is".to_vec()]).expect("one"),
            b"as is"
        );
    }
}
