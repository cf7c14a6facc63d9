//! Reference clips of the voices that speak from them (self-hosted zero-shot packs): fetched
//! from the blob store by the digest the snapshot froze (`references/<64 hex>`, where the
//! catalog's AddReference put them), checked against that digest, and kept in a bounded
//! in-memory cache so a clip is read once per replica, not once per call.
//!
//! Invariant it guards: the bytes a vendor receives are exactly the clip the snapshot names
//! (invariant 7 of docs/ARCHITECTURE.md): a blob whose SHA-256 is not its name is refused,
//! never sent.

use std::sync::Arc;

use bytes::Bytes;
use object_store::{ObjectStore, ObjectStoreExt as _, path::Path};
use voxpool_domain::{
    audio::clip::ClipFormat,
    reference::{Reference, clip_digest},
};

use crate::{adapters::ReferenceAudio, error::SynthesisError};

/// Default bound of the in-memory clip cache, in bytes.
pub const DEFAULT_CACHE_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Clone)]
struct ByBytes;

impl quick_cache::Weighter<String, Arc<ReferenceAudio>> for ByBytes {
    fn weight(&self, _: &String, clip: &Arc<ReferenceAudio>) -> u64 {
        clip.bytes.len() as u64 + 1
    }
}

/// The clip fetcher (module doc). Cheap to share behind an `Arc`.
pub struct ReferenceClips {
    store: Arc<dyn ObjectStore>,
    location: String,
    cache: quick_cache::sync::Cache<String, Arc<ReferenceAudio>, ByBytes>,
}

impl std::fmt::Debug for ReferenceClips {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReferenceClips")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl ReferenceClips {
    /// Clips in `store` (rooted at the blob store's `references/` folder), shown as
    /// `location` in errors, cached up to `cache_bytes`.
    pub fn new(store: Arc<dyn ObjectStore>, location: &str, cache_bytes: u64) -> Self {
        Self {
            store,
            location: location.to_owned(),
            cache: quick_cache::sync::Cache::with_weighter(256, cache_bytes.max(1), ByBytes),
        }
    }

    /// The bytes of `reference`, checked.
    ///
    /// Errors: [`SynthesisError::ReferenceMissing`] (the store has no such clip: synthesis
    /// and the catalog use different blob stores), [`SynthesisError::ReferenceCorrupt`] (the
    /// bytes are not the digest's), [`SynthesisError::BlobUnavailable`] (the store fails).
    pub async fn fetch(
        &self,
        reference: &Reference,
    ) -> Result<Arc<ReferenceAudio>, SynthesisError> {
        if let Some(hit) = self.cache.get(&reference.digest) {
            return Ok(hit);
        }
        let hex = reference.hex().ok_or_else(|| {
            SynthesisError::invalid(
                "snapshot.references.digest",
                format!(
                    "{} is not sha256: and 64 lowercase hex digits",
                    voxpool_domain::untrusted::quote(&reference.digest)
                ),
            )
        })?;
        let got = self.store.get(&Path::from(hex)).await;
        let bytes: Bytes = match got {
            Ok(found) => found
                .bytes()
                .await
                .map_err(|e| SynthesisError::BlobUnavailable {
                    location: self.location.clone(),
                    cause: e.to_string(),
                })?,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(SynthesisError::ReferenceMissing {
                    digest: reference.digest.clone(),
                    location: self.location.clone(),
                });
            }
            Err(e) => {
                return Err(SynthesisError::BlobUnavailable {
                    location: self.location.clone(),
                    cause: e.to_string(),
                });
            }
        };
        if clip_digest(&bytes) != reference.digest {
            return Err(SynthesisError::ReferenceCorrupt {
                digest: reference.digest.clone(),
                location: self.location.clone(),
            });
        }
        let format = ClipFormat::sniff(&bytes).ok_or_else(|| SynthesisError::ReferenceCorrupt {
            digest: reference.digest.clone(),
            location: self.location.clone(),
        })?;
        let clip = Arc::new(ReferenceAudio {
            reference: reference.clone(),
            bytes,
            format,
        });
        self.cache.insert(reference.digest.clone(), clip.clone());
        Ok(clip)
    }
}

#[cfg(test)]
mod tests {
    use object_store::{PutPayload, memory::InMemory};

    use super::*;

    fn reference(bytes: &[u8]) -> Reference {
        Reference {
            digest: clip_digest(bytes),
            transcript: "hello".into(),
            language: "en-US".into(),
            emotion: String::new(),
            weight: 1,
            duration_ms: 2_000,
        }
    }

    #[tokio::test]
    async fn a_clip_is_fetched_by_digest_and_checked() {
        let store = Arc::new(InMemory::new());
        let clip = b"RIFF\0\0\0\0WAVEfmt and the rest".to_vec();
        let r = reference(&clip);
        let hex = r.hex().unwrap().to_owned();
        store
            .put(&Path::from(hex.as_str()), PutPayload::from(clip.clone()))
            .await
            .unwrap();
        let clips = ReferenceClips::new(store.clone(), "memory:///", DEFAULT_CACHE_BYTES);
        let got = clips.fetch(&r).await.unwrap();
        assert_eq!(&got.bytes[..], &clip[..]);
        assert_eq!(got.format, ClipFormat::Wav);

        // A blob whose bytes are not its name is never sent.
        let other = reference(b"RIFF\0\0\0\0WAVE other");
        let other_hex = other.hex().unwrap().to_owned();
        store
            .put(
                &Path::from(other_hex.as_str()),
                PutPayload::from(clip.clone()),
            )
            .await
            .unwrap();
        assert!(matches!(
            clips.fetch(&other).await,
            Err(SynthesisError::ReferenceCorrupt { .. })
        ));
        let missing = reference(b"never stored");
        assert!(matches!(
            clips.fetch(&missing).await,
            Err(SynthesisError::ReferenceMissing { .. })
        ));
    }
}
