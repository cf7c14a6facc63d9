//! Lease ids as capabilities (invariant 11 of docs/ARCHITECTURE.md): only a lease this scheduler fleet issued can be
//! renewed, reported on or released.
//!
//! Owns the caller-facing form of a lease id and its MAC:
//!
//! ```text
//! <pool>/<upstream>/<key>/<token>.<granted_at_ms>.<mac>
//! volc-standard/acct-a/app-1/3f2a…e1.1764640000123.9c0d…ab
//! ```
//!
//! `token` is the store's handle (32 hex digits, 128 random bits); `granted_at_ms` is the store
//! clock at the grant; `mac` is HMAC-SHA256 over pool, key, token and grant time, truncated to
//! 128 bits (32 hex digits), keyed with the fleet's lease secret. Ids, pools and keys hold no
//! `/` and tokens, times and MACs no `.` or `/`, so the form parses without ambiguity.
//!
//! Verification happens at the gRPC edge before any store call: a made-up or altered id is
//! refused (PERMISSION_DENIED, `LEASE_NOT_ISSUED`) and changes nothing, so the key a Report or
//! a recovery-window Renew acts on is always the one the lease was granted on.
//!
//! **The secret.** `scheduler.lease_secret` (a credential reference) when configured, with
//! `scheduler.lease_secret_previous` also accepted, never signing (a rotation adds the new
//! secret there first, then swaps the two: docs/SECURITY.md ("The lease secret")). Unset, the replicas share
//! one kept in the store ([`LeaseStore::lease_secret`]): the first replica creates it, every
//! other adopts it, so every lease one replica grants verifies on every other with no setup.
//! Each replica re-asserts it every [`REFRESH`]: a store that lost it (FLUSHALL, a restart
//! without persistence) gets the replica's own back before anyone creates a new one, so the
//! leases live across the loss can still re-register; a replica that finds another secret in
//! the store adopts it for signing and keeps accepting its own. Until a replica has read the
//! store's secret it grants nothing and answers UNAVAILABLE (its health says NOT_SERVING).

use std::{
    sync::{Arc, RwLock},
    time::Duration,
};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use tokio_util::sync::CancellationToken;
use voxpool_config::SchedulerSettings;
use voxpool_domain::secret::Secret;

use crate::{
    model::{Lease, LeaseId, LeaseToken},
    store::LeaseStore,
};

/// Shortest lease secret accepted from the config.
pub const MIN_SECRET_CHARS: usize = 32;
/// Hex digits of the MAC in a lease id (128 bits).
const MAC_HEX: usize = 32;
/// Most secrets a replica accepts at once (its signing one, a configured previous one, and
/// those it adopted from or lost to the store).
const MAX_ACCEPTED: usize = 4;
/// How often a replica on a store-kept secret re-asserts it in the store, so that after a
/// flush the running replicas put it back before a replica starting then creates another. Not
/// shorter: while the secret's cluster shard fails over, each failing re-assertion also counts
/// towards the connection's rebuild (`store/redis/conn/heal.rs`), and at 1 s those extra
/// rebuilds disturbed the healthy shards (`topologies.rs`).
pub const REFRESH: Duration = Duration::from_secs(5);

/// A lease id as the caller holds it, parsed (not yet verified: see [`LeaseSigner::verify`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedLease {
    /// The store's handle of the lease (its pool and token).
    pub id: LeaseId,
    /// The key the lease was granted on, `upstream/key`.
    pub key_id: String,
    /// Store clock at the grant (ms since the epoch).
    pub granted_at_ms: i64,
    mac: String,
}

impl SignedLease {
    /// Parses the id's shape; `None` when it is not `<pool>/<upstream>/<key>/<token>.<ms>.<mac>`
    /// with valid parts.
    pub fn parse(raw: &str) -> Option<Self> {
        let (path, tail) = raw.rsplit_once('/')?;
        let mut parts = path.splitn(3, '/');
        let (pool, upstream, key) = (parts.next()?, parts.next()?, parts.next()?);
        if !voxpool_config::is_valid_id(pool)
            || upstream.is_empty()
            || key.is_empty()
            || key.contains('/')
        {
            return None;
        }
        let mut fields = tail.split('.');
        let (token, granted, mac) = (fields.next()?, fields.next()?, fields.next()?);
        if fields.next().is_some()
            || mac.len() != MAC_HEX
            || !mac
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            || granted.is_empty()
            || granted.len() > 16
            // One spelling per id: no leading zeros.
            || (granted.len() > 1 && granted.starts_with('0'))
            || !granted.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        Some(Self {
            id: LeaseId {
                pool: pool.to_owned(),
                token: LeaseToken::parse(token)?,
            },
            key_id: format!("{upstream}/{key}"),
            granted_at_ms: granted.parse().ok()?,
            mac: mac.to_owned(),
        })
    }
}

impl std::fmt::Display for SignedLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{}/{}.{}.{}",
            self.id.pool,
            self.key_id,
            self.id.token.as_str(),
            self.granted_at_ms,
            self.mac
        )
    }
}

/// Why a presented lease id is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Not a lease id at all (INVALID_ARGUMENT).
    Malformed,
    /// Well-formed, but no secret of this fleet signed it: made up, altered, or issued before
    /// lease signing or under a secret since dropped (PERMISSION_DENIED).
    NotIssued,
}

/// Where the secret comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Configured,
    Store,
}

struct Keys {
    /// Signs; also accepted. `None` until a store-kept secret was read.
    signing: Option<MacKey>,
    /// Also accepted (a configured previous secret, or store secrets seen before).
    accepted: Vec<MacKey>,
}

/// A lease secret and its HMAC state keyed once: every MAC starts from a copy of it instead
/// of hashing the secret's two key blocks again (two of the five SHA-256 blocks a lease id's
/// MAC costs).
#[derive(Clone)]
struct MacKey {
    secret: Secret,
    /// `None` never happens (HMAC takes keys of any length); a MAC under it is empty and
    /// matches nothing.
    keyed: Option<Hmac<Sha256>>,
}

impl MacKey {
    fn new(secret: Secret) -> Self {
        let keyed = Hmac::<Sha256>::new_from_slice(secret.expose().as_bytes()).ok();
        Self { secret, keyed }
    }
}

/// Signs the leases this replica grants and verifies the ids callers present.
pub struct LeaseSigner {
    keys: RwLock<Keys>,
    source: Source,
}

impl std::fmt::Debug for LeaseSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseSigner")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

fn mac_hex(key: &MacKey, pool: &str, key_id: &str, token: &str, granted_at_ms: i64) -> String {
    let Some(mut mac) = key.keyed.clone() else {
        return String::new();
    };
    for part in [
        "voxpool lease v1",
        pool,
        key_id,
        token,
        &granted_at_ms.to_string(),
    ] {
        mac.update(part.as_bytes());
        mac.update(b"\0");
    }
    let full = mac.finalize().into_bytes();
    hex::encode(&full[..MAC_HEX / 2])
}

/// A fresh random secret (256 bits as hex) for a store-kept fleet secret.
fn random_secret() -> Secret {
    let bytes: [u8; 32] = rand::random();
    Secret::new(hex::encode(bytes))
}

impl LeaseSigner {
    /// A signer over configured secrets: `current` signs, both verify.
    pub fn configured(current: Secret, previous: Option<Secret>) -> Self {
        Self {
            keys: RwLock::new(Keys {
                signing: Some(MacKey::new(current)),
                accepted: previous.into_iter().map(MacKey::new).collect(),
            }),
            source: Source::Configured,
        }
    }

    /// A signer over the secret the store keeps for the fleet, not read yet
    /// ([`LeaseSigner::refresh`] reads it).
    pub fn store_kept() -> Self {
        Self {
            keys: RwLock::new(Keys {
                signing: None,
                accepted: Vec::new(),
            }),
            source: Source::Store,
        }
    }

    /// True once the signer has a secret to sign with.
    pub fn is_ready(&self) -> bool {
        self.keys.read().is_ok_and(|k| k.signing.is_some())
    }

    /// The signer the settings ask for: the configured secrets, or the store's shared one
    /// ([`LeaseSigner::store_kept`]).
    ///
    /// Errors: a configured secret that does not resolve or is shorter than
    /// [`MIN_SECRET_CHARS`], with its config path (a configuration error: exit at start-up).
    pub fn from_settings(settings: &SchedulerSettings) -> Result<Self, String> {
        let resolve = |path: &'static str, r: &voxpool_config::CredentialRef| {
            let secret = r.resolve().map_err(|e| format!("scheduler.{path}: {e}"))?;
            if secret.expose().chars().count() < MIN_SECRET_CHARS {
                return Err(format!(
                    "scheduler.{path}: the lease secret has fewer than {MIN_SECRET_CHARS} characters; use e.g. `openssl rand -hex 32`"
                ));
            }
            Ok(secret)
        };
        match (&settings.lease_secret, &settings.lease_secret_previous) {
            (Some(current), previous) => {
                let current = resolve("lease_secret", current)?;
                let previous = previous
                    .as_ref()
                    .map(|p| resolve("lease_secret_previous", p))
                    .transpose()?;
                Ok(Self::configured(current, previous))
            }
            (None, Some(_)) => Err(
                "scheduler.lease_secret_previous is set without scheduler.lease_secret: set the new secret as lease_secret and the old one as lease_secret_previous".into(),
            ),
            (None, None) => Ok(Self::store_kept()),
        }
    }

    /// The caller-facing id of `lease`, granted at `granted_at_ms` (store clock); `None`
    /// before the signer [`is_ready`](Self::is_ready).
    pub fn sign(&self, lease: &Lease, granted_at_ms: i64) -> Option<SignedLease> {
        let keys = self.keys.read().ok()?;
        let mac = mac_hex(
            keys.signing.as_ref()?,
            &lease.id.pool,
            &lease.key_id,
            lease.id.token.as_str(),
            granted_at_ms,
        );
        Some(SignedLease {
            id: lease.id.clone(),
            key_id: lease.key_id.clone(),
            granted_at_ms,
            mac,
        })
    }

    /// Parses and verifies a presented id (constant-time MAC comparison against every accepted
    /// secret).
    pub fn verify(&self, raw: &str) -> Result<SignedLease, Refused> {
        let lease = SignedLease::parse(raw).ok_or(Refused::Malformed)?;
        let Ok(keys) = self.keys.read() else {
            return Err(Refused::NotIssued);
        };
        let matches = keys
            .signing
            .iter()
            .chain(keys.accepted.iter())
            .any(|secret| {
                let expected = mac_hex(
                    secret,
                    &lease.id.pool,
                    &lease.key_id,
                    lease.id.token.as_str(),
                    lease.granted_at_ms,
                );
                subtle::ConstantTimeEq::ct_eq(expected.as_bytes(), lease.mac.as_bytes()).into()
            });
        if matches {
            Ok(lease)
        } else {
            Err(Refused::NotIssued)
        }
    }

    /// One read (and re-assertion) of a store-kept secret (module doc): takes the store's
    /// secret, creating it from a fresh random one when the store has none; puts this
    /// replica's back if the store lost it; adopts the store's if it differs. A no-op for a
    /// configured secret.
    ///
    /// Errors: the store did not answer (the secret stays as it was).
    pub async fn refresh(&self, store: &dyn LeaseStore) -> Result<(), String> {
        if self.source != Source::Store {
            return Ok(());
        }
        let ours = self
            .keys
            .read()
            .map_err(|_| "lease secret lock poisoned".to_owned())?
            .signing
            .as_ref()
            .map(|k| k.secret.clone());
        let candidate = ours.clone().unwrap_or_else(random_secret);
        let theirs = store
            .lease_secret(&candidate)
            .await
            .map_err(|e| format!("reading the fleet's lease secret: {e}"))?;
        if ours.as_ref() == Some(&theirs) {
            return Ok(());
        }
        let mut keys = self
            .keys
            .write()
            .map_err(|_| "lease secret lock poisoned".to_owned())?;
        if let Some(old) = keys.signing.replace(MacKey::new(theirs)) {
            tracing::warn!(
                "the store holds another lease secret than this replica's (it lost ours and another replica created one): signing with the store's, still accepting ours"
            );
            keys.accepted.insert(0, old);
            keys.accepted.truncate(MAX_ACCEPTED - 1);
        } else {
            tracing::info!("lease secret in place (the store's, or created there by this replica)");
        }
        Ok(())
    }

    /// Runs [`LeaseSigner::refresh`] every [`REFRESH`] until `stop` (store-kept secrets only).
    pub fn spawn_refresh(self: &Arc<Self>, store: Arc<dyn LeaseStore>, stop: CancellationToken) {
        if self.source != Source::Store {
            return;
        }
        let signer = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(REFRESH) => {
                        if let Err(e) = signer.refresh(store.as_ref()).await {
                            tracing::debug!(error = %e, "could not re-assert the lease secret");
                        }
                    }
                    () = stop.cancelled() => return,
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;

    #[tokio::test]
    async fn replicas_on_one_store_share_its_secret_and_put_it_back_after_a_loss() {
        let store = MemoryStore::new();
        let (a, b) = (LeaseSigner::store_kept(), LeaseSigner::store_kept());
        assert!(!a.is_ready() && a.sign(&lease(), 1).is_none());
        a.refresh(&store).await.expect("store answers");
        b.refresh(&store).await.expect("store answers");
        let raw = a.sign(&lease(), 1).expect("ready").to_string();
        assert!(
            b.verify(&raw).is_ok(),
            "a lease one replica signs verifies on the other"
        );
    }

    fn lease() -> Lease {
        Lease {
            id: LeaseId {
                pool: "volc-standard".into(),
                token: LeaseToken::random(),
            },
            key_id: "acct-a/app-1".into(),
            expires_at_ms: 2_000,
            granted_at_ms: 1_000,
            key_in_flight: 1,
            key_capacity: 10,
        }
    }

    fn signer(secret: &str) -> LeaseSigner {
        LeaseSigner::configured(Secret::new(secret), None)
    }

    #[test]
    fn a_signed_id_round_trips_and_verifies() {
        let s = signer("s".repeat(32).as_str());
        let l = lease();
        let signed = s.sign(&l, 1_000).expect("ready");
        let raw = signed.to_string();
        assert!(raw.starts_with("volc-standard/acct-a/app-1/"), "{raw}");
        let back = s.verify(&raw).expect("verifies");
        assert_eq!(back, signed);
        assert_eq!(back.id, l.id);
        assert_eq!(back.key_id, "acct-a/app-1");
        assert_eq!(back.granted_at_ms, 1_000);
    }

    #[test]
    fn altered_or_foreign_ids_are_not_issued() {
        let s = signer(&"a".repeat(32));
        let raw = s.sign(&lease(), 1_000).expect("ready").to_string();
        // Another key, another grant time, another token, another pool: each breaks the MAC.
        for altered in [
            raw.replacen("app-1", "app-2", 1),
            raw.replacen(".1000.", ".1001.", 1),
            raw.replacen("volc-standard", "volc-other", 1),
        ] {
            assert_eq!(s.verify(&altered), Err(Refused::NotIssued), "{altered}");
        }
        let (head, mac) = raw.rsplit_once('.').expect("mac");
        let flipped = format!(
            "{head}.{}",
            mac.chars()
                .map(|c| if c == '0' { '1' } else { '0' })
                .collect::<String>()
        );
        assert_eq!(s.verify(&flipped), Err(Refused::NotIssued));
        assert_eq!(
            signer(&"b".repeat(32)).verify(&raw),
            Err(Refused::NotIssued)
        );
    }

    #[test]
    fn the_previous_secret_still_verifies_after_a_rotation() {
        let old = signer(&"o".repeat(32));
        let raw = old.sign(&lease(), 5).expect("ready").to_string();
        let rotated = LeaseSigner::configured(
            Secret::new("n".repeat(32)),
            Some(Secret::new("o".repeat(32))),
        );
        assert!(rotated.verify(&raw).is_ok());
        let fresh = rotated.sign(&lease(), 5).expect("ready").to_string();
        assert_eq!(
            old.verify(&fresh),
            Err(Refused::NotIssued),
            "only the new secret signs"
        );
    }

    #[test]
    fn malformed_ids_are_told_apart_from_unissued_ones() {
        let s = signer(&"a".repeat(32));
        for bad in [
            "",
            "volc-standard/0123456789abcdef0123456789abcdef",
            "volc-standard/acct-a/app-1/xyz.1.00000000000000000000000000000000",
            "volc-standard/acct-a/app-1/0123456789abcdef0123456789abcdef.1",
            "volc-standard/acct-a/app-1/0123456789abcdef0123456789abcdef.-1.00000000000000000000000000000000",
            "Bad Pool/acct-a/app-1/0123456789abcdef0123456789abcdef.1.00000000000000000000000000000000",
            "volc-standard/acct-a/0123456789abcdef0123456789abcdef.1.00000000000000000000000000000000",
            "volc-standard/acct-a/app-1/0123456789abcdef0123456789abcdef.01.00000000000000000000000000000000",
        ] {
            assert_eq!(s.verify(bad), Err(Refused::Malformed), "{bad:?}");
        }
        let well_formed = "volc-standard/acct-a/app-1/0123456789abcdef0123456789abcdef.1.00000000000000000000000000000000";
        assert_eq!(s.verify(well_formed), Err(Refused::NotIssued));
    }
}
