//! A careful RIFF/WAVE reader and the service's one PCM WAV writer.
//!
//! The reader is our own because the placeholders below are what vendors and espeak-ng really
//! send and `hound`'s reader refuses them; the writer's header comes from `hound`.
//!
//! [`parse`] walks the chunks by their declared sizes (word-aligned, pad byte skipped), reads
//! `fmt ` (PCM or WAVE_FORMAT_EXTENSIBLE with a PCM sub-format), skips every other chunk
//! (`LIST`, `fact`, …) and returns the `data` bytes. Writers that cannot seek leave placeholder
//! sizes: a `data` chunk declaring `0xFFFFFFFF`, `0x7FFFFFFF`, or espeak-ng's `--stdout`
//! value (`0x7FFFF000`, about 2 GiB) — anything from [`PLACEHOLDER_MIN`] up — while fewer bytes
//! follow is read to the end of the input. The RIFF size itself is never trusted. A trailing
//! partial sample frame is dropped. Anything else that does not add up is an error, so a
//! vendor's JSON error body can never pass for audio.

/// Smallest `data` size treated as a "size unknown" placeholder when fewer bytes follow.
pub const PLACEHOLDER_MIN: u32 = 0x7FFF_0000;

/// Length of the header [`write`] produces.
pub const HEADER_LEN: usize = 44;

const FORMAT_PCM: u16 = 1;
const FORMAT_EXTENSIBLE: u16 = 0xFFFE;

/// The sample layout of a PCM WAV.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WavSpec {
    /// Interleaved channels (1 = mono).
    pub channels: u16,
    /// Samples per second per channel (Hz).
    pub sample_rate: u32,
    /// Bits per sample (8, 16, 24 or 32).
    pub bits_per_sample: u16,
}

impl WavSpec {
    /// Bytes per sample frame (all channels).
    pub fn block_align(self) -> usize {
        usize::from(self.channels) * usize::from(self.bits_per_sample).div_ceil(8)
    }
}

impl std::fmt::Display for WavSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} Hz, {} ch, {}-bit",
            self.sample_rate, self.channels, self.bits_per_sample
        )
    }
}

/// A parsed WAV: its layout and its PCM sample bytes (borrowed from the input).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wav<'a> {
    /// Sample layout from `fmt `.
    pub spec: WavSpec,
    /// The `data` payload, whole sample frames only.
    pub data: &'a [u8],
}

/// Why bytes are not a usable PCM WAV. Messages are short and never include the bytes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WavError {
    /// Does not start with `RIFF....WAVE`.
    #[error("not a RIFF/WAVE file (starts with {0:?})")]
    NotWave(String),
    /// A chunk header or body runs past the end of the input.
    #[error("chunk {id:?} declares {declared} bytes but only {available} follow")]
    Truncated {
        /// Chunk id.
        id: String,
        /// Declared size.
        declared: u32,
        /// Bytes present after the chunk header.
        available: usize,
    },
    /// No `fmt ` chunk before `data`.
    #[error("no fmt chunk before the data chunk")]
    MissingFmt,
    /// No `data` chunk.
    #[error("no data chunk")]
    MissingData,
    /// A format other than integer PCM, or a nonsensical layout.
    #[error("unsupported WAV encoding: {0}")]
    Unsupported(String),
    /// The data is too long for one RIFF file (4 GiB).
    #[error("{0} bytes of audio do not fit one WAV file")]
    TooLong(usize),
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn chunk_id(b: &[u8]) -> String {
    String::from_utf8_lossy(b).escape_debug().to_string()
}

fn parse_fmt(body: &[u8]) -> Result<WavSpec, WavError> {
    if body.len() < 16 {
        return Err(WavError::Unsupported(format!(
            "fmt chunk of {} bytes",
            body.len()
        )));
    }
    let mut tag = u16_at(body, 0);
    if tag == FORMAT_EXTENSIBLE && body.len() >= 26 {
        tag = u16_at(body, 24);
    }
    let spec = WavSpec {
        channels: u16_at(body, 2),
        sample_rate: u32_at(body, 4),
        bits_per_sample: u16_at(body, 14),
    };
    if tag != FORMAT_PCM {
        return Err(WavError::Unsupported(format!(
            "format tag {tag:#06x} (only integer PCM)"
        )));
    }
    if spec.channels == 0
        || spec.sample_rate == 0
        || !matches!(spec.bits_per_sample, 8 | 16 | 24 | 32)
    {
        return Err(WavError::Unsupported(spec.to_string()));
    }
    Ok(spec)
}

/// Where the samples of a WAV begin, read from its header alone (see [`header`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Sample layout from `fmt `.
    pub spec: WavSpec,
    /// Offset of the first sample byte (just past the `data` chunk header).
    pub data_start: usize,
    /// The `data` chunk's declared size in bytes; `None` for a placeholder ([`PLACEHOLDER_MIN`]
    /// and up): the samples run to the end of the stream.
    pub data_len: Option<u32>,
}

/// Walks the chunks up to the `data` chunk header. With `complete` false (bytes still
/// arriving), running out of bytes is `Ok(None)`; with `complete` true it is the error
/// [`parse`] reports.
fn walk(bytes: &[u8], complete: bool) -> Result<Option<Header>, WavError> {
    let riff_ok = bytes.len() < 4 || &bytes[0..4] == b"RIFF";
    let wave_ok = bytes.len() < 12 || &bytes[8..12] == b"WAVE";
    if !riff_ok || !wave_ok || (complete && bytes.len() < 12) {
        return Err(WavError::NotWave(chunk_id(&bytes[..bytes.len().min(12)])));
    }
    let mut pos = 12;
    let mut spec = None;
    while pos + 8 <= bytes.len() {
        let id = &bytes[pos..pos + 4];
        let size = u32_at(bytes, pos + 4);
        let body_start = pos + 8;
        let available = bytes.len() - body_start;
        let declared = size as usize;
        if id == b"data" {
            let spec = spec.ok_or(WavError::MissingFmt)?;
            return Ok(Some(Header {
                spec,
                data_start: body_start,
                data_len: (size < PLACEHOLDER_MIN).then_some(size),
            }));
        }
        if declared > available {
            if !complete {
                return Ok(None);
            }
            return Err(WavError::Truncated {
                id: chunk_id(id),
                declared: size,
                available,
            });
        }
        if id == b"fmt " {
            spec = Some(parse_fmt(&bytes[body_start..body_start + declared])?);
        }
        pos = body_start + declared + declared % 2;
    }
    if complete {
        Err(WavError::MissingData)
    } else {
        Ok(None)
    }
}

/// Reads the header of a WAV whose bytes may still be arriving (a vendor's stream): `Ok(None)`
/// until the `data` chunk header is in `bytes`, an error as soon as the bytes cannot be a PCM
/// WAV (so a JSON error body is refused from its first bytes).
pub fn header(bytes: &[u8]) -> Result<Option<Header>, WavError> {
    walk(bytes, false)
}

/// Parses a PCM WAV (module doc).
pub fn parse(bytes: &[u8]) -> Result<Wav<'_>, WavError> {
    let Some(header) = walk(bytes, true)? else {
        return Err(WavError::MissingData);
    };
    let available = bytes.len() - header.data_start;
    let len = match header.data_len {
        Some(declared) if declared as usize <= available => declared as usize,
        Some(declared) => {
            return Err(WavError::Truncated {
                id: "data".into(),
                declared,
                available,
            });
        }
        None => available,
    };
    let whole = len - len % WavSpec::block_align(header.spec).max(1);
    Ok(Wav {
        spec: header.spec,
        data: &bytes[header.data_start..header.data_start + whole],
    })
}

/// The 44-byte header of a WAV streamed before its length is known: RIFF and `data` sizes
/// are `0xFFFFFFFF` (the convention streaming writers use; readers take the samples to the
/// end of the stream). Errors: a layout [`write`] cannot write either.
pub fn streaming_header(spec: WavSpec) -> Result<Vec<u8>, WavError> {
    let mut out = write(spec, &[])?;
    out[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    out[40..44].copy_from_slice(&u32::MAX.to_le_bytes());
    Ok(out)
}

/// A canonical 44-byte-header PCM WAV of `data`, whose RIFF and data sizes match the bytes:
/// the one WAV writer of the service (joined pieces, PCM that a vendor streamed for a WAV
/// request). The header is written by `hound`; the samples are copied as they are.
pub fn write(spec: WavSpec, data: &[u8]) -> Result<Vec<u8>, WavError> {
    let too_long = || WavError::TooLong(data.len());
    u32::try_from(data.len())
        .ok()
        .filter(|n| n.checked_add(36).is_some())
        .ok_or_else(too_long)?;
    if !matches!(spec.bits_per_sample, 8 | 16 | 24 | 32) || spec.channels == 0 || spec.channels > 2
    {
        return Err(WavError::Unsupported(spec.to_string()));
    }
    let header = hound::WavSpec {
        channels: spec.channels,
        sample_rate: spec.sample_rate,
        bits_per_sample: spec.bits_per_sample,
        sample_format: hound::SampleFormat::Int,
    };
    // hound writes a header for zero samples (sizes 36 / 0); our sizes follow from the data.
    let mut out = std::io::Cursor::new(Vec::with_capacity(HEADER_LEN + data.len()));
    hound::WavWriter::new(&mut out, header)
        .and_then(hound::WavWriter::finalize)
        .map_err(|e| WavError::Unsupported(format!("{spec}: {e}")))?;
    let mut out = out.into_inner();
    if out.len() != HEADER_LEN {
        return Err(WavError::Unsupported(spec.to_string()));
    }
    let data_len = u32::try_from(data.len()).map_err(|_| too_long())?;
    out[4..8].copy_from_slice(&(36 + data_len).to_le_bytes());
    out[40..44].copy_from_slice(&data_len.to_le_bytes());
    out.extend_from_slice(data);
    Ok(out)
}

/// Raw signed 16-bit little-endian mono PCM at `sample_rate_hz` wrapped in a WAV header whose
/// sizes match the data (a vendor that streams PCM when the caller asked for WAV).
pub fn from_pcm16(pcm: &[u8], sample_rate_hz: u32) -> Result<Vec<u8>, WavError> {
    if pcm.len() % 2 == 1 {
        return Err(WavError::Unsupported(format!(
            "PCM with an odd length ({} bytes)",
            pcm.len()
        )));
    }
    write(
        WavSpec {
            channels: 1,
            sample_rate: sample_rate_hz,
            bits_per_sample: 16,
        },
        pcm,
    )
}

#[cfg(test)]
#[path = "wav_tests.rs"]
mod tests;
