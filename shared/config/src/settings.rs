//! The `[scheduler]` and `[synthesis]` tuning tables, every value with its default.

use serde::{Deserialize, Serialize};

/// Scheduler tuning. All durations in milliseconds.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerSettings {
    /// Lease TTL when `Acquire.lease_ttl_ms` is 0. Default 30000.
    pub default_lease_ttl_ms: u64,
    /// Largest `lease_ttl_ms` accepted. Default 600000 (10 min).
    pub max_lease_ttl_ms: u64,
    /// Cooldown after RATE_LIMITED without `retry_after_ms`. On an adaptive pool only when the
    /// key ran no other lease: there a rate limit lowers the effective capacity instead
    /// (`adaptive_*`), and cools the key only for a Retry-After the vendor sent. Default 1000.
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
    /// How often a replica with waiters polls the pool's line in the store: that hands over
    /// slots freed by a lease's expiry or a cooldown's end (which no call announces) and
    /// claims hand-overs whose announcement was lost. Default 25.
    pub wait_poll_ms: u64,
    /// How long a waiting Acquire's ticket stays in the pool's line in the store, and a slot
    /// handed to it stays unclaimed, without a word from its replica (which renews its
    /// tickets every third of this): a killed replica's waiters leave the line, and the slots
    /// handed to them return, within this. Keep it above `store_timeout_ms`. Default 3000;
    /// at least 100.
    pub line_ticket_ttl_ms: u64,
    /// Redis connect and command timeout. Default 1000.
    pub store_timeout_ms: u64,
    /// Most expired leases reclaimed per script call. Default 64.
    pub reap_batch: u32,
    /// Most Acquires that may wait at once in one pool's line on one replica; one more is
    /// answered RESOURCE_EXHAUSTED naming this setting. Waiting Acquires do not count against
    /// `--max-concurrent-requests`, so this is what bounds them. Default 1024; 1..=100000
    /// ([`super::MAX_WAITERS`]).
    pub max_waiters: u32,
    /// Replicas that must acknowledge a grant (Redis `WAIT`) before Acquire answers; a grant
    /// fewer replicas acknowledge in time is withdrawn and Acquire answers UNAVAILABLE. This
    /// is what keeps a Redis failover from forgetting a live lease (asynchronous replication
    /// would otherwise lose it and let the promoted replica oversell the key). Capped by the
    /// replicas in sync with the primary at the grant, so a primary left without replicas
    /// keeps serving (Redis's `min-replicas-to-write` refuses that, if wanted). Unset: 1 for
    /// `redis-sentinel://` and `redis-cluster://` stores, 0 (off) for single-node and memory
    /// stores. 0 turns it off knowingly (see docs/OPERATIONS.md ("Failover guarantee")).
    pub store_replica_acks: Option<u32>,
    /// How long a grant waits for `store_replica_acks` acknowledgements. Default 250; at most
    /// half of `store_timeout_ms`.
    pub store_replica_ack_timeout_ms: u64,
    /// After the store is found without a pool's state (a Redis restarted empty, FLUSHALL, a
    /// promoted replica that never had it, a fresh store), new grants on that pool wait this
    /// long while the holders of live leases re-register them by renewing (a lease tells its
    /// holder to renew at least every half of this). 0 turns recovery off: a lost store is
    /// then re-seeded with zero in flight at once, which can oversell until the lost leases
    /// end. Default 5000.
    pub recovery_window_ms: u64,
    /// Prefix of every Redis key this deployment writes (`<prefix>:{<pool>}:<field>`), so
    /// several deployments can share one Redis. ASCII letters, digits, `-`, `_`, `.`; at most
    /// 32 characters. Default `vp`.
    pub store_key_prefix: String,
    /// Adaptive pools: on an overload refusal (CONCURRENCY_LIMITED, or RATE_LIMITED: any HTTP
    /// 429, a 503 with Retry-After, a read timeout of a `queueing` upstream) a key's effective
    /// capacity is multiplied by
    /// this (0 < f < 1), but never set below the in-flight count the vendor accepted (the
    /// key's leases at the refusal, less the refused one) nor below 1. Default 0.5.
    pub adaptive_decrease: f64,
    /// Adaptive pools: concurrency refusals within this many ms of a decrease do not lower it
    /// again (a refusal right after an increase does: the probe found the limit). Refusals on
    /// a key holding more leases than its effective capacity never do (those leases predate
    /// the decrease), so 0 is safe: each refusal then lowers it to what the vendor accepted.
    /// Raise it for a vendor whose refusals arrive late, in bursts. Default 0.
    pub adaptive_hold_ms: u64,
    /// Adaptive pools: a key below its capacity gains one slot on a success once this many
    /// ms passed since its effective capacity last changed (probing one slot at a time).
    /// A probe the vendor refuses doubles the key's wait for the next one, up to
    /// `adaptive_increase_max_ms`; one that holds brings it back to this. Default 2000.
    pub adaptive_increase_ms: u64,
    /// Adaptive pools: the longest wait between probes of a key whose probes keep being
    /// refused (the vendor's limit is stable): bounds how long a raised vendor limit goes
    /// unnoticed. At least `adaptive_increase_ms`. Default 8000.
    pub adaptive_increase_max_ms: u64,
    /// The secret lease ids are signed with (HMAC-SHA256), shared by every scheduler replica
    /// of the deployment: a credential reference, `{ env = "NAME" }` or `{ file = "/path" }`,
    /// at least 32 characters. Unset: the replicas share one kept in the store (created by the
    /// first replica, at `<store_key_prefix>:lease-secret`), which a memory-store scheduler
    /// loses when it restarts (its callers' leases then cannot re-register; see docs/SECURITY.md,
    /// "The lease secret").
    pub lease_secret: Option<crate::CredentialRef>,
    /// A second secret lease ids may be signed with: accepted, never used to sign. A rotation
    /// puts the new secret here first, then swaps it with `lease_secret` (the old one is then
    /// here until every lease signed with it has ended), so no replica refuses a live lease.
    pub lease_secret_previous: Option<crate::CredentialRef>,
    /// How long a fill lock (`AcquireFill`, single-flight filling of a cache entry) lives
    /// unless renewed, when the request's `ttl_ms` is 0. Default 30000; 1..=300000
    /// ([`super::MAX_FILL_TTL_MS`]).
    pub fill_ttl_ms: u64,
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
            line_ticket_ttl_ms: 3_000,
            store_timeout_ms: 1_000,
            reap_batch: 64,
            max_waiters: 1024,
            store_replica_acks: None,
            store_replica_ack_timeout_ms: 250,
            recovery_window_ms: 5_000,
            store_key_prefix: "vp".to_owned(),
            adaptive_decrease: 0.5,
            adaptive_hold_ms: 0,
            adaptive_increase_ms: 2_000,
            adaptive_increase_max_ms: 8_000,
            lease_secret: None,
            lease_secret_previous: None,
            fill_ttl_ms: 30_000,
        }
    }
}

/// Synthesis tuning. Durations in milliseconds.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SynthesisSettings {
    /// Longest accepted text, in characters. Default 20000; at least 1.
    pub max_text_chars: usize,
    /// Most vendor attempts (keys tried) per request chunk. Default 4.
    pub max_attempts: u32,
    /// Timeout of one vendor HTTP call. Default 30000; at least 1.
    pub attempt_timeout_ms: u64,
    /// Overall deadline when the caller sets none. Default 60000.
    pub default_deadline_ms: u64,
    /// Most chunks of one request synthesized at once, each on its own lease (text longer
    /// than the vendor's limit is split into chunks; they are emitted in text order). Every
    /// lease is taken in the request's traffic class, so a BATCH request's chunks count
    /// against the batch share. 1 = one chunk after another. Default 4.
    pub max_parallel_chunks: u32,
    /// How long no scheduler endpoint may have answered its health check SERVING before new
    /// calls fail at once with UNAVAILABLE instead of waiting out their deadline. Long enough
    /// to ride out a scheduler restart or a store failover. Default 5000.
    pub scheduler_unavailable_grace_ms: u64,
    /// How often synthesis checks each scheduler endpoint's health (and at once after a call
    /// failed UNAVAILABLE): an endpoint not SERVING leaves the balancer until it answers again,
    /// and a SERVING answer keeps an idle replica from counting the scheduler as silent (so it
    /// must be below `scheduler_unavailable_grace_ms`). Default 500; at least 50.
    pub scheduler_probe_interval_ms: u64,
    /// Part of every audio cache key: raise it after an adapter change that alters the audio
    /// a request produces, and every entry stored before is a miss from then on (old entries
    /// age out by their TTL or the size bound). Default 1.
    pub cache_version: u32,
    /// Size bound of the audio cache on a local blob store (`file://`), bytes: past it the
    /// entries written first are evicted until the cache holds at most 90% of it. Cloud
    /// stores are bounded by the TTL (and the bucket's lifecycle rules). Default 1073741824
    /// (1 GiB); at least 1048576.
    pub cache_max_bytes: u64,
    /// TTL of the fill lock (taken from the scheduler) a replica holds while it synthesizes a
    /// missing cache entry, renewed every third of it: when its holder dies, a waiting request
    /// takes the fill over within this. Default 10000; 1000..=300000.
    pub cache_fill_ttl_ms: u64,
    /// A streaming caller (`SynthesizeStream`, the HTTP front) that takes no audio for this long
    /// is cut off: its calls end, its leases are released and the audio waiting for it is freed.
    /// Default 30000; at least 1000.
    pub stalled_reader_timeout_ms: u64,
    /// The secret audio cache entries are sealed with (HMAC-SHA256), shared by every synthesis
    /// replica on one blob store, so an entry only voxpool wrote is served: a credential
    /// reference, `{ env = "NAME" }` or `{ file = "/path" }`, at least 32 characters. Unset:
    /// a key derived from `scheduler.lease_secret` when that is configured, else a key of the
    /// process alone (its entries serve no other replica and no restart; see docs/SECURITY.md,
    /// "The audio cache secret").
    pub cache_secret: Option<crate::CredentialRef>,
}

impl Default for SynthesisSettings {
    fn default() -> Self {
        Self {
            max_text_chars: 20_000,
            max_attempts: 4,
            attempt_timeout_ms: 30_000,
            default_deadline_ms: 60_000,
            max_parallel_chunks: 4,
            scheduler_unavailable_grace_ms: 5_000,
            scheduler_probe_interval_ms: 500,
            cache_version: 1,
            cache_max_bytes: 1 << 30,
            cache_fill_ttl_ms: 10_000,
            stalled_reader_timeout_ms: 30_000,
            cache_secret: None,
        }
    }
}
