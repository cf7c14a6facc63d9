//! The pools configuration file shared by the scheduler and synthesis services.
//!
//! Layers, later wins: built-in defaults -> the TOML file (`--config`) -> environment variables
//! `VOXPOOL_SCHEDULER__<FIELD>` / `VOXPOOL_SYNTHESIS__<FIELD>` (nested with `__`). Unknown
//! fields are errors (`deny_unknown_fields`), so a typo fails loudly. [`Config::validate`]
//! returns every problem at once, each naming its path (`pools[1].upstreams[0].keys[2].capacity`).
//!
//! Shape (see `deploy/config/example.toml`):
//! ```toml
//! [[pools]]
//! id = "volc-standard"      # a tts model id; voice packs pin it
//! provider = "volcengine"   # adapter used by every upstream of this pool
//! model = "seed-tts-1.0"    # vendor model id sent upstream
//! [[pools.upstreams]]
//! id = "acct-a"
//! base_url = "https://openspeech.bytedance.com"
//! params = { cluster = "volcano_tts" }
//! [[pools.upstreams.keys]]
//! id = "app-1"              # the vendor app_id
//! capacity = 10             # concurrent requests the vendor allows this key
//! credential = { env = "VOLC_TOKEN_APP1" }   # or { file = "/run/secrets/x" }
//! ```
//! Credentials are references (an environment variable or a file), never inline values.

use std::{
    collections::{BTreeMap, HashSet},
    fmt,
    path::{Path, PathBuf},
};

use figment::{
    Figment,
    providers::{Env, Format, Serialized, Toml},
};
use serde::{Deserialize, Serialize};

use crate::secret::Secret;

/// Provider ids an upstream or a voice pack may name (API.md).
pub const PROVIDERS: &[&str] = &[
    "openai",
    "azure",
    "volcengine",
    "elevenlabs",
    "minimax",
    "dashscope",
    "espeak",
];

/// Largest capacity a key may declare (a sanity bound, far above any vendor's cap).
pub const MAX_KEY_CAPACITY: u32 = 100_000;

/// The whole configuration file.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// TTS pools, one per tts model id.
    #[serde(default)]
    pub pools: Vec<PoolConfig>,
    /// Scheduler tuning (lease TTLs, cooldowns).
    #[serde(default)]
    pub scheduler: SchedulerSettings,
    /// Synthesis tuning (text limits, attempts, timeouts).
    #[serde(default)]
    pub synthesis: SynthesisSettings,
}

/// One pool: the keys that serve one tts model id.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    /// Pool id = tts model id, e.g. `volc-standard`. `[a-z0-9][a-z0-9._-]*`, at most 64 chars.
    pub id: String,
    /// Adapter used by every upstream of this pool; one of [`PROVIDERS`].
    pub provider: String,
    /// Vendor model / resource id sent upstream.
    #[serde(default)]
    pub model: String,
    /// Vendor endpoints / accounts.
    #[serde(default)]
    pub upstreams: Vec<UpstreamConfig>,
}

/// One vendor endpoint / account inside a pool.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Upstream id, unique within the pool. Same character set as pool ids.
    pub id: String,
    /// Vendor base URL; optional where the adapter has a default.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Vendor region (Azure), optional.
    #[serde(default)]
    pub region: Option<String>,
    /// Adapter options (e.g. Volcengine `cluster`). Values are strings, numbers or booleans.
    #[serde(default)]
    pub params: BTreeMap<String, serde_json::Value>,
    /// The keys (app ids) of this account.
    #[serde(default)]
    pub keys: Vec<KeyConfig>,
}

/// One key (vendor `app_id` + credential).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    /// Key id (the vendor app id), unique within the upstream. Reported as `upstream/key`.
    pub id: String,
    /// Concurrent requests the vendor allows this key, 1..=100000.
    pub capacity: u32,
    /// Where the credential lives; not needed by the `espeak` provider.
    #[serde(default)]
    pub credential: Option<CredentialRef>,
}

/// A reference to a credential: an environment variable or a file. Never the value itself.
///
/// Written `{ env = "NAME" }` or `{ file = "/path" }`: exactly one of the two, no other field.
/// A string in its place (a secret pasted inline) is refused without echoing it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CredentialRef {
    /// `{ env = "NAME" }`: the value of environment variable NAME.
    Env(String),
    /// `{ file = "/run/secrets/x" }`: the file's contents, trimmed.
    File(PathBuf),
}

impl<'de> Deserialize<'de> for CredentialRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Reference;
        impl<'de> serde::de::Visitor<'de> for Reference {
            type Value = CredentialRef;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#"a credential reference { env = "NAME" } or { file = "/path" }"#)
            }

            fn visit_str<E: serde::de::Error>(self, _secret: &str) -> Result<Self::Value, E> {
                Err(E::custom(
                    r#"credential must be a reference, { env = "NAME" } or { file = "/path" }, never the secret itself (the value is not shown)"#,
                ))
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                use serde::de::Error;
                let (mut env, mut file) = (None, None);
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "env" => env = Some(map.next_value::<String>()?),
                        "file" => file = Some(map.next_value::<PathBuf>()?),
                        other => {
                            return Err(A::Error::custom(format!(
                                "unknown credential field {other:?}: expected env or file"
                            )));
                        }
                    }
                }
                match (env, file) {
                    (Some(e), None) => Ok(CredentialRef::Env(e)),
                    (None, Some(f)) => Ok(CredentialRef::File(f)),
                    (Some(_), Some(_)) => Err(A::Error::custom(
                        "credential sets both env and file: keep one",
                    )),
                    (None, None) => Err(A::Error::custom(
                        r#"empty credential: set env = "NAME" or file = "/path""#,
                    )),
                }
            }
        }
        d.deserialize_any(Reference)
    }
}

impl CredentialRef {
    /// Reads the credential. The error names the variable or file, never a value.
    pub fn resolve(&self) -> Result<Secret, String> {
        match self {
            CredentialRef::Env(name) => match std::env::var(name) {
                Ok(v) if !v.trim().is_empty() => Ok(Secret::new(v)),
                Ok(_) => Err(format!("environment variable {name} is empty")),
                Err(_) => Err(format!("environment variable {name} is not set")),
            },
            CredentialRef::File(path) => match std::fs::read_to_string(path) {
                Ok(v) if !v.trim().is_empty() => Ok(Secret::new(v)),
                Ok(_) => Err(format!("credential file {} is empty", path.display())),
                Err(e) => Err(format!(
                    "cannot read credential file {}: {e}",
                    path.display()
                )),
            },
        }
    }
}

/// Scheduler tuning. All durations in milliseconds.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerSettings {
    /// Lease TTL when `Acquire.lease_ttl_ms` is 0. Default 30000.
    pub default_lease_ttl_ms: u64,
    /// Largest `lease_ttl_ms` accepted. Default 600000 (10 min).
    pub max_lease_ttl_ms: u64,
    /// Cooldown after RATE_LIMITED without `retry_after_ms`. Default 1000.
    pub rate_limit_cooldown_ms: u64,
    /// Consecutive UPSTREAM_ERROR/TIMEOUT reports before a key cools. Default 3.
    pub failure_threshold: u32,
    /// First failure cooldown; doubles per further failure. Default 1000.
    pub failure_backoff_base_ms: u64,
    /// Cap of the failure cooldown. Default 60000.
    pub failure_backoff_max_ms: u64,
    /// Cooldown after KEY_INVALID / QUOTA_EXHAUSTED; the key stays disabled until EnableKey
    /// or this passes. Default 86400000 (24 h).
    pub credential_cooldown_ms: u64,
    /// How often a waiting Acquire re-checks the store when no release wakes it. Default 25.
    pub wait_poll_ms: u64,
    /// Redis connect and command timeout. Default 1000.
    pub store_timeout_ms: u64,
    /// Most expired leases reclaimed per script call. Default 64.
    pub reap_batch: u32,
    /// Most Acquires that may wait at once in one pool's line on one replica; one more is
    /// answered RESOURCE_EXHAUSTED naming this setting. Waiting Acquires do not count against
    /// `--max-concurrent-requests`, so this is what bounds them. Default 1024.
    pub max_waiters: u32,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        Self {
            default_lease_ttl_ms: 30_000,
            max_lease_ttl_ms: 600_000,
            rate_limit_cooldown_ms: 1_000,
            failure_threshold: 3,
            failure_backoff_base_ms: 1_000,
            failure_backoff_max_ms: 60_000,
            credential_cooldown_ms: 86_400_000,
            wait_poll_ms: 25,
            store_timeout_ms: 1_000,
            reap_batch: 64,
            max_waiters: 1024,
        }
    }
}

/// Synthesis tuning. Durations in milliseconds.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SynthesisSettings {
    /// Longest accepted text, in characters. Default 20000.
    pub max_text_chars: usize,
    /// Most vendor attempts (keys tried) per request chunk. Default 4.
    pub max_attempts: u32,
    /// Timeout of one vendor HTTP call. Default 30000.
    pub attempt_timeout_ms: u64,
    /// Overall deadline when the caller sets none. Default 60000.
    pub default_deadline_ms: u64,
}

impl Default for SynthesisSettings {
    fn default() -> Self {
        Self {
            max_text_chars: 20_000,
            max_attempts: 4,
            attempt_timeout_ms: 30_000,
            default_deadline_ms: 60_000,
        }
    }
}

/// Why a configuration could not be used: every problem, each with its path.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read or parsed (includes unknown fields and wrong types).
    #[error("{0}")]
    Load(String),
    /// Parsed, but some values are invalid.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<ConfigProblem>),
}

/// One invalid value: where it is and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// Path such as `pools[1].upstreams[0].keys[2].capacity`.
    pub path: String,
    /// What is wrong and what is expected.
    pub message: String,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Whether validation also resolves every key's credential (synthesis) or only checks the
/// shape (scheduler, which never sees credentials).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// Credentials are not read.
    Ignore,
    /// Every non-espeak key must have a readable, non-empty credential.
    Require,
}

/// True for ids made of `[a-z0-9._-]`, starting with a letter or digit, 1..=64 chars.
pub fn is_valid_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 64
        && bytes[0].is_ascii_alphanumeric()
        && bytes.iter().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        })
}

/// Key ids may also hold upper case (vendor app ids), same length bound, no `/`.
fn is_valid_key_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl Config {
    /// Loads `path` (TOML) over the defaults, then `VOXPOOL_SCHEDULER__*` /
    /// `VOXPOOL_SYNTHESIS__*` environment overrides. Does not validate.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        if !path.exists() {
            return Err(ConfigError::Load(format!(
                "config file {} does not exist",
                path.display()
            )));
        }
        Self::figment(Toml::file(path))
            .map_err(|e| ConfigError::Load(format!("config file {}: {e}", path.display())))
    }

    /// Parses TOML text (tests, embedded examples), with the same environment overrides.
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        Self::figment(Toml::string(text)).map_err(|e| ConfigError::Load(e.to_string()))
    }

    fn figment(file: figment::providers::Data<Toml>) -> Result<Self, Box<figment::Error>> {
        Figment::from(Serialized::defaults(Config::default()))
            .merge(file)
            .merge(
                Env::prefixed("VOXPOOL_")
                    .filter(|k| {
                        let k = k.as_str().to_ascii_lowercase();
                        k.starts_with("scheduler__") || k.starts_with("synthesis__")
                    })
                    .split("__"),
            )
            .extract()
            .map_err(Box::new)
    }

    /// Loads and validates in one step.
    pub fn load_validated(path: &Path, credentials: Credentials) -> Result<Self, ConfigError> {
        let config = Self::load(path)?;
        config.validate(credentials)?;
        Ok(config)
    }

    /// Checks ids, uniqueness, capacities, providers, settings and (optionally) credentials.
    /// Returns every problem found, each naming its path. Credential values never appear.
    pub fn validate(&self, credentials: Credentials) -> Result<(), ConfigError> {
        let mut problems = Vec::new();
        let mut push =
            |path: String, message: String| problems.push(ConfigProblem { path, message });
        if self.pools.is_empty() {
            push(
                "pools".into(),
                "at least one [[pools]] entry is required".into(),
            );
        }
        let mut pool_ids = HashSet::new();
        for (pi, pool) in self.pools.iter().enumerate() {
            let pp = format!("pools[{pi}]");
            if !is_valid_id(&pool.id) {
                push(
                    format!("{pp}.id"),
                    format!(
                        "{:?} is not a valid id: use 1-64 of [a-z0-9._-], starting with a letter or digit",
                        pool.id
                    ),
                );
            } else if !pool_ids.insert(pool.id.as_str()) {
                push(
                    format!("{pp}.id"),
                    format!("duplicate pool id {:?}", pool.id),
                );
            }
            if !PROVIDERS.contains(&pool.provider.as_str()) {
                push(
                    format!("{pp}.provider"),
                    format!(
                        "unknown provider {:?}: expected one of {}",
                        pool.provider,
                        PROVIDERS.join(", ")
                    ),
                );
            }
            if pool.upstreams.is_empty() {
                push(
                    format!("{pp}.upstreams"),
                    "a pool needs at least one upstream".into(),
                );
            }
            let mut upstream_ids = HashSet::new();
            for (ui, up) in pool.upstreams.iter().enumerate() {
                let up_path = format!("{pp}.upstreams[{ui}]");
                if !is_valid_id(&up.id) {
                    push(
                        format!("{up_path}.id"),
                        format!("{:?} is not a valid id: use 1-64 of [a-z0-9._-]", up.id),
                    );
                } else if !upstream_ids.insert(up.id.as_str()) {
                    push(
                        format!("{up_path}.id"),
                        format!("duplicate upstream id {:?} in pool {:?}", up.id, pool.id),
                    );
                }
                if up.keys.is_empty() {
                    push(
                        format!("{up_path}.keys"),
                        "an upstream needs at least one key".into(),
                    );
                }
                let mut key_ids = HashSet::new();
                for (ki, key) in up.keys.iter().enumerate() {
                    let kp = format!("{up_path}.keys[{ki}]");
                    if !is_valid_key_id(&key.id) {
                        push(
                            format!("{kp}.id"),
                            format!(
                                "{:?} is not a valid key id: use 1-64 of [A-Za-z0-9._-]",
                                key.id
                            ),
                        );
                    } else if !key_ids.insert(key.id.as_str()) {
                        push(
                            format!("{kp}.id"),
                            format!("duplicate key id {:?} in upstream {:?}", key.id, up.id),
                        );
                    }
                    if key.capacity == 0 || key.capacity > MAX_KEY_CAPACITY {
                        push(
                            format!("{kp}.capacity"),
                            format!(
                                "must be 1..={MAX_KEY_CAPACITY}, got {} (use the DisableKey admin RPC to take a key out)",
                                key.capacity
                            ),
                        );
                    }
                    if credentials == Credentials::Require && pool.provider != "espeak" {
                        match &key.credential {
                            None => push(
                                format!("{kp}.credential"),
                                "required: { env = \"NAME\" } or { file = \"/path\" }".into(),
                            ),
                            Some(c) => {
                                if let Err(e) = c.resolve() {
                                    push(format!("{kp}.credential"), e);
                                }
                            }
                        }
                    }
                }
            }
        }
        let s = &self.scheduler;
        if s.default_lease_ttl_ms == 0 || s.default_lease_ttl_ms > s.max_lease_ttl_ms {
            push(
                "scheduler.default_lease_ttl_ms".into(),
                format!(
                    "must be 1..=max_lease_ttl_ms ({}), got {}",
                    s.max_lease_ttl_ms, s.default_lease_ttl_ms
                ),
            );
        }
        if s.failure_backoff_base_ms > s.failure_backoff_max_ms {
            push(
                "scheduler.failure_backoff_base_ms".into(),
                "must not exceed failure_backoff_max_ms".into(),
            );
        }
        if s.failure_threshold == 0 {
            push(
                "scheduler.failure_threshold".into(),
                "must be at least 1".into(),
            );
        }
        if s.store_timeout_ms == 0 || s.wait_poll_ms == 0 || s.reap_batch == 0 || s.max_waiters == 0
        {
            push(
                "scheduler".into(),
                "store_timeout_ms, wait_poll_ms, reap_batch and max_waiters must be positive"
                    .into(),
            );
        }
        if self.synthesis.max_attempts == 0 {
            push("synthesis.max_attempts".into(), "must be at least 1".into());
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(problems))
        }
    }

    /// The pool with id `id`.
    pub fn pool(&self, id: &str) -> Option<&PoolConfig> {
        self.pools.iter().find(|p| p.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[[pools]]
id = "volc-standard"
provider = "volcengine"
model = "seed-tts-1.0"

[[pools.upstreams]]
id = "acct-a"
base_url = "https://openspeech.bytedance.com"
params = { cluster = "volcano_tts" }

[[pools.upstreams.keys]]
id = "app-1"
capacity = 10
credential = { env = "VOXPOOL_TEST_NEVER_SET_1" }
"#;

    #[test]
    fn api_md_example_parses_and_validates_without_credentials() {
        let c = Config::from_toml_str(GOOD).unwrap();
        c.validate(Credentials::Ignore).unwrap();
        assert_eq!(c.pools[0].upstreams[0].keys[0].capacity, 10);
        assert_eq!(
            c.pools[0].upstreams[0].keys[0].credential,
            Some(CredentialRef::Env("VOXPOOL_TEST_NEVER_SET_1".into()))
        );
    }

    #[test]
    fn missing_credential_variable_is_named_not_printed() {
        let c = Config::from_toml_str(GOOD).unwrap();
        let err = c.validate(Credentials::Require).unwrap_err().to_string();
        assert!(
            err.contains("pools[0].upstreams[0].keys[0].credential"),
            "{err}"
        );
        assert!(err.contains("VOXPOOL_TEST_NEVER_SET_1 is not set"), "{err}");
    }

    #[test]
    fn credentials_are_references_with_exactly_one_known_field() {
        for (bad, want) in [
            (
                r#"credential = "sk-inline-secret-123456""#,
                "never the secret itself",
            ),
            (
                r#"credential = { env = "A", foo = 1 }"#,
                "unknown credential field \"foo\"",
            ),
            (
                r#"credential = { env = "A", file = "/x" }"#,
                "both env and file",
            ),
            (r#"credential = {}"#, "empty credential"),
        ] {
            let text = GOOD.replace(r#"credential = { env = "VOXPOOL_TEST_NEVER_SET_1" }"#, bad);
            let err = Config::from_toml_str(&text).unwrap_err().to_string();
            assert!(err.contains(want), "{bad}: {err}");
            assert!(
                !err.contains("sk-inline-secret"),
                "the inline secret was echoed: {err}"
            );
        }
        let text = GOOD.replace(
            r#"{ env = "VOXPOOL_TEST_NEVER_SET_1" }"#,
            r#"{ file = "/run/secrets/x" }"#,
        );
        let c = Config::from_toml_str(&text).unwrap();
        assert_eq!(
            c.pools[0].upstreams[0].keys[0].credential,
            Some(CredentialRef::File("/run/secrets/x".into()))
        );
    }

    #[test]
    fn unknown_fields_fail_loudly() {
        let text = GOOD.replace("capacity = 10", "capacty = 10");
        let err = Config::from_toml_str(&text).unwrap_err().to_string();
        assert!(err.contains("capacty"), "{err}");
    }

    #[test]
    fn problems_name_their_paths() {
        let text = format!(
            "{GOOD}\n[[pools.upstreams.keys]]\nid = \"app-1\"\ncapacity = 0\n\n[[pools]]\nid = \"volc-standard\"\nprovider = \"nope\"\n"
        );
        let err = Config::from_toml_str(&text)
            .unwrap()
            .validate(Credentials::Ignore)
            .unwrap_err();
        let ConfigError::Invalid(problems) = err else {
            panic!("expected Invalid")
        };
        let paths: Vec<_> = problems.iter().map(|p| p.path.as_str()).collect();
        assert!(
            paths.contains(&"pools[0].upstreams[0].keys[1].id"),
            "{paths:?}"
        );
        assert!(
            paths.contains(&"pools[0].upstreams[0].keys[1].capacity"),
            "{paths:?}"
        );
        assert!(paths.contains(&"pools[1].id"), "{paths:?}");
        assert!(paths.contains(&"pools[1].provider"), "{paths:?}");
        assert!(paths.contains(&"pools[1].upstreams"), "{paths:?}");
    }

    #[test]
    fn ids_follow_the_documented_charset() {
        assert!(is_valid_id("volc-standard"));
        assert!(is_valid_id("a.b_c-1"));
        assert!(!is_valid_id(""));
        assert!(!is_valid_id("-x"));
        assert!(!is_valid_id("Upper"));
        assert!(!is_valid_id("a/b"));
        assert!(!is_valid_id(&"x".repeat(65)));
    }
}
