//! Clone scopes: where a cloned voice lives at a vendor, and its limits there.
//!
//! Every vendor binds a voice clone to a scope above the key (an ElevenLabs workspace, a
//! MiniMax account, a DashScope account and region, a Fish Audio account), except Volcengine,
//! whose clone slots are bought per AppID (a key). An upstream enables cloning with a `clone`
//! table; its keys then share the scope's clones and slots:
//!
//! ```toml
//! [[pools.upstreams]]
//! id = "eleven-team-a"
//! clone = { slots = 10, keep_alive = "6d", max_clones_per_minute = 30, min_residence = "10m" }
//! ```
//!
//! A scope is named by its upstream id, or `upstream/key` for a provider whose clones live per
//! key ([`clones_per_key`]): there each key of the upstream is a scope of its own with the
//! upstream's limits.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use voxpool_domain::provider::Provider;

use crate::{Config, ConfigProblem};

/// Most clone slots one scope may declare (a sanity bound, above every vendor's plans).
pub const MAX_CLONE_SLOTS: u32 = 10_000;

/// How long a clone made or used stays safe from eviction when `min_residence` is unset.
pub const DEFAULT_MIN_RESIDENCE: Duration = Duration::from_secs(10 * 60);

/// An upstream's `clone` table: cloning is enabled in its scope.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CloneConfig {
    /// Clones the scope may hold at once (the vendor plan's slots), 1..=[`MAX_CLONE_SLOTS`].
    pub slots: u32,
    /// How often a clone must be used to stay alive, as `humantime` reads it (`"6d"`,
    /// `"12h"`): MiniMax drops a new clone not used for synthesis within 7 days. Unset = the
    /// vendor keeps clones without use (or only drops them after a long time).
    #[serde(default)]
    pub keep_alive: Option<String>,
    /// Most clone calls per minute the vendor allows the scope (apart from its synthesis
    /// rate limit). Unset = no limit of its own.
    #[serde(default)]
    pub max_clones_per_minute: Option<u32>,
    /// How long a clone made or used in the scope is safe from eviction, as `humantime` reads
    /// it (`"10m"`, `"1h"`; `"0s"` = no minimum): with every slot held by clones that recent,
    /// a new clone is refused rather than evicting one (each eviction costs a delete and a
    /// create at the vendor). Unset = [`DEFAULT_MIN_RESIDENCE`].
    #[serde(default)]
    pub min_residence: Option<String>,
}

impl CloneConfig {
    /// [`CloneConfig::min_residence`] as a duration ([`DEFAULT_MIN_RESIDENCE`] when unset); the
    /// error names the value.
    pub fn min_residence(&self) -> Result<Duration, String> {
        let Some(raw) = &self.min_residence else {
            return Ok(DEFAULT_MIN_RESIDENCE);
        };
        humantime::parse_duration(raw.trim())
            .map_err(|e| format!("{raw:?} is not a duration like \"10m\" or \"1h\": {e}"))
    }

    /// [`CloneConfig::keep_alive`] as a duration (`None` when unset); the error names the
    /// value.
    pub fn keep_alive(&self) -> Result<Option<Duration>, String> {
        let Some(raw) = &self.keep_alive else {
            return Ok(None);
        };
        let every = humantime::parse_duration(raw.trim())
            .map_err(|e| format!("{raw:?} is not a duration like \"6d\" or \"12h\": {e}"))?;
        if every < Duration::from_secs(60) {
            return Err(format!("must be at least 1m, got {raw:?}"));
        }
        Ok(Some(every))
    }
}

/// Whether `provider`'s clones live per key (Volcengine: the AppID that bought the slot)
/// rather than per account (every other provider).
pub fn clones_per_key(provider: Provider) -> bool {
    provider == Provider::Volcengine
}

/// One scope clones live in: an upstream with a `clone` table, or one key of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloneScope {
    /// `upstream`, or `upstream/key` where each key is its own scope.
    pub id: String,
    /// The pool it belongs to.
    pub pool: String,
    /// The pool's provider.
    pub provider: String,
    /// The upstream.
    pub upstream: String,
    /// The key, where each key is its own scope.
    pub key: Option<String>,
    /// Clones the scope may hold at once.
    pub slots: u32,
    /// How often a clone must be used to stay alive (`None`: no rule).
    pub keep_alive: Option<Duration>,
    /// Most clone calls per minute (`None`: no limit of its own).
    pub max_clones_per_minute: Option<u32>,
    /// How long a clone made or used here is safe from eviction.
    pub min_residence: Duration,
}

impl Config {
    /// Every clone scope of the config, in pool, upstream, key order. Call on a validated
    /// config: a `keep_alive` that does not parse is left out (`None`), a `min_residence`
    /// that does not parse is the default.
    pub fn clone_scopes(&self) -> Vec<CloneScope> {
        let mut out = Vec::new();
        for pool in &self.pools {
            let per_key = pool.provider_id().is_some_and(clones_per_key);
            for up in &pool.upstreams {
                let Some(clone) = &up.clone else { continue };
                let scope = |id: String, key: Option<String>| CloneScope {
                    id,
                    pool: pool.id.clone(),
                    provider: pool.provider.clone(),
                    upstream: up.id.clone(),
                    key,
                    slots: clone.slots,
                    keep_alive: clone.keep_alive().ok().flatten(),
                    max_clones_per_minute: clone.max_clones_per_minute,
                    min_residence: clone.min_residence().unwrap_or(DEFAULT_MIN_RESIDENCE),
                };
                if per_key {
                    out.extend(
                        up.keys
                            .iter()
                            .map(|k| scope(format!("{}/{}", up.id, k.id), Some(k.id.clone()))),
                    );
                } else {
                    out.push(scope(up.id.clone(), None));
                }
            }
        }
        out
    }
}

/// The problems of every upstream's `clone` table, each naming its path.
pub(super) fn problems(config: &Config) -> Vec<ConfigProblem> {
    let mut out = Vec::new();
    for (pi, pool) in config.pools.iter().enumerate() {
        for (ui, up) in pool.upstreams.iter().enumerate() {
            let Some(clone) = &up.clone else { continue };
            let path = format!("pools[{pi}].upstreams[{ui}].clone");
            let mut push = |field: &str, message: String| {
                out.push(ConfigProblem {
                    path: format!("{path}.{field}"),
                    message: format!("{message} (pool {:?}, upstream {:?})", pool.id, up.id),
                });
            };
            if clone.slots == 0 || clone.slots > MAX_CLONE_SLOTS {
                push(
                    "slots",
                    format!(
                        "must be 1..={MAX_CLONE_SLOTS} (the clones the vendor plan lets this scope hold), got {}",
                        clone.slots
                    ),
                );
            }
            if let Err(e) = clone.keep_alive() {
                push("keep_alive", e);
            }
            if clone.max_clones_per_minute == Some(0) {
                push(
                    "max_clones_per_minute",
                    "must be at least 1 (leave it out for no limit of its own)".into(),
                );
            }
            if let Err(e) = clone.min_residence() {
                push("min_residence", e);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::{Config, ConfigError, Credentials};

    const CONFIG: &str = r#"
[[pools]]
id = "eleven"
provider = "elevenlabs"
[[pools.upstreams]]
id = "team-a"
clone = { slots = 10, keep_alive = "6d", max_clones_per_minute = 30 }
[[pools.upstreams.keys]]
id = "k1"
capacity = 2
[[pools.upstreams.keys]]
id = "k2"
capacity = 2
[[pools.upstreams]]
id = "team-b"
[[pools.upstreams.keys]]
id = "k1"
capacity = 2
[[pools]]
id = "volc"
provider = "volcengine"
[[pools.upstreams]]
id = "acct"
clone = { slots = 1 }
[[pools.upstreams.keys]]
id = "app-1"
capacity = 2
[[pools.upstreams.keys]]
id = "app-2"
capacity = 2
"#;

    #[test]
    fn scopes_are_upstreams_or_keys_where_clones_live_per_key() {
        let config = Config::from_toml_str(CONFIG).expect("parse");
        config.validate(Credentials::Ignore).expect("valid");
        let scopes = config.clone_scopes();
        let ids: Vec<_> = scopes.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["team-a", "acct/app-1", "acct/app-2"]);
        let team = &scopes[0];
        assert_eq!(team.pool, "eleven");
        assert_eq!(team.provider, "elevenlabs");
        assert_eq!(team.key, None);
        assert_eq!(team.slots, 10);
        assert_eq!(
            team.keep_alive,
            Some(std::time::Duration::from_secs(6 * 86_400))
        );
        assert_eq!(team.max_clones_per_minute, Some(30));
        assert_eq!(scopes[2].key.as_deref(), Some("app-2"));
        assert_eq!(scopes[2].upstream, "acct");
        assert_eq!(scopes[2].keep_alive, None);
        assert_eq!(team.min_residence, super::DEFAULT_MIN_RESIDENCE);
    }

    #[test]
    fn min_residence_is_read_defaulted_and_checked() {
        let text = CONFIG.replace(
            "clone = { slots = 1 }",
            "clone = { slots = 1, min_residence = \"90s\" }",
        );
        let config = Config::from_toml_str(&text).expect("parse");
        config.validate(Credentials::Ignore).expect("valid");
        let scopes = config.clone_scopes();
        assert_eq!(scopes[0].min_residence, std::time::Duration::from_secs(600));
        assert_eq!(scopes[1].min_residence, std::time::Duration::from_secs(90));
        let none = CONFIG.replace(
            "clone = { slots = 1 }",
            "clone = { slots = 1, min_residence = \"0s\" }",
        );
        let config = Config::from_toml_str(&none).expect("parse");
        config
            .validate(Credentials::Ignore)
            .expect("0s: no minimum");
        assert_eq!(
            config.clone_scopes()[1].min_residence,
            std::time::Duration::ZERO
        );

        let bad = CONFIG.replace(
            "clone = { slots = 1 }",
            "clone = { slots = 1, min_residence = \"a while\" }",
        );
        let config = Config::from_toml_str(&bad).expect("parse");
        let Err(ConfigError::Invalid(problems)) = config.validate(Credentials::Ignore) else {
            panic!("expected problems");
        };
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(
            problems[0].path,
            "pools[1].upstreams[0].clone.min_residence"
        );
        assert!(
            problems[0].message.contains("a while"),
            "{}",
            problems[0].message
        );
    }

    #[test]
    fn bad_clone_tables_name_the_pool_upstream_and_field() {
        let text = CONFIG
            .replace(
                "slots = 10, keep_alive = \"6d\"",
                "slots = 0, keep_alive = \"soon\"",
            )
            .replace("max_clones_per_minute = 30", "max_clones_per_minute = 0");
        let config = Config::from_toml_str(&text).expect("parse");
        let Err(ConfigError::Invalid(problems)) = config.validate(Credentials::Ignore) else {
            panic!("expected problems");
        };
        let paths: Vec<_> = problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "pools[0].upstreams[0].clone.slots",
                "pools[0].upstreams[0].clone.keep_alive",
                "pools[0].upstreams[0].clone.max_clones_per_minute",
            ]
        );
        assert!(
            problems[0]
                .message
                .contains("pool \"eleven\", upstream \"team-a\""),
            "{}",
            problems[0].message
        );
    }

    #[test]
    fn unknown_clone_fields_are_refused() {
        let text = CONFIG.replace("clone = { slots = 1 }", "clone = { slots = 1, slot = 2 }");
        let err = Config::from_toml_str(&text).expect_err("unknown field");
        assert!(err.to_string().contains("slot"), "{err}");
    }
}
