//! Jobs metrics (OpenTelemetry; exported over OTLP when configured, no-ops otherwise). Each
//! replica counts what it did itself; a fleet's totals are the sums over replicas.
//!
//! | instrument | kind | unit | attributes |
//! |---|---|---|---|
//! | `voxpool.jobs.created` | counter | `{job}` | `priority` (`BATCH`, `STANDARD`; an idempotent repeat is not counted) |
//! | `voxpool.jobs.finalized` | counter | `{job}` | `state` (`SUCCEEDED`, `FAILED`, `CANCELLED`; the summary written, at least once per job) |
//! | `voxpool.jobs.items` | counter | `{item}` | `state` (`SUCCEEDED`, `FAILED`, `CANCELLED`), `code` (`OK` or the item's gRPC code) |
//! | `voxpool.jobs.item.duration` | histogram | `s` | `state` (from this replica taking the item to ending it) |
//! | `voxpool.jobs.items.in_flight` | up-down counter | `{item}` | none (items this replica holds) |
//! | `voxpool.jobs.items.reclaimed` | counter | `{item}` | none (taken over from a worker that went silent) |
//! | `voxpool.jobs.items.already_written` | counter | `{item}` | none (reclaimed items whose audio was written: ended without a call) |
//! | `voxpool.jobs.attempts` | counter | `{attempt}` | `code` (`OK`, Synthesize's gRPC code, or `CANCELLED` when a cancel stopped an item's parts) |
//! | `voxpool.jobs.characters` | counter | `{character}` | `cached` (`true` when every chunk came from the audio cache) |
//! | `voxpool.jobs.webhook.deliveries` | counter | `{delivery}` | `outcome` (`delivered`, `retry`, `abandoned`) |
//! | `voxpool.jobs.expired` | counter | `{job}` | none (jobs whose results the retention sweep deleted) |
//!
//! Attributes take values from closed sets only: a tenant, a job name or an item id (caller
//! strings) never becomes one, so cardinality stays fixed and nothing a caller sent is exported.

use std::{sync::OnceLock, time::Duration};

use opentelemetry::{
    KeyValue, global,
    metrics::{Counter, Histogram, UpDownCounter},
};

use crate::model::ItemState;

/// The jobs instruments.
struct Instruments {
    created: Counter<u64>,
    finalized: Counter<u64>,
    items: Counter<u64>,
    item_duration: Histogram<f64>,
    in_flight: UpDownCounter<i64>,
    reclaimed: Counter<u64>,
    already_written: Counter<u64>,
    attempts: Counter<u64>,
    characters: Counter<u64>,
    webhook: Counter<u64>,
    expired: Counter<u64>,
}

fn counter(
    meter: &opentelemetry::metrics::Meter,
    name: &'static str,
    unit: &'static str,
    what: &'static str,
) -> Counter<u64> {
    meter
        .u64_counter(name)
        .with_unit(unit)
        .with_description(what)
        .build()
}

fn instruments() -> &'static Instruments {
    static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();
    INSTRUMENTS.get_or_init(|| {
        let meter = global::meter("voxpool-jobs");
        Instruments {
            created: counter(&meter, "voxpool.jobs.created", "{job}", "jobs created"),
            finalized: counter(
                &meter,
                "voxpool.jobs.finalized",
                "{job}",
                "ended jobs whose summary was written, by state",
            ),
            items: counter(
                &meter,
                "voxpool.jobs.items",
                "{item}",
                "items ended, by state and code",
            ),
            item_duration: meter
                .f64_histogram("voxpool.jobs.item.duration")
                .with_unit("s")
                .with_description("time from taking an item to ending it")
                .build(),
            in_flight: meter
                .i64_up_down_counter("voxpool.jobs.items.in_flight")
                .with_unit("{item}")
                .with_description("items this replica holds")
                .build(),
            reclaimed: counter(
                &meter,
                "voxpool.jobs.items.reclaimed",
                "{item}",
                "items taken over from a worker that went silent",
            ),
            already_written: counter(
                &meter,
                "voxpool.jobs.items.already_written",
                "{item}",
                "reclaimed items whose audio was already written (no vendor call)",
            ),
            attempts: counter(
                &meter,
                "voxpool.jobs.attempts",
                "{attempt}",
                "Synthesize calls for items, by code",
            ),
            characters: counter(
                &meter,
                "voxpool.jobs.characters",
                "{character}",
                "characters of succeeded items",
            ),
            webhook: counter(
                &meter,
                "voxpool.jobs.webhook.deliveries",
                "{delivery}",
                "webhook delivery tries, by outcome",
            ),
            expired: counter(
                &meter,
                "voxpool.jobs.expired",
                "{job}",
                "jobs whose results the retention sweep deleted",
            ),
        }
    })
}

/// A job was created (`priority`: the enum's name without its prefix).
pub fn created(priority: &'static str) {
    instruments()
        .created
        .add(1, &[KeyValue::new("priority", priority)]);
}

/// An ended job's summary was written.
pub fn finalized(state: &'static str) {
    instruments()
        .finalized
        .add(1, &[KeyValue::new("state", state)]);
}

/// An item ended here after `elapsed` with `code` (`OK` unless it failed).
pub fn item(state: ItemState, code: &str, elapsed: Duration) {
    let state = KeyValue::new("state", state.as_str());
    let code = KeyValue::new("code", status_code(code));
    let m = instruments();
    m.items.add(1, &[state.clone(), code]);
    m.item_duration.record(elapsed.as_secs_f64(), &[state]);
}

/// This replica took (`+1`) or let go of (`-1`) an item.
pub fn in_flight(delta: i64) {
    instruments().in_flight.add(delta, &[]);
}

/// An item was reclaimed from a silent worker.
pub fn reclaimed() {
    instruments().reclaimed.add(1, &[]);
}

/// A reclaimed item's audio was found written.
pub fn already_written() {
    instruments().already_written.add(1, &[]);
}

/// One Synthesize call for an item ended with `code`.
pub fn attempt(code: tonic::Code) {
    instruments().attempts.add(
        1,
        &[KeyValue::new(
            "code",
            voxpool_domain::status::code_name(code),
        )],
    );
}

/// A succeeded item's characters.
pub fn characters(n: i64, all_cached: bool) {
    instruments().characters.add(
        u64::try_from(n).unwrap_or(0),
        &[KeyValue::new(
            "cached",
            if all_cached { "true" } else { "false" },
        )],
    );
}

/// One webhook try ended with `outcome`.
pub fn webhook(outcome: &'static str) {
    instruments()
        .webhook
        .add(1, &[KeyValue::new("outcome", outcome)]);
}

/// A job's results were deleted past its retention.
pub fn expired() {
    instruments().expired.add(1, &[]);
}

/// `code` as stored on an item (a gRPC code name) when it is one, else `UNKNOWN`: the
/// attribute's values stay the closed set of code names.
fn status_code(code: &str) -> &'static str {
    use tonic::Code;
    const CODES: [Code; 17] = [
        Code::Ok,
        Code::Cancelled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
    ];
    CODES
        .into_iter()
        .map(voxpool_domain::status::code_name)
        .find(|name| *name == code)
        .unwrap_or("UNKNOWN")
}

#[cfg(test)]
mod tests {
    use super::status_code;

    #[test]
    fn item_codes_map_to_code_names_and_anything_else_to_unknown() {
        assert_eq!(status_code("OK"), "OK");
        assert_eq!(status_code("RESOURCE_EXHAUSTED"), "RESOURCE_EXHAUSTED");
        assert_eq!(status_code("a caller's string"), "UNKNOWN");
        assert_eq!(status_code(""), "UNKNOWN");
    }
}
