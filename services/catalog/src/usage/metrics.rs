//! Usage ledger metrics (OpenTelemetry; exported over OTLP when configured, no-ops
//! otherwise). Each catalog replica counts what its own consumer did.
//!
//! | instrument | kind | unit | attributes |
//! |---|---|---|---|
//! | `voxpool.catalog.usage.records` | counter | `{record}` | `result`: `applied` (stored for the first time), `repeated` (a redelivery, counted nothing), `malformed` (acknowledged and skipped) |
//! | `voxpool.catalog.usage.swept` | counter | `{attempt}` | none (charges counted as charged after the grace) |
//! | `voxpool.catalog.usage.lag` | gauge | `{record}` | none (entries pending in the group plus entries not read yet) |
//! | `voxpool.catalog.usage.errors` | counter | `{error}` | `stage`: `redis`, `database` |
//! | `voxpool.catalog.usage.expired` | counter | `{record}` | none (raw records deleted by retention) |

use std::sync::OnceLock;

use opentelemetry::{
    KeyValue, global,
    metrics::{Counter, Gauge},
};

struct Instruments {
    records: Counter<u64>,
    swept: Counter<u64>,
    lag: Gauge<u64>,
    errors: Counter<u64>,
    expired: Counter<u64>,
}

fn instruments() -> &'static Instruments {
    static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();
    INSTRUMENTS.get_or_init(|| {
        let meter = global::meter("voxpool-catalog");
        let counter = |name: &'static str, unit: &'static str, what: &'static str| {
            meter
                .u64_counter(name)
                .with_unit(unit)
                .with_description(what)
                .build()
        };
        Instruments {
            records: counter(
                "voxpool.catalog.usage.records",
                "{record}",
                "usage stream records read, by result",
            ),
            swept: counter(
                "voxpool.catalog.usage.swept",
                "{attempt}",
                "unsettled charges counted as charged after the grace",
            ),
            lag: meter
                .u64_gauge("voxpool.catalog.usage.lag")
                .with_unit("{record}")
                .with_description("usage stream entries pending or not read yet")
                .build(),
            errors: counter(
                "voxpool.catalog.usage.errors",
                "{error}",
                "usage consumer failures, by stage",
            ),
            expired: counter(
                "voxpool.catalog.usage.expired",
                "{record}",
                "raw usage records deleted by retention",
            ),
        }
    })
}

/// Records read: `applied`, `repeated` or `malformed`.
pub fn records(result: &'static str, n: u64) {
    if n > 0 {
        instruments()
            .records
            .add(n, &[KeyValue::new("result", result)]);
    }
}

/// Charges the sweep counted.
pub fn swept(n: u64) {
    if n > 0 {
        instruments().swept.add(n, &[]);
    }
}

/// Entries pending or unread.
pub fn lag(n: u64) {
    instruments().lag.record(n, &[]);
}

/// A failure at `stage` (`redis`, `database`).
pub fn error(stage: &'static str) {
    instruments()
        .errors
        .add(1, &[KeyValue::new("stage", stage)]);
}

/// Raw records retention deleted.
pub fn expired(n: u64) {
    if n > 0 {
        instruments().expired.add(n, &[]);
    }
}
