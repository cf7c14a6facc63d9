//! [`Joiner`]: one output from the validated pieces of a split text, incrementally, so the
//! streaming RPC and the unary RPC produce the same bytes (unary = everything `push` returned
//! followed by what `finish` returns; streaming sends the same bytes as they come).

use super::{Audio, AudioFormat};
use super::{
    AudioError,
    wav::{self, WavSpec},
};

/// Joins pieces of one format (module doc of [`super`]).
#[derive(Debug)]
pub struct Joiner {
    format: AudioFormat,
    chain_ogg: bool,
    pieces: usize,
    wav: Option<(WavSpec, Vec<u8>)>,
    sample_rate_hz: Option<u32>,
}

impl Joiner {
    /// A joiner for pieces of `format`.
    pub fn new(format: AudioFormat) -> Self {
        Self {
            format,
            chain_ogg: false,
            pieces: 0,
            wav: None,
            sample_rate_hz: None,
        }
    }

    /// A joiner that also accepts several OGG_OPUS pieces and concatenates them into a chained
    /// Ogg stream (RFC 3533 allows it; players read it as consecutive streams). For files that
    /// are read as a whole, such as voxctl's outputs; a live stream keeps [`Joiner::new`].
    pub fn chaining_ogg(format: AudioFormat) -> Self {
        Self {
            chain_ogg: true,
            ..Self::new(format)
        }
    }

    /// The sample rate (Hz) of the pieces so far, from the WAV header or the vendor.
    pub fn sample_rate_hz(&self) -> Option<u32> {
        self.sample_rate_hz
    }

    /// Adds the next piece (already passed [`super::validate`]) and returns the bytes that
    /// may be sent now: the piece itself for PCM and MP3 (later MP3 pieces without their ID3v2
    /// tag), the first OGG_OPUS piece, nothing for WAV (whose header needs the final size).
    /// Errors: a layout or sample-rate mismatch, a second OGG_OPUS piece, a bad WAV.
    pub fn push(&mut self, audio: &Audio) -> Result<Vec<u8>, AudioError> {
        if audio.format != self.format {
            return Err(AudioError::WrongFormat {
                expected: self.format,
                got: audio.format,
            });
        }
        let index = self.pieces;
        self.pieces += 1;
        match self.format {
            AudioFormat::Wav => {
                let parsed = wav::parse(&audio.bytes)?;
                match &mut self.wav {
                    None => self.wav = Some((parsed.spec, parsed.data.to_vec())),
                    Some((first, data)) if *first == parsed.spec => {
                        data.extend_from_slice(parsed.data);
                    }
                    Some((first, _)) => {
                        return Err(AudioError::Mismatch {
                            index,
                            first: first.to_string(),
                            got: parsed.spec.to_string(),
                        });
                    }
                }
                self.sample_rate_hz = Some(parsed.spec.sample_rate);
                Ok(Vec::new())
            }
            AudioFormat::OggOpus if index > 0 && !self.chain_ogg => Err(AudioError::CannotJoinOpus),
            AudioFormat::Pcm | AudioFormat::Mp3 | AudioFormat::OggOpus => {
                self.check_rate(index, audio.sample_rate_hz)?;
                if self.format == AudioFormat::Mp3 && index > 0 {
                    Ok(strip_id3v2(&audio.bytes).to_vec())
                } else {
                    Ok(audio.bytes.clone())
                }
            }
        }
    }

    fn check_rate(&mut self, index: usize, rate: Option<u32>) -> Result<(), AudioError> {
        match (self.sample_rate_hz, rate) {
            (Some(first), Some(got)) if first != got => Err(AudioError::Mismatch {
                index,
                first: format!("{first} Hz"),
                got: format!("{got} Hz"),
            }),
            (None, Some(got)) => {
                self.sample_rate_hz = Some(got);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The bytes still owed after the last piece: the whole WAV file (one header whose sizes
    /// match the data) for WAV, nothing for the other formats. Errors: no WAV piece at all,
    /// or more than 4 GiB of samples.
    pub fn finish(self) -> Result<Vec<u8>, AudioError> {
        match (self.format, self.wav) {
            (AudioFormat::Wav, Some((spec, data))) => Ok(wav::write(spec, &data)?),
            (AudioFormat::Wav, None) => Err(AudioError::Wav(wav::WavError::MissingData)),
            (AudioFormat::Pcm | AudioFormat::Mp3 | AudioFormat::OggOpus, _) => Ok(Vec::new()),
        }
    }
}

/// `bytes` without a leading ID3v2 tag (header, syncsafe size, optional footer).
fn strip_id3v2(bytes: &[u8]) -> &[u8] {
    if bytes.len() < 10 || !bytes.starts_with(b"ID3") {
        return bytes;
    }
    let size = bytes[6..10]
        .iter()
        .fold(0usize, |acc, b| (acc << 7) | usize::from(b & 0x7F));
    let footer = if bytes[5] & 0x10 != 0 { 10 } else { 0 };
    bytes.get(10 + size + footer..).unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    use super::*;

    const MONO: WavSpec = WavSpec {
        channels: 1,
        sample_rate: 22050,
        bits_per_sample: 16,
    };

    fn piece(format: AudioFormat, bytes: Vec<u8>, rate: Option<u32>) -> Audio {
        Audio {
            bytes,
            format,
            sample_rate_hz: rate,
        }
    }

    fn join(format: AudioFormat, pieces: &[Audio]) -> Result<Vec<u8>, AudioError> {
        let mut j = Joiner::new(format);
        let mut out = Vec::new();
        for p in pieces {
            out.extend(j.push(p)?);
        }
        out.extend(j.finish()?);
        Ok(out)
    }

    #[test]
    fn wav_pieces_join_under_one_header_with_matching_sizes() {
        let a = wav::write(MONO, &[1, 0, 2, 0]).unwrap();
        let mut b = wav::write(MONO, &[3, 0]).unwrap();
        b[40..44].copy_from_slice(&0x7FFF_F000u32.to_le_bytes());
        let out = join(
            AudioFormat::Wav,
            &[
                piece(AudioFormat::Wav, a, None),
                piece(AudioFormat::Wav, b, None),
            ],
        )
        .unwrap();
        assert_eq!(out, wav::write(MONO, &[1, 0, 2, 0, 3, 0]).unwrap());
    }

    #[test]
    fn wav_pieces_with_different_rates_are_refused() {
        let a = wav::write(MONO, &[1, 0]).unwrap();
        let b = wav::write(
            WavSpec {
                sample_rate: 24000,
                ..MONO
            },
            &[1, 0],
        )
        .unwrap();
        let err = join(
            AudioFormat::Wav,
            &[
                piece(AudioFormat::Wav, a, None),
                piece(AudioFormat::Wav, b, None),
            ],
        );
        assert!(
            matches!(err, Err(AudioError::Mismatch { index: 1, .. })),
            "{err:?}"
        );
    }

    #[test]
    fn pcm_joins_by_concatenation_and_checks_rates() {
        let out = join(
            AudioFormat::Pcm,
            &[
                piece(AudioFormat::Pcm, vec![1, 2], Some(24000)),
                piece(AudioFormat::Pcm, vec![3, 4], Some(24000)),
            ],
        );
        assert_eq!(out.unwrap(), vec![1, 2, 3, 4]);
        let mismatch = join(
            AudioFormat::Pcm,
            &[
                piece(AudioFormat::Pcm, vec![1, 2], Some(24000)),
                piece(AudioFormat::Pcm, vec![3, 4], Some(16000)),
            ],
        );
        assert!(matches!(mismatch, Err(AudioError::Mismatch { .. })));
    }

    #[test]
    fn later_mp3_pieces_lose_their_id3_tag() {
        let tagged = [
            b"ID3\x04\x00\x00\x00\x00\x00\x02".as_slice(),
            &[0xAA, 0xBB],
            &[0xFF, 0xFB, 7],
        ]
        .concat();
        let out = join(
            AudioFormat::Mp3,
            &[
                piece(AudioFormat::Mp3, tagged.clone(), None),
                piece(AudioFormat::Mp3, tagged.clone(), None),
            ],
        );
        assert_eq!(out.unwrap(), [tagged.as_slice(), &[0xFF, 0xFB, 7]].concat());
    }

    #[test]
    fn a_second_opus_piece_is_refused() {
        let p = piece(AudioFormat::OggOpus, b"OggS".to_vec(), None);
        assert_eq!(
            join(AudioFormat::OggOpus, &[p.clone(), p]),
            Err(AudioError::CannotJoinOpus)
        );
    }
}
