//! Who an HTTP caller is: `Authorization: Bearer <key>` checked against `[[http.api_keys]]`
//! (`voxpool_config::HttpSettings`), which gives the tenant and traffic class its calls run
//! as.
//!
//! Invariant guarded: a key never leaves this module. Only SHA-256 digests are kept (a
//! `key = { env }` reference is read and hashed at start-up), presented keys are hashed and
//! compared in constant time, and logs, spans and errors name the tenant, never the key.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use voxpool_config::{HttpApiKey, HttpPriority};

use crate::lease::Priority;

/// Who a call runs as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The tenant (fairness inside its class).
    pub tenant: String,
    /// The traffic class of its leases.
    pub priority: Priority,
    /// The key's name (`name` in its entry, else `key-` and the first 8 hex digits of its
    /// SHA-256); empty for anonymous calls. Usage records and budgets name the caller by it.
    pub name: String,
}

/// The accepted keys, as digests.
#[derive(Clone)]
pub struct ApiKeys {
    keys: Vec<([u8; 32], Caller)>,
    /// Who an unauthenticated call runs as (`--http-allow-anonymous`), if anyone.
    anonymous: Option<Caller>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKeys")
            .field("keys", &self.keys.len())
            .field("anonymous", &self.anonymous.is_some())
            .finish()
    }
}

fn priority(p: HttpPriority) -> Priority {
    match p {
        HttpPriority::Interactive => Priority::Interactive,
        HttpPriority::Standard => Priority::Standard,
        HttpPriority::Batch => Priority::Batch,
    }
}

/// The tenant of calls made without a key under `--http-allow-anonymous`.
pub const ANONYMOUS_TENANT: &str = "anonymous";

impl ApiKeys {
    /// Reads `configured` (a validated config's `[[http.api_keys]]`). With no key at all the
    /// listener only starts when `allow_anonymous`; then every call runs as tenant
    /// [`ANONYMOUS_TENANT`], class STANDARD, whatever key it presents (OpenAI's SDKs always
    /// send one; vLLM does the same without keys). With keys and `allow_anonymous`, a call
    /// without a key runs as anonymous and one with an unknown key is refused.
    /// Errors (one line, naming the entry and the variable or file, never a value): a `key`
    /// reference that cannot be read; no key and no `allow_anonymous`.
    pub fn load(configured: &[HttpApiKey], allow_anonymous: bool) -> Result<Self, String> {
        let mut keys = Vec::with_capacity(configured.len());
        for (i, entry) in configured.iter().enumerate() {
            let digest = match (&entry.key, entry.digest()) {
                (Some(reference), _) => {
                    let secret = reference
                        .resolve()
                        .map_err(|e| format!("http.api_keys[{i}].key: {e}"))?;
                    Sha256::digest(secret.expose().trim().as_bytes()).into()
                }
                (None, Some(digest)) => digest,
                (None, None) => {
                    return Err(format!(
                        "http.api_keys[{i}]: set sha256 or key (the config was not validated)"
                    ));
                }
            };
            keys.push((
                digest,
                Caller {
                    tenant: entry.tenant.clone(),
                    priority: priority(entry.priority),
                    name: if entry.name.is_empty() {
                        format!("key-{}", &hex::encode(digest)[..8])
                    } else {
                        entry.name.clone()
                    },
                },
            ));
        }
        if keys.is_empty() && !allow_anonymous {
            return Err("--http-listen needs at least one [[http.api_keys]] entry in the config (sha256 = \"<hex>\" or key = { env = \"NAME\" }, tenant, priority), or --http-allow-anonymous to serve without keys".into());
        }
        Ok(Self {
            keys,
            anonymous: allow_anonymous.then(|| Caller {
                tenant: ANONYMOUS_TENANT.to_owned(),
                priority: Priority::Standard,
                name: String::new(),
            }),
        })
    }

    /// Number of configured keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when no key is configured (anonymous only).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The caller of a request whose `Authorization` header is `authorization`. Errors: the
    /// 401 message (no header, not a bearer token, an unknown key).
    pub fn caller(&self, authorization: Option<&[u8]>) -> Result<Caller, &'static str> {
        if self.keys.is_empty()
            && let Some(anonymous) = &self.anonymous
        {
            return Ok(anonymous.clone());
        }
        let Some(raw) = authorization else {
            return self.anonymous.clone().ok_or(
                "missing Authorization header: send `Authorization: Bearer <API key>` (an [[http.api_keys]] key of this server)",
            );
        };
        let token = raw
            .strip_prefix(b"Bearer ")
            .or_else(|| raw.strip_prefix(b"bearer "))
            .ok_or("the Authorization header is not `Bearer <API key>`")?;
        let presented: [u8; 32] = Sha256::digest(token.trim_ascii()).into();
        // Every digest is compared, so the time taken says nothing of which one matched.
        let mut found = None;
        for (digest, caller) in &self.keys {
            if bool::from(digest.ct_eq(&presented)) {
                found = Some(caller);
            }
        }
        found
            .cloned()
            .ok_or("incorrect API key: it matches no [[http.api_keys]] entry of this server")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(sha256: Option<String>, env: Option<&str>, tenant: &str) -> HttpApiKey {
        HttpApiKey {
            sha256,
            key: env.map(|e| voxpool_config::CredentialRef::Env(e.to_owned())),
            tenant: tenant.to_owned(),
            priority: HttpPriority::Batch,
            name: String::new(),
        }
    }

    #[test]
    fn a_key_is_known_by_its_digest_and_gives_its_tenant_and_class() {
        let digest = hex::encode(Sha256::digest(b"sk-test-one"));
        let keys = ApiKeys::load(&[key(Some(digest), None, "acme")], false).unwrap();
        let caller = keys.caller(Some(b"Bearer sk-test-one")).unwrap();
        assert_eq!(caller.tenant, "acme");
        assert_eq!(caller.priority, Priority::Batch);
        assert!(keys.caller(Some(b"Bearer sk-test-two")).is_err());
        assert!(
            keys.caller(Some(b"sk-test-one")).is_err(),
            "not a bearer token"
        );
        assert!(
            keys.caller(None)
                .unwrap_err()
                .contains("missing Authorization")
        );
        assert!(!format!("{keys:?}").contains("sk-test"));
    }

    #[test]
    fn no_key_needs_anonymous_and_an_unreadable_reference_is_named() {
        let e = ApiKeys::load(&[], false).unwrap_err();
        assert!(e.contains("--http-allow-anonymous"), "{e}");
        let anonymous = ApiKeys::load(&[], true).unwrap();
        assert_eq!(anonymous.caller(None).unwrap().tenant, ANONYMOUS_TENANT);
        // No key configured: whatever an SDK sends is anonymous too.
        assert_eq!(
            anonymous
                .caller(Some(b"Bearer sk-anything"))
                .unwrap()
                .tenant,
            ANONYMOUS_TENANT
        );
        let digest = hex::encode(Sha256::digest(b"sk-known"));
        let both = ApiKeys::load(&[key(Some(digest), None, "acme")], true).unwrap();
        assert_eq!(both.caller(None).unwrap().tenant, ANONYMOUS_TENANT);
        assert!(
            both.caller(Some(b"Bearer x")).is_err(),
            "with keys configured, a wrong key is still wrong"
        );
        let e = ApiKeys::load(
            &[key(None, Some("VOXPOOL_TEST_UNSET_HTTP_KEY"), "a")],
            false,
        )
        .unwrap_err();
        assert!(
            e.starts_with("http.api_keys[0].key: environment variable VOXPOOL_TEST_UNSET_HTTP_KEY"),
            "{e}"
        );
    }
}
