//! The pools of the config as synthesis needs them: provider, model, upstream targets and each
//! key's resolved credential.
//!
//! # Credential policy
//! Credentials are resolved once at startup. A key whose credential cannot be read (variable
//! unset, file missing) is kept out of rotation: every Acquire for its pool lists it in
//! `exclude_keys`, and a startup warning names the key and the variable. A pool with no usable
//! key refuses requests with FAILED_PRECONDITION naming every missing variable, so
//! `make run` with the example config serves the espeak pool while the Volcengine pool explains
//! what to set. `--require-credentials` turns any missing credential into a startup failure
//! (production). The `espeak` provider needs no credential; `selfhosted` keys take one only
//! when their server was started with an API key.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::Duration,
};

use voxpool_config::{Config, PoolConfig};
use voxpool_domain::provider::Provider;

use crate::adapters::{KeyCredential, UpstreamTarget};

/// One key of a pool with its credential, or why it has none.
#[derive(Clone, Debug)]
pub struct PoolKey {
    /// Key and credential, when usable.
    pub credential: Result<Arc<KeyCredential>, String>,
    /// The key's upstream.
    pub upstream: Arc<UpstreamTarget>,
}

/// One configured pool.
#[derive(Debug)]
pub struct Pool {
    /// Pool id (= tts model id).
    pub id: String,
    /// Provider of every upstream.
    pub provider: Provider,
    /// Vendor model id from the config.
    pub model: String,
    /// Upstream ids in config order.
    pub upstream_ids: Vec<String>,
    /// Keys by `upstream/key`.
    pub keys: BTreeMap<String, PoolKey>,
    /// How long a streaming call cut off on cancel keeps its lease after its vendor
    /// connection was closed (config `cancel_grace_ms`).
    pub cancel_grace: Duration,
    /// How long the pool's audio may serve from the audio cache after it was stored (config
    /// `cache.ttl`); `None` when the config says `cache = { enabled = false }`: its requests
    /// never read or write the cache.
    pub cache_ttl: Option<Duration>,
    /// Capacity of the keys with a credential here: the calls the pool runs at once.
    pub slots: u32,
    /// Its pace and backlog on this replica (`crate::job::admission`).
    pub load: crate::job::admission::Load,
    /// What the pool's vendor charges (`price`).
    pub price: voxpool_config::PriceConfig,
}

impl Pool {
    /// `None` for a pool whose provider no adapter has (a config that was not validated).
    fn from_config(p: &PoolConfig) -> Option<Self> {
        let provider = p.provider_id()?;
        let mut keys = BTreeMap::new();
        for u in &p.upstreams {
            let upstream = Arc::new(UpstreamTarget {
                id: u.id.clone(),
                base_url: u.base_url.clone(),
                region: u.region.clone(),
                params: u.params.clone(),
                queueing: u.queueing,
                latency_limit: u.latency_limit_ms.map(Duration::from_millis),
            });
            for k in &u.keys {
                let key_id = format!("{}/{}", u.id, k.id);
                let secret = match &k.credential {
                    _ if provider.is_local() => Ok(None),
                    Some(c) => c.resolve().map(Some),
                    // A self-hosted server started without an API key takes none.
                    None if !provider.needs_credential() => Ok(None),
                    None => Err(
                        "no credential configured (add credential = { env = \"NAME\" })".to_owned(),
                    ),
                };
                let credential = secret.map(|secret| {
                    Arc::new(KeyCredential {
                        key_id: key_id.clone(),
                        app_id: k.id.clone(),
                        secret,
                    })
                });
                keys.insert(
                    key_id,
                    PoolKey {
                        credential,
                        upstream: upstream.clone(),
                    },
                );
            }
        }
        let slots = p
            .upstreams
            .iter()
            .flat_map(|u| {
                u.keys
                    .iter()
                    .map(move |k| (format!("{}/{}", u.id, k.id), k.capacity))
            })
            .filter(|(id, _)| keys.get(id).is_some_and(|k| k.credential.is_ok()))
            .map(|(_, capacity)| capacity)
            .sum();
        Some(Self {
            id: p.id.clone(),
            provider,
            model: p.model.clone(),
            upstream_ids: p.upstreams.iter().map(|u| u.id.clone()).collect(),
            keys,
            cancel_grace: Duration::from_millis(p.cancel_grace_ms),
            // A validated config has a readable TTL; an unreadable one keeps the pool out.
            cache_ttl: p.cache.enabled.then(|| p.cache.ttl().ok()).flatten(),
            slots,
            price: p.price.clone(),
            // A local engine shares this machine's cores among its calls.
            load: if provider.is_local() {
                crate::job::admission::Load::local(
                    std::thread::available_parallelism()
                        .map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX)),
                )
            } else {
                crate::job::admission::Load::default()
            },
        })
    }

    /// `upstream/key: reason` for every key without a usable credential.
    pub fn credential_problems(&self) -> Vec<String> {
        self.keys
            .iter()
            .filter_map(|(id, k)| k.credential.as_ref().err().map(|e| format!("{id}: {e}")))
            .collect()
    }

    /// Keys that must never be leased (no credential).
    pub fn unusable_keys(&self) -> Vec<String> {
        self.keys
            .iter()
            .filter(|(_, k)| k.credential.is_err())
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// True when at least one key has a credential.
    pub fn has_usable_key(&self) -> bool {
        self.keys.values().any(|k| k.credential.is_ok())
    }
}

/// Every configured pool by id.
#[derive(Debug)]
pub struct Pools {
    pools: HashMap<String, Arc<Pool>>,
    names: String,
}

impl Pools {
    /// Builds the pools of a validated config, resolving credentials (module doc).
    pub fn from_config(config: &Config) -> Self {
        let pools: HashMap<String, Arc<Pool>> = config
            .pools
            .iter()
            .filter_map(|p| Some((p.id.clone(), Arc::new(Pool::from_config(p)?))))
            .collect();
        let mut names: Vec<&str> = pools.keys().map(String::as_str).collect();
        names.sort_unstable();
        let names = names.join(", ");
        Self { pools, names }
    }

    /// The pool with id `id`.
    pub fn get(&self, id: &str) -> Option<&Arc<Pool>> {
        self.pools.get(id)
    }

    /// Comma-separated pool ids, sorted.
    pub fn names(&self) -> &str {
        &self.names
    }

    /// Every pool, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Pool>> {
        self.pools.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOML: &str = r#"
[[pools]]
id = "espeak-local"
provider = "espeak"
[[pools.upstreams]]
id = "local"
[[pools.upstreams.keys]]
id = "engine-1"
capacity = 2

[[pools]]
id = "volc"
provider = "volcengine"
[[pools.upstreams]]
id = "acct-a"
[[pools.upstreams.keys]]
id = "app-1"
capacity = 10
credential = { env = "VOXPOOL_SYNTH_TEST_NEVER_SET" }
[[pools.upstreams.keys]]
id = "app-2"
capacity = 10
credential = { env = "PATH" }
"#;

    #[test]
    fn keys_without_credentials_are_named_and_excluded_but_others_stay_usable() {
        let config = Config::from_toml_str(TOML).unwrap();
        let pools = Pools::from_config(&config);
        let espeak = pools.get("espeak-local").unwrap();
        assert!(espeak.credential_problems().is_empty());
        assert!(
            espeak.keys["local/engine-1"]
                .credential
                .as_ref()
                .unwrap()
                .secret
                .is_none()
        );
        let volc = pools.get("volc").unwrap();
        assert_eq!(volc.unusable_keys(), ["acct-a/app-1"]);
        assert!(volc.credential_problems()[0].contains("VOXPOOL_SYNTH_TEST_NEVER_SET is not set"));
        assert!(volc.has_usable_key());
        assert_eq!(pools.names(), "espeak-local, volc");
    }
}
