//! A usage record out of a stream entry (`XREADGROUP`, `XAUTOCLAIM` and `XRANGE` replies as
//! the redis crate's `streams` module types them), checked: a malformed one is logged escaped
//! and skipped.

use redis::{FromRedisValue, Value, streams::StreamId};
use voxpool_domain::untrusted;
use voxpool_domain::usage::{USAGE_FIELD, UsageEvent};

use super::day_of;

/// One stream entry: its id and, when it parsed, the record.
pub struct Entry {
    /// The entry id, `ms-seq`.
    pub id: String,
    /// The record; `None` when malformed.
    pub event: Option<UsageEvent>,
}

impl Entry {
    /// The entry `s`, its record read from the field [`USAGE_FIELD`]. An entry deleted while
    /// pending has no fields: malformed (acknowledged and skipped).
    pub fn of(s: &StreamId) -> Self {
        Self {
            event: parse(&s.id, s.map.get(USAGE_FIELD)),
            id: s.id.clone(),
        }
    }

    /// The entry `id` the redis crate could not type (a field name that is not UTF-8: no
    /// synthesis writes one): malformed, logged, acknowledged and skipped.
    pub fn untyped(id: String) -> Self {
        warn(
            &id,
            "an entry the redis client cannot read (a field name is not UTF-8)",
            "",
        );
        Self { id, event: None }
    }
}

/// `ms-seq` as numbers, so ids compare in stream order.
pub fn parse_id(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// Longest string field a record may carry.
const MAX_FIELD_CHARS: usize = 512;

/// The record of entry `id` from its `r` field, or `None` (logged, escaped) when it is not
/// one.
pub fn parse(id: &str, field: Option<&Value>) -> Option<UsageEvent> {
    let json = field.map(String::from_redis_value_ref);
    let problem = match &json {
        None => "no `r` field".to_owned(),
        Some(Err(_)) => "the `r` field is not UTF-8 text".to_owned(),
        Some(Ok(text)) => match serde_json::from_str::<UsageEvent>(text) {
            Err(e) => format!("not a usage record: {e}"),
            Ok(event) => match check(&event) {
                Ok(()) => return Some(event),
                Err(why) => why,
            },
        },
    };
    let text = json.and_then(Result::ok).unwrap_or_default();
    warn(id, &problem, &text);
    None
}

fn warn(id: &str, problem: &str, record: &str) {
    tracing::warn!(
        entry = %untrusted::quote(id),
        problem = %untrusted::quote(problem),
        record = %untrusted::quote(&record.chars().take(200).collect::<String>()),
        "malformed usage record skipped"
    );
}

fn check(e: &UsageEvent) -> Result<(), String> {
    let c = e.context();
    if c.record_id.is_empty() {
        return Err("empty record_id".to_owned());
    }
    if day_of(c.at_ms).is_none() {
        return Err(format!("at_ms {} is no time", c.at_ms));
    }
    let fields = [
        &c.record_id,
        &c.request_id,
        &c.tenant,
        &c.caller,
        &c.path,
        &c.pack_id,
        &c.snapshot_digest,
        &c.pool,
        &c.currency,
    ];
    if fields.iter().any(|f| f.chars().count() > MAX_FIELD_CHARS) {
        return Err(format!(
            "a field is longer than {MAX_FIELD_CHARS} characters"
        ));
    }
    Ok(())
}
