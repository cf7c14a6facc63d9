//! [`Joiner`]: one output from the pieces of a split text, incrementally, so the streaming
//! RPC and the unary RPC produce the same bytes (unary = everything the joiner returned, in
//! order; streaming sends the same bytes as they come).
//!
//! A piece can be pushed whole ([`Joiner::push`]) or as it arrives from a vendor
//! ([`Joiner::begin`], [`Joiner::feed`] with any slicing of its bytes, [`Joiner::end`]): the
//! output is the same bytes either way. WAV output is exact by default (one header whose sizes
//! match the samples, so nothing can be sent before the last piece); with
//! [`Joiner::streaming_wav`] a header with unknown sizes (`0xFFFFFFFF`) goes out as soon as the
//! first piece's header is read, then the samples as they come.

use super::{Audio, AudioFormat};
use super::{
    AudioError,
    wav::{self, WavError, WavSpec},
};

/// Most bytes a WAV piece may carry before its `data` chunk starts (`LIST` and other chunks).
const MAX_WAV_PREAMBLE: usize = 1 << 20;

/// Where the current piece is.
#[derive(Debug)]
enum Piece {
    /// No piece begun (or the last one ended).
    Idle,
    /// The piece's first bytes, held until its header is read (WAV, or a later MP3 piece's
    /// possible ID3v2 tag).
    Probe(Vec<u8>),
    /// WAV samples: `left` declared bytes still to come (`None`: to the end), `partial` an
    /// incomplete sample frame, `declared`/`got` for the truncation check.
    Samples {
        spec: WavSpec,
        left: Option<u64>,
        declared: Option<u32>,
        got: u64,
        partial: Vec<u8>,
    },
    /// A later MP3 piece's ID3v2 tag: this many bytes still to drop.
    Skip(usize),
    /// Bytes go out as they are.
    Pass,
}

/// Joins pieces of one format (module doc of [`super`]).
#[derive(Debug)]
pub struct Joiner {
    format: AudioFormat,
    chain_ogg: bool,
    streaming_wav: bool,
    /// Pieces begun so far.
    pieces: usize,
    piece: Piece,
    /// The first WAV piece's layout.
    wav_spec: Option<WavSpec>,
    /// Exact WAV: every piece's samples, written under one header by [`Joiner::finish`].
    wav_data: Vec<u8>,
    sample_rate_hz: Option<u32>,
}

impl Joiner {
    /// A joiner for pieces of `format`.
    pub fn new(format: AudioFormat) -> Self {
        Self {
            format,
            chain_ogg: false,
            streaming_wav: false,
            pieces: 0,
            piece: Piece::Idle,
            wav_spec: None,
            wav_data: Vec::new(),
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

    /// WAV output with the streaming header (sizes `0xFFFFFFFF`) sent with the first piece's
    /// first samples, instead of an exact header after the last piece. No effect on other
    /// formats.
    pub fn streaming_wav(mut self) -> Self {
        self.streaming_wav = true;
        self
    }

    /// The sample rate (Hz) of the pieces so far, from the WAV header or the vendor.
    pub fn sample_rate_hz(&self) -> Option<u32> {
        self.sample_rate_hz
    }

    /// Adds a whole piece (already passed [`super::validate`]) and returns the bytes that may
    /// be sent now: the piece itself for PCM and MP3 (later MP3 pieces without their ID3v2
    /// tag), the first OGG_OPUS piece, nothing for exact WAV (whose header needs the final
    /// size). Errors: a layout or sample-rate mismatch, a second OGG_OPUS piece, a bad WAV.
    pub fn push(&mut self, audio: &Audio) -> Result<Vec<u8>, AudioError> {
        if audio.format != self.format {
            return Err(AudioError::WrongFormat {
                expected: self.format,
                got: audio.format,
            });
        }
        self.begin()?;
        let mut out = self.feed(&audio.bytes)?;
        out.extend(self.end(audio.sample_rate_hz)?);
        Ok(out)
    }

    /// Starts the next piece. Errors: a second OGG_OPUS piece (unless chaining).
    pub fn begin(&mut self) -> Result<(), AudioError> {
        let index = self.pieces;
        if self.format == AudioFormat::OggOpus && index > 0 && !self.chain_ogg {
            return Err(AudioError::CannotJoinOpus);
        }
        self.pieces += 1;
        self.piece = match self.format {
            AudioFormat::Wav => Piece::Probe(Vec::new()),
            AudioFormat::Mp3 if index > 0 => Piece::Probe(Vec::new()),
            AudioFormat::Mp3 | AudioFormat::Pcm | AudioFormat::OggOpus => Piece::Pass,
        };
        Ok(())
    }

    /// The next bytes of the current piece, sliced anyhow; returns the bytes that may be sent
    /// now. Errors: a WAV whose header is not PCM WAV or whose layout differs from the first
    /// piece's.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<u8>, AudioError> {
        let mut out = Vec::new();
        match std::mem::replace(&mut self.piece, Piece::Idle) {
            Piece::Idle | Piece::Pass => {
                self.piece = Piece::Pass;
                out.extend_from_slice(bytes);
            }
            Piece::Probe(mut held) => {
                held.extend_from_slice(bytes);
                self.probe(held, &mut out)?;
            }
            Piece::Skip(n) if n >= bytes.len() => self.piece = Piece::Skip(n - bytes.len()),
            Piece::Skip(n) => {
                self.piece = Piece::Pass;
                out.extend_from_slice(&bytes[n..]);
            }
            samples @ Piece::Samples { .. } => {
                self.piece = samples;
                self.samples(bytes, &mut out);
            }
        }
        Ok(out)
    }

    /// Reads a held piece start once enough of it is there.
    fn probe(&mut self, held: Vec<u8>, out: &mut Vec<u8>) -> Result<(), AudioError> {
        if self.format == AudioFormat::Mp3 {
            if held.len() >= 3 && !held.starts_with(b"ID3") {
                self.piece = Piece::Pass;
                out.extend_from_slice(&held);
            } else if held.len() >= 10 {
                let size = held[6..10]
                    .iter()
                    .fold(0usize, |acc, b| (acc << 7) | usize::from(b & 0x7F));
                let footer = if held[5] & 0x10 != 0 { 10 } else { 0 };
                let tag = 10 + size + footer;
                if tag >= held.len() {
                    self.piece = Piece::Skip(tag - held.len());
                } else {
                    self.piece = Piece::Pass;
                    out.extend_from_slice(&held[tag..]);
                }
            } else {
                self.piece = Piece::Probe(held);
            }
            return Ok(());
        }
        let Some(header) = wav::header(&held)? else {
            if held.len() > MAX_WAV_PREAMBLE {
                return Err(AudioError::Wav(WavError::MissingData));
            }
            self.piece = Piece::Probe(held);
            return Ok(());
        };
        let index = self.pieces - 1;
        match self.wav_spec {
            None => {
                self.wav_spec = Some(header.spec);
                if self.streaming_wav {
                    out.extend(wav::streaming_header(header.spec)?);
                }
            }
            Some(first) if first != header.spec => {
                return Err(AudioError::Mismatch {
                    index,
                    first: first.to_string(),
                    got: header.spec.to_string(),
                });
            }
            Some(_) => {}
        }
        self.sample_rate_hz = Some(header.spec.sample_rate);
        self.piece = Piece::Samples {
            spec: header.spec,
            left: header.data_len.map(u64::from),
            declared: header.data_len,
            got: 0,
            partial: Vec::new(),
        };
        self.samples(&held[header.data_start..], out);
        Ok(())
    }

    /// WAV sample bytes: whole frames go out (or into the exact file), a partial frame waits.
    fn samples(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        let Piece::Samples {
            spec,
            left,
            got,
            partial,
            ..
        } = &mut self.piece
        else {
            return;
        };
        let take = match left {
            Some(n) => bytes.len().min(usize::try_from(*n).unwrap_or(usize::MAX)),
            None => bytes.len(),
        };
        if let Some(n) = left {
            *n -= take as u64;
        }
        *got += take as u64;
        partial.extend_from_slice(&bytes[..take]);
        let align = spec.block_align().max(1);
        let whole = partial.len() - partial.len() % align;
        let frames: Vec<u8> = partial.drain(..whole).collect();
        if self.streaming_wav {
            out.extend(frames);
        } else {
            self.wav_data.extend(frames);
        }
    }

    /// Ends the current piece (`sample_rate_hz` as the vendor reported it) and returns what
    /// may be sent now (a later MP3 piece shorter than an ID3v2 header). Errors: a WAV piece
    /// without a complete header or with fewer samples than it declared, a rate mismatch.
    pub fn end(&mut self, sample_rate_hz: Option<u32>) -> Result<Vec<u8>, AudioError> {
        let index = self.pieces.saturating_sub(1);
        let mut out = Vec::new();
        match std::mem::replace(&mut self.piece, Piece::Idle) {
            Piece::Probe(held) if self.format == AudioFormat::Wav => {
                // Not even a header: the whole-file parse names what is missing.
                wav::parse(&held)?;
                return Err(AudioError::Wav(WavError::MissingData));
            }
            Piece::Probe(held) => out = held,
            Piece::Samples {
                declared: Some(declared),
                left: Some(left),
                got,
                ..
            } if left > 0 => {
                return Err(AudioError::Wav(WavError::Truncated {
                    id: "data".into(),
                    declared,
                    available: usize::try_from(got).unwrap_or(usize::MAX),
                }));
            }
            Piece::Idle | Piece::Pass | Piece::Skip(_) | Piece::Samples { .. } => {}
        }
        if self.format != AudioFormat::Wav {
            self.check_rate(index, sample_rate_hz)?;
        }
        Ok(out)
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
    /// match the data) for exact WAV, nothing for streaming WAV and the other formats.
    /// Errors: no WAV piece at all, or more than 4 GiB of samples.
    pub fn finish(self) -> Result<Vec<u8>, AudioError> {
        match (self.format, self.wav_spec) {
            (AudioFormat::Wav, Some(_)) if self.streaming_wav => Ok(Vec::new()),
            (AudioFormat::Wav, Some(spec)) => Ok(wav::write(spec, &self.wav_data)?),
            (AudioFormat::Wav, None) => Err(AudioError::Wav(WavError::MissingData)),
            (AudioFormat::Pcm | AudioFormat::Mp3 | AudioFormat::OggOpus, _) => Ok(Vec::new()),
        }
    }
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

    /// Feeds each piece `step` bytes at a time.
    fn join_sliced(mut j: Joiner, pieces: &[Audio], step: usize) -> Result<Vec<u8>, AudioError> {
        let mut out = Vec::new();
        for p in pieces {
            j.begin()?;
            for slice in p.bytes.chunks(step) {
                out.extend(j.feed(slice)?);
            }
            out.extend(j.end(p.sample_rate_hz)?);
        }
        out.extend(j.finish()?);
        Ok(out)
    }

    #[test]
    fn pieces_fed_in_any_slicing_give_the_same_bytes_as_whole_pieces() {
        let tagged = [
            b"ID3\x04\x00\x00\x00\x00\x03".as_slice(),
            &[0xAA, 0xBB, 0xCC],
            &[0xFF, 0xFB, 7, 8, 9],
        ]
        .concat();
        let mut placeholder = wav::write(MONO, &[5, 0, 6, 0, 7]).unwrap();
        placeholder[40..44].copy_from_slice(&0x7FFF_F000u32.to_le_bytes());
        let cases = [
            (
                AudioFormat::Wav,
                vec![
                    piece(
                        AudioFormat::Wav,
                        wav::write(MONO, &[1, 0, 2, 0]).unwrap(),
                        None,
                    ),
                    piece(AudioFormat::Wav, placeholder, None),
                ],
            ),
            (
                AudioFormat::Mp3,
                vec![
                    piece(AudioFormat::Mp3, tagged.clone(), None),
                    piece(AudioFormat::Mp3, tagged.clone(), None),
                    piece(AudioFormat::Mp3, vec![0xFF, 0xFB], None),
                ],
            ),
            (
                AudioFormat::Pcm,
                vec![
                    piece(AudioFormat::Pcm, vec![1, 2, 3, 4], Some(24000)),
                    piece(AudioFormat::Pcm, vec![5, 6], Some(24000)),
                ],
            ),
        ];
        for (format, pieces) in cases {
            let whole = join(format, &pieces).unwrap();
            for step in [1, 2, 3, 7, 1000] {
                let sliced = join_sliced(Joiner::new(format), &pieces, step).unwrap();
                assert_eq!(sliced, whole, "{format} fed {step} bytes at a time");
            }
        }
    }

    #[test]
    fn streaming_wav_sends_an_unknown_size_header_then_samples_as_they_come() {
        let mut j = Joiner::new(AudioFormat::Wav).streaming_wav();
        let a = wav::write(MONO, &[1, 0, 2, 0]).unwrap();
        j.begin().unwrap();
        assert!(j.feed(&a[..20]).unwrap().is_empty(), "no header yet");
        let first = j.feed(&a[20..46]).unwrap();
        assert_eq!(
            first.len(),
            wav::HEADER_LEN + 2,
            "header and one whole frame"
        );
        assert_eq!(&first[4..8], &u32::MAX.to_le_bytes());
        assert_eq!(&first[40..44], &u32::MAX.to_le_bytes());
        assert_eq!(&first[44..], &[1, 0]);
        assert_eq!(j.feed(&a[46..]).unwrap(), vec![2, 0]);
        j.end(None).unwrap();
        j.begin().unwrap();
        let b = wav::write(MONO, &[3, 0]).unwrap();
        assert_eq!(j.feed(&b).unwrap(), vec![3, 0], "later headers are dropped");
        j.end(None).unwrap();
        assert!(j.finish().unwrap().is_empty());
        let parsed = wav::header(&first).unwrap().unwrap();
        assert_eq!(parsed.data_len, None, "readers take the samples to the end");
    }

    #[test]
    fn a_wav_piece_cut_short_of_its_declared_size_is_refused_at_its_end() {
        let a = wav::write(MONO, &[1, 0, 2, 0]).unwrap();
        let mut j = Joiner::new(AudioFormat::Wav);
        j.begin().unwrap();
        j.feed(&a[..46]).unwrap();
        assert!(matches!(
            j.end(None),
            Err(AudioError::Wav(WavError::Truncated {
                declared: 4,
                available: 2,
                ..
            }))
        ));
    }

    #[test]
    fn a_json_body_is_refused_as_wav_from_its_first_bytes() {
        let mut j = Joiner::new(AudioFormat::Wav);
        j.begin().unwrap();
        assert!(j.feed(br#"{"error":"busy"}"#).is_err());
    }
}
