//! `[[client_tokens]]`: the service bearer tokens data-plane callers present (separate from
//! the admin token). Each entry names a caller and points at its token with a credential
//! reference, like vendor keys:
//!
//! ```toml
//! [[client_tokens]]
//! name = "synthesis"                                   # the caller, in logs: token:synthesis
//! token = { env = "VOXPOOL_CLIENT_TOKEN_SYNTHESIS" }   # or { file = "/run/secrets/x" }
//! services = ["scheduler"]                             # where it is accepted (default: all)
//! ```
//!
//! A service that finds at least one entry for itself (or serves `--tls-client-ca`) refuses
//! unauthenticated data-plane calls; the values are read when the service starts
//! (`voxpool_runtime::auth::ClientAuth::load`).

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

/// Shape problems of `[[client_tokens]]`: names and their uniqueness (values are read at
/// start-up, not here).
pub(super) fn problems(tokens: &[ClientTokenConfig]) -> Vec<ConfigProblem> {
    let mut problems = Vec::new();
    let mut names = std::collections::HashSet::new();
    for (i, entry) in tokens.iter().enumerate() {
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
