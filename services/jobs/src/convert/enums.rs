//! The class and format enums between the jobs domain and the wire, both ways: shared by the
//! gRPC edge and the synthesis client (which imports nothing else of the edge's conversions).

use voxpool_proto::{scheduler::v1::Priority as PbPriority, synthesis::v1::AudioFormat};

use crate::model::{Format, Priority};

/// The class of a checked request (`validate::check` leaves STANDARD or BATCH only).
pub fn priority(p: PbPriority) -> Priority {
    match p {
        PbPriority::Standard => Priority::Standard,
        PbPriority::Batch | PbPriority::Interactive | PbPriority::Unspecified => Priority::Batch,
    }
}

/// The wire's class.
pub fn priority_pb(p: Priority) -> PbPriority {
    match p {
        Priority::Standard => PbPriority::Standard,
        Priority::Batch => PbPriority::Batch,
    }
}

/// The format of a request's number (unspecified and unknown numbers: WAV, the default;
/// `validate::check` refuses unknown ones first).
pub fn format(n: i32) -> Format {
    match AudioFormat::try_from(n).unwrap_or(AudioFormat::Wav) {
        AudioFormat::Mp3 => Format::Mp3,
        AudioFormat::OggOpus => Format::OggOpus,
        AudioFormat::Pcm => Format::Pcm,
        AudioFormat::Wav | AudioFormat::Unspecified => Format::Wav,
    }
}

/// The wire's format.
pub fn format_pb(f: Format) -> AudioFormat {
    match f {
        Format::Wav => AudioFormat::Wav,
        Format::Mp3 => AudioFormat::Mp3,
        Format::OggOpus => AudioFormat::OggOpus,
        Format::Pcm => AudioFormat::Pcm,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stored_numbers_of_class_and_format_are_the_wires() {
        for p in [Priority::Standard, Priority::Batch] {
            assert_eq!(p.code(), priority_pb(p) as i32);
            assert_eq!(priority(priority_pb(p)), p);
            assert_eq!(p.as_str(), priority_pb(p).as_str_name());
        }
        for f in [Format::Wav, Format::Mp3, Format::OggOpus, Format::Pcm] {
            assert_eq!(f.code(), format_pb(f) as i32);
            assert_eq!(format(format_pb(f) as i32), f);
        }
        assert_eq!(format(0), Format::Wav, "unspecified is WAV");
    }
}
