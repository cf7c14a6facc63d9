//! Reading the usage stream's replies: entries (`XREADGROUP`, `XAUTOCLAIM`), `XINFO`
//! fields, and a record out of an entry, checked (a malformed one is logged escaped and
//! skipped).

use redis::Value;
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

/// A field of an `XINFO` reply (a flat array of name, value or a map).
pub fn field_of(v: &Value, name: &str) -> Option<Value> {
    match v {
        Value::Array(items) => items
            .chunks(2)
            .find(|kv| text(&kv[0]).as_deref() == Some(name))
            .and_then(|kv| kv.get(1).cloned()),
        Value::Map(pairs) => pairs
            .iter()
            .find(|(k, _)| text(k).as_deref() == Some(name))
            .map(|(_, v)| v.clone()),
        _ => None,
    }
}

/// A string reply.
pub fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// A number reply (an integer or its digits).
pub fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Int(n) => u64::try_from(*n).ok(),
        other => text(other).and_then(|s| s.parse().ok()),
    }
}

/// `ms-seq` as numbers, so ids compare in stream order.
pub fn parse_id(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// The entries of an `XREADGROUP` reply (nil when nothing came in time).
pub fn read_reply(v: &Value) -> Vec<Entry> {
    match v {
        Value::Array(streams) => streams
            .iter()
            .filter_map(|s| match s {
                Value::Array(kv) => kv.get(1).map(entries_of),
                _ => None,
            })
            .flatten()
            .collect(),
        Value::Map(pairs) => pairs.iter().flat_map(|(_, e)| entries_of(e)).collect(),
        _ => Vec::new(),
    }
}

/// Stream entries `[[id, [field, value, …]], …]`; an entry deleted while pending has no
/// fields and is malformed (acknowledged and skipped).
pub fn entries_of(v: &Value) -> Vec<Entry> {
    let Value::Array(items) = v else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|item| {
            let Value::Array(parts) = item else {
                return None;
            };
            let id = text(parts.first()?)?;
            let json = parts
                .get(1)
                .and_then(|f| field_of(f, USAGE_FIELD))
                .and_then(|v| text(&v));
            let event = parse(&id, json.as_deref());
            Some(Entry { id, event })
        })
        .collect()
}

/// Longest string field a record may carry.
const MAX_FIELD_CHARS: usize = 512;

/// The record of entry `id`, or `None` (logged, escaped) when it is not one.
pub fn parse(id: &str, json: Option<&str>) -> Option<UsageEvent> {
    let problem = match json.map(serde_json::from_str::<UsageEvent>) {
        None => "no `r` field".to_owned(),
        Some(Err(e)) => format!("not a usage record: {e}"),
        Some(Ok(event)) => match check(&event) {
            Ok(()) => return Some(event),
            Err(why) => why,
        },
    };
    tracing::warn!(
        entry = %untrusted::quote(id),
        problem = %untrusted::quote(&problem),
        record = %untrusted::quote(&json.unwrap_or_default().chars().take(200).collect::<String>()),
        "malformed usage record skipped"
    );
    None
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
