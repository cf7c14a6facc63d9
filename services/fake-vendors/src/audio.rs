//! Small real audio for the fake vendors.
//!
//! - WAV / PCM: a 440 Hz sine tone, 16-bit mono, at the requested sample rate (WAV written by
//!   `hound`, so its RIFF sizes match its bytes).
//! - MP3: a run of silent MPEG-1 Layer III frames (128 kbit/s, 44.1 kHz, mono; a 4-byte frame
//!   header followed by zeroed side information and data, 417 bytes a frame, 26 ms each).
//!   Decoders play it as silence; its sample rate is always 44.1 kHz whatever was asked.
//! - Ogg Opus: `OggS` followed by fixed filler bytes. It passes a magic-number check and nothing
//!   more: it is not decodable.

use std::{f64::consts::PI, io::Cursor};

/// The encodings a fake can return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// RIFF/WAVE, 16-bit mono.
    Wav,
    /// Raw signed 16-bit little-endian mono.
    Pcm,
    /// Silent MPEG-1 Layer III frames.
    Mp3,
    /// A non-decodable Ogg placeholder.
    OggOpus,
}

/// Bytes of one silent MP3 frame (128 kbit/s, 44.1 kHz, no padding): 144·128000/44100.
const MP3_FRAME_LEN: usize = 417;

/// `millis` of a 440 Hz tone as signed 16-bit little-endian mono PCM.
pub fn tone_pcm16(sample_rate_hz: u32, millis: u32) -> Vec<u8> {
    let samples = u64::from(sample_rate_hz) * u64::from(millis) / 1000;
    (0..samples)
        .flat_map(|n| {
            let t = n as f64 / f64::from(sample_rate_hz);
            let v = (0.3 * f64::from(i16::MAX) * (2.0 * PI * 440.0 * t).sin()) as i16;
            v.to_le_bytes()
        })
        .collect()
}

/// `millis` of a 440 Hz tone as a WAV file.
pub fn tone_wav(sample_rate_hz: u32, millis: u32) -> Result<Vec<u8>, String> {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: sample_rate_hz,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let pcm = tone_pcm16(sample_rate_hz, millis);
    let mut out = Cursor::new(Vec::with_capacity(pcm.len() + 44));
    {
        let mut writer = hound::WavWriter::new(&mut out, spec).map_err(|e| e.to_string())?;
        for pair in pcm.chunks_exact(2) {
            writer
                .write_sample(i16::from_le_bytes([pair[0], pair[1]]))
                .map_err(|e| e.to_string())?;
        }
        writer.finalize().map_err(|e| e.to_string())?;
    }
    Ok(out.into_inner())
}

/// About `millis` of silent MP3 (at least one frame).
pub fn silent_mp3(millis: u32) -> Vec<u8> {
    let frames = (millis as usize * 44_100 / 1152 / 1000).max(1);
    let mut out = Vec::with_capacity(frames * MP3_FRAME_LEN);
    for _ in 0..frames {
        // sync + MPEG-1 + Layer III + no CRC; 128 kbit/s, 44.1 kHz, no padding; mono.
        out.extend_from_slice(&[0xFF, 0xFB, 0x90, 0xC0]);
        out.resize(out.len() + MP3_FRAME_LEN - 4, 0);
    }
    out
}

/// A fixed Ogg-looking placeholder (not decodable).
pub fn ogg_placeholder() -> Vec<u8> {
    let mut out = b"OggS".to_vec();
    out.extend_from_slice(&[0u8; 60]);
    out
}

/// Audio of `encoding` at `sample_rate_hz` (ignored by MP3 and Ogg), `millis` long.
pub fn render(encoding: Encoding, sample_rate_hz: u32, millis: u32) -> Result<Vec<u8>, String> {
    Ok(match encoding {
        Encoding::Wav => tone_wav(sample_rate_hz, millis)?,
        Encoding::Pcm => tone_pcm16(sample_rate_hz, millis),
        Encoding::Mp3 => silent_mp3(millis),
        Encoding::OggOpus => ogg_placeholder(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wav_tone_is_a_readable_wav_of_the_right_length() {
        let wav = tone_wav(16_000, 100).unwrap();
        let reader = hound::WavReader::new(Cursor::new(wav)).unwrap();
        assert_eq!(reader.spec().sample_rate, 16_000);
        assert_eq!(reader.len(), 1600);
        assert_eq!(tone_pcm16(8_000, 10).len(), 160);
    }

    #[test]
    fn mp3_is_whole_frames_with_a_frame_sync() {
        let mp3 = silent_mp3(200);
        assert_eq!(mp3.len() % MP3_FRAME_LEN, 0);
        assert_eq!(&mp3[..2], &[0xFF, 0xFB]);
        assert_eq!(&mp3[MP3_FRAME_LEN..MP3_FRAME_LEN + 2], &[0xFF, 0xFB]);
    }
}
