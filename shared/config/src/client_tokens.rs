//! `[[client_tokens]]`: the service bearer tokens data-plane callers present (separate from
//! the admin token). Each entry names a caller and points at its token with a credential
//! reference, like vendor keys:
//!
//! ```toml
//! [[client_tokens]]
//! name = "synthesis"                                   # the caller, in logs: token:synthesis
//! token = { env = "VOXPOOL_CLIENT_TOKEN_SYNTHESIS" }   # or { file = "/run/secrets/x" }
//! services = ["scheduler"]                             # where it is accepted (default: all)
//! tenants = ["team-a"]                                 # whom it acts for (default: any tenant)
//! ```
//!
//! A service that finds at least one entry for itself (or serves `--tls-client-ca`) refuses
//! unauthenticated data-plane calls; the values are read when the service starts
//! (`voxpool_runtime::auth::ClientAuth::load`). `tenants` binds the token to the tenants it may
//! act for on synthesis and jobs (`voxpool_runtime::auth::TenantBinding`); without it the token
//! acts for any tenant.

use serde::{Deserialize, Serialize};

use super::{ConfigProblem, CredentialRef, is_valid_id};

/// One accepted caller token.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ClientTokenConfig {
    /// The caller's name (`[a-z0-9._-]`, 1-64 chars), unique: its identity is `token:<name>`.
    pub name: String,
    /// Where the token lives; at least 16 characters once read.
    pub token: CredentialRef,
    /// The services that accept this token; empty (the default) means every service.
    #[serde(default)]
    pub services: Vec<DataPlane>,
    /// The tenants its calls may act for on synthesis and jobs (each 1-64 printable
    /// characters, at least one); unset (the default) means any tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenants: Option<Vec<String>>,
}

/// A service whose data-plane RPCs take client credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DataPlane {
    /// `voxpool.scheduler.v1.PoolScheduler` (Acquire, Renew, Release, Report, status).
    Scheduler,
    /// `voxpool.synthesis.v1.Synthesis`.
    Synthesis,
    /// `voxpool.jobs.v1.Jobs`.
    Jobs,
}

impl DataPlane {
    /// The name used in the config (`scheduler`, `synthesis`, `jobs`).
    pub fn as_str(self) -> &'static str {
        match self {
            DataPlane::Scheduler => "scheduler",
            DataPlane::Synthesis => "synthesis",
            DataPlane::Jobs => "jobs",
        }
    }
}

impl ClientTokenConfig {
    /// True when `service` accepts this token.
    pub fn accepted_by(&self, service: DataPlane) -> bool {
        self.services.is_empty() || self.services.contains(&service)
    }
}

/// Shape problems of `[[client_tokens]]`: names and their uniqueness, tenant bindings (values
/// are read at start-up, not here).
pub(super) fn problems(tokens: &[ClientTokenConfig]) -> Vec<ConfigProblem> {
    let mut problems = Vec::new();
    let mut names = std::collections::HashSet::new();
    for (i, entry) in tokens.iter().enumerate() {
        if let Some(tenants) = &entry.tenants {
            problems.extend(tenant_problems(i, entry, tenants));
        }
        if !is_valid_id(&entry.name) {
            problems.push(ConfigProblem {
                path: format!("client_tokens[{i}].name"),
                message: format!(
                    "{:?} is not a valid name: use 1-64 of [a-z0-9._-], starting with a letter or digit",
                    entry.name
                ),
            });
        } else if !names.insert(entry.name.as_str()) {
            problems.push(ConfigProblem {
                path: format!("client_tokens[{i}].name"),
                message: format!(
                    "duplicate client token name {:?}: give each caller its own",
                    entry.name
                ),
            });
        }
    }
    problems
}

/// Problems of entry `i`'s `tenants`: none listed (which would read as "no tenant" or "any"),
/// a malformed or repeated name, or a binding only the scheduler would see (it applies none).
fn tenant_problems(i: usize, entry: &ClientTokenConfig, tenants: &[String]) -> Vec<ConfigProblem> {
    let path = |j: Option<usize>| match j {
        Some(j) => format!("client_tokens[{i}].tenants[{j}]"),
        None => format!("client_tokens[{i}].tenants"),
    };
    let mut problems = Vec::new();
    if tenants.is_empty() {
        problems.push(ConfigProblem {
            path: path(None),
            message: "is empty: list the tenants the token may act for, or leave tenants out to let it act for any tenant".into(),
        });
    }
    if entry.services == [DataPlane::Scheduler] {
        problems.push(ConfigProblem {
            path: path(None),
            message: "binds a token only the scheduler accepts, which applies no tenant binding: drop tenants, or add \"synthesis\" or \"jobs\" to services".into(),
        });
    }
    let mut seen = std::collections::HashSet::new();
    for (j, tenant) in tenants.iter().enumerate() {
        if let Some(message) = super::http::tenant_problem(tenant) {
            problems.push(ConfigProblem {
                path: path(Some(j)),
                message,
            });
        } else if !seen.insert(tenant.as_str()) {
            problems.push(ConfigProblem {
                path: path(Some(j)),
                message: format!("{tenant:?} is listed twice"),
            });
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use crate::{Config, Credentials, DataPlane};

    const POOL: &str = "[[pools]]\nid = \"p\"\nprovider = \"espeak\"\n[[pools.upstreams]]\nid = \"u\"\n[[pools.upstreams.keys]]\nid = \"k\"\ncapacity = 1\n";

    fn entry(name: &str, extra: &str) -> String {
        format!("[[client_tokens]]\nname = \"{name}\"\ntoken = {{ env = \"T_{name}\" }}\n{extra}")
    }

    #[test]
    fn names_are_ids_unique_and_services_default_to_all() {
        let text = format!(
            "{POOL}{}{}{}",
            entry("synthesis", "services = [\"scheduler\"]\n"),
            entry("synthesis", ""),
            entry("Bad Name", "")
        );
        let config = Config::from_toml_str(&text).unwrap();
        assert!(config.client_tokens[0].accepted_by(DataPlane::Scheduler));
        assert!(!config.client_tokens[0].accepted_by(DataPlane::Synthesis));
        assert!(config.client_tokens[1].accepted_by(DataPlane::Synthesis));
        let err = config
            .validate(Credentials::Ignore)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("client_tokens[1].name: duplicate")
                && err.contains("client_tokens[2].name"),
            "{err}"
        );
    }

    /// The problems `validate` finds in `text` (after the pool), as `path: message` lines.
    fn problems(text: &str) -> Vec<String> {
        let config = Config::from_toml_str(&format!("{POOL}{text}")).expect("parses");
        match config.validate(Credentials::Ignore) {
            Ok(()) => Vec::new(),
            Err(crate::ConfigError::Invalid(p)) => p
                .into_iter()
                .map(|p| format!("{}: {}", p.path, p.message))
                .collect(),
            Err(e) => vec![e.to_string()],
        }
    }

    #[test]
    fn tenants_bind_a_token_and_are_unset_by_default() {
        let text = format!(
            "{POOL}{}{}",
            entry("apps", "tenants = [\"team-a\", \"team b\"]\n"),
            entry("jobs", "")
        );
        let config = Config::from_toml_str(&text).unwrap();
        assert_eq!(
            config.client_tokens[0].tenants.as_deref(),
            Some(&["team-a".to_owned(), "team b".to_owned()][..])
        );
        assert_eq!(config.client_tokens[1].tenants, None, "unbound: any tenant");
        assert!(config.validate(Credentials::Ignore).is_ok());
    }

    #[test]
    fn empty_malformed_repeated_or_scheduler_only_tenants_are_refused_by_path() {
        let long = "t".repeat(65);
        let p = problems(&format!(
            "{}{}{}",
            entry("a", "tenants = []\n"),
            entry(
                "b",
                &format!("tenants = [\"\", \" pad\", \"x\\u0007\", \"{long}\", \"ok\", \"ok\"]\n")
            ),
            entry("c", "services = [\"scheduler\"]\ntenants = [\"team-a\"]\n"),
        ));
        let has = |prefix: &str, part: &str| {
            p.iter()
                .any(|line| line.starts_with(prefix) && line.contains(part))
        };
        assert!(
            has("client_tokens[0].tenants: is empty", "leave tenants out"),
            "{p:?}"
        );
        for j in 0..4 {
            assert!(
                has(
                    &format!("client_tokens[1].tenants[{j}]: "),
                    "1-64 printable"
                ),
                "{j}: {p:?}"
            );
        }
        assert!(
            has("client_tokens[1].tenants[5]: ", "listed twice"),
            "{p:?}"
        );
        assert!(
            !p.iter()
                .any(|l| l.starts_with("client_tokens[1].tenants[4]")),
            "{p:?}"
        );
        assert!(
            has("client_tokens[2].tenants: ", "only the scheduler"),
            "{p:?}"
        );
        assert_eq!(p.len(), 7, "{p:?}");
    }

    #[test]
    fn a_misspelt_tenants_field_is_refused_not_ignored() {
        // `tenant` (an HTTP key's field) on a token would otherwise leave it unbound.
        let text = format!("{POOL}{}", entry("a", "tenant = \"team-a\"\n"));
        let err = Config::from_toml_str(&text).unwrap_err().to_string();
        assert!(err.contains("tenant") && err.contains("tenants"), "{err}");
    }

    #[test]
    fn an_unknown_service_or_an_inline_token_is_refused() {
        let text = format!("{POOL}{}", entry("a", "services = [\"catalog\"]\n"));
        let err = Config::from_toml_str(&text).unwrap_err().to_string();
        assert!(err.contains("catalog"), "{err}");
        let text = format!(
            "{POOL}[[client_tokens]]\nname = \"a\"\ntoken = \"inline-secret-0123456789\"\n"
        );
        let err = Config::from_toml_str(&text).unwrap_err().to_string();
        assert!(
            err.contains("never the secret itself") && !err.contains("inline-secret"),
            "{err}"
        );
    }
}
