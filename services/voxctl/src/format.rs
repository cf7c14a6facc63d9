//! Output audio formats: the CLI spelling, the proto enum and the file extension of each.

use clap::ValueEnum;
use voxpool_proto::synthesis::v1::AudioFormat;

/// An output format that `--format` accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// RIFF/WAVE, 16-bit PCM (the default).
    Wav,
    /// MPEG audio layer III.
    Mp3,
    /// Opus in an Ogg container.
    OggOpus,
    /// Raw signed 16-bit little-endian mono, no header.
    Pcm,
}

impl Format {
    /// The proto enum sent in `SynthesizeRequest.format`.
    pub fn to_pb(self) -> AudioFormat {
        match self {
            Format::Wav => AudioFormat::Wav,
            Format::Mp3 => AudioFormat::Mp3,
            Format::OggOpus => AudioFormat::OggOpus,
            Format::Pcm => AudioFormat::Pcm,
        }
    }

    /// The format a proto enum value names; UNSPECIFIED is WAV (the services' default), and
    /// a value this voxctl does not know is `None`.
    pub fn from_pb(raw: i32) -> Option<Format> {
        match AudioFormat::try_from(raw).ok()? {
            AudioFormat::Unspecified | AudioFormat::Wav => Some(Format::Wav),
            AudioFormat::Mp3 => Some(Format::Mp3),
            AudioFormat::OggOpus => Some(Format::OggOpus),
            AudioFormat::Pcm => Some(Format::Pcm),
        }
    }

    /// The same format in the shared audio types (for joining parts).
    pub fn to_audio(self) -> voxpool_domain::audio::AudioFormat {
        use voxpool_domain::audio::AudioFormat as A;
        match self {
            Format::Wav => A::Wav,
            Format::Mp3 => A::Mp3,
            Format::OggOpus => A::OggOpus,
            Format::Pcm => A::Pcm,
        }
    }

    /// File extension without the dot (`wav`, `mp3`, `ogg`, `pcm`).
    pub fn extension(self) -> &'static str {
        match self {
            Format::Wav => "wav",
            Format::Mp3 => "mp3",
            Format::OggOpus => "ogg",
            Format::Pcm => "pcm",
        }
    }

    /// Largest file the format can describe, in bytes: a WAV's RIFF and `data` sizes are
    /// 32-bit (RIFF/WAVE, Microsoft Multimedia Programming Interface 1.0), so past 4 GiB the
    /// file cannot say how long it is. The other formats have no such field.
    pub fn max_file_bytes(self) -> Option<u64> {
        match self {
            Format::Wav => Some(u64::from(u32::MAX)),
            Format::Mp3 | Format::OggOpus | Format::Pcm => None,
        }
    }

    /// The proto enum name (`WAV`), as recorded in the checkpoint.
    pub fn as_str(self) -> &'static str {
        self.to_pb().as_str_name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_format_has_a_distinct_extension_and_proto_value() {
        let all = [Format::Wav, Format::Mp3, Format::OggOpus, Format::Pcm];
        let mut exts: Vec<_> = all.iter().map(|f| f.extension()).collect();
        exts.dedup();
        assert_eq!(exts.len(), 4);
        assert_eq!(Format::OggOpus.as_str(), "OGG_OPUS");
        assert_eq!(Format::Wav.to_pb() as i32, 1);
        for f in all {
            assert_eq!(Format::from_pb(f.to_pb() as i32), Some(f));
        }
        assert_eq!(Format::from_pb(0), Some(Format::Wav), "unspecified is WAV");
        assert_eq!(Format::from_pb(99), None);
    }
}
