//! The one `SynthesizeRequest` voxctl sends. `synth` and every `batch` item build their
//! request template here, so a field is set in one place and the two commands ask the same
//! thing for the same voice and text; [`crate::call::Caller::speak`] fills in each part's text
//! and request id.

use voxpool_proto::{
    scheduler::v1::Priority,
    synthesis::v1::{CachePolicy, SynthesizeRequest},
};

use crate::{format::Format, manifest::Voice};

/// What every call of one command sends, whatever voice and text it speaks.
#[derive(Clone, Debug)]
pub struct CallSettings {
    /// Output format.
    pub format: Format,
    /// Requested sample rate (0 = vendor default).
    pub sample_rate_hz: i32,
    /// Traffic class.
    pub priority: Priority,
    /// Tenant.
    pub tenant: String,
    /// How the call uses the audio cache.
    pub cache_policy: CachePolicy,
}

impl CallSettings {
    /// The request for `voice` with reference-clip tag `emotion` (empty = none) and clip
    /// `seed`; text and request id empty, set per part.
    pub fn template(&self, voice: &Voice, emotion: &str, seed: u64) -> SynthesizeRequest {
        SynthesizeRequest {
            voice: Some(voice.to_pb()),
            text: String::new(),
            format: self.format.to_pb() as i32,
            sample_rate_hz: self.sample_rate_hz,
            request_id: String::new(),
            priority: self.priority as i32,
            tenant: self.tenant.clone(),
            // voxctl writes files whole: exact WAV sizes.
            wav_streaming_header: false,
            cache_policy: self.cache_policy as i32,
            emotion: emotion.to_owned(),
            seed: Some(seed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_carries_every_setting_and_leaves_text_and_id_to_each_part() {
        let settings = CallSettings {
            format: Format::Pcm,
            sample_rate_hz: 16_000,
            priority: Priority::Batch,
            tenant: "studio".to_owned(),
            cache_policy: CachePolicy::Bypass,
        };
        let voice = Voice::PackId("vp_1".to_owned());
        let request = settings.template(&voice, "angry", 7);
        assert_eq!(request.voice, Some(voice.to_pb()));
        assert_eq!(request.format, Format::Pcm.to_pb() as i32);
        assert_eq!(request.sample_rate_hz, 16_000);
        assert_eq!(request.priority, Priority::Batch as i32);
        assert_eq!(request.tenant, "studio");
        assert_eq!(request.cache_policy, CachePolicy::Bypass as i32);
        assert_eq!(request.emotion, "angry");
        assert_eq!(request.seed, Some(7));
        assert!(!request.wav_streaming_header, "voxctl writes whole files");
        assert!(request.text.is_empty() && request.request_id.is_empty());
    }
}
