//! [`Provider`]: the vendor adapters a pool or a voice pack can name (docs/API.md "Provider ids"),
//! as one enum that serde and the compiler check, instead of strings compared by hand.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

/// A provider id: which adapter (wire format) serves a pool or voices a pack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// Any OpenAI-compatible `/v1/audio/speech` server.
    OpenAi,
    /// Azure AI Speech.
    Azure,
    /// Volcengine (ByteDance) TTS.
    Volcengine,
    /// ElevenLabs.
    ElevenLabs,
    /// MiniMax T2A.
    MiniMax,
    /// Alibaba DashScope (CosyVoice).
    DashScope,
    /// Self-hosted zero-shot servers (vLLM-Omni, CosyVoice, Fish Speech, IndexTTS,
    /// GPT-SoVITS) that speak a voice from reference clips; the wire profile is the
    /// upstream's `params.profile`.
    #[serde(rename = "selfhosted")]
    SelfHosted,
    /// The local espeak-ng engine (no credential, no base URL).
    Espeak,
}

impl Provider {
    /// Every provider, in docs/API.md order.
    pub const ALL: [Provider; 8] = [
        Provider::OpenAi,
        Provider::Azure,
        Provider::Volcengine,
        Provider::ElevenLabs,
        Provider::MiniMax,
        Provider::DashScope,
        Provider::SelfHosted,
        Provider::Espeak,
    ];

    /// The id as configs, packs and snapshots spell it (`openai`, `elevenlabs`, …).
    pub const fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Azure => "azure",
            Provider::Volcengine => "volcengine",
            Provider::ElevenLabs => "elevenlabs",
            Provider::MiniMax => "minimax",
            Provider::DashScope => "dashscope",
            Provider::SelfHosted => "selfhosted",
            Provider::Espeak => "espeak",
        }
    }

    /// Every id, comma-separated, for messages that say what is accepted.
    pub fn names() -> String {
        Self::ALL.map(Provider::as_str).join(", ")
    }

    /// True for the local engine, which needs neither credential nor base URL.
    pub fn is_local(self) -> bool {
        self == Provider::Espeak
    }

    /// Whether every key needs a credential: not the local engine, and not self-hosted
    /// servers (only those started with an API key take one).
    pub fn needs_credential(self) -> bool {
        !matches!(self, Provider::Espeak | Provider::SelfHosted)
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A provider id that names no adapter.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown provider {}: use one of {}", crate::untrusted::quote(.0), Provider::names())]
pub struct UnknownProvider(pub String);

impl FromStr for Provider {
    type Err = UnknownProvider;

    fn from_str(s: &str) -> Result<Self, UnknownProvider> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownProvider(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_through_text_and_serde() {
        for p in Provider::ALL {
            assert_eq!(p.as_str().parse::<Provider>(), Ok(p));
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, format!("\"{}\"", p.as_str()));
            assert_eq!(serde_json::from_str::<Provider>(&json).unwrap(), p);
        }
        let err = "OpenAI".parse::<Provider>().unwrap_err();
        assert!(
            err.to_string().contains("use one of openai, azure"),
            "{err}"
        );
        assert!(serde_json::from_str::<Provider>("\"nope\"").is_err());
    }
}
