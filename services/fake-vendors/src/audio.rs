//! Small real audio for the fake vendors.
//!
//! - WAV / PCM: a 440 Hz sine tone, 16-bit mono, at the requested sample rate (WAV written by
//!   `hound`, so its RIFF sizes match its bytes).
//! - MP3: a run of silent MPEG-1 Layer III frames (128 kbit/s, 44.1 kHz, mono; a 4-byte frame
//!   header followed by zeroed side information and data, 417 bytes a frame, 26 ms each).
//!   Decoders play it as silence; its sample rate is always 44.1 kHz whatever was asked.
//! - Ogg Opus: `OggS` followed by fixed filler bytes. It passes a magic-number check and nothing
//!   more: it is not decodable.
//!
//! With markers on ([`render_marked`]), the payload starts with [`marker`] of the request's text
//! so that a test can find, in the audio a service returns, which text produced which part: the
//! PCM samples (WAV: the data chunk after the header), the bytes after the first MP3 frame's
//! 4-byte header, or the filler after `OggS`. The length stays the same (PCM/WAV shorter than the
//! marker grow to hold it); the rest is the usual tone or silence.

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

/// Bytes of request text a [`marker`] keeps.
pub const MARKER_TEXT_BYTES: usize = 48;

/// The marker of a request text: ASCII `[[`, the first [`MARKER_TEXT_BYTES`] (48) bytes of
/// `text` as UTF-8 (cut back to a char boundary), `]]`, then one space if needed to make the
/// length even (whole 16-bit samples). At most 53 bytes.
pub fn marker(text: &str) -> Vec<u8> {
    let mut end = text.len().min(MARKER_TEXT_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = Vec::with_capacity(end + 5);
    out.extend_from_slice(b"[[");
    out.extend_from_slice(&text.as_bytes()[..end]);
    out.extend_from_slice(b"]]");
    if out.len() % 2 == 1 {
        out.push(b' ');
    }
    out
}

/// Writes `marker` over the start of `payload`, growing it (zeros) if it is shorter.
fn overlay(payload: &mut Vec<u8>, marker: &[u8]) {
    if payload.len() < marker.len() {
        payload.resize(marker.len(), 0);
    }
    payload[..marker.len()].copy_from_slice(marker);
}

/// `millis` of a 440 Hz tone as signed 16-bit little-endian mono PCM. A second holds exactly
/// 440 periods, so the first second is computed and the rest repeats it: long answers (minutes
/// of audio, for tests of slow readers) cost a copy, not a sine per sample.
pub fn tone_pcm16(sample_rate_hz: u32, millis: u32) -> Vec<u8> {
    let samples =
        usize::try_from(u64::from(sample_rate_hz) * u64::from(millis) / 1000).unwrap_or(usize::MAX);
    let second: Vec<u8> = (0..u64::from(sample_rate_hz).min(samples as u64))
        .flat_map(|n| {
            let t = n as f64 / f64::from(sample_rate_hz);
            let v = (0.3 * f64::from(i16::MAX) * (2.0 * PI * 440.0 * t).sin()) as i16;
            v.to_le_bytes()
        })
        .collect();
    let mut pcm = Vec::with_capacity(samples * 2);
    while pcm.len() < samples * 2 {
        let take = (samples * 2 - pcm.len()).min(second.len());
        pcm.extend_from_slice(&second[..take]);
    }
    pcm
}

/// `millis` of a 440 Hz tone as a WAV file.
pub fn tone_wav(sample_rate_hz: u32, millis: u32) -> Result<Vec<u8>, String> {
    wav_of(sample_rate_hz, &tone_pcm16(sample_rate_hz, millis))
}

/// 16-bit mono PCM (`pcm`, little-endian, even length) wrapped in a WAV file.
fn wav_of(sample_rate_hz: u32, pcm: &[u8]) -> Result<Vec<u8>, String> {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: sample_rate_hz,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
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
    render_marked(encoding, sample_rate_hz, millis, None)
}

/// [`render`], with the payload starting with `marker` when given (see the module doc; a
/// marker is at most 53 bytes, which always fits an MP3 frame and the Ogg filler).
pub fn render_marked(
    encoding: Encoding,
    sample_rate_hz: u32,
    millis: u32,
    marker: Option<&[u8]>,
) -> Result<Vec<u8>, String> {
    let marker = marker.unwrap_or_default();
    let pcm = || {
        let mut pcm = tone_pcm16(sample_rate_hz, millis);
        overlay(&mut pcm, marker);
        pcm
    };
    Ok(match encoding {
        Encoding::Wav => wav_of(sample_rate_hz, &pcm())?,
        Encoding::Pcm => pcm(),
        Encoding::Mp3 => {
            let mut mp3 = silent_mp3(millis);
            let room = MP3_FRAME_LEN - 4;
            let m = &marker[..marker.len().min(room)];
            mp3[4..4 + m.len()].copy_from_slice(m);
            mp3
        }
        Encoding::OggOpus => {
            let mut ogg = ogg_placeholder();
            let m = &marker[..marker.len().min(ogg.len() - 4)];
            ogg[4..4 + m.len()].copy_from_slice(m);
            ogg
        }
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
    fn markers_keep_48_bytes_at_a_char_boundary_and_an_even_length() {
        assert_eq!(marker("Hi"), b"[[Hi]]");
        assert_eq!(marker("Hey"), b"[[Hey]] ");
        let long = "é".repeat(40); // 80 bytes: 48 is a boundary
        assert_eq!(marker(&long).len(), 2 + 48 + 2);
        let odd = format!("a{}", "é".repeat(40)); // byte 48 is inside a char
        let m = marker(&odd);
        assert_eq!(&m[2..49], &odd.as_bytes()[..47]);
        assert_eq!(m.len() % 2, 0);
    }

    #[test]
    fn marked_audio_starts_its_payload_with_the_marker_and_keeps_its_length() {
        let m = marker("Hello there");
        let wav = render_marked(Encoding::Wav, 8_000, 50, Some(&m)).unwrap();
        assert_eq!(wav.len(), tone_wav(8_000, 50).unwrap().len());
        assert_eq!(&wav[44..44 + m.len()], &m[..]);
        assert!(hound::WavReader::new(Cursor::new(&wav)).is_ok());
        let pcm = render_marked(Encoding::Pcm, 8_000, 1, Some(&m)).unwrap();
        assert_eq!(
            &pcm[..],
            &m[..],
            "a payload shorter than the marker grows to hold it"
        );
        let mp3 = render_marked(Encoding::Mp3, 0, 200, Some(&m)).unwrap();
        assert_eq!(&mp3[..4], &[0xFF, 0xFB, 0x90, 0xC0]);
        assert_eq!(&mp3[4..4 + m.len()], &m[..]);
        let ogg = render_marked(Encoding::OggOpus, 0, 200, Some(&m)).unwrap();
        assert_eq!(&ogg[..4], b"OggS");
        assert_eq!(&ogg[4..4 + m.len()], &m[..]);
        assert_eq!(
            render_marked(Encoding::Pcm, 8_000, 10, None).unwrap(),
            tone_pcm16(8_000, 10)
        );
    }

    #[test]
    fn mp3_is_whole_frames_with_a_frame_sync() {
        let mp3 = silent_mp3(200);
        assert_eq!(mp3.len() % MP3_FRAME_LEN, 0);
        assert_eq!(&mp3[..2], &[0xFF, 0xFB]);
        assert_eq!(&mp3[MP3_FRAME_LEN..MP3_FRAME_LEN + 2], &[0xFF, 0xFB]);
    }
}
