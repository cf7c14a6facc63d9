//! Tests of the RIFF reader and writer.

use super::*;

const MONO16: WavSpec = WavSpec {
    channels: 1,
    sample_rate: 22050,
    bits_per_sample: 16,
};

/// A RIFF file from raw chunks (id, declared size, body), RIFF size as given.
fn riff(riff_size: u32, chunks: &[(&[u8; 4], u32, &[u8])]) -> Vec<u8> {
    let mut out = b"RIFF".to_vec();
    out.extend_from_slice(&riff_size.to_le_bytes());
    out.extend_from_slice(b"WAVE");
    for (id, size, body) in chunks {
        out.extend_from_slice(*id);
        out.extend_from_slice(&size.to_le_bytes());
        out.extend_from_slice(body);
        if body.len() % 2 == 1 {
            out.push(0);
        }
    }
    out
}

fn fmt_body(tag: u16, channels: u16, rate: u32, bits: u16) -> Vec<u8> {
    let align = channels * bits / 8;
    let mut b = Vec::new();
    b.extend_from_slice(&tag.to_le_bytes());
    b.extend_from_slice(&channels.to_le_bytes());
    b.extend_from_slice(&rate.to_le_bytes());
    b.extend_from_slice(&(rate * u32::from(align)).to_le_bytes());
    b.extend_from_slice(&align.to_le_bytes());
    b.extend_from_slice(&bits.to_le_bytes());
    b
}

#[test]
fn written_header_sizes_match_the_bytes_and_hound_reads_it() {
    let samples: Vec<i16> = (0..1000).map(|i| (i * 30) as i16).collect();
    let data: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
    let wav = write(MONO16, &data).unwrap();
    assert_eq!(wav.len(), HEADER_LEN + data.len());
    assert_eq!(u32_at(&wav, 4) as usize, wav.len() - 8);
    assert_eq!(u32_at(&wav, 40) as usize, data.len());
    let reader = hound::WavReader::new(std::io::Cursor::new(&wav)).unwrap();
    assert_eq!(reader.spec().sample_rate, 22050);
    let back: Vec<i16> = reader.into_samples().map(Result::unwrap).collect();
    assert_eq!(back, samples);
    assert_eq!(
        parse(&wav).unwrap(),
        Wav {
            spec: MONO16,
            data: &data
        }
    );
}

#[test]
fn espeak_stdout_placeholder_sizes_read_to_the_end() {
    let fmt = fmt_body(1, 1, 22050, 16);
    let data = [1u8, 0, 2, 0, 3, 0];
    let wav = riff(
        0x7FFF_F024,
        &[(b"fmt ", 16, &fmt), (b"data", 0x7FFF_F000, &data)],
    );
    assert_eq!(parse(&wav).unwrap().data, &data);
}

#[test]
fn streaming_placeholders_read_to_the_end() {
    let fmt = fmt_body(1, 1, 16000, 16);
    for placeholder in [0xFFFF_FFFF, 0x7FFF_FFFF] {
        let wav = riff(
            placeholder,
            &[(b"fmt ", 16, &fmt), (b"data", placeholder, &[5, 0, 6, 0])],
        );
        assert_eq!(parse(&wav).unwrap().data, &[5, 0, 6, 0]);
    }
}

#[test]
fn list_and_odd_sized_chunks_are_skipped_by_their_sizes() {
    let fmt = fmt_body(1, 1, 24000, 16);
    let wav = riff(
        0,
        &[
            (b"LIST", 5, b"INFOx"),
            (b"fmt ", 16, &fmt),
            (b"fact", 4, &[0, 0, 0, 0]),
            (b"data", 4, &[9, 0, 8, 0]),
            (b"LIST", 4, b"junk"),
        ],
    );
    let parsed = parse(&wav).unwrap();
    assert_eq!(parsed.spec.sample_rate, 24000);
    assert_eq!(parsed.data, &[9, 0, 8, 0]);
}

#[test]
fn a_partial_trailing_frame_is_dropped() {
    let fmt = fmt_body(1, 1, 22050, 16);
    let mut wav = riff(
        0xFFFF_FFFF,
        &[(b"fmt ", 16, &fmt), (b"data", 0xFFFF_FFFF, &[1, 0, 2])],
    );
    wav.pop(); // a streamed file has no pad byte after an odd-length tail
    assert_eq!(parse(&wav).unwrap().data, &[1, 0]);
}

#[test]
fn a_truncated_data_chunk_without_placeholder_is_an_error() {
    let fmt = fmt_body(1, 1, 22050, 16);
    let wav = riff(100, &[(b"fmt ", 16, &fmt), (b"data", 1000, &[1, 0])]);
    assert!(matches!(
        parse(&wav),
        Err(WavError::Truncated {
            declared: 1000,
            available: 2,
            ..
        })
    ));
}

#[test]
fn extensible_pcm_is_accepted_and_float_is_refused() {
    let mut ext = fmt_body(0xFFFE, 2, 48000, 16);
    ext.extend_from_slice(&22u16.to_le_bytes());
    ext.extend_from_slice(&16u16.to_le_bytes());
    ext.extend_from_slice(&3u32.to_le_bytes());
    ext.extend_from_slice(&1u16.to_le_bytes());
    ext.extend_from_slice(&[0; 14]);
    let wav = riff(0, &[(b"fmt ", 40, &ext), (b"data", 4, &[0, 0, 0, 0])]);
    assert_eq!(
        parse(&wav).unwrap().spec,
        WavSpec {
            channels: 2,
            sample_rate: 48000,
            bits_per_sample: 16
        }
    );
    let float = riff(
        0,
        &[
            (b"fmt ", 16, &fmt_body(3, 1, 22050, 32)),
            (b"data", 4, &[0; 4]),
        ],
    );
    assert!(matches!(parse(&float), Err(WavError::Unsupported(_))));
}

#[test]
fn vendor_error_bodies_are_not_audio() {
    assert!(matches!(
        parse(br#"{"error":{"message":"rate limited"}}"#),
        Err(WavError::NotWave(_))
    ));
    assert!(matches!(parse(b""), Err(WavError::NotWave(_))));
    let no_data = riff(0, &[(b"fmt ", 16, &fmt_body(1, 1, 22050, 16))]);
    assert_eq!(parse(&no_data), Err(WavError::MissingData));
    let no_fmt = riff(0, &[(b"data", 2, &[0, 0])]);
    assert_eq!(parse(&no_fmt), Err(WavError::MissingFmt));
}

#[test]
fn pcm_is_wrapped_into_a_wav_whose_sizes_match() {
    let pcm: Vec<u8> = (0..200i16).flat_map(i16::to_le_bytes).collect();
    let wav = from_pcm16(&pcm, 16_000).unwrap();
    assert_eq!(wav.len(), 44 + pcm.len());
    let reader = hound::WavReader::new(std::io::Cursor::new(&wav)).unwrap();
    assert_eq!(reader.spec().sample_rate, 16_000);
    assert_eq!(reader.len(), 200);
    assert!(from_pcm16(&[1, 2, 3], 16_000).is_err());
}
