//! Protobuf → the console's view types (`crate::view`): the one place that reads the wire
//! types, so pages and templates never do.

use voxpool_proto::{
    catalog::v1::{self as cpb, voice_pack::Kind},
    jobs::v1 as jpb,
    scheduler::v1::{self as spb, KeyState, Priority},
    synthesis::v1 as sypb,
};

use crate::view::{CacheView, ClipView, JobView, KeyView, PackView, PoolView, RevisionView};

/// A pool's status; times become "milliseconds left" on the store's clock.
pub fn pool(p: spb::PoolStatus) -> PoolView {
    let now = p.now_ms;
    PoolView {
        line: p
            .class_waiters
            .iter()
            .map(|c| {
                let class = Priority::try_from(c.priority)
                    .map_or("unknown", |p| p.as_str_name())
                    .to_owned();
                (class, c.waiters, c.oldest_wait_ms)
            })
            .collect(),
        waiting: p.class_waiters.iter().map(|c| c.waiters).sum(),
        keys: p.keys.into_iter().map(|k| key(k, now)).collect(),
        pool: p.pool,
        capacity: p.capacity,
        in_flight: p.in_flight,
        batch: (p.batch_in_flight, p.batch_limit),
        recovering_ms: (p.recovering_until_ms - now).max(0),
        store_error: p.store_error,
    }
}

fn key(k: spb::KeyStatus, now: i64) -> KeyView {
    let state = match KeyState::try_from(k.state) {
        Ok(KeyState::Available) => "available",
        Ok(KeyState::Cooling) => "cooling",
        Ok(KeyState::Disabled) => "disabled",
        Ok(KeyState::OverQuota) => "over quota",
        _ => "unknown",
    };
    KeyView {
        pool: k.pool,
        key: k.key_id,
        capacity: k.capacity,
        effective: k.effective_capacity,
        in_flight: k.in_flight,
        state,
        cooling_ms: if k.cooldown_until_ms > 0 {
            (k.cooldown_until_ms - now).max(0)
        } else {
            0
        },
        failures: k.consecutive_failures,
        quota: (k.quota_used, k.quota_limit),
        quota_resets_ms: if k.quota_resets_at_ms > 0 {
            (k.quota_resets_at_ms - now).max(0)
        } else {
            0
        },
    }
}

fn tier(t: i32) -> String {
    cpb::Tier::try_from(t)
        .map_or("UNSPECIFIED", |t| t.as_str_name())
        .trim_start_matches("TIER_")
        .to_owned()
}

fn fmt_number(v: f64) -> String {
    format!("{v}")
}

/// A pack.
pub fn pack(p: cpb::VoicePack) -> PackView {
    let mut params = Vec::new();
    if let Some(v) = &p.params {
        for (name, value) in [
            ("pitch_pct", v.pitch_pct),
            ("rate", v.rate),
            ("volume_pct", v.volume_pct),
        ] {
            if let Some(value) = value {
                params.push((name.to_owned(), fmt_number(value)));
            }
        }
    }
    let mut extra: Vec<(String, String)> = p.extra.into_iter().collect();
    extra.sort();
    PackView {
        kind: Kind::try_from(p.kind)
            .map_or("UNSPECIFIED", |k| k.as_str_name())
            .to_owned(),
        tier: tier(p.tier),
        clips: p.references.into_iter().map(clip).collect(),
        id: p.id,
        name: p.display_name,
        description: p.description,
        provider: p.provider,
        model: p.model,
        voice_id: p.voice_id,
        tts_model_id: p.tts_model_id,
        locales: p.locales,
        upstream_ids: p.upstream_ids,
        params,
        extra,
        enabled: p.enabled,
        version: p.version,
    }
}

/// A reference clip.
pub fn clip(r: cpb::VoicePackReference) -> ClipView {
    ClipView {
        removed: r.remove_time.is_some(),
        digest: r.digest,
        transcript: r.transcript,
        language: r.language,
        emotion: r.emotion,
        weight: r.weight,
        duration_ms: r.duration_ms,
        media_type: r.media_type,
    }
}

/// RFC 3339 of a protobuf timestamp, empty when unset.
pub fn time(t: Option<&prost_types::Timestamp>) -> String {
    t.and_then(|t| chrono::DateTime::from_timestamp(t.seconds, 0))
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}

/// A revision.
pub fn revision(r: &cpb::VoicePackRevision) -> RevisionView {
    RevisionView {
        version: r.version,
        action: r.action.clone(),
        time: time(r.time.as_ref()),
    }
}

/// A job, with the failures of its failed items (listed separately).
pub fn job(j: jpb::Job, failures: Vec<(String, String)>) -> JobView {
    let c = j.item_counts.unwrap_or_default();
    JobView {
        id: j.name.trim_start_matches("jobs/").to_owned(),
        state: jpb::job::State::try_from(j.state)
            .map_or("UNSPECIFIED", |s| s.as_str_name())
            .to_owned(),
        total: j.total_items,
        counts: (c.queued, c.running, c.succeeded, c.failed, c.cancelled),
        cached: j.cached_items,
        created: time(j.create_time.as_ref()),
        name: j.name,
        failures,
    }
}

/// Why one item failed, in a line.
pub fn item_failure(item: &jpb::JobItem) -> (String, String) {
    let why = item.error.as_ref().map_or_else(
        || "failed (no reason recorded)".to_owned(),
        |e| {
            if e.reason.is_empty() {
                format!("{}: {}", e.code, e.message)
            } else {
                format!("{} {}: {}", e.code, e.reason, e.message)
            }
        },
    );
    (item.id.clone(), why)
}

/// The cache's stats.
pub fn cache(s: sypb::CacheStats) -> CacheView {
    CacheView {
        enabled: s.enabled,
        location: s.location,
        entries: s.entries,
        bytes: s.bytes,
        max_bytes: s.max_bytes,
        evictions: s.evictions,
        pools: s
            .pools
            .into_iter()
            .map(|p| {
                (
                    p.pool,
                    p.hits,
                    p.misses,
                    p.fills,
                    p.coalesced,
                    p.characters_saved,
                )
            })
            .collect(),
    }
}
