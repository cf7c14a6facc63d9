//! Rule: the pools file, its parsing and validation with path-named errors; nothing else.
//!
//! The pools configuration file shared by the scheduler and synthesis services. Modules
//! (private; their types are re-exported here):
//!
//! - `client_tokens`: `[[client_tokens]]`, the bearer tokens data-plane callers present.
//! - `clone`: an upstream's `clone` table and the clone scopes of a config.
//! - `credential`: credential references (an environment variable or a file).
//! - `http`: `[http]`, the API keys of synthesis's OpenAI-compatible front.
//! - `settings`: the `[scheduler]` and `[synthesis]` tuning tables with their defaults.
//! - `validate`: [`Config::validate`], every problem at once, each naming its path.
//! - `load_error`: load errors in the words of the layer that caused them.
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

use std::{collections::BTreeMap, path::Path};

use figment::{
    Figment,
    providers::{Env, Format, Serialized, Toml},
};
use serde::{Deserialize, Serialize};

use voxpool_domain::provider::Provider;

mod client_tokens;
mod clone;
mod credential;
mod http;
mod load_error;
mod settings;
mod usage;
mod validate;

pub use self::{
    client_tokens::{ClientTokenConfig, DataPlane},
    clone::{CloneConfig, CloneScope, MAX_CLONE_SLOTS, clones_per_key},
    credential::CredentialRef,
    http::{HttpApiKey, HttpPriority, HttpSettings},
    settings::{SchedulerSettings, SynthesisSettings},
    usage::{BudgetConfig, MAX_COST_MICROS, PriceConfig, StoreDown, UsageSettings},
    validate::{ConfigError, ConfigProblem, Credentials, is_valid_id},
};

/// Largest capacity a key may declare (a sanity bound, far above any vendor's cap).
pub const MAX_KEY_CAPACITY: u32 = 100_000;

/// Largest `scheduler.max_waiters` accepted: waiting Acquires per pool line on one replica
/// (a sanity bound; each waiter holds a request, a task and a ticket in the store's line).
pub const MAX_WAITERS: u32 = 100_000;

/// Longest fill lock (`AcquireFill.ttl_ms`, `scheduler.fill_ttl_ms`) the scheduler grants, in
/// milliseconds (5 minutes): a dead filler keeps the others waiting at most this long.
pub const MAX_FILL_TTL_MS: u64 = 300_000;

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
    /// Data-plane caller tokens (`[[client_tokens]]`, see [`ClientTokenConfig`]).
    #[serde(default)]
    pub client_tokens: Vec<ClientTokenConfig>,
    /// Synthesis's OpenAI-compatible HTTP front (`[http]`, see [`HttpSettings`]).
    #[serde(default)]
    pub http: HttpSettings,
    /// Currency, what cache hits cost, how long raw usage records stay (`[usage]`).
    #[serde(default)]
    pub usage: UsageSettings,
    /// Spending limits per tenant or caller (`[[budgets]]`, see [`BudgetConfig`]).
    #[serde(default)]
    pub budgets: Vec<BudgetConfig>,
}

/// One pool: the keys that serve one tts model id.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    /// Pool id = tts model id, e.g. `volc-standard`. `[a-z0-9][a-z0-9._-]*`, at most 64 chars.
    pub id: String,
    /// Adapter used by every upstream of this pool; one of [`PROVIDERS`].
    /// Adapter of every upstream of the pool, as written; [`PoolConfig::provider_id`] is the
    /// typed form (validation refuses an unknown one, naming its path).
    pub provider: String,
    /// Vendor model / resource id sent upstream.
    #[serde(default)]
    pub model: String,
    /// Vendor endpoints / accounts.
    #[serde(default)]
    pub upstreams: Vec<UpstreamConfig>,
    /// Most of the pool's capacity that BATCH leases may hold, 0 < share <= 1 (default 1):
    /// below 1, live traffic always finds headroom while bulk jobs run.
    #[serde(default = "full_share")]
    pub batch_max_share: f64,
    /// Learn each key's real concurrency from the vendor (default true): an overload refusal
    /// (a concurrency code, any HTTP 429, a 503 with Retry-After, a `queueing` upstream's read
    /// timeout) lowers the key's effective capacity, sustained success raises it back one slot at a
    /// time up to `capacity` (`[scheduler] adaptive_*`). False grants against `capacity` only.
    #[serde(default = "enabled")]
    pub adaptive: bool,
    /// How long a streaming vendor call cut off because its caller went away keeps its lease
    /// after its vendor connection was closed, in ms (default [`DEFAULT_CANCEL_GRACE_MS`], at
    /// most [`MAX_CANCEL_GRACE_MS`]): the vendor notices the closed connection a moment later,
    /// and a slot handed on before that would be its cap + 1.
    #[serde(default = "default_cancel_grace_ms")]
    pub cancel_grace_ms: u64,
    /// Whether the pool's audio may be kept in the audio cache, and for how long
    /// (`cache = { enabled = true, ttl = "30d" }`, the default). Some vendors' terms forbid
    /// storing their audio: `enabled = false` then keeps every request of the pool out of it.
    #[serde(default)]
    pub cache: PoolCache,
    /// What the pool's vendor charges (`price = { per_million_characters = 15.0 }`, see
    /// [`PriceConfig`]); default free.
    #[serde(default)]
    pub price: PriceConfig,
}

/// A pool's `cache` table: see [`PoolConfig::cache`].
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct PoolCache {
    /// False: the pool's requests never read or write the cache. Default true.
    pub enabled: bool,
    /// How long an entry serves after it was written, as `humantime` reads it (`"30d"`,
    /// `"12h"`, `"90m"`); an older entry is a miss and is filled anew. Default `"30d"`;
    /// at least one second.
    pub ttl: String,
}

impl Default for PoolCache {
    fn default() -> Self {
        Self {
            enabled: true,
            ttl: "30d".to_owned(),
        }
    }
}

impl PoolCache {
    /// [`PoolCache::ttl`] as a duration; the validation error names the value.
    pub fn ttl(&self) -> Result<std::time::Duration, String> {
        let ttl = humantime::parse_duration(self.ttl.trim()).map_err(|e| {
            format!(
                "{:?} is not a duration like \"30d\" or \"12h\": {e}",
                self.ttl
            )
        })?;
        if ttl < std::time::Duration::from_secs(1) {
            return Err(format!("must be at least 1s, got {:?}", self.ttl));
        }
        Ok(ttl)
    }
}

/// Default `cancel_grace_ms`: covers a vendor noticing a closed connection on its next write
/// (tuned against the fake vendors' streaming cancellation burst, with margin).
pub const DEFAULT_CANCEL_GRACE_MS: u64 = 50;
/// Largest `cancel_grace_ms` accepted: every cut-off call holds its slot this long.
pub const MAX_CANCEL_GRACE_MS: u64 = 10_000;

fn default_cancel_grace_ms() -> u64 {
    DEFAULT_CANCEL_GRACE_MS
}

fn full_share() -> f64 {
    1.0
}

fn enabled() -> bool {
    true
}

impl PoolConfig {
    /// The pool's provider, or `None` for an id no adapter has (only before validation).
    pub fn provider_id(&self) -> Option<Provider> {
        self.provider.parse().ok()
    }
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
    /// The upstream queues requests beyond its concurrency instead of refusing them (the
    /// self-hosted servers of docs/VENDORS.md): a call that runs out its whole attempt timeout
    /// there is reported RATE_LIMITED, an overload signal that lowers an adaptive key's
    /// effective capacity, instead of TIMEOUT. Default false.
    #[serde(default)]
    pub queueing: bool,
    /// A successful call slower than this (ms) is a concurrency signal: the server queued it
    /// behind others (a self-hosted server that queues instead of refusing). The audio is
    /// delivered; the key is reported CONCURRENCY_LIMITED instead of SUCCESS, which lowers an
    /// adaptive key's effective capacity (no effect on a pool that is not adaptive; the call's
    /// characters then do not count against a quota). Unset = latency is no signal.
    #[serde(default)]
    pub latency_limit_ms: Option<u64>,
    /// Cloning is enabled in this upstream's scope, with its limits
    /// (`clone = { slots = 10, keep_alive = "6d" }`, see [`CloneConfig`]); unset = no
    /// cloning here.
    #[serde(default)]
    pub clone: Option<CloneConfig>,
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
    /// Characters the vendor's plan allows this key per UTC calendar period
    /// (`quota = { characters = 1000000, per = "month" }`): synthesis reports the characters
    /// each call used, and a key whose quota is spent is not leased until the period resets.
    #[serde(default)]
    pub quota: Option<QuotaConfig>,
}

/// A key's character budget per period (see [`KeyConfig::quota`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaConfig {
    /// Characters per period, at least 1.
    pub characters: u64,
    /// The period.
    pub per: QuotaPeriod,
}

/// A UTC calendar period of a quota.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum QuotaPeriod {
    /// From 00:00 UTC to the next 00:00 UTC.
    Day,
    /// From the first of the month 00:00 UTC to the first of the next.
    Month,
}

impl QuotaPeriod {
    /// The name in the config and the store (`day`, `month`).
    pub fn as_str(self) -> &'static str {
        match self {
            QuotaPeriod::Day => "day",
            QuotaPeriod::Month => "month",
        }
    }

    /// The period containing `now_ms` (ms since the Unix epoch, UTC): `(start_ms, end_ms)`,
    /// end exclusive. The Redis store computes the same in `lua/prelude.lua` (`quota_window`).
    pub fn window(self, now_ms: i64) -> (i64, i64) {
        use chrono::{Datelike, NaiveDate, TimeZone, Utc};
        const DAY: i64 = 86_400_000;
        let day_start = now_ms.div_euclid(DAY) * DAY;
        match self {
            QuotaPeriod::Day => (day_start, day_start + DAY),
            QuotaPeriod::Month => {
                let Some(now) = Utc.timestamp_millis_opt(now_ms).single() else {
                    return (day_start, day_start + DAY);
                };
                let first = |y: i32, m: u32| {
                    NaiveDate::from_ymd_opt(y, m, 1)
                        .and_then(|d| d.and_hms_opt(0, 0, 0))
                        .map(|t| t.and_utc().timestamp_millis())
                };
                let (y, m) = (now.year(), now.month());
                let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
                match (first(y, m), first(ny, nm)) {
                    (Some(start), Some(end)) => (start, end),
                    _ => (day_start, day_start + DAY),
                }
            }
        }
    }
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
        Self::figment(Toml::file(path)).map_err(|e| {
            ConfigError::Load(load_error::describe(
                *e,
                &format!("config file {}", path.display()),
            ))
        })
    }

    /// Parses TOML text (tests, embedded examples), with the same environment overrides.
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        Self::figment(Toml::string(text))
            .map_err(|e| ConfigError::Load(load_error::describe(*e, "config text")))
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

    /// The pool with id `id`.
    pub fn pool(&self, id: &str) -> Option<&PoolConfig> {
        self.pools.iter().find(|p| p.id == id)
    }
}

#[cfg(test)]
mod tests;
