//! How much audio a call produced, from its bytes: exact for PCM and WAV (16-bit samples at
//! the call's rate; a WAV's header read for its layout), from the first frame's bit rate for
//! MP3 (vendors send constant bit rate), from the last page's granule position for Ogg Opus.

use crate::{adapters::AudioFormat, audio::wav};

/// Milliseconds of audio in `len` bytes of `format`, whose first bytes are `head` (at least
/// the header) and last bytes `tail` (Ogg: the last page), at `rate` Hz when known.
pub fn audio_ms(format: AudioFormat, rate: Option<u32>, len: u64, head: &[u8], tail: &[u8]) -> u64 {
    match format {
        AudioFormat::Pcm => pcm_ms(len, rate.unwrap_or(24_000), 2),
        AudioFormat::Wav => match wav::header(head) {
            Ok(Some(h)) => {
                let data = h
                    .data_len
                    .map_or(len.saturating_sub(h.data_start as u64), u64::from)
                    .min(len.saturating_sub(h.data_start as u64));
                pcm_ms(data, h.spec.sample_rate, h.spec.block_align() as u64)
            }
            _ => pcm_ms(len.saturating_sub(44), rate.unwrap_or(24_000), 2),
        },
        AudioFormat::Mp3 => mp3_kbps(head).map_or(0, |kbps| len * 8 / kbps),
        AudioFormat::OggOpus => ogg_granule(tail).map_or(0, |g| g.saturating_sub(312) / 48),
    }
}

fn pcm_ms(bytes: u64, rate: u32, frame: u64) -> u64 {
    if rate == 0 || frame == 0 {
        return 0;
    }
    bytes / frame * 1000 / u64::from(rate)
}

/// The bit rate (kbit/s) of the first MPEG-1 Layer III frame header in `b` (after an ID3v2
/// tag, if any).
fn mp3_kbps(b: &[u8]) -> Option<u64> {
    const RATES: [u64; 15] = [
        0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320,
    ];
    let mut at = 0;
    if b.starts_with(b"ID3") && b.len() >= 10 {
        let size = b[6..10]
            .iter()
            .fold(0usize, |acc, x| (acc << 7) | usize::from(x & 0x7f));
        at = 10 + size;
    }
    while at + 3 < b.len() {
        if b[at] == 0xFF && b[at + 1] & 0xE0 == 0xE0 {
            let index = usize::from(b[at + 2] >> 4);
            return RATES.get(index).copied().filter(|r| *r > 0);
        }
        at += 1;
    }
    None
}

/// The granule position of the last Ogg page starting in `b` (48 kHz samples for Opus).
fn ogg_granule(b: &[u8]) -> Option<u64> {
    let at = b.windows(4).rposition(|w| w == b"OggS")?;
    let g = b.get(at + 6..at + 14)?;
    Some(u64::from_le_bytes(g.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcm_and_wav_are_counted_by_their_samples() {
        assert_eq!(
            audio_ms(AudioFormat::Pcm, Some(16_000), 32_000, &[], &[]),
            1000
        );
        let wav = wav::from_pcm16(&vec![0u8; 48_000], 24_000).unwrap_or_default();
        assert_eq!(
            audio_ms(AudioFormat::Wav, None, wav.len() as u64, &wav, &[]),
            1000
        );
    }

    #[test]
    fn mp3_is_counted_from_its_bit_rate() {
        // 128 kbit/s: 16,000 bytes a second.
        let head = [0xFF, 0xFB, 0x90, 0x64];
        assert_eq!(audio_ms(AudioFormat::Mp3, None, 16_000, &head, &[]), 1000);
    }

    #[test]
    fn ogg_is_counted_from_its_last_granule() {
        let mut page = b"OggS\0\0".to_vec();
        page.extend_from_slice(&(48_000u64 + 312).to_le_bytes());
        assert_eq!(audio_ms(AudioFormat::OggOpus, None, 100, &[], &page), 1000);
    }
}
