//! Joins the audio of the parts of a split item into one file.
//!
//! WAV parts are decoded and re-encoded with `hound`, so the result has one correct RIFF header
//! (sizes cover every sample); parts must share channels, sample rate and sample format. Raw
//! PCM and MP3 frames concatenate as they are; Ogg Opus parts concatenate into a chained Ogg
//! stream, which the Ogg specification allows.

use std::io::Cursor;

use hound::{SampleFormat, WavReader, WavSpec, WavWriter};

use crate::format::Format;

/// Why parts could not be joined.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// A part is not a readable WAV file.
    #[error("part {part} is not a valid WAV file: {source}")]
    BadWav {
        /// 1-based part number.
        part: usize,
        /// The decoder's error.
        #[source]
        source: hound::Error,
    },
    /// A part's format differs from the first part's.
    #[error("part {part} is {found}, part 1 is {expected}: cannot join")]
    Mismatch {
        /// 1-based part number.
        part: usize,
        /// Part 1's format.
        expected: String,
        /// This part's format.
        found: String,
    },
    /// Writing the joined file failed.
    #[error("cannot encode the joined WAV: {0}")]
    Encode(#[source] hound::Error),
}

/// Joins `parts` (in order) into one file of `format`. One part is returned as is.
pub fn join(format: Format, mut parts: Vec<Vec<u8>>) -> Result<Vec<u8>, JoinError> {
    if parts.len() == 1 {
        return Ok(parts.remove(0));
    }
    match format {
        Format::Wav => join_wav(&parts),
        Format::Pcm | Format::Mp3 | Format::OggOpus => Ok(parts.concat()),
    }
}

fn describe(spec: &WavSpec) -> String {
    let kind = match spec.sample_format {
        SampleFormat::Int => "int",
        SampleFormat::Float => "float",
    };
    format!(
        "{} Hz, {} channel(s), {}-bit {kind}",
        spec.sample_rate, spec.channels, spec.bits_per_sample
    )
}

fn join_wav(parts: &[Vec<u8>]) -> Result<Vec<u8>, JoinError> {
    let mut readers = Vec::with_capacity(parts.len());
    for (i, bytes) in parts.iter().enumerate() {
        let reader =
            WavReader::new(Cursor::new(bytes.as_slice())).map_err(|source| JoinError::BadWav {
                part: i + 1,
                source,
            })?;
        readers.push(reader);
    }
    let spec = readers[0].spec();
    for (i, reader) in readers.iter().enumerate().skip(1) {
        if reader.spec() != spec {
            return Err(JoinError::Mismatch {
                part: i + 1,
                expected: describe(&spec),
                found: describe(&reader.spec()),
            });
        }
    }
    let mut out = Cursor::new(Vec::new());
    let mut writer = WavWriter::new(&mut out, spec).map_err(JoinError::Encode)?;
    for (i, reader) in readers.iter_mut().enumerate() {
        let bad = |source| JoinError::BadWav {
            part: i + 1,
            source,
        };
        match spec.sample_format {
            SampleFormat::Float => {
                for s in reader.samples::<f32>() {
                    writer
                        .write_sample(s.map_err(bad)?)
                        .map_err(JoinError::Encode)?;
                }
            }
            SampleFormat::Int => {
                for s in reader.samples::<i32>() {
                    writer
                        .write_sample(s.map_err(bad)?)
                        .map_err(JoinError::Encode)?;
                }
            }
        }
    }
    writer.finalize().map_err(JoinError::Encode)?;
    Ok(out.into_inner())
}

#[cfg(test)]
mod tests {
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
