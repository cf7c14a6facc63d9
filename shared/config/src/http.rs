//! `[http]`: the OpenAI-compatible HTTP front of synthesis (`--http-listen`). Its callers
//! present `Authorization: Bearer <key>`; each accepted key names the tenant and traffic class
//! its calls run as, so HTTP traffic takes part in tenant fairness and the batch share like
//! gRPC traffic:
//!
//! ```toml
//! [[http.api_keys]]
//! sha256 = "<64 hex digits: sha256 of the key>"   # or key = { env = "NAME" } / { file = "…" }
//! tenant = "acme"
//! priority = "INTERACTIVE"                        # | "STANDARD" (default) | "BATCH"
//! ```
//!
//! Only digests or references live in the file, never a key. Shape problems are reported here
//! with their path; a `key` reference is read when the listener starts (synthesis refuses to
//! start when it cannot be read, naming the variable or file).

use serde::{Deserialize, Serialize};

use super::{ConfigProblem, CredentialRef};

/// Longest tenant name (as `SynthesizeRequest.tenant`).
const MAX_TENANT_CHARS: usize = voxpool_domain::contract::MAX_TENANT_CHARS;

/// The `[http]` table.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HttpSettings {
    /// Accepted API keys (`[[http.api_keys]]`); none = the listener refuses to start unless
    /// `--http-allow-anonymous`.
    #[serde(default)]
    pub api_keys: Vec<HttpApiKey>,
}

/// One accepted API key: exactly one of `sha256` and `key`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HttpApiKey {
    /// Lowercase or uppercase hex SHA-256 of the key (64 digits): the key itself never
    /// appears in the file.
    #[serde(default)]
    pub sha256: Option<String>,
    /// Where the key lives (`{ env = "NAME" }` or `{ file = "/path" }`), read at start-up.
    #[serde(default)]
    pub key: Option<CredentialRef>,
    /// The tenant its calls run as: 1-64 printable characters.
    pub tenant: String,
    /// The key's name in usage records and `[[budgets]] callers`; empty = `key-` and the
    /// first 8 hex digits of its SHA-256.
    #[serde(default)]
    pub name: String,
    /// The traffic class of its calls (default STANDARD).
    #[serde(default)]
    pub priority: HttpPriority,
}

/// A key's traffic class, spelled as the proto enum.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum HttpPriority {
    /// Live traffic: served first.
    Interactive,
    /// The default.
    #[default]
    Standard,
    /// Bulk jobs: served last, within each pool's batch share.
    Batch,
}

impl HttpPriority {
    /// The name as written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            HttpPriority::Interactive => "INTERACTIVE",
            HttpPriority::Standard => "STANDARD",
            HttpPriority::Batch => "BATCH",
        }
    }
}

impl HttpApiKey {
    /// The configured digest as 32 bytes, when `sha256` is set and well formed.
    pub fn digest(&self) -> Option<[u8; 32]> {
        let hex = self.sha256.as_deref()?;
        let bytes = hex::decode(hex.trim()).ok()?;
        bytes.try_into().ok()
    }
}

/// Shape problems of `[http]`, each with its path.
pub(super) fn problems(http: &HttpSettings) -> Vec<ConfigProblem> {
    let mut problems = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, entry) in http.api_keys.iter().enumerate() {
        let path = |field: &str| format!("http.api_keys[{i}].{field}");
        match (&entry.sha256, &entry.key) {
            (Some(_), Some(_)) => problems.push(ConfigProblem {
                path: path("sha256"),
                message: "sets both sha256 and key: keep one".into(),
            }),
            (None, None) => problems.push(ConfigProblem {
                path: path("sha256"),
                message: r#"missing: set sha256 = "<hex of the key's SHA-256>" or key = { env = "NAME" }"#.into(),
            }),
            (Some(_), None) => match entry.digest() {
                None => problems.push(ConfigProblem {
                    path: path("sha256"),
                    message: "is not 64 hex digits: write the key's SHA-256, e.g. `printf %s \"$KEY\" | sha256sum`".into(),
                }),
                Some(d) if !seen.insert(d) => problems.push(ConfigProblem {
                    path: path("sha256"),
                    message: "the same key is listed twice: give each tenant its own key".into(),
                }),
                Some(_) => {}
            },
            (None, Some(_)) => {}
        }
        if let Some(message) = tenant_problem(&entry.tenant) {
            problems.push(ConfigProblem {
                path: path("tenant"),
                message,
            });
        }
    }
    problems
}

/// Why `tenant` cannot name a tenant in the config (an HTTP key's, or one of a client token's
/// `tenants`), if it cannot: what a request's `tenant` accepts
/// (`voxpool_domain::contract::check_tenant`), not empty, without surrounding spaces.
pub(super) fn tenant_problem(tenant: &str) -> Option<String> {
    let printable = voxpool_domain::contract::check_tenant(tenant).is_ok();
    (tenant.is_empty() || !printable || tenant.trim() != tenant).then(|| {
        format!(
            "{}: a tenant must be 1-{MAX_TENANT_CHARS} printable characters without surrounding spaces",
            voxpool_domain::untrusted::quote(tenant)
        )
    })
}

#[cfg(test)]
mod tests {
    use crate::{Config, ConfigError, Credentials};

    const POOL: &str = "[[pools]]\nid = \"p\"\nprovider = \"espeak\"\n[[pools.upstreams]]\nid = \"u\"\n[[pools.upstreams.keys]]\nid = \"k\"\ncapacity = 1\n";

    fn problems(toml: &str) -> Vec<String> {
        let config = Config::from_toml_str(&format!("{POOL}{toml}")).expect("parses");
        match config.validate(Credentials::Ignore) {
            Ok(()) => Vec::new(),
            Err(ConfigError::Invalid(p)) => p
                .into_iter()
                .map(|p| format!("{}: {}", p.path, p.message))
                .collect(),
            Err(e) => vec![e.to_string()],
        }
    }

    #[test]
    fn keys_are_digests_or_references_with_a_tenant() {
        let hex = "a".repeat(64);
        assert!(
            problems(&format!(
                "[[http.api_keys]]\nsha256 = \"{hex}\"\ntenant = \"acme\"\npriority = \"BATCH\"\n"
            ))
            .is_empty()
        );
        assert!(
            problems("[[http.api_keys]]\nkey = { env = \"K\" }\ntenant = \"acme\"\n").is_empty()
        );
        let p = problems("[[http.api_keys]]\ntenant = \"acme\"\n");
        assert!(
            p[0].starts_with("http.api_keys[0].sha256: missing"),
            "{p:?}"
        );
        let p = problems("[[http.api_keys]]\nsha256 = \"abc\"\ntenant = \"\"\n");
        assert!(
            p.iter().any(|p| p.contains("is not 64 hex digits")),
            "{p:?}"
        );
        assert!(
            p.iter().any(|p| p.starts_with("http.api_keys[0].tenant")),
            "{p:?}"
        );
        let p = problems(&format!(
            "[[http.api_keys]]\nsha256 = \"{hex}\"\ntenant = \"a\"\n[[http.api_keys]]\nsha256 = \"{}\"\ntenant = \"b\"\n",
            hex.to_uppercase()
        ));
        assert!(
            p.iter()
                .any(|p| p.starts_with("http.api_keys[1].sha256: the same key")),
            "{p:?}"
        );
    }

    #[test]
    fn an_unknown_priority_is_refused_by_name() {
        let e = Config::from_toml_str(&format!("{POOL}[[http.api_keys]]\nkey = {{ env = \"K\" }}\ntenant = \"a\"\npriority = \"URGENT\"\n")).unwrap_err();
        assert!(e.to_string().contains("URGENT"), "{e}");
    }
}
