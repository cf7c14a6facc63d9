//! Reference clips: the few seconds of a voice a zero-shot model imitates. [`inspect`] is the
//! one check every clip passes before the catalog stores it (the container is WAV, MP3 or
//! FLAC, every packet decodes, the duration and size are inside [`ClipLimits`]); [`to_wav`]
//! turns a stored clip into 16-bit PCM WAV for servers that take only WAV.
//!
//! Decoding is the `symphonia` crate's (its WAV, PCM, MP3 and FLAC readers); the whole clip
//! is decoded, so a file that only starts like audio is refused, not stored.

use std::io::Cursor;

use symphonia::core::{
    audio::SampleBuffer, codecs::DecoderOptions, errors::Error as DecodeError,
    formats::FormatOptions, io::MediaSourceStream, meta::MetadataOptions, probe::Hint,
};

/// The bounds a clip must keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClipLimits {
    /// Largest clip in bytes.
    pub max_bytes: usize,
    /// Shortest clip in milliseconds.
    pub min_ms: u32,
    /// Longest clip in milliseconds.
    pub max_ms: u32,
}

impl ClipLimits {
    /// The catalog's bounds: at most 10 MiB, 1..30 s (the self-hosted servers of
    /// docs/VENDORS.md want a few seconds to a few tens of seconds; a profile can be
    /// narrower, e.g. GPT-SoVITS 3..10 s, and synthesis refuses a clip outside it).
    pub const CATALOG: ClipLimits = ClipLimits {
        max_bytes: 10 * 1024 * 1024,
        min_ms: 1_000,
        max_ms: 30_000,
    };
}

/// A clip's container.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClipFormat {
    /// RIFF/WAVE (PCM).
    Wav,
    /// MPEG-1/2 layer III.
    Mp3,
    /// FLAC.
    Flac,
}

impl ClipFormat {
    /// The media type (`audio/wav`, `audio/mpeg`, `audio/flac`).
    pub fn media_type(self) -> &'static str {
        match self {
            ClipFormat::Wav => "audio/wav",
            ClipFormat::Mp3 => "audio/mpeg",
            ClipFormat::Flac => "audio/flac",
        }
    }

    /// The file extension (`wav`, `mp3`, `flac`).
    pub fn extension(self) -> &'static str {
        match self {
            ClipFormat::Wav => "wav",
            ClipFormat::Mp3 => "mp3",
            ClipFormat::Flac => "flac",
        }
    }

    /// From [`ClipFormat::media_type`]'s spelling.
    pub fn from_media_type(s: &str) -> Option<Self> {
        [ClipFormat::Wav, ClipFormat::Mp3, ClipFormat::Flac]
            .into_iter()
            .find(|f| f.media_type() == s)
    }

    /// The container the first bytes announce, if one of the three.
    pub fn sniff(bytes: &[u8]) -> Option<Self> {
        if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WAVE" {
            Some(ClipFormat::Wav)
        } else if bytes.starts_with(b"fLaC") {
            Some(ClipFormat::Flac)
        } else if bytes.starts_with(b"ID3")
            || (bytes.len() >= 2 && bytes[0] == 0xFF && bytes[1] & 0xE0 == 0xE0)
        {
            Some(ClipFormat::Mp3)
        } else {
            None
        }
    }
}

/// What [`inspect`] learned of a clip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClipInfo {
    /// Its container.
    pub format: ClipFormat,
    /// Duration in milliseconds (decoded frames over the sample rate, rounded down).
    pub duration_ms: u32,
    /// Sample rate in Hz.
    pub sample_rate_hz: u32,
    /// Channels.
    pub channels: u16,
}

/// Why a clip is refused: the message names the limit or what is wrong, for the caller.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ClipError(pub String);

/// Checks `bytes` against `limits` and decodes it whole.
///
/// Errors (each names the bound it broke): empty, over `max_bytes`, not WAV/MP3/FLAC, a
/// packet that does not decode, no audio track, a duration outside `min_ms..=max_ms`.
pub fn inspect(bytes: &[u8], limits: ClipLimits) -> Result<ClipInfo, ClipError> {
    if bytes.is_empty() {
        return Err(ClipError("is empty: send a WAV, MP3 or FLAC clip".into()));
    }
    if bytes.len() > limits.max_bytes {
        return Err(ClipError(format!(
            "is {} bytes, over the limit of {} bytes ({} MiB): send a shorter or more compressed clip",
            bytes.len(),
            limits.max_bytes,
            limits.max_bytes / (1024 * 1024)
        )));
    }
    let (info, _) = decode(bytes, false)?;
    if info.duration_ms < limits.min_ms || info.duration_ms > limits.max_ms {
        return Err(ClipError(format!(
            "lasts {:.2} s, outside the accepted {:.0}..{:.0} s: send a clip of a few seconds of clear speech",
            f64::from(info.duration_ms) / 1000.0,
            f64::from(limits.min_ms) / 1000.0,
            f64::from(limits.max_ms) / 1000.0
        )));
    }
    Ok(info)
}

/// The clip as 16-bit PCM WAV (its own rate and channels). A WAV clip already 16-bit is
/// returned as it is. Errors: as [`inspect`]'s decoding errors.
pub fn to_wav(bytes: &[u8]) -> Result<Vec<u8>, ClipError> {
    if ClipFormat::sniff(bytes) == Some(ClipFormat::Wav)
        && hound::WavReader::new(Cursor::new(bytes)).is_ok_and(|r| r.spec().bits_per_sample == 16)
    {
        return Ok(bytes.to_vec());
    }
    let (info, samples) = decode(bytes, true)?;
    let spec = hound::WavSpec {
        channels: info.channels,
        sample_rate: info.sample_rate_hz,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut out = Cursor::new(Vec::with_capacity(samples.len() * 2 + 44));
    let written = (|| {
        let mut writer = hound::WavWriter::new(&mut out, spec)?;
        for s in &samples {
            writer.write_sample(*s)?;
        }
        writer.finalize()
    })();
    written.map_err(|e| ClipError(format!("cannot be written as WAV: {e}")))?;
    Ok(out.into_inner())
}

/// Decodes every packet; with `keep`, returns the interleaved 16-bit samples too.
fn decode(bytes: &[u8], keep: bool) -> Result<(ClipInfo, Vec<i16>), ClipError> {
    let format = ClipFormat::sniff(bytes).ok_or_else(|| {
        ClipError("is not WAV, MP3 or FLAC (its first bytes are none of theirs)".into())
    })?;
    if let Some(cut) = truncation(bytes, format) {
        return Err(ClipError(cut));
    }
    let mut hint = Hint::new();
    hint.with_extension(format.extension());
    let source = MediaSourceStream::new(Box::new(Cursor::new(bytes.to_vec())), Default::default());
    let bad = |e: DecodeError| ClipError(format!("does not decode as {}: {e}", format.extension()));
    let probed = symphonia::default::get_probe()
        .format(
            &hint,
            source,
            &FormatOptions::default(),
            &MetadataOptions::default(),
        )
        .map_err(bad)?;
    let mut reader = probed.format;
    let track = reader
        .default_track()
        .ok_or_else(|| ClipError("holds no audio track".into()))?;
    let track_id = track.id;
    let declared_frames = track.codec_params.n_frames;
    let mut decoder = symphonia::default::get_codecs()
        .make(&track.codec_params, &DecoderOptions::default())
        .map_err(bad)?;
    let mut sample_rate_hz = track.codec_params.sample_rate.unwrap_or(0);
    let mut channels = track
        .codec_params
        .channels
        .map_or(0, |c| u16::try_from(c.count()).unwrap_or(0));
    let mut frames: u64 = 0;
    let mut samples = Vec::new();
    loop {
        let packet = match reader.next_packet() {
            Ok(p) => p,
            Err(DecodeError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(DecodeError::ResetRequired) => break,
            Err(e) => return Err(bad(e)),
        };
        if packet.track_id() != track_id {
            continue;
        }
        let decoded = decoder.decode(&packet).map_err(bad)?;
        let spec = *decoded.spec();
        sample_rate_hz = spec.rate;
        channels = u16::try_from(spec.channels.count()).unwrap_or(0);
        frames += decoded.frames() as u64;
        if keep {
            let mut buf = SampleBuffer::<i16>::new(decoded.capacity() as u64, spec);
            buf.copy_interleaved_ref(decoded);
            samples.extend_from_slice(buf.samples());
        }
    }
    // A FLAC stream says how many frames it holds: fewer decoded is a file cut off (the
    // decoder stops at the end of the bytes without an error).
    if format == ClipFormat::Flac && declared_frames.is_some_and(|n| n > 0 && frames < n) {
        return Err(ClipError(format!(
            "is truncated: its header announces {} frames of audio, the file holds {frames}: send the whole file",
            declared_frames.unwrap_or_default()
        )));
    }
    if frames == 0 || sample_rate_hz == 0 || channels == 0 {
        return Err(ClipError("holds no audio samples".into()));
    }
    let duration_ms = u32::try_from(frames * 1000 / u64::from(sample_rate_hz)).unwrap_or(u32::MAX);
    Ok((
        ClipInfo {
            format,
            duration_ms,
            sample_rate_hz,
            channels,
        },
        samples,
    ))
}

/// Why a WAV whose `data` chunk declares more bytes than follow is not the clip it claims to
/// be (the decoder reads what is there and stops without an error). Placeholder sizes of
/// writers that cannot seek ([`super::wav::PLACEHOLDER_MIN`] and up) mean "to the end".
fn truncation(bytes: &[u8], format: ClipFormat) -> Option<String> {
    if format != ClipFormat::Wav {
        return None;
    }
    let mut pos = 12;
    while pos + 8 <= bytes.len() {
        let size = u32::from_le_bytes([
            bytes[pos + 4],
            bytes[pos + 5],
            bytes[pos + 6],
            bytes[pos + 7],
        ]);
        let available = bytes.len() - (pos + 8);
        if &bytes[pos..pos + 4] == b"data" {
            return (size < super::wav::PLACEHOLDER_MIN && size as usize > available).then(|| {
                format!(
                    "is truncated: its data chunk announces {size} bytes of audio, {available} follow: send the whole file"
                )
            });
        }
        pos = pos
            .saturating_add(8)
            .saturating_add(size as usize)
            .saturating_add(size as usize % 2);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wav(seconds: f64, rate: u32) -> Vec<u8> {
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: rate,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut out = Cursor::new(Vec::new());
        let mut w = hound::WavWriter::new(&mut out, spec).unwrap();
        let n = (seconds * f64::from(rate)) as u32;
        for i in 0..n {
            let t = f64::from(i) / f64::from(rate);
            w.write_sample((8000.0 * (t * 440.0 * std::f64::consts::TAU).sin()) as i16)
                .unwrap();
        }
        w.finalize().unwrap();
        out.into_inner()
    }

    #[test]
    fn a_wav_clip_is_measured() {
        let info = inspect(&wav(2.5, 16_000), ClipLimits::CATALOG).unwrap();
        assert_eq!(info.format, ClipFormat::Wav);
        assert_eq!(info.duration_ms, 2_500);
        assert_eq!((info.sample_rate_hz, info.channels), (16_000, 1));
    }

    #[test]
    fn refusals_name_the_limit() {
        let e = inspect(&wav(0.5, 16_000), ClipLimits::CATALOG).unwrap_err();
        assert!(e.0.contains("0.50 s") && e.0.contains("1..30 s"), "{e}");
        let e = inspect(&wav(31.0, 8_000), ClipLimits::CATALOG).unwrap_err();
        assert!(e.0.contains("1..30 s"), "{e}");
        let small = ClipLimits {
            max_bytes: 1000,
            ..ClipLimits::CATALOG
        };
        let e = inspect(&wav(2.0, 16_000), small).unwrap_err();
        assert!(e.0.contains("over the limit of 1000 bytes"), "{e}");
        let e = inspect(b"hello, not audio at all", ClipLimits::CATALOG).unwrap_err();
        assert!(e.0.contains("not WAV, MP3 or FLAC"), "{e}");
        assert!(inspect(b"", ClipLimits::CATALOG).is_err());
    }

    #[test]
    fn a_clip_that_only_starts_like_audio_is_refused() {
        let mut bytes = wav(2.0, 16_000);
        // Keep the header, replace the samples' chunk id: no data chunk to decode.
        let at = bytes.windows(4).position(|w| w == b"data").unwrap();
        bytes[at..at + 4].copy_from_slice(b"junk");
        assert!(inspect(&bytes, ClipLimits::CATALOG).is_err());
    }

    #[test]
    fn a_wav_cut_before_its_declared_end_is_refused_but_a_streaming_header_is_not() {
        let whole = wav(4.0, 16_000);
        let cut = inspect(&whole[..whole.len() / 2], ClipLimits::CATALOG).unwrap_err();
        assert!(cut.0.contains("is truncated"), "{cut}");
        // A writer that cannot seek leaves the placeholder size: the samples run to the end.
        let mut streamed = whole.clone();
        streamed[40..44].copy_from_slice(&u32::MAX.to_le_bytes());
        streamed[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(inspect(&streamed[..streamed.len() / 2], ClipLimits::CATALOG).is_ok());
    }

    #[test]
    fn to_wav_keeps_a_16_bit_wav_as_it_is() {
        let clip = wav(1.5, 22_050);
        assert_eq!(to_wav(&clip).unwrap(), clip);
    }
}
