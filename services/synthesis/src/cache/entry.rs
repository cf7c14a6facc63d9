//! One cache entry's bytes: a header that seals the audio, then the audio.
//!
//! Layout: the magic line `voxpool-cache-1\n`, the header's length (4 bytes, big-endian), the
//! header (JSON, [`Header`]), the audio exactly as the vendor sent it for the chunk. Reading
//! checks all of it: a truncated object, a wrong length, an audio whose SHA-256 differs from
//! the header's or a header naming another key than the one read is [`Corrupt`] (the caller
//! deletes it and fills it anew), never served.

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

const MAGIC: &[u8] = b"voxpool-cache-1\n";
/// Headers are a few hundred bytes; anything larger is not one of ours.
const MAX_HEADER: usize = 16 * 1024;

/// What an entry says about its audio.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Header {
    /// The entry's cache key (lowercase hex, `super::key`): an object copied or renamed to
    /// another key's path is refused, not served for that key's text.
    pub key: String,
    /// Lowercase hex SHA-256 of the audio.
    pub sha256: String,
    /// Audio length, bytes.
    pub bytes: u64,
    /// Sample rate the vendor reported (Hz), when it did.
    pub sample_rate_hz: Option<u32>,
    /// The key (`upstream/key`) whose call produced the audio.
    pub key_id: String,
    /// The pool the entry belongs to (for stats and purges; not part of the identity).
    pub pool: String,
    /// Characters of the chunk's text (what a hit saves at the vendor).
    pub characters: u64,
}

/// An entry read back whole and checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The header.
    pub header: Header,
    /// The chunk's vendor audio.
    pub audio: bytes::Bytes,
}

/// An object under `cache/` that is not a whole, intact entry (why, for the log).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("corrupt cache entry: {0}")]
pub struct Corrupt(pub &'static str);

/// The object's bytes for `audio` under `header` (whose `sha256` and `bytes` are set here).
pub fn encode(mut header: Header, audio: &[u8]) -> Vec<u8> {
    header.sha256 = hex::encode(Sha256::digest(audio));
    header.bytes = audio.len() as u64;
    // A struct of strings and numbers always serializes.
    let json = serde_json::to_vec(&header).unwrap_or_default();
    let len = u32::try_from(json.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + json.len() + audio.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(audio);
    out
}

/// Reads back the object stored for `key` (module doc).
pub fn decode(object: bytes::Bytes, key: &str) -> Result<Entry, Corrupt> {
    let rest = object
        .strip_prefix(MAGIC)
        .ok_or(Corrupt("no voxpool-cache-1 magic"))?;
    let (len, rest) = rest
        .split_first_chunk::<4>()
        .ok_or(Corrupt("truncated before the header"))?;
    let len = u32::from_be_bytes(*len) as usize;
    if len > MAX_HEADER || rest.len() < len {
        return Err(Corrupt("truncated header"));
    }
    let header: Header =
        serde_json::from_slice(&rest[..len]).map_err(|_| Corrupt("unreadable header"))?;
    if header.key != key {
        return Err(Corrupt(
            "the entry belongs to another key (copied or moved)",
        ));
    }
    let start = MAGIC.len() + 4 + len;
    let audio = object.slice(start..);
    if audio.len() as u64 != header.bytes {
        return Err(Corrupt("audio length differs from the header (truncated?)"));
    }
    if hex::encode(Sha256::digest(&audio)) != header.sha256 {
        return Err(Corrupt("audio digest differs from the header"));
    }
    Ok(Entry { header, audio })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            key: "k".into(),
            sha256: String::new(),
            bytes: 0,
            sample_rate_hz: Some(24_000),
            key_id: "acct/k1".into(),
            pool: "fake".into(),
            characters: 12,
        }
    }

    #[test]
    fn an_entry_round_trips_with_its_digest() {
        let object = encode(header(), b"RIFF audio");
        let entry = decode(object.into(), "k").unwrap();
        assert_eq!(&entry.audio[..], b"RIFF audio");
        assert_eq!(entry.header.bytes, 10);
        assert_eq!(entry.header.sample_rate_hz, Some(24_000));
    }

    #[test]
    fn truncation_and_bit_flips_are_corrupt_never_served() {
        let object = encode(header(), b"0123456789");
        for cut in [0, 5, MAGIC.len() + 2, MAGIC.len() + 10, object.len() - 1] {
            assert!(
                decode(bytes::Bytes::copy_from_slice(&object[..cut]), "k").is_err(),
                "cut at {cut}"
            );
        }
        let mut flipped = object.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(
            decode(flipped.into(), "k"),
            Err(Corrupt("audio digest differs from the header"))
        );
    }

    #[test]
    fn an_entry_read_under_another_key_is_refused() {
        let object = encode(header(), b"audio");
        assert_eq!(
            decode(object.into(), "other"),
            Err(Corrupt(
                "the entry belongs to another key (copied or moved)"
            ))
        );
    }
}
