//! The identity of a chunk's audio: what makes two requests share an entry.
//!
//! An entry is keyed by SHA-256 over a canonical JSON of everything that shapes the chunk's
//! sound: the `cache_version` (config), the snapshot digest (which seals the voice, its
//! prosody params and vendor options, the pack revision and the pool), the pool's provider
//! and vendor model (operator config the snapshot does not carry), the chunk's text as the
//! splitter produced it with whitespace runs collapsed to one space and the ends trimmed (TTS
//! engines read `" Hi  there"` and `"Hi there"` alike; so a long text re-renders only the
//! chunks that changed), the output
//! format and the sample rate asked of the vendor, and, for voices with reference clips, the
//! clip the request picked and its seed (the server's sampling; absent from the identity of
//! voices without clips, whose keys are unchanged by them). Two requests that differ in any of these
//! never share an entry; two that agree on all of them produce the same audio and do.
//! `wav_streaming_header` and the traffic class, tenant and request id are not part of it:
//! they change how the audio is delivered, not the audio.
//!
//! Objects live at `<pack id>/<snapshot digest hex>/<key hex>` under the store's `cache/`
//! folder, so a pack's or a snapshot's entries can be listed (and purged) by prefix.

use object_store::path::Path;
use sha2::{Digest as _, Sha256};

use crate::adapters::{AudioFormat, Utterance};

/// A chunk's cache identity and where its entry lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryKey {
    /// Lowercase hex SHA-256 of the canonical identity (module doc).
    pub hex: String,
    /// The entry's path under `cache/`.
    pub path: Path,
}

impl EntryKey {
    /// The key of the audio `utterance` gets from a pool of `provider`, under
    /// `cache_version` (module doc: what is part of the identity and what is not).
    pub fn of(utterance: &Utterance, provider: &str, cache_version: u32) -> Self {
        // A struct serializes its fields in declaration order whatever serde_json's features:
        // the same identity always hashes the same.
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Canonical<'a> {
            cache_version: u32,
            snapshot_digest: &'a str,
            provider: &'a str,
            model: &'a str,
            text: &'a str,
            format: &'static str,
            sample_rate_hz: Option<u32>,
            #[serde(skip_serializing_if = "str::is_empty")]
            reference_digest: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            seed: Option<u64>,
        }
        let text = utterance
            .text
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let reference_digest = utterance
            .reference
            .as_ref()
            .map_or("", |r| r.reference.digest.as_str());
        let snapshot_digest = utterance.voice.digest.as_str();
        let identity = serde_json::to_string(&Canonical {
            cache_version,
            snapshot_digest,
            provider,
            model: &utterance.pool_model,
            text: &text,
            format: format_name(utterance.format),
            sample_rate_hz: utterance.sample_rate_hz,
            reference_digest,
            seed: utterance.seed.filter(|_| !reference_digest.is_empty()),
        })
        .unwrap_or_default();
        let hex = hex::encode(Sha256::digest(identity.as_bytes()));
        let path = Path::from_iter([
            utterance.voice.pack_id.as_str(),
            digest_hex(snapshot_digest),
            hex.as_str(),
        ]);
        Self { hex, path }
    }

    /// The name of the entry's fill lock at the scheduler (single-flight across replicas).
    pub fn lock_name(&self) -> String {
        format!("cache:{}", self.hex)
    }
}

/// The hex of a `sha256:<hex>` digest (the whole string if it has no such prefix).
pub fn digest_hex(digest: &str) -> &str {
    digest.strip_prefix("sha256:").unwrap_or(digest)
}

fn format_name(format: AudioFormat) -> &'static str {
    match format {
        AudioFormat::Wav => "wav",
        AudioFormat::Mp3 => "mp3",
        AudioFormat::OggOpus => "ogg_opus",
        AudioFormat::Pcm => "pcm",
    }
}
