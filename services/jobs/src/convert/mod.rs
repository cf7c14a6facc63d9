//! Conversions between the jobs domain ([`crate::model`]) and its protobuf forms, in one
//! place: a checked CreateJob into a [`NewJob`], the class and format enums both ways, the
//! store's records as the API's messages, and as the JSON of the summary and the webhook (the
//! proto's JSON names, camelCase; times as RFC 3339). Nothing else in the crate below the edge
//! builds or reads a `pb` message, except the synthesis client (`crate::synth`).

pub mod enums;
pub mod metering;

use prost::Message as _;
use prost_types::Timestamp;
use serde_json::{Value, json};
use voxpool_proto::{
    jobs::v1 as pb, scheduler::v1::Priority as PbPriority, synthesis::v1::AudioFormat,
};

pub use enums::{format, format_pb, priority, priority_pb};
pub use metering::{budget_wait_pb, usage, usage_pb};

use crate::{
    domain::NewJob,
    model::{ItemResult, ItemState, JobRecord, JobSpec, JobState},
    results::Results,
    service::validate::Checked,
    store::ItemRow,
};

/// A checked CreateJob (its tenant resolved) as the job to create; each item's spec encoded as
/// the store keeps it.
pub fn new_job(req: &pb::CreateJobRequest, checked: Checked) -> NewJob {
    NewJob {
        spec: JobSpec {
            tenant: req.tenant.clone(),
            priority: priority(checked.priority),
            format: format(req.format),
            sample_rate_hz: req.sample_rate_hz,
            request_id: req.request_id.clone(),
            webhook_url: req.webhook_url.clone(),
            blob_store: String::new(),
            characters: checked.characters,
        },
        items: checked
            .items
            .into_iter()
            .map(|(id, spec)| (id, spec.encode_to_vec()))
            .collect(),
    }
}

fn timestamp(ms: i64) -> Timestamp {
    Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: i32::try_from(ms.rem_euclid(1000) * 1_000_000).unwrap_or(0),
    }
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// The proto's job state.
pub fn job_state(s: JobState) -> pb::job::State {
    match s {
        JobState::Queued => pb::job::State::Queued,
        JobState::Running => pb::job::State::Running,
        JobState::Succeeded => pb::job::State::Succeeded,
        JobState::Failed => pb::job::State::Failed,
        JobState::Cancelled => pb::job::State::Cancelled,
    }
}

/// The proto's item state.
pub fn item_state(s: ItemState) -> pb::job_item::State {
    match s {
        ItemState::Queued => pb::job_item::State::Queued,
        ItemState::Running => pb::job_item::State::Running,
        ItemState::Succeeded => pb::job_item::State::Succeeded,
        ItemState::Failed => pb::job_item::State::Failed,
        ItemState::Cancelled => pb::job_item::State::Cancelled,
    }
}

/// `r` as the API's Job.
pub fn job(r: &JobRecord, results: &Results) -> pb::Job {
    pb::Job {
        name: r.name(),
        state: job_state(r.state) as i32,
        item_counts: Some(pb::ItemCounts {
            queued: r.queued,
            running: r.running,
            succeeded: r.succeeded,
            failed: r.failed,
            cancelled: r.cancelled,
        }),
        characters: r.spec.characters,
        characters_succeeded: r.characters_succeeded,
        create_time: Some(timestamp(r.create_ms)),
        start_time: r.start_ms.map(timestamp),
        end_time: r.end_ms.map(timestamp),
        expire_time: r.expire_ms.map(timestamp),
        tenant: r.spec.tenant.clone(),
        priority: priority_pb(r.spec.priority) as i32,
        format: format_pb(r.spec.format) as i32,
        sample_rate_hz: r.spec.sample_rate_hz,
        request_id: r.spec.request_id.clone(),
        webhook_host: crate::webhook::host_of(&r.spec.webhook_url),
        summary_uri: results.uri(&format!("{}/summary.json", r.id)),
        total_items: r.total,
        cached_items: r.cached_items,
        usage: Some(usage_pb(&r.usage)),
        budget_wait: r.budget_wait.as_ref().map(budget_wait_pb),
    }
}

/// An item row as the API's JobItem.
pub fn item(row: &ItemRow, results: &Results) -> pb::JobItem {
    let result = row.result.clone().unwrap_or_default();
    let characters = pb::JobItemSpec::decode(row.spec.as_slice()).map_or(0, |s| {
        i64::try_from(s.text.chars().count()).unwrap_or(i64::MAX)
    });
    pb::JobItem {
        id: row.id.clone(),
        state: item_state(row.state) as i32,
        output_uri: output_uri(&result, results),
        error: result.error.map(|e| pb::ItemError {
            code: e.code,
            reason: e.reason,
            message: e.message,
            metadata: e.metadata,
        }),
        attempts: i32::try_from(row.attempts).unwrap_or(i32::MAX),
        characters,
        chunks: result.chunks,
        cached_chunks: result.cached_chunks,
        key_id: result.key_id,
        reference_digest: result.reference_digest,
        audio_bytes: result.audio_bytes,
        usage: result.usage.as_ref().map(usage_pb),
    }
}

fn output_uri(result: &ItemResult, results: &Results) -> String {
    if result.output.is_empty() {
        String::new()
    } else {
        results.uri(&result.output)
    }
}

fn state_name(s: i32) -> &'static str {
    pb::job::State::try_from(s).map_or("STATE_UNSPECIFIED", |s| s.as_str_name())
}

/// Job `r` as JSON (webhook body, summary header).
pub fn job_value(r: &JobRecord, results: &Results) -> Value {
    job_json(&job(r, results))
}

/// An item row as JSON (summary lines).
pub fn item_value(row: &ItemRow, results: &Results) -> Value {
    item_json(&item(row, results))
}

/// The Job as JSON (webhook body, summary header).
fn job_json(j: &pb::Job) -> Value {
    let counts = j.item_counts.unwrap_or_default();
    let time = |t: &Option<Timestamp>| {
        t.as_ref().map_or(Value::Null, |t| {
            Value::String(rfc3339(t.seconds * 1000 + i64::from(t.nanos / 1_000_000)))
        })
    };
    json!({
        "name": j.name,
        "state": state_name(j.state),
        "itemCounts": {
            "queued": counts.queued,
            "running": counts.running,
            "succeeded": counts.succeeded,
            "failed": counts.failed,
            "cancelled": counts.cancelled,
        },
        "characters": j.characters.to_string(),
        "charactersSucceeded": j.characters_succeeded.to_string(),
        "createTime": time(&j.create_time),
        "startTime": time(&j.start_time),
        "endTime": time(&j.end_time),
        "expireTime": time(&j.expire_time),
        "tenant": j.tenant,
        "priority": PbPriority::try_from(j.priority)
            .map_or("PRIORITY_UNSPECIFIED", |p| p.as_str_name()),
        "format": AudioFormat::try_from(j.format)
            .map_or("AUDIO_FORMAT_UNSPECIFIED", |f| f.as_str_name()),
        "sampleRateHz": j.sample_rate_hz,
        "webhookHost": j.webhook_host,
        "requestId": j.request_id,
        "summaryUri": j.summary_uri,
        "totalItems": j.total_items,
        "cachedItems": j.cached_items,
        "usage": j.usage.as_ref().map(metering::usage_json),
        "budgetWait": j.budget_wait.as_ref().map(metering::budget_wait_json),
    })
}

/// A JobItem as JSON (summary lines).
fn item_json(i: &pb::JobItem) -> Value {
    let state =
        pb::job_item::State::try_from(i.state).map_or("STATE_UNSPECIFIED", |s| s.as_str_name());
    let mut v = json!({
        "id": i.id,
        "state": state,
        "attempts": i.attempts,
        "characters": i.characters.to_string(),
    });
    if !i.output_uri.is_empty() {
        v["outputUri"] = json!(i.output_uri);
        v["audioBytes"] = json!(i.audio_bytes.to_string());
        v["chunks"] = json!(i.chunks);
        v["cachedChunks"] = json!(i.cached_chunks);
        v["keyId"] = json!(i.key_id);
    }
    if let Some(u) = &i.usage {
        v["usage"] = metering::usage_json(u);
    }
    if let Some(e) = &i.error {
        v["error"] = json!({ "code": e.code, "reason": e.reason, "message": e.message, "metadata": e.metadata });
    }
    v
}
