//! Which pools exist, so that a pack no pool serves is refused when it is written rather than
//! at every synthesis of it.
//!
//! The catalog learns the pools from the same pools config file the scheduler and synthesis
//! read (`--config FILE` / `VOXPOOL_CONFIG`; only `[[pools]]` `id` and `provider`
//! are used, credentials are not read). Without it the catalog does not know the pools and
//! accepts any well-formed `tts_model_id` (the embedded default, and tests). Invariant: with
//! the pools known, Create (and an Update that changes `tts_model_id` or `provider`) and
//! `seed` never store a pack whose `tts_model_id` names no pool, or whose provider differs from
//! its pool's, since synthesis would refuse every request for it.

use std::{collections::BTreeMap, path::Path};

use voxpool_config::{CloneScope, Config, Credentials};

use crate::{error::Violation, model::PackSpec};

/// The configured pools (id → provider), or unknown.
#[derive(Clone, Debug, Default)]
pub struct ServedPools {
    /// `None`: no pools config given; every pool id is accepted.
    pools: Option<BTreeMap<String, String>>,
    /// Where they came from, for messages.
    source: String,
    /// The config's `[usage]` table (defaults without a config).
    usage: voxpool_config::UsageSettings,
    /// The clone scopes of every pool (upstreams with a `clone` table, or their keys).
    scopes: Vec<CloneScope>,
}

impl ServedPools {
    /// No pools config: every pool id is accepted.
    pub fn unknown() -> Self {
        Self::default()
    }

    /// The pools of `path` (a pools config file; validated without reading credentials).
    ///
    /// Errors: the file is missing or invalid (the message names the path and every problem).
    pub fn load(path: &Path) -> Result<Self, String> {
        let config = Config::load_validated(path, Credentials::Ignore)
            .map_err(|e| format!("--config {}: {e}", path.display()))?;
        Ok(Self::from_config(
            &config,
            &format!("--config {}", path.display()),
        ))
    }

    /// The pools of a loaded config; `source` names it in messages.
    pub fn from_config(config: &Config, source: &str) -> Self {
        Self {
            pools: Some(
                config
                    .pools
                    .iter()
                    .map(|p| (p.id.clone(), p.provider.clone()))
                    .collect(),
            ),
            source: source.to_owned(),
            usage: config.usage.clone(),
            scopes: config.clone_scopes(),
        }
    }

    /// The clone scopes of `pool`; `None` when the pools are unknown.
    pub fn clone_scopes(&self, pool: &str) -> Option<Vec<&CloneScope>> {
        self.pools.as_ref()?;
        Some(self.scopes.iter().filter(|s| s.pool == pool).collect())
    }

    /// The clone scope `id` of `pool`.
    pub fn clone_scope(&self, pool: &str, id: &str) -> Option<&CloneScope> {
        self.scopes.iter().find(|s| s.pool == pool && s.id == id)
    }

    /// Where the pools came from (`--config FILE`), for messages.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The config's `[usage]` table (retention of raw usage records).
    pub fn usage(&self) -> &voxpool_config::UsageSettings {
        &self.usage
    }

    /// Whether the pools are known.
    pub fn is_known(&self) -> bool {
        self.pools.is_some()
    }

    /// The violations of `spec` against the pools, fields named `<prefix>.<field>`; none when
    /// the pools are unknown.
    pub fn check(&self, spec: &PackSpec, prefix: &str) -> Vec<Violation> {
        let Some(pools) = &self.pools else {
            return Vec::new();
        };
        let field = |f: &str| format!("{prefix}.{f}");
        match pools.get(&spec.tts_model_id) {
            None => vec![Violation {
                field: field("tts_model_id"),
                description: format!(
                    "no configured pool serves tts model id {:?} (pools: {}; from {}): use one of them or add the pool to the config",
                    spec.tts_model_id,
                    if pools.is_empty() {
                        "none".to_owned()
                    } else {
                        pools.keys().cloned().collect::<Vec<_>>().join(", ")
                    },
                    self.source
                ),
            }],
            Some(provider) if *provider != spec.provider => vec![Violation {
                field: field("provider"),
                description: format!(
                    "pool {:?} is served by provider {provider:?}, not {:?} (from {}): set provider = {provider:?} or pin another pool",
                    spec.tts_model_id, spec.provider, self.source
                ),
            }],
            Some(_) => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "[[pools]]\nid = \"espeak-local\"\nprovider = \"espeak\"\n[[pools.upstreams]]\nid = \"local\"\n[[pools.upstreams.keys]]\nid = \"k\"\ncapacity = 2\n";

    fn spec(provider: &str, pool: &str) -> PackSpec {
        PackSpec {
            display_name: "x".into(),
            description: String::new(),
            provider: provider.into(),
            model: "m".into(),
            voice_id: "v".into(),
            tts_model_id: pool.into(),
            kind: Default::default(),
            upstream_ids: vec![],
            params: Default::default(),
            extra: Default::default(),
            tier: voxpool_domain::snapshot::Tier::Standard,
            locales: vec![],
            references: vec![],
        }
    }

    #[test]
    fn known_pools_refuse_an_unserved_model_id_and_a_provider_mismatch_naming_the_fix() {
        let config = Config::from_toml_str(CONFIG).expect("config");
        let pools = ServedPools::from_config(&config, "test.toml");
        assert!(
            pools
                .check(&spec("espeak", "espeak-local"), "voice_pack")
                .is_empty()
        );
        let unserved = pools.check(&spec("espeak", "volc-standard"), "voice_pack");
        assert_eq!(unserved.len(), 1);
        assert_eq!(unserved[0].field, "voice_pack.tts_model_id");
        assert!(
            unserved[0].description.contains("pools: espeak-local"),
            "{unserved:?}"
        );
        let mismatch = pools.check(&spec("openai", "espeak-local"), "packs[3]");
        assert_eq!(mismatch[0].field, "packs[3].provider");
        assert!(
            mismatch[0]
                .description
                .contains("set provider = \"espeak\"")
        );
    }

    #[test]
    fn unknown_pools_accept_any_pool_id() {
        assert!(
            ServedPools::unknown()
                .check(&spec("espeak", "anything"), "voice_pack")
                .is_empty()
        );
    }
}
