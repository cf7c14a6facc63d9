//! One cache entry's bytes: a sealed header that vouches for the audio, then the audio.
//!
//! Layout: the magic line `voxpool-cache-2\n`, the header's MAC (32 bytes: HMAC-SHA256 under
//! the fleet's cache key, [`super::seal`], over the magic, the length and the header), the
//! header's length (4 bytes, big-endian), the header (JSON, [`Header`]: the entry's key, the
//! audio's SHA-256 and length), the audio exactly as the vendor sent it for the chunk. Reading
//! checks all of it, and nothing unchecked is served:
//! - a header whose MAC fails (written without the fleet's secret, or altered: an audio swapped
//!   with its digest recomputed) is [`Refused::Unsealed`], a miss the next fill replaces;
//! - an entry of the unsealed format `voxpool-cache-1` is [`Refused::Old`], a miss like an
//!   entry of an older `cache_version`;
//! - a truncated object, a wrong length, an audio whose SHA-256 differs from the sealed
//!   header's, or a header naming another key than the one read is [`Refused::Corrupt`] (the
//!   caller deletes it and fills it anew).

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::seal::{MAC_BYTES, Seal};

const MAGIC: &[u8] = b"voxpool-cache-2\n";
/// The unsealed format written before entries carried a MAC.
const OLD_MAGIC: &[u8] = b"voxpool-cache-1\n";
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

/// Why an object under `cache/` is not served (module doc).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Not a whole, intact entry (why, for the log): deleted, filled anew.
    #[error("corrupt cache entry: {0}")]
    Corrupt(&'static str),
    /// Its header's MAC fails under every accepted key: not written by this fleet (or with a
    /// secret it no longer has), or altered. A miss; the next fill replaces it.
    #[error("cache entry fails its seal (not written with this fleet's cache secret, or altered)")]
    Unsealed,
    /// The unsealed format of earlier versions: a miss.
    #[error("cache entry of the unsealed format voxpool-cache-1")]
    Old,
}

/// The object's bytes for `audio` under `header` (whose `sha256` and `bytes` are set here),
/// sealed with `seal`.
pub fn encode(mut header: Header, audio: &[u8], seal: &Seal) -> Vec<u8> {
    header.sha256 = hex::encode(Sha256::digest(audio));
    header.bytes = audio.len() as u64;
    // A struct of strings and numbers always serializes.
    let json = serde_json::to_vec(&header).unwrap_or_default();
    let len = u32::try_from(json.len()).unwrap_or(u32::MAX);
    let mut sealed = Vec::with_capacity(MAGIC.len() + 4 + json.len());
    sealed.extend_from_slice(MAGIC);
    sealed.extend_from_slice(&len.to_be_bytes());
    sealed.extend_from_slice(&json);
    let mac = seal.sign(&sealed);
    let mut out = Vec::with_capacity(MAC_BYTES + sealed.len() + audio.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&mac);
    out.extend_from_slice(&sealed[MAGIC.len()..]);
    out.extend_from_slice(audio);
    out
}

/// Reads back the object stored for `key`, checking it against `seal` (module doc).
pub fn decode(object: bytes::Bytes, key: &str, seal: &Seal) -> Result<Entry, Refused> {
    let Some(rest) = object.strip_prefix(MAGIC) else {
        return Err(if object.starts_with(OLD_MAGIC) {
            Refused::Old
        } else {
            Refused::Corrupt("no voxpool-cache-2 magic")
        });
    };
    let (mac, rest) = rest
        .split_first_chunk::<MAC_BYTES>()
        .ok_or(Refused::Corrupt("truncated before the header"))?;
    let (len_bytes, rest) = rest
        .split_first_chunk::<4>()
        .ok_or(Refused::Corrupt("truncated before the header"))?;
    let len = u32::from_be_bytes(*len_bytes) as usize;
    if len > MAX_HEADER || rest.len() < len {
        return Err(Refused::Corrupt("truncated header"));
    }
    let mut sealed = Vec::with_capacity(MAGIC.len() + 4 + len);
    sealed.extend_from_slice(MAGIC);
    sealed.extend_from_slice(len_bytes);
    sealed.extend_from_slice(&rest[..len]);
    if !seal.verify(&sealed, mac) {
        return Err(Refused::Unsealed);
    }
    let header: Header =
        serde_json::from_slice(&rest[..len]).map_err(|_| Refused::Corrupt("unreadable header"))?;
    if header.key != key {
        return Err(Refused::Corrupt(
            "the entry belongs to another key (copied or moved)",
        ));
    }
    let start = MAGIC.len() + MAC_BYTES + 4 + len;
    let audio = object.slice(start..);
    if audio.len() as u64 != header.bytes {
        return Err(Refused::Corrupt(
            "audio length differs from the header (truncated?)",
        ));
    }
    if hex::encode(Sha256::digest(&audio)) != header.sha256 {
        return Err(Refused::Corrupt("audio digest differs from the header"));
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

    fn seal() -> Seal {
        Seal::from_secret("the-fleets-cache-secret-0123456789").unwrap()
    }

    #[test]
    fn an_entry_round_trips_with_its_digest() {
        let object = encode(header(), b"RIFF audio", &seal());
        let entry = decode(object.into(), "k", &seal()).unwrap();
        assert_eq!(&entry.audio[..], b"RIFF audio");
        assert_eq!(entry.header.bytes, 10);
        assert_eq!(entry.header.sample_rate_hz, Some(24_000));
    }

    #[test]
    fn truncation_and_bit_flips_are_refused_never_served() {
        let object = encode(header(), b"0123456789", &seal());
        for cut in [0, 5, MAGIC.len() + 2, MAGIC.len() + 40, object.len() - 1] {
            assert!(
                decode(bytes::Bytes::copy_from_slice(&object[..cut]), "k", &seal()).is_err(),
                "cut at {cut}"
            );
        }
        let mut flipped = object.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(
            decode(flipped.into(), "k", &seal()),
            Err(Refused::Corrupt("audio digest differs from the header"))
        );
    }

    #[test]
    fn an_entry_read_under_another_key_is_refused() {
        let object = encode(header(), b"audio", &seal());
        assert_eq!(
            decode(object.into(), "other", &seal()),
            Err(Refused::Corrupt(
                "the entry belongs to another key (copied or moved)"
            ))
        );
    }

    /// What someone who can write the store but lacks the secret can do: swap the audio and
    /// recompute the digest and length in the header.
    fn forge(object: &[u8], audio: &[u8]) -> Vec<u8> {
        let at = MAGIC.len() + MAC_BYTES;
        let len = u32::from_be_bytes(object[at..at + 4].try_into().unwrap()) as usize;
        let mut header: Header = serde_json::from_slice(&object[at + 4..at + 4 + len]).unwrap();
        header.sha256 = hex::encode(Sha256::digest(audio));
        header.bytes = audio.len() as u64;
        let json = serde_json::to_vec(&header).unwrap();
        let mut out = object[..at].to_vec();
        out.extend_from_slice(&u32::try_from(json.len()).unwrap().to_be_bytes());
        out.extend_from_slice(&json);
        out.extend_from_slice(audio);
        out
    }

    #[test]
    fn swapped_audio_with_its_digest_recomputed_fails_the_seal() {
        let object = encode(header(), b"the real audio", &seal());
        let forged = forge(&object, b"other audio");
        assert_eq!(decode(forged.into(), "k", &seal()), Err(Refused::Unsealed));
        let other = Seal::from_secret("another-fleets-secret-0123456789ab").unwrap();
        assert_eq!(
            decode(object.into(), "k", &other),
            Err(Refused::Unsealed),
            "an entry sealed under another secret"
        );
    }

    #[test]
    fn an_unsealed_entry_of_the_old_format_is_a_miss() {
        let mut old = OLD_MAGIC.to_vec();
        old.extend_from_slice(b"\0\0\0\x02{}audio");
        assert_eq!(decode(old.into(), "k", &seal()), Err(Refused::Old));
    }
}
