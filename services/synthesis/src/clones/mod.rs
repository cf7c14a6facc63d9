//! The clone worker: synthesis replicas run the vendor steps of managed voice clones.
//!
//! The catalog keeps every clone as a row that is also its work item (docs/CATALOG.md,
//! "Clones"); only synthesis holds the vendors' credentials, so each replica whose pools file
//! declares clone scopes runs one worker ([`worker::run`]): it claims due steps of the scopes it
//! has a key for through the catalog's `CloneWork` (admin token), runs ONE vendor step per task
//! with a key of the task's scope ([`flows`]), and reports the outcome with the lease token.
//!
//! Clone calls are a lease class of their own: they take no scheduler lease and no synthesis
//! slot, are not metered as usage (their requests carry an open [`Gate`]), and are paced by the
//! catalog's row lease and its per-scope clone rate (`max_clones_per_minute`, enforced at
//! Claim). A key's secret never reaches a message: every vendor text goes through the
//! adapters' scrubbing (`adapters::http::failure`).
//!
//! Modules: [`client`] (the `CloneWork` edge: protobuf in and out, nothing below it),
//! [`worker`] (the loop), [`flows`] (one step → one vendor flow), and one module per vendor
//! flow ([`dashscope`], [`elevenlabs`], [`minimax`], [`volcengine`]).
//!
//! [`Gate`]: crate::adapters::gate::Gate

pub mod client;
pub mod dashscope;
pub mod elevenlabs;
pub mod flows;
pub mod minimax;
pub mod step;
pub mod volcengine;
pub mod worker;

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use voxpool_config::Config;
use voxpool_domain::provider::Provider;
use voxpool_runtime::auth::ClientToken;

use crate::{
    adapters::{KeyCredential, UpstreamTarget},
    pools::Pools,
};

/// The vendor step a task asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// Upload the clips and create the clone.
    Create,
    /// Ask whether training finished.
    Poll,
    /// Delete the vendor's copy.
    Delete,
    /// Use the clone once so the vendor keeps it.
    KeepAlive,
    /// List the scope's clones (no pack).
    Import,
}

impl Work {
    /// The name in logs (`CREATE`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Work::Create => "CREATE",
            Work::Poll => "POLL",
            Work::Delete => "DELETE",
            Work::KeepAlive => "KEEPALIVE",
            Work::Import => "IMPORT",
        }
    }
}

/// One reference clip of the recipe: its bytes are `references/<hex>` in the blob store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// `sha256:` + 64 hex.
    pub digest: String,
    /// Its media type (`audio/wav`, …).
    pub content_type: String,
    /// What it says.
    pub transcript: String,
    /// BCP 47 language.
    pub language: String,
}

/// One claimed step.
#[derive(Clone, Debug)]
pub struct Task {
    /// The pack (empty for [`Work::Import`]).
    pub pack_id: String,
    /// The clone scope.
    pub scope: String,
    /// The step.
    pub work: Work,
    /// Claims of this step so far, this one included.
    pub attempt: u32,
    /// Passed back with the report.
    pub lease_token: String,
    /// When the lease ends: a result after it is dropped.
    pub lease_until: SystemTime,
    /// The vendor's id, once it assigned one.
    pub vendor_voice_id: Option<String>,
    /// The recipe's provider.
    pub provider: String,
    /// The recipe's model (empty: the pool's).
    pub model: String,
    /// DashScope's `target_model` (empty: none).
    pub target_model: String,
    /// The clips to clone from.
    pub samples: Vec<Sample>,
    /// The pool of the scope.
    pub pool: String,
}

/// What a step found, as the worker reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The vendor trains it: poll again after `poll_after`.
    Training {
        /// The vendor's id.
        vendor_voice_id: String,
        /// When to ask again.
        poll_after: Duration,
    },
    /// Usable.
    Ready {
        /// The vendor's id.
        vendor_voice_id: String,
        /// When the vendor drops it unless used (`None`: no such rule).
        expires_at: Option<SystemTime>,
    },
    /// Refused for good (the message is scrubbed of secrets).
    Failed(String),
    /// Failed for now: the same step again after `after` (the catalog backs off further).
    Retry {
        /// The vendor's wait, or zero.
        after: Duration,
        /// Why.
        error: String,
    },
    /// The vendor's copy is gone (or was never there).
    Deleted,
    /// The vendor reports the clone gone.
    Expired {
        /// Why.
        error: String,
        /// The vendor took the slot back (Volcengine Reclaimed).
        reclaimed: bool,
    },
    /// The clones the vendor lists in the scope: `(vendor id, name)`.
    Imported(Vec<(String, String)>),
}

/// A clone scope this replica can act in: a key with a credential and its upstream.
#[derive(Clone, Debug)]
pub struct ScopeKeys {
    /// `upstream` or `upstream/key`.
    pub id: String,
    /// Its pool.
    pub pool: String,
    /// The pool's provider.
    pub provider: Provider,
    /// The pool's model.
    pub pool_model: String,
    /// Keys of the scope with a credential, in config order (a step's attempt picks one, so
    /// a bad key is not tried every time).
    pub keys: Vec<(Arc<KeyCredential>, Arc<UpstreamTarget>)>,
}

impl ScopeKeys {
    /// The key a step's `attempt` runs with: the keys in turn.
    pub fn key_for(&self, attempt: u32) -> Option<&(Arc<KeyCredential>, Arc<UpstreamTarget>)> {
        if self.keys.is_empty() {
            return None;
        }
        let i = (attempt.max(1) as usize - 1) % self.keys.len();
        self.keys.get(i)
    }
}

/// The clone scopes of `config` this replica holds a credential for, and the ids of those it
/// does not (logged by the caller).
pub fn scopes_of(config: &Config, pools: &Pools) -> (Vec<ScopeKeys>, Vec<String>) {
    let (mut usable, mut missing) = (Vec::new(), Vec::new());
    for scope in config.clone_scopes() {
        let Some(pool) = pools.get(&scope.pool) else {
            missing.push(scope.id);
            continue;
        };
        let prefix = format!("{}/", scope.upstream);
        let keys: Vec<_> = pool
            .keys
            .iter()
            .filter(|(id, _)| match &scope.key {
                Some(key) => **id == format!("{}{key}", prefix),
                None => id.starts_with(&prefix),
            })
            .filter_map(|(_, k)| {
                let credential = k.credential.as_ref().ok()?;
                Some((credential.clone(), k.upstream.clone()))
            })
            .collect();
        if keys.is_empty() {
            missing.push(scope.id);
        } else {
            usable.push(ScopeKeys {
                id: scope.id,
                pool: scope.pool,
                provider: pool.provider,
                pool_model: pool.model.clone(),
                keys,
            });
        }
    }
    (usable, missing)
}

/// A worker name no other process uses: host, process id, random suffix.
pub fn worker_name() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "synthesis".to_owned());
    format!(
        "{}-{}-{:08x}",
        host.chars().take(64).collect::<String>(),
        std::process::id(),
        rand::random::<u32>()
    )
}

/// How the worker runs (`--clone-lease-ms`, `--clone-poll-ms`).
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// How long a claimed step is leased.
    pub lease: Duration,
    /// How long a training clone waits before it is polled again.
    pub poll_after: Duration,
}

/// Starts this replica's clone worker (module doc) when `config` declares clone scopes it
/// holds a key for and `token` (the admin token) is set; logs why not otherwise. The worker
/// ends at `shutdown` once its steps under way are reported.
pub fn spawn(
    config: &Config,
    core: &crate::job::Core,
    catalog_url: &str,
    token: ClientToken,
    timing: Timing,
    shutdown: CancellationToken,
) -> Result<Option<JoinHandle<()>>, String> {
    let (scopes, missing) = scopes_of(config, &core.pools);
    if !missing.is_empty() {
        tracing::warn!(scopes = %missing.join(", "), "clone scopes without a key with a credential here: this replica runs none of their clone steps");
    }
    if scopes.is_empty() {
        return Ok(None);
    }
    if !token.is_set() {
        tracing::warn!(
            "clone worker off: it needs the admin token (VOXPOOL_ADMIN_TOKEN or --admin-token-file) for the catalog's CloneWork; clones stay PENDING until a replica with it runs them"
        );
        return Ok(None);
    }
    let client = client::CloneWorkClientHandle::connect_lazy(catalog_url, token)?;
    let ctx = step::Context {
        http: crate::adapters::http::shared_client()?,
        clips: core.references.clone(),
        adapters: Arc::new(core.adapters.clone()),
        poll_after: timing.poll_after,
    };
    let options = worker::WorkerOptions {
        lease: timing.lease,
        ..Default::default()
    };
    let worker = worker::Worker::new(client, scopes, ctx, options);
    Ok(Some(tokio::spawn(worker.run(shutdown))))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOML: &str = r#"
[[pools]]
id = "volc"
provider = "volcengine"
[[pools.upstreams]]
id = "acct"
clone = { slots = 2 }
[[pools.upstreams.keys]]
id = "app-1"
capacity = 1
credential = { env = "PATH" }
[[pools.upstreams.keys]]
id = "app-2"
capacity = 1
credential = { env = "VOXPOOL_CLONE_TEST_NEVER_SET" }

[[pools]]
id = "eleven"
provider = "elevenlabs"
[[pools.upstreams]]
id = "team"
clone = { slots = 2 }
[[pools.upstreams.keys]]
id = "k1"
capacity = 1
credential = { env = "PATH" }
[[pools.upstreams.keys]]
id = "k2"
capacity = 1
credential = { env = "PATH" }
"#;

    #[test]
    fn scopes_hold_the_keys_with_credentials_and_steps_take_them_in_turn() {
        let config = Config::from_toml_str(TOML).unwrap();
        let (scopes, missing) = scopes_of(&config, &Pools::from_config(&config));
        assert_eq!(missing, ["acct/app-2"]);
        let ids: Vec<&str> = scopes.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["acct/app-1", "team"]);
        let team = &scopes[1];
        let key = |attempt| team.key_for(attempt).map(|(k, _)| k.key_id.clone());
        assert_eq!(key(1).as_deref(), Some("team/k1"));
        assert_eq!(key(2).as_deref(), Some("team/k2"));
        assert_eq!(key(3).as_deref(), Some("team/k1"));
    }
}
