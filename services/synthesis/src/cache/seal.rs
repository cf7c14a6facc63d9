//! The key audio cache entries are sealed with: HMAC-SHA256 under a secret the synthesis
//! replicas of one blob store share, so only voxpool can write an entry that is served.
//!
//! An entry's own SHA-256 ([`super::entry`]) catches damage, not a forger: whoever can write
//! the store can swap an entry's audio and recompute its digest. The MAC (over the entry's
//! header, which carries the audio's digest and length and the entry's key) needs the secret.
//!
//! **The secret**, in order (docs/SECURITY.md, "The audio cache secret"):
//! 1. `synthesis.cache_secret` (a credential reference, at least 32 characters);
//! 2. else `scheduler.lease_secret` when configured (the same config file every replica
//!    reads), with `scheduler.lease_secret_previous` also accepted: a lease secret rotation
//!    then keeps the cache;
//! 3. else a random key of this process: entries serve this process only (a warning says so).
//!
//! The HMAC key is derived from the secret with a label, `HMAC(secret, "voxpool audio cache
//! seal v1")`, so a cache MAC is never a valid lease id MAC under the same secret.

use hmac::{KeyInit as _, Mac as _};
use sha2::Sha256;
use voxpool_config::{Config, CredentialRef};

type HmacSha256 = hmac::Hmac<Sha256>;

const LABEL: &[u8] = b"voxpool audio cache seal v1";
/// Shortest accepted secret, as for the lease secret.
pub const MIN_SECRET_CHARS: usize = 32;
/// Bytes of a MAC.
pub const MAC_BYTES: usize = 32;

/// Where the sealing key came from (for the start-up line; never the secret).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `synthesis.cache_secret`.
    CacheSecret,
    /// Derived from `scheduler.lease_secret`.
    LeaseSecret,
    /// Random, this process only.
    Process,
}

/// The sealing key and the keys a seal is accepted under (module doc), keyed once. `Debug`
/// shows only the origin.
#[derive(Clone)]
pub struct Seal {
    signing: HmacSha256,
    accepted: Vec<HmacSha256>,
    origin: Origin,
}

impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seal")
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl Seal {
    /// The seal `config` asks for (module doc).
    ///
    /// Errors: a configured secret that does not resolve or is shorter than
    /// [`MIN_SECRET_CHARS`], naming its config path (exit at start-up).
    pub fn from_config(config: &Config) -> Result<Self, String> {
        if let Some(secret) = &config.synthesis.cache_secret {
            let key = resolve("synthesis.cache_secret", secret)?;
            return Self::with_keys(&key, &[], Origin::CacheSecret);
        }
        let scheduler = &config.scheduler;
        if let Some(secret) = &scheduler.lease_secret {
            let key = resolve("scheduler.lease_secret", secret)?;
            let previous = match &scheduler.lease_secret_previous {
                Some(p) => vec![resolve("scheduler.lease_secret_previous", p)?],
                None => Vec::new(),
            };
            return Self::with_keys(&key, &previous, Origin::LeaseSecret);
        }
        Ok(Self::process())
    }

    /// A random key of this process alone.
    pub fn process() -> Self {
        let key: [u8; 32] = rand::random();
        Self::with_keys(&key, &[], Origin::Process).unwrap_or_else(|_| unreachable!())
    }

    /// A seal under `secret` (tests: replicas sharing one secret).
    ///
    /// Errors: never for a real secret (HMAC takes keys of any length).
    pub fn from_secret(secret: &str) -> Result<Self, String> {
        Self::with_keys(&derive(secret)?, &[], Origin::CacheSecret)
    }

    fn with_keys(signing: &[u8], previous: &[[u8; 32]], origin: Origin) -> Result<Self, String> {
        let signing = keyed(signing)?;
        let mut accepted = vec![signing.clone()];
        for key in previous {
            accepted.push(keyed(key)?);
        }
        Ok(Self {
            signing,
            accepted,
            origin,
        })
    }

    /// Where the key came from.
    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// The MAC of `data`.
    pub fn sign(&self, data: &[u8]) -> [u8; MAC_BYTES] {
        let mut mac = self.signing.clone();
        mac.update(data);
        mac.finalize().into_bytes().into()
    }

    /// Whether `tag` is `data`'s MAC under an accepted key (compared in constant time).
    pub fn verify(&self, data: &[u8], tag: &[u8]) -> bool {
        self.accepted.iter().any(|key| {
            let mut mac = key.clone();
            mac.update(data);
            mac.verify_slice(tag).is_ok()
        })
    }
}

fn keyed(key: &[u8]) -> Result<HmacSha256, String> {
    HmacSha256::new_from_slice(key).map_err(|e| format!("audio cache seal key: {e}"))
}

fn derive(secret: &str) -> Result<[u8; 32], String> {
    let mut mac = keyed(secret.as_bytes())?;
    mac.update(LABEL);
    Ok(mac.finalize().into_bytes().into())
}

/// The HMAC key of the secret `reference` names.
fn resolve(path: &str, reference: &CredentialRef) -> Result<[u8; 32], String> {
    let secret = reference.resolve().map_err(|e| format!("{path}: {e}"))?;
    if secret.expose().chars().count() < MIN_SECRET_CHARS {
        return Err(format!(
            "{path}: the secret has fewer than {MIN_SECRET_CHARS} characters; use e.g. `openssl rand -hex 32`"
        ));
    }
    derive(secret.expose())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_verifies_under_its_secret_only() {
        let a = Seal::from_secret("a-secret-of-at-least-thirty-two-chars").unwrap();
        let b = Seal::from_secret("another-secret-of-thirty-two-chars!!").unwrap();
        let tag = a.sign(b"header");
        assert!(a.verify(b"header", &tag));
        assert!(!a.verify(b"headers", &tag));
        assert!(!b.verify(b"header", &tag));
        assert!(!Seal::process().verify(b"header", &tag));
        assert!(!format!("{a:?}").contains("secret-of"));
    }
}
