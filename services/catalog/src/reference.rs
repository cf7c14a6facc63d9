//! Reference clips of a pack: the rules of AddReference / RemoveReference and the clips'
//! bytes in the blob store.
//!
//! Invariants it guards:
//! - a clip is stored content-addressed (`references/<64 hex of its SHA-256>`) before any
//!   pack names it, and never overwritten or deleted by the catalog: a snapshot frozen with
//!   a clip can always fetch it, whatever happens to the pack later (invariant 7 of
//!   docs/ARCHITECTURE.md). A put whose pack write then fails leaves an unnamed blob, which
//!   is harmless (the same bytes are the same blob).
//! - only packs whose provider speaks from reference audio (`selfhosted`), or managed clones
//!   (cloned at the vendor from their clips, see [`crate::clones`]), hold clips, at most
//!   [`MAX_REFERENCES`], each once;
//! - every clip passed `voxpool_domain::audio::clip::inspect` (WAV/MP3/FLAC, decodable,
//!   1..30 s, at most 10 MiB) and carries a transcript and a language.

use std::sync::Arc;

use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload, path::Path};
use voxpool_domain::{
    audio::clip::{self, ClipInfo, ClipLimits},
    provider::Provider,
    reference::{clip_digest, digest_hex},
};
use voxpool_proto::catalog::v1 as pb;

use crate::{
    error::{CatalogError, Violation},
    model::{PackReference, VoicePack},
    validate::canonical_locale,
};

/// The blob-store folder clips live in.
pub const FOLDER: &str = "references";
/// Most clips a pack may hold.
pub const MAX_REFERENCES: usize = 16;
/// Longest transcript, in characters.
pub const MAX_TRANSCRIPT: usize = 1_000;
/// Largest weight.
pub const MAX_WEIGHT: u32 = 1_000;
/// Longest emotion tag, in bytes (`[a-z0-9_-]`).
pub const MAX_EMOTION: usize = 32;

/// Where clip bytes go: the blob store's `references/` folder.
#[derive(Clone)]
pub struct ClipStore {
    store: Arc<dyn ObjectStore>,
}

impl std::fmt::Debug for ClipStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClipStore").finish_non_exhaustive()
    }
}

impl ClipStore {
    /// Clips in `store` (already rooted at the `references/` folder).
    pub fn new(store: Arc<dyn ObjectStore>) -> Self {
        Self { store }
    }

    /// An in-memory store (tests, `server::serve`).
    pub fn in_memory() -> Self {
        Self::new(Arc::new(object_store::memory::InMemory::new()))
    }

    /// Stores `bytes` under `digest`'s hex unless a blob is already there (same name, same
    /// bytes). Errors: [`CatalogError::BlobUnavailable`].
    pub async fn put(&self, digest: &str, bytes: Vec<u8>) -> Result<(), CatalogError> {
        let hex = digest_hex(digest).ok_or_else(|| CatalogError::BlobUnavailable {
            cause: format!("not a clip digest: {digest}"),
        })?;
        let path = Path::from(hex);
        match self.store.head(&path).await {
            Ok(_) => return Ok(()),
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => {
                return Err(CatalogError::BlobUnavailable {
                    cause: e.to_string(),
                });
            }
        }
        self.store
            .put(&path, PutPayload::from(bytes))
            .await
            .map(|_| ())
            .map_err(|e| CatalogError::BlobUnavailable {
                cause: e.to_string(),
            })
    }

    /// The bytes stored under `digest` (`None`: no such blob, or not a clip digest). Errors:
    /// [`CatalogError::BlobUnavailable`].
    pub async fn get(&self, digest: &str) -> Result<Option<Vec<u8>>, CatalogError> {
        let Some(hex) = digest_hex(digest) else {
            return Ok(None);
        };
        let unavailable = |e: object_store::Error| CatalogError::BlobUnavailable {
            cause: e.to_string(),
        };
        match self.store.get(&Path::from(hex)).await {
            Ok(found) => Ok(Some(found.bytes().await.map_err(unavailable)?.to_vec())),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(unavailable(e)),
        }
    }
}

/// An AddReference request that passed the field checks (the language may still default to
/// the pack's first locale).
#[derive(Clone, Debug)]
pub struct CheckedClip {
    /// `sha256:<hex>` of the audio.
    pub digest: String,
    /// What the decoder found.
    pub info: ClipInfo,
    /// Size of the audio in bytes.
    pub size_bytes: i64,
    /// Trimmed transcript.
    pub transcript: String,
    /// Canonical BCP 47 language, `None` = take the pack's first locale.
    pub language: Option<String>,
    /// Tag or empty.
    pub emotion: String,
    /// 1..=1000.
    pub weight: u32,
}

/// Checks every field of `req` except the pack (all violations at once).
///
/// Errors: [`CatalogError::InvalidArgument`] naming `pack_id`, `audio`, `transcript`,
/// `language`, `emotion`, `weight`.
pub fn check_add(req: &pb::AddReferenceRequest) -> Result<CheckedClip, CatalogError> {
    let mut violations = Vec::new();
    let mut fail = |field: &str, description: String| {
        violations.push(Violation {
            field: field.into(),
            description,
        });
    };
    if req.pack_id.trim().is_empty() {
        fail("pack_id", "required".into());
    }
    let info = match clip::inspect(&req.audio, ClipLimits::CATALOG) {
        Ok(info) => Some(info),
        Err(e) => {
            fail("audio", format!("the clip {e}"));
            None
        }
    };
    let transcript = req.transcript.trim();
    let chars = transcript.chars().count();
    if transcript.is_empty() {
        fail(
            "transcript",
            "required: what the clip says (zero-shot models read it with the audio)".into(),
        );
    } else if chars > MAX_TRANSCRIPT {
        fail(
            "transcript",
            format!("at most {MAX_TRANSCRIPT} characters, got {chars}"),
        );
    } else if transcript.chars().any(char::is_control) {
        fail("transcript", "must not contain control characters".into());
    } else if !voxpool_domain::text::has_speech(transcript) {
        fail(
            "transcript",
            "holds no letter or digit (only spaces, zero-width characters, punctuation or symbols): write what the clip says".into(),
        );
    }
    let language = if req.language.is_empty() {
        None
    } else {
        let canon = canonical_locale(&req.language);
        if canon.is_none() {
            fail(
                "language",
                format!(
                    "not a BCP 47 language tag such as \"en-US\": {}",
                    voxpool_domain::untrusted::quote(&req.language)
                ),
            );
        }
        canon
    };
    if !req.emotion.is_empty() && !voxpool_domain::reference::is_tag(&req.emotion) {
        fail(
            "emotion",
            format!(
                "must match [a-z0-9_-]{{1,{MAX_EMOTION}}}, got {}",
                voxpool_domain::untrusted::quote(&req.emotion)
            ),
        );
    }
    if req.weight > MAX_WEIGHT {
        fail(
            "weight",
            format!("must be 1..{MAX_WEIGHT} (0 = 1), got {}", req.weight),
        );
    }
    match info {
        Some(info) if violations.is_empty() => Ok(CheckedClip {
            digest: clip_digest(&req.audio),
            info,
            size_bytes: i64::try_from(req.audio.len()).unwrap_or(i64::MAX),
            transcript: transcript.to_owned(),
            language,
            emotion: req.emotion.clone(),
            weight: req.weight.max(1),
        }),
        _ => Err(CatalogError::InvalidArgument { violations }),
    }
}

/// Whether a pack of content `spec` speaks from (or is cloned from) reference clips: a
/// `selfhosted` pack, or a managed clone ([`crate::clones::is_managed`]).
pub fn takes_clips(spec: &crate::model::PackSpec) -> bool {
    spec.provider == Provider::SelfHosted.as_str() || crate::clones::is_managed(spec)
}

/// Whether `pack` may hold clips. Errors: [`CatalogError::ReferencesNotAccepted`].
pub fn accepts(pack: &VoicePack) -> Result<(), CatalogError> {
    if takes_clips(&pack.spec) {
        Ok(())
    } else {
        Err(CatalogError::ReferencesNotAccepted {
            id: pack.id.clone(),
            provider: pack.spec.provider.clone(),
        })
    }
}

/// The stored clip of `clip` for `pack` added at `add_time_us`.
///
/// Errors: INVALID_ARGUMENT `language` when the request left it empty and the pack has no
/// locale to take.
pub fn stored(
    clip: &CheckedClip,
    pack: &VoicePack,
    add_time_us: i64,
) -> Result<PackReference, CatalogError> {
    let language = match (&clip.language, pack.spec.locales.first()) {
        (Some(l), _) => l.clone(),
        (None, Some(first)) => first.clone(),
        (None, None) => {
            return Err(CatalogError::invalid(
                "language",
                "required: the pack has no locales to take it from (e.g. \"en-US\")",
            ));
        }
    };
    Ok(PackReference {
        digest: clip.digest.clone(),
        transcript: clip.transcript.clone(),
        language,
        emotion: clip.emotion.clone(),
        weight: clip.weight,
        duration_ms: clip.info.duration_ms,
        media_type: clip.info.format.media_type().to_owned(),
        size_bytes: clip.size_bytes,
        add_time_us,
    })
}

/// The clips of `current` with `new` added. Errors: the pack no longer takes clips,
/// [`CatalogError::ReferenceExists`], [`CatalogError::TooManyReferences`].
pub fn with_added(
    current: &VoicePack,
    new: &PackReference,
) -> Result<Vec<PackReference>, CatalogError> {
    accepts(current)?;
    let clips = &current.spec.references;
    if clips.iter().any(|r| r.digest == new.digest) {
        return Err(CatalogError::ReferenceExists {
            id: current.id.clone(),
            digest: new.digest.clone(),
        });
    }
    if clips.len() >= MAX_REFERENCES {
        return Err(CatalogError::TooManyReferences {
            id: current.id.clone(),
            limit: MAX_REFERENCES,
        });
    }
    let mut out = clips.clone();
    out.push(new.clone());
    Ok(out)
}

/// The clips of `current` without `digest`. Errors: [`CatalogError::ReferenceNotFound`].
pub fn without(current: &VoicePack, digest: &str) -> Result<Vec<PackReference>, CatalogError> {
    let clips = &current.spec.references;
    if !clips.iter().any(|r| r.digest == digest) {
        return Err(CatalogError::ReferenceNotFound {
            id: current.id.clone(),
            digest: digest.to_owned(),
        });
    }
    Ok(clips
        .iter()
        .filter(|r| r.digest != digest)
        .cloned()
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bad_field_is_named_at_once() {
        let req = pb::AddReferenceRequest {
            pack_id: String::new(),
            audio: b"not audio".to_vec(),
            transcript: " ".into(),
            language: "english please".into(),
            emotion: "LOUD".into(),
            weight: 5_000,
        };
        let Err(CatalogError::InvalidArgument { violations }) = check_add(&req) else {
            panic!("expected INVALID_ARGUMENT");
        };
        let fields: Vec<_> = violations.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "pack_id",
                "audio",
                "transcript",
                "language",
                "emotion",
                "weight"
            ]
        );
    }
}
