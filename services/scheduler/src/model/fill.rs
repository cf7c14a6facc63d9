//! Fill locks: single-flight filling of a cache entry (`AcquireFill`, docs/SCHEDULER.md "Fill
//! locks"). One lock per content key, shared by every replica through the store, held by one
//! [`FillId`] at a time until it is released or its TTL (store clock) ends.
//!
//! Owns the shape of what reaches the store: a [`FillKey`] holds only `[A-Za-z0-9._:/-]`
//! (no braces, so a Redis hash tag built from it is exactly the key; no control characters,
//! so it is safe in logs), and a [`FillId`] is 128 random bits, unguessable, so only the
//! caller it was granted to can renew or release the lock.

/// Longest fill key, in characters.
pub const MAX_FILL_KEY_CHARS: usize = 256;

/// A checked content key (module doc).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FillKey(String);

impl FillKey {
    /// `raw` if it is 1..=[`MAX_FILL_KEY_CHARS`] characters of `[A-Za-z0-9._:/-]`; otherwise
    /// what is wrong with it (without quoting it: the caller quotes).
    pub fn parse(raw: &str) -> Result<Self, String> {
        if raw.is_empty() {
            return Err(format!(
                "required: 1..={MAX_FILL_KEY_CHARS} characters of A-Z a-z 0-9 . _ : / - (e.g. a digest of what the cache entry holds)"
            ));
        }
        if raw.len() > MAX_FILL_KEY_CHARS {
            return Err(format!(
                "at most {MAX_FILL_KEY_CHARS} characters, got {} bytes",
                raw.len()
            ));
        }
        let allowed =
            |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '/' | '-');
        if let Some((at, c)) = raw.chars().enumerate().find(|&(_, c)| !allowed(c)) {
            return Err(format!(
                "character {at} ('{}') is not allowed: use only A-Z a-z 0-9 . _ : / -",
                c.escape_default()
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    /// The key.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for FillKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The token of one granted fill lock: 32 lowercase hex digits (module doc).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct FillId(String);

impl std::fmt::Debug for FillId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A capability: never printed whole.
        write!(f, "FillId({}…)", &self.0[..self.0.len().min(6)])
    }
}

impl FillId {
    /// A fresh unguessable id from the OS-seeded CSPRNG.
    pub fn random() -> Self {
        let bytes: [u8; 16] = rand::random();
        Self(hex::encode(bytes))
    }

    /// Parses 32 lowercase hex digits, as [`FillId::random`] makes them.
    pub fn parse(raw: &str) -> Option<Self> {
        (raw.len() == 32 && raw.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .then(|| Self(raw.to_owned()))
    }

    /// The id as sent to its holder.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What [`LeaseStore::acquire_fill`](crate::store::LeaseStore::acquire_fill) did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FillState {
    /// The lock is now the caller's, for the TTL it asked.
    Granted,
    /// Another caller holds it.
    Held {
        /// At most how long until its lock expires (ms, store clock).
        ttl_left_ms: u64,
        /// The holder's id, so a waiter can tell "still that holder" from "released"; never
        /// sent to a caller.
        holder: FillId,
    },
}

/// Who holds a fill lock now ([`LeaseStore::fill_holder`](crate::store::LeaseStore::fill_holder)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FillHolder {
    /// The holder's id.
    pub fill_id: FillId,
    /// How long until its lock expires unless renewed (ms, store clock; at least 1).
    pub ttl_left_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_hold_only_the_allowed_characters() {
        for ok in ["a", "tts:v1/abc.def_0-9", &"k".repeat(256)] {
            assert_eq!(FillKey::parse(ok).map(|k| k.to_string()), Ok(ok.to_owned()));
        }
        for bad in ["", "a{b}", "a b", "new\nline", "é", &"k".repeat(257)] {
            assert!(FillKey::parse(bad).is_err(), "{bad:?}");
        }
        let why = FillKey::parse("ab\ncd").unwrap_err();
        assert!(why.contains("character 2") && !why.contains('\n'), "{why}");
    }

    #[test]
    fn ids_are_random_hex_and_parse_back() {
        let id = FillId::random();
        assert_eq!(FillId::parse(id.as_str()), Some(id.clone()));
        assert_ne!(id, FillId::random());
        assert_eq!(FillId::parse("ABCDEF0123456789abcdef0123456789"), None);
        assert_eq!(FillId::parse("abc"), None);
        assert!(!format!("{id:?}").contains(id.as_str()));
    }
}
