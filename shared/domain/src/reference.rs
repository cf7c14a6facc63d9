//! Reference clips as a snapshot freezes them, and the one rule that picks a clip for a
//! request (invariant 7 of docs/ARCHITECTURE.md extends to them: a snapshot names its clips
//! by digest, so a card speaks with exactly the clips it was bound with).
//!
//! # Picking a clip ([`select`])
//! 1. A request `emotion` keeps the clips with that tag (none: an error listing the tags).
//! 2. Among the candidates, a weighted roll: `r mod total_weight` walks the cumulative
//!    weights in snapshot order. With a seed, `r` is the first 8 bytes (big-endian) of
//!    `SHA-256("voxpool-reference-roll:" + seed as 8 big-endian bytes)`, so the same seed
//!    picks the same clip of the same snapshot on every replica and every release; without
//!    one, `r` is random.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use voxpool_proto::catalog::v1 as pb;

/// One clip of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Reference {
    /// `sha256:` + 64 lowercase hex digits over the clip's bytes.
    pub digest: String,
    /// What the clip says.
    pub transcript: String,
    /// BCP 47 language of the clip.
    pub language: String,
    /// Tag a request can pick the clip by; empty = none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub emotion: String,
    /// Relative weight in the roll, 1..=1000.
    pub weight: u32,
    /// Duration in milliseconds.
    pub duration_ms: u32,
}

impl Reference {
    /// The 64 hex digits of the digest (the blob's name under `references/`), if the digest
    /// is well formed.
    pub fn hex(&self) -> Option<&str> {
        digest_hex(&self.digest)
    }

    /// The canonical JSON object the snapshot digest covers (keys in byte order).
    pub fn canonical(&self) -> String {
        let s = |v: &str| serde_json::to_string(v).unwrap_or_else(|_| "\"\"".to_owned());
        format!(
            "{{\"digest\":{},\"durationMs\":{},\"emotion\":{},\"language\":{},\"transcript\":{},\"weight\":{}}}",
            s(&self.digest),
            self.duration_ms,
            s(&self.emotion),
            s(&self.language),
            s(&self.transcript),
            self.weight
        )
    }

    /// To the proto message.
    pub fn to_pb(&self) -> pb::SnapshotReference {
        pb::SnapshotReference {
            digest: self.digest.clone(),
            transcript: self.transcript.clone(),
            language: self.language.clone(),
            emotion: self.emotion.clone(),
            weight: self.weight,
            duration_ms: self.duration_ms,
        }
    }

    /// From the proto message.
    pub fn from_pb(p: &pb::SnapshotReference) -> Self {
        Self {
            digest: p.digest.clone(),
            transcript: p.transcript.clone(),
            language: p.language.clone(),
            emotion: p.emotion.clone(),
            weight: p.weight,
            duration_ms: p.duration_ms,
        }
    }
}

/// The hex part of `sha256:<64 lowercase hex>`, or `None` when `digest` is not of that form.
pub fn digest_hex(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))).then_some(hex)
}

/// Whether `s` is a clip tag: `[a-z0-9_-]{1,32}`.
pub fn is_tag(s: &str) -> bool {
    (1..=32).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// `sha256:` + lowercase hex of SHA-256 over `bytes`: a clip's digest.
pub fn clip_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Why no clip can be picked. Maps to INVALID_ARGUMENT on field `emotion`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectError(pub String);

/// The clip a request speaks with (module doc): `None` when the voice has no clips and the
/// request names no emotion.
///
/// Errors: an `emotion` on a voice without clips, or one no clip is tagged with (the
/// message lists the tags the voice has).
pub fn select<'a>(
    references: &'a [Reference],
    emotion: &str,
    seed: Option<u64>,
) -> Result<Option<&'a Reference>, SelectError> {
    if references.is_empty() {
        return if emotion.is_empty() {
            Ok(None)
        } else {
            Err(SelectError(
                "this voice has no reference clips to pick by emotion: leave emotion empty".into(),
            ))
        };
    }
    let candidates: Vec<&Reference> = references
        .iter()
        .filter(|r| emotion.is_empty() || r.emotion == emotion)
        .collect();
    if candidates.is_empty() {
        let mut tags: Vec<&str> = references
            .iter()
            .map(|r| r.emotion.as_str())
            .filter(|t| !t.is_empty())
            .collect();
        tags.sort_unstable();
        tags.dedup();
        let have = if tags.is_empty() {
            "none of its clips has a tag".to_owned()
        } else {
            format!("its clips are tagged {}", tags.join(", "))
        };
        return Err(SelectError(format!(
            "no reference clip of this voice is tagged {}: {have}",
            crate::untrusted::quote(emotion)
        )));
    }
    let total: u64 = candidates.iter().map(|r| u64::from(r.weight.max(1))).sum();
    let roll = match seed {
        Some(seed) => seeded_roll(seed),
        None => rand::random::<u64>(),
    } % total;
    let mut acc = 0u64;
    for r in &candidates {
        acc += u64::from(r.weight.max(1));
        if roll < acc {
            return Ok(Some(r));
        }
    }
    Ok(candidates.last().copied())
}

fn seeded_roll(seed: u64) -> u64 {
    let mut h = Sha256::new();
    h.update(b"voxpool-reference-roll:");
    h.update(seed.to_be_bytes());
    let out = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&out[..8]);
    u64::from_be_bytes(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clip(n: u8, emotion: &str, weight: u32) -> Reference {
        Reference {
            digest: clip_digest(&[n]),
            transcript: format!("clip {n}"),
            language: "en-US".into(),
            emotion: emotion.into(),
            weight,
            duration_ms: 3_000,
        }
    }

    #[test]
    fn the_same_seed_picks_the_same_clip() {
        let clips = [clip(1, "", 1), clip(2, "", 1), clip(3, "", 1)];
        for seed in 0..50 {
            let a = select(&clips, "", Some(seed)).unwrap().unwrap();
            let b = select(&clips, "", Some(seed)).unwrap().unwrap();
            assert_eq!(a.digest, b.digest);
        }
        let picked: std::collections::BTreeSet<_> = (0..50)
            .map(|s| select(&clips, "", Some(s)).unwrap().unwrap().digest.clone())
            .collect();
        assert_eq!(picked.len(), 3, "50 seeds should reach every clip");
    }

    #[test]
    fn weights_shape_the_roll() {
        let clips = [clip(1, "", 1), clip(2, "", 999)];
        let heavy = (0..1000)
            .filter(|s| select(&clips, "", Some(*s)).unwrap().unwrap().digest == clips[1].digest)
            .count();
        assert!(heavy > 980, "{heavy}");
    }

    #[test]
    fn emotion_keeps_only_its_clips_and_a_missing_tag_lists_the_others() {
        let clips = [clip(1, "calm", 1), clip(2, "angry", 1), clip(3, "", 1)];
        for seed in 0..20 {
            let r = select(&clips, "angry", Some(seed)).unwrap().unwrap();
            assert_eq!(r.digest, clips[1].digest);
        }
        let e = select(&clips, "sad", None).unwrap_err();
        assert!(
            e.0.contains("\"sad\"") && e.0.contains("angry, calm"),
            "{e}"
        );
        assert_eq!(select(&[], "", None).unwrap(), None);
        assert!(select(&[], "calm", None).is_err());
    }

    #[test]
    fn emotion_tags_are_short_lowercase_words() {
        assert!(is_tag("calm"));
        assert!(is_tag("very-happy_2"));
        assert!(!is_tag("Calm"));
        assert!(!is_tag(""));
        assert!(!is_tag(&"a".repeat(33)));
    }

    #[test]
    fn digests_are_checked_for_shape() {
        let d = clip_digest(b"x");
        assert_eq!(digest_hex(&d).map(str::len), Some(64));
        assert_eq!(digest_hex("sha256:ABC"), None);
        assert_eq!(digest_hex("md5:00"), None);
    }
}
