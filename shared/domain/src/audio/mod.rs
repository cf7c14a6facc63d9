//! Audio formats, checks and joining: the one sniffer ([`sniff`]), the one WAV reader and
//! writer ([`wav`]) and the one joiner ([`Joiner`]) that synthesis and voxctl both use.
//!
//! - [`validate`] runs on every vendor answer before it is reported as SUCCESS: the format
//!   must be the one asked for and the bytes must look like it (a parseable PCM WAV, an MP3
//!   frame or ID3 tag, an Ogg page, whole 16-bit samples), so a vendor's error body is never
//!   returned as audio; a failure counts as UPSTREAM_ERROR and fails over.
//! - [`Joiner`] turns the pieces of split text into one output: PCM by concatenation, MP3 by
//!   concatenating frames (ID3v2 tags of later pieces dropped), WAV by concatenating the
//!   sample data under ONE header whose sizes match the bytes (pieces must share sample rate,
//!   channels and bit depth). Ogg Opus streams cannot be joined by concatenation: a second
//!   piece is refused (the service refuses multi-chunk OGG_OPUS requests up front).

pub mod clip;
pub mod join;
pub mod wav;

pub use join::Joiner;

/// Audio container/encoding requested by the caller (mirrors the proto `AudioFormat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AudioFormat {
    /// RIFF/WAVE, 16-bit PCM.
    Wav,
    /// MPEG-1 layer III.
    Mp3,
    /// Opus in Ogg.
    OggOpus,
    /// Raw signed 16-bit little-endian mono, no header.
    Pcm,
}

impl std::fmt::Display for AudioFormat {
    /// The format's name in the API (`WAV`, `MP3`, `OGG_OPUS`, `PCM`), as callers spell it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AudioFormat::Wav => "WAV",
            AudioFormat::Mp3 => "MP3",
            AudioFormat::OggOpus => "OGG_OPUS",
            AudioFormat::Pcm => "PCM",
        })
    }
}

/// A piece of encoded audio: what a vendor returned, or one part of a split text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Audio {
    /// Encoded audio in `format`.
    pub bytes: Vec<u8>,
    /// Its format.
    pub format: AudioFormat,
    /// Its sample rate (Hz), when known.
    pub sample_rate_hz: Option<u32>,
}

/// Why a vendor answer or a set of pieces is not usable audio.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AudioError {
    /// The vendor returned another format than requested.
    #[error("asked for {expected:?} audio, got {got:?}")]
    WrongFormat {
        /// Requested.
        expected: AudioFormat,
        /// Returned.
        got: AudioFormat,
    },
    /// A WAV that does not parse.
    #[error("invalid WAV: {0}")]
    Wav(#[from] wav::WavError),
    /// Bytes that are not the claimed encoding.
    #[error("not {format} audio: {reason}")]
    NotAudio {
        /// Claimed format.
        format: AudioFormat,
        /// What is wrong.
        reason: String,
    },
    /// Pieces with different layouts (sample rate, channels, bit depth).
    #[error("piece {index} is {got}, the first piece is {first}; pieces must share one layout")]
    Mismatch {
        /// 0-based piece index.
        index: usize,
        /// Layout of the first piece.
        first: String,
        /// Layout of this piece.
        got: String,
    },
    /// Ogg Opus pieces cannot be concatenated.
    #[error(
        "OGG_OPUS audio cannot be joined from several pieces; use WAV, PCM or MP3 for long text"
    )]
    CannotJoinOpus,
}

/// Checks that `audio` is plausibly what was asked for (module doc).
pub fn validate(audio: &Audio, expected: AudioFormat) -> Result<(), AudioError> {
    if audio.format != expected {
        return Err(AudioError::WrongFormat {
            expected,
            got: audio.format,
        });
    }
    sniff(expected, &audio.bytes)
}

/// The one format sniffer: `bytes` must look like `format` (a parseable PCM WAV, an ID3 tag
/// or MPEG frame sync, an Ogg page, whole 16-bit samples). Adapters use it on raw vendor
/// bodies, [`validate`] on every answer.
pub fn sniff(format: AudioFormat, b: &[u8]) -> Result<(), AudioError> {
    let not = |reason: &str| {
        Err(AudioError::NotAudio {
            format,
            reason: reason.to_owned(),
        })
    };
    match format {
        AudioFormat::Wav => wav::parse(b).map(|_| ()).map_err(AudioError::from),
        AudioFormat::Pcm if b.is_empty() => not("no samples"),
        AudioFormat::Pcm if b.len() % 2 == 1 => not("odd byte count for 16-bit samples"),
        AudioFormat::Pcm => Ok(()),
        AudioFormat::Mp3
            if b.starts_with(b"ID3") || (b.len() >= 2 && b[0] == 0xFF && b[1] & 0xE0 == 0xE0) =>
        {
            Ok(())
        }
        AudioFormat::Mp3 => not("no ID3 tag or MPEG frame sync at the start"),
        AudioFormat::OggOpus if b.starts_with(b"OggS") => Ok(()),
        AudioFormat::OggOpus => not("no Ogg page at the start"),
    }
}

/// [`sniff`] for the first bytes of a stream: `Ok(true)` once `bytes` are enough to tell they
/// look like `format` (a WAV through its `data` chunk header, an ID3 tag or MPEG frame sync,
/// an Ogg page, one 16-bit sample), `Ok(false)` while more are needed, an error as soon as they
/// cannot be `format`. A stream that ends undecided is judged by [`sniff`] on all its bytes.
pub fn sniff_start(format: AudioFormat, b: &[u8]) -> Result<bool, AudioError> {
    let needed = match format {
        AudioFormat::Wav => return Ok(wav::header(b)?.is_some()),
        AudioFormat::Pcm => 2,
        AudioFormat::Mp3 if b.first() == Some(&b'I') => 3,
        AudioFormat::Mp3 => 2,
        AudioFormat::OggOpus => 4,
    };
    if b.len() >= needed {
        // A prefix of PCM may end mid-sample; the whole stream's length is the caller's check.
        if format == AudioFormat::Pcm {
            return Ok(true);
        }
        return sniff(format, b).map(|()| true);
    }
    let prefix_ok = match format {
        AudioFormat::Mp3 => b"ID3".starts_with(b) || b == [0xFF],
        AudioFormat::OggOpus => b"OggS".starts_with(b),
        AudioFormat::Wav | AudioFormat::Pcm => true,
    };
    if prefix_ok {
        Ok(false)
    } else {
        sniff(format, b).map(|()| false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn audio(format: AudioFormat, bytes: &[u8]) -> Audio {
        Audio {
            bytes: bytes.to_vec(),
            format,
            sample_rate_hz: None,
        }
    }

    #[test]
    fn json_error_bodies_fail_validation_for_every_container() {
        let body = br#"{"error":"quota"}"#;
        assert!(validate(&audio(AudioFormat::Wav, body), AudioFormat::Wav).is_err());
        assert!(validate(&audio(AudioFormat::Mp3, body), AudioFormat::Mp3).is_err());
        assert!(validate(&audio(AudioFormat::OggOpus, body), AudioFormat::OggOpus).is_err());
        assert!(validate(&audio(AudioFormat::Pcm, b"abc"), AudioFormat::Pcm).is_err());
    }

    #[test]
    fn a_different_format_than_requested_is_refused() {
        let err = validate(
            &audio(AudioFormat::Mp3, &[0xFF, 0xFB, 0x90]),
            AudioFormat::Wav,
        )
        .unwrap_err();
        assert_eq!(
            err,
            AudioError::WrongFormat {
                expected: AudioFormat::Wav,
                got: AudioFormat::Mp3
            }
        );
    }

    #[test]
    fn plausible_audio_passes() {
        assert!(
            validate(
                &audio(AudioFormat::Mp3, &[0xFF, 0xFB, 0x90, 0]),
                AudioFormat::Mp3
            )
            .is_ok()
        );
        assert!(
            validate(
                &audio(AudioFormat::Mp3, b"ID3\x04\0\0\0\0\0\0"),
                AudioFormat::Mp3
            )
            .is_ok()
        );
        assert!(
            validate(
                &audio(AudioFormat::OggOpus, b"OggS\0\x02"),
                AudioFormat::OggOpus
            )
            .is_ok()
        );
        assert!(validate(&audio(AudioFormat::Pcm, &[0, 1, 2, 3]), AudioFormat::Pcm).is_ok());
    }

    #[test]
    fn stream_starts_are_judged_as_soon_as_enough_bytes_are_there() {
        let wav = wav::write(
            wav::WavSpec {
                channels: 1,
                sample_rate: 8000,
                bits_per_sample: 16,
            },
            &[0, 0],
        )
        .unwrap();
        assert_eq!(sniff_start(AudioFormat::Wav, &wav[..30]), Ok(false));
        assert_eq!(sniff_start(AudioFormat::Wav, &wav[..44]), Ok(true));
        assert!(sniff_start(AudioFormat::Wav, b"{\"err").is_err());
        assert_eq!(sniff_start(AudioFormat::Mp3, b"I"), Ok(false));
        assert_eq!(sniff_start(AudioFormat::Mp3, b"ID3"), Ok(true));
        assert_eq!(sniff_start(AudioFormat::Mp3, &[0xFF, 0xFB]), Ok(true));
        assert!(sniff_start(AudioFormat::Mp3, b"{").is_err());
        assert_eq!(sniff_start(AudioFormat::OggOpus, b"Og"), Ok(false));
        assert!(sniff_start(AudioFormat::OggOpus, b"<x").is_err());
        assert_eq!(sniff_start(AudioFormat::Pcm, &[1]), Ok(false));
        assert_eq!(sniff_start(AudioFormat::Pcm, &[1, 2]), Ok(true));
        assert_eq!(
            sniff_start(AudioFormat::Pcm, &[1, 2, 3]),
            Ok(true),
            "a prefix may end mid-sample"
        );
    }
}
