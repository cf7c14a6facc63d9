//! [`Config::validate`]: every problem of a parsed config at once, each naming its path
//! (`pools[1].upstreams[0].keys[2].capacity`), credential values never shown.

use std::{collections::HashSet, fmt};

use super::{Config, MAX_CANCEL_GRACE_MS, MAX_FILL_TTL_MS, MAX_KEY_CAPACITY, MAX_WAITERS};

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
            if let Err(unknown) = pool.provider.parse::<voxpool_domain::provider::Provider>() {
                push(format!("{pp}.provider"), unknown.to_string());
            }
            let share = pool.batch_max_share;
            if !(share.is_finite() && share > 0.0 && share <= 1.0) {
                push(
                    format!("{pp}.batch_max_share"),
                    format!(
                        "must be above 0 and at most 1 (a share of the pool's capacity), got {share}"
                    ),
                );
            }
            if pool.cancel_grace_ms > MAX_CANCEL_GRACE_MS {
                push(
                    format!("{pp}.cancel_grace_ms"),
                    format!(
                        "must be 0..={MAX_CANCEL_GRACE_MS} ms (every call cut off on cancel holds its lease this long), got {}",
                        pool.cancel_grace_ms
                    ),
                );
            }
            if let Err(e) = pool.cache.ttl() {
                push(format!("{pp}.cache.ttl"), e);
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
                if up.latency_limit_ms == Some(0) {
                    push(
                        format!("{up_path}.latency_limit_ms"),
                        "must be at least 1 ms (leave it out for no latency signal)".into(),
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
                    if key.quota.is_some_and(|q| q.characters == 0) {
                        push(
                            format!("{kp}.quota.characters"),
                            "must be at least 1 (leave quota out for a key without one)".into(),
                        );
                    }
                    let needed = pool
                        .provider_id()
                        .is_none_or(voxpool_domain::provider::Provider::needs_credential);
                    let local = pool
                        .provider_id()
                        .is_some_and(voxpool_domain::provider::Provider::is_local);
                    if credentials == Credentials::Require && !local {
                        match &key.credential {
                            None if !needed => {}
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
        if s.line_ticket_ttl_ms < 100 {
            push(
                "scheduler.line_ticket_ttl_ms".into(),
                format!("must be at least 100, got {}", s.line_ticket_ttl_ms),
            );
        }
        if s.fill_ttl_ms == 0 || s.fill_ttl_ms > MAX_FILL_TTL_MS {
            push(
                "scheduler.fill_ttl_ms".into(),
                format!(
                    "must be 1..={MAX_FILL_TTL_MS} (the longest fill lock AcquireFill grants), got {}",
                    s.fill_ttl_ms
                ),
            );
        }
        if s.failure_threshold == 0 {
            push(
                "scheduler.failure_threshold".into(),
                "must be at least 1".into(),
            );
        }
        if s.max_waiters > MAX_WAITERS {
            push(
                "scheduler.max_waiters".into(),
                format!(
                    "must be 1..={MAX_WAITERS} (each waiting Acquire holds a request, a task and a ticket in the store's line), got {}",
                    s.max_waiters
                ),
            );
        }
        for (field, value) in [
            ("store_timeout_ms", s.store_timeout_ms),
            ("wait_poll_ms", s.wait_poll_ms),
            ("reap_batch", u64::from(s.reap_batch)),
            ("max_waiters", u64::from(s.max_waiters)),
        ] {
            if value == 0 {
                push(
                    format!("scheduler.{field}"),
                    format!(
                        "must be at least 1, got 0 (set in the config file or VOXPOOL_SCHEDULER__{})",
                        field.to_ascii_uppercase()
                    ),
                );
            }
        }
        if s.store_replica_ack_timeout_ms == 0
            || s.store_replica_ack_timeout_ms > s.store_timeout_ms / 2
        {
            push(
                "scheduler.store_replica_ack_timeout_ms".into(),
                format!(
                    "must be 1..={} (half of store_timeout_ms {}: the store call that waits must clearly outlast the wait), got {}",
                    s.store_timeout_ms / 2,
                    s.store_timeout_ms,
                    s.store_replica_ack_timeout_ms
                ),
            );
        }
        if s.recovery_window_ms > s.max_lease_ttl_ms {
            push(
                "scheduler.recovery_window_ms".into(),
                format!(
                    "must be 0..=max_lease_ttl_ms ({}): no lease outlives that, so a longer window only holds grants back; got {}",
                    s.max_lease_ttl_ms, s.recovery_window_ms
                ),
            );
        }
        let prefix_ok = (1..=32).contains(&s.store_key_prefix.len())
            && s.store_key_prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !prefix_ok {
            push(
                "scheduler.store_key_prefix".into(),
                format!(
                    "must be 1 to 32 ASCII letters, digits, '-', '_' or '.', got {}",
                    voxpool_domain::untrusted::quote(&s.store_key_prefix)
                ),
            );
        }
        let f = s.adaptive_decrease;
        if !(f.is_finite() && f > 0.0 && f < 1.0) {
            push(
                "scheduler.adaptive_decrease".into(),
                format!("must be above 0 and below 1 (a factor), got {f}"),
            );
        }
        if s.adaptive_increase_ms == 0 {
            push(
                "scheduler.adaptive_increase_ms".into(),
                "must be at least 1 ms".into(),
            );
        }
        if s.adaptive_increase_max_ms < s.adaptive_increase_ms {
            push(
                "scheduler.adaptive_increase_max_ms".into(),
                format!(
                    "must be at least adaptive_increase_ms ({}), got {}",
                    s.adaptive_increase_ms, s.adaptive_increase_max_ms
                ),
            );
        }
        for (field, value) in [
            ("max_text_chars", self.synthesis.max_text_chars as u64),
            ("attempt_timeout_ms", self.synthesis.attempt_timeout_ms),
        ] {
            if value == 0 {
                push(
                    format!("synthesis.{field}"),
                    format!(
                        "must be at least 1, got 0 (set in the config file or VOXPOOL_SYNTHESIS__{})",
                        field.to_ascii_uppercase()
                    ),
                );
            }
        }
        if self.synthesis.max_attempts == 0 {
            push("synthesis.max_attempts".into(), "must be at least 1".into());
        }
        let (probe, grace) = (
            self.synthesis.scheduler_probe_interval_ms,
            self.synthesis.scheduler_unavailable_grace_ms,
        );
        if probe < 50 || probe >= grace {
            push(
                "synthesis.scheduler_probe_interval_ms".into(),
                format!(
                    "must be at least 50 and below synthesis.scheduler_unavailable_grace_ms \
                     ({grace}), got {probe}: an idle replica hears from the scheduler only \
                     through these probes"
                ),
            );
        }
        if !(1..=64).contains(&self.synthesis.max_parallel_chunks) {
            push(
                "synthesis.max_parallel_chunks".into(),
                format!(
                    "must be 1 to 64, got {}",
                    self.synthesis.max_parallel_chunks
                ),
            );
        }
        if self.synthesis.cache_max_bytes < 1 << 20 {
            push(
                "synthesis.cache_max_bytes".into(),
                format!(
                    "must be at least 1048576 (1 MiB), got {}",
                    self.synthesis.cache_max_bytes
                ),
            );
        }
        if !(1_000..=300_000).contains(&self.synthesis.cache_fill_ttl_ms) {
            push(
                "synthesis.cache_fill_ttl_ms".into(),
                format!(
                    "must be 1000 to 300000 ms, got {}",
                    self.synthesis.cache_fill_ttl_ms
                ),
            );
        }
        if self.synthesis.stalled_reader_timeout_ms < 1_000 {
            push(
                "synthesis.stalled_reader_timeout_ms".into(),
                format!(
                    "must be at least 1000 ms, got {}",
                    self.synthesis.stalled_reader_timeout_ms
                ),
            );
        }
        problems.extend(super::client_tokens::problems(&self.client_tokens));
        problems.extend(super::http::problems(&self.http));
        problems.extend(super::usage::problems(self));
        problems.extend(super::clone::problems(self));
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(problems))
        }
    }
}
