//! Usage and the budget wait between the domain ([`crate::usage`]) and the wire: the
//! synthesis answer's `Usage` in, the API's `Usage` and `BudgetWait` out, and their JSON in
//! the summary and the webhook (the proto's JSON names; int64 as strings).

use serde_json::{Value, json};
use voxpool_proto::{jobs::v1 as pb, synthesis::v1 as spb};

use super::{rfc3339, timestamp};
use crate::usage::{BudgetWait, Usage};

/// A Synthesize answer's usage as the domain keeps it.
pub fn usage(u: &spb::Usage) -> Usage {
    Usage {
        characters: u.characters,
        billed_characters: u.billed_characters,
        cached_characters: u.cached_characters,
        audio_ms: u.audio_ms,
        cost_micros: Usage::micros_of(u.cost),
        currency: u.currency.clone(),
        gpu_ms: u.gpu_ms,
        failed_attempts: i64::from(u.failed_attempts),
    }
}

/// `u` as the API's Usage.
pub fn usage_pb(u: &Usage) -> spb::Usage {
    spb::Usage {
        characters: u.characters,
        billed_characters: u.billed_characters,
        cached_characters: u.cached_characters,
        audio_ms: u.audio_ms,
        cost: u.cost(),
        currency: u.currency.clone(),
        gpu_ms: u.gpu_ms,
        failed_attempts: i32::try_from(u.failed_attempts).unwrap_or(i32::MAX),
    }
}

/// `w` as the API's BudgetWait.
pub fn budget_wait_pb(w: &BudgetWait) -> pb::BudgetWait {
    pb::BudgetWait {
        budget: w.budget.clone(),
        subject: w.subject.clone(),
        reset_time: (w.resets_at_ms > 0).then(|| timestamp(w.resets_at_ms)),
        next_try_time: (w.next_try_ms > 0).then(|| timestamp(w.next_try_ms)),
        message: w.message.clone(),
    }
}

/// The API's Usage as JSON (summary, webhook).
pub fn usage_json(u: &spb::Usage) -> Value {
    json!({
        "characters": u.characters.to_string(),
        "billedCharacters": u.billed_characters.to_string(),
        "cachedCharacters": u.cached_characters.to_string(),
        "audioMs": u.audio_ms.to_string(),
        "cost": u.cost,
        "currency": u.currency,
        "gpuMs": u.gpu_ms.to_string(),
        "failedAttempts": u.failed_attempts,
    })
}

/// The API's BudgetWait as JSON (webhook of a job still waiting never happens: a job ends
/// first; the summary of a job read while it waits).
pub fn budget_wait_json(w: &pb::BudgetWait) -> Value {
    let time = |t: &Option<prost_types::Timestamp>| {
        t.as_ref().map_or(Value::Null, |t| {
            Value::String(rfc3339(t.seconds * 1000 + i64::from(t.nanos / 1_000_000)))
        })
    };
    json!({
        "budget": w.budget,
        "subject": w.subject,
        "resetTime": time(&w.reset_time),
        "nextTryTime": time(&w.next_try_time),
        "message": w.message,
    })
}
