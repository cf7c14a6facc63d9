//! Usage records for the ledger's tests.
#![allow(dead_code)]

use voxpool_catalog::usage::{Group, UsageFilter, UsageRow, UsageStore};
use voxpool_domain::{
    provider::Provider,
    snapshot::Tier,
    usage::{AttemptUsage, DoneUsage, UsageContext, UsageEvent},
};

/// 2026-12-01T10:00:00Z.
pub const AT_MS: i64 = 1_796_119_200_000;

/// The context of request `record` by `tenant` on pool `pool` at [`AT_MS`].
pub fn context(record: &str, tenant: &str, pool: &str) -> UsageContext {
    UsageContext {
        record_id: record.to_owned(),
        request_id: format!("req-{record}"),
        tenant: tenant.to_owned(),
        caller: "app".to_owned(),
        path: "grpc".to_owned(),
        pack_id: "vp_1".to_owned(),
        snapshot_digest: "sha256:00".to_owned(),
        tier: Some(Tier::Pro),
        pool: pool.to_owned(),
        provider: Provider::OpenAi,
        currency: "USD".to_owned(),
        at_ms: AT_MS,
    }
}

fn attempt(n: u32, characters: u64, outcome: &str) -> AttemptUsage {
    AttemptUsage {
        attempt: n,
        key_id: "u1/k1".to_owned(),
        upstream_id: "u1".to_owned(),
        characters,
        billed_characters: characters,
        audio_ms: characters * 10,
        gpu_ms: 0,
        cost_micros: i64::try_from(characters).expect("small") * 15,
        outcome: outcome.to_owned(),
    }
}

/// Attempt `n` charged for `characters`.
pub fn charge(c: &UsageContext, n: u32, characters: u64) -> UsageEvent {
    UsageEvent::Charge {
        context: c.clone(),
        attempt: attempt(n, characters, ""),
    }
}

/// Attempt `n` settled at `characters` (0 = refused before any audio).
pub fn settle(c: &UsageContext, n: u32, characters: u64) -> UsageEvent {
    let outcome = if characters == 0 {
        "RATE_LIMITED"
    } else {
        "SUCCESS"
    };
    UsageEvent::Settle {
        context: c.clone(),
        attempt: attempt(n, characters, outcome),
    }
}

/// The request's end.
pub fn done(c: &UsageContext, cached: u64, audio_ms: u64, failed: u32) -> UsageEvent {
    UsageEvent::Done {
        context: c.clone(),
        done: DoneUsage {
            cached_characters: cached,
            audio_ms,
            cached_cost_micros: 0,
            failed_attempts: failed,
            ok: true,
        },
    }
}

/// A whole request: a refused first attempt, a second that spoke `characters`.
pub fn request(c: &UsageContext, characters: u64) -> Vec<UsageEvent> {
    vec![
        charge(c, 0, characters),
        settle(c, 0, 0),
        charge(c, 1, characters),
        settle(c, 1, characters),
        done(c, 0, characters * 10, 1),
    ]
}

/// Totals per tenant (grouped by tenant only).
pub async fn by_tenant(store: &UsageStore) -> Vec<UsageRow> {
    let filter = UsageFilter {
        group_by: vec![Group::Tenant],
        ..UsageFilter::default()
    };
    store.rows(&filter, None, 1000).await.expect("rows")
}

/// The one tenant row of `tenant`.
pub async fn tenant_row(store: &UsageStore, tenant: &str) -> Option<UsageRow> {
    by_tenant(store)
        .await
        .into_iter()
        .find(|r| r.tenant == tenant)
}
