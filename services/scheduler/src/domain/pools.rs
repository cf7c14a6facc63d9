//! The pool table: the configured pools, their upstreams and keys, as every RPC checks a
//! request against them. Built once from the config; the one copy the service and the domain
//! read.
//!
//! Invariant 10 of docs/ARCHITECTURE.md (untrusted strings): a caller's pool or key id is looked up here and only
//! the configured id (never the caller's string) names a pool in metrics and spans.

use std::collections::HashMap;

use voxpool_config::Config;

use crate::model::PoolSpec;

/// One configured pool.
#[derive(Debug)]
pub struct PoolEntry {
    /// What the store is seeded with (its keys, batch share, adaptive setting).
    pub spec: PoolSpec,
    /// Its upstream ids, in config order.
    pub upstreams: Vec<String>,
}

impl PoolEntry {
    /// Whether `key` (`upstream/key`) is a key of this pool.
    pub fn has_key(&self, key: &str) -> bool {
        self.spec.keys.iter().any(|k| k.key_id == key)
    }

    /// How many keys the pool has.
    pub fn key_count(&self) -> usize {
        self.spec.keys.len()
    }
}

/// Every configured pool, by id.
#[derive(Debug)]
pub struct PoolTable {
    pools: HashMap<String, PoolEntry>,
    /// The pool ids, sorted, joined with ", " (for NOT_FOUND messages).
    names: String,
}

impl PoolTable {
    /// The pools of a (validated) config file.
    pub fn from_config(config: &Config) -> Self {
        let pools: HashMap<String, PoolEntry> = PoolSpec::from_config(config)
            .into_iter()
            .zip(&config.pools)
            .map(|(spec, p)| {
                let upstreams = p.upstreams.iter().map(|u| u.id.clone()).collect();
                (p.id.clone(), PoolEntry { spec, upstreams })
            })
            .collect();
        let mut names: Vec<&str> = pools.keys().map(String::as_str).collect();
        names.sort_unstable();
        let names = names.join(", ");
        Self { pools, names }
    }

    /// The configured pool `pool`.
    pub fn get(&self, pool: &str) -> Option<&PoolEntry> {
        self.pools.get(pool)
    }

    /// The configured pool's own id, or `unknown`: what spans and metric series carry.
    pub fn label<'a>(&'a self, pool: &str) -> &'a str {
        self.pools
            .get_key_value(pool)
            .map_or("unknown", |(name, _)| name.as_str())
    }

    /// The pool ids, sorted, joined with ", ".
    pub fn names(&self) -> &str {
        &self.names
    }

    /// The pool ids, sorted.
    pub fn ids(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = self.pools.keys().map(String::as_str).collect();
        ids.sort_unstable();
        ids
    }

    /// The spec of `pool`, to seed it again.
    pub fn spec(&self, pool: &str) -> Option<&PoolSpec> {
        self.pools.get(pool).map(|p| &p.spec)
    }

    /// Every pool's id.
    pub fn iter_ids(&self) -> impl Iterator<Item = &str> {
        self.pools.keys().map(String::as_str)
    }
}
