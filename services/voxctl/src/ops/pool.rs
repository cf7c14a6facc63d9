//! `voxctl pool status [POOL] [--watch]`: per-key in-flight/capacity as bars, state and
//! cooldowns, from the scheduler's `GetPoolStatus` / `ListPools`, joined with synthesis's
//! `ListPools`: the scheduler never sees credentials, so a key synthesis cannot use (no
//! credential there) shows `NO_CREDENTIAL` and a pool synthesis cannot serve says so. Then
//! the budgets (`[[budgets]]`): one line per row with its period, used/reserved/limit and reset.

use std::{
    fmt::Write as _,
    io::{IsTerminal as _, Write as _},
    time::Duration,
};

use voxpool_proto::{
    scheduler::v1::{
        BudgetStatus, GetPoolStatusRequest, KeyState, KeyStatus, ListPoolsRequest, PoolStatus,
        pool_scheduler_client::PoolSchedulerClient,
    },
    synthesis::v1::{self as synthesis_pb, PoolReadiness, synthesis_client::SynthesisClient},
};

use super::OpError;
use crate::connect;

/// Width of the in-flight bars, in characters.
const BAR: usize = 20;

/// Prints the status of `pool` (or every pool) once, or every `interval` until Ctrl-C.
pub async fn status(
    scheduler: &str,
    synthesis: &str,
    token: &voxpool_runtime::auth::ClientToken,
    pool: Option<&str>,
    watch: Option<Duration>,
) -> Result<(), OpError> {
    let mut client = PoolSchedulerClient::new(connect::authed(scheduler, token)?);
    let mut synthesis_client = SynthesisClient::new(connect::authed(synthesis, token)?);
    let tty = std::io::stdout().is_terminal();
    loop {
        let (pools, budgets) =
            fetch(&mut client, &format!("scheduler at {scheduler}"), pool).await?;
        let readiness = match readiness(&mut synthesis_client).await {
            Ok(r) => r,
            Err(why) => {
                crate::say!(
                    "voxctl: credentials not checked: synthesis at {synthesis} {why} (--synthesis)"
                );
                Vec::new()
            }
        };
        let text = pools
            .iter()
            .map(|p| render(p, readiness.iter().find(|r| r.pool == p.pool)))
            .collect::<Vec<_>>()
            .join("\n")
            + &render_budgets(&budgets);
        let frame = match watch {
            Some(_) if tty => format!("\x1b[2J\x1b[H{text}"),
            Some(_) => format!("{text}\n"),
            None => text,
        };
        // A closed stdout (`| head`) ends the command quietly instead of panicking.
        let mut out = std::io::stdout().lock();
        if out
            .write_all(frame.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            return Ok(());
        }
        drop(out);
        let Some(every) = watch else {
            return Ok(());
        };
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

async fn fetch(
    client: &mut PoolSchedulerClient<connect::Authed>,
    service: &str,
    pool: Option<&str>,
) -> Result<(Vec<PoolStatus>, Vec<BudgetStatus>), OpError> {
    match pool {
        Some(pool) => client
            .get_pool_status(GetPoolStatusRequest { pool: pool.into() })
            .await
            .map(|r| {
                let mut p = r.into_inner();
                let budgets = std::mem::take(&mut p.budgets);
                (vec![p], budgets)
            })
            .map_err(|s| OpError::status("GetPoolStatus", service, &s)),
        None => client
            .list_pools(ListPoolsRequest {})
            .await
            .map(|r| {
                let r = r.into_inner();
                (r.pools, r.budgets)
            })
            .map_err(|s| OpError::status("ListPools", service, &s)),
    }
}

/// The budget table: `budget SUBJECT PER used/reserved/limit reset`, one line per row
/// (characters, and cost with 6 decimals as every cost voxctl prints, where the budget limits
/// them); empty without budgets.
pub fn render_budgets(budgets: &[BudgetStatus]) -> String {
    if budgets.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nbudgets\n");
    for b in budgets {
        let mut limits = Vec::new();
        if b.characters_limit > 0 {
            limits.push(format!(
                "characters {}/{}/{}",
                b.characters_used, b.characters_reserved, b.characters_limit
            ));
        }
        if b.cost_limit > 0.0 {
            limits.push(format!(
                "cost {:.6}/{:.6}/{:.6} {}",
                b.cost_used, b.cost_reserved, b.cost_limit, b.currency
            ));
        }
        let reset = chrono::DateTime::from_timestamp_millis(b.resets_at_ms)
            .map(|d| d.format("%Y-%m-%dT%H:%M:%SZ").to_string())
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {:<20} {:<20} per {:<5}  {} (used/reserved/limit)  resets {reset}",
            b.id,
            voxpool_domain::untrusted::quote(&b.subject),
            b.per,
            limits.join("  "),
        );
    }
    out
}

/// Synthesis's view of every pool, or why it did not answer.
async fn readiness(
    client: &mut SynthesisClient<connect::Authed>,
) -> Result<Vec<PoolReadiness>, String> {
    let call = client.list_pools(synthesis_pb::ListPoolsRequest {});
    match tokio::time::timeout(Duration::from_secs(3), call).await {
        Ok(Ok(r)) => Ok(r.into_inner().pools),
        Ok(Err(status)) => Err(format!(
            "answered {}",
            voxpool_domain::untrusted::quote(status.message())
        )),
        Err(_) => Err("did not answer within 3s".to_owned()),
    }
}

/// Renders one pool: a header line (with `recovering, grants resume in Ns` while the store
/// recovers the pool's lost state, and what synthesis cannot do with it per `readiness`),
/// then one line per key.
pub fn render(pool: &PoolStatus, readiness: Option<&PoolReadiness>) -> String {
    if !pool.store_error.is_empty() {
        return format!(
            "pool {}  UNAVAILABLE: {}\n",
            pool.pool,
            voxpool_domain::untrusted::quote(&pool.store_error)
        );
    }
    let mut out = format!(
        "pool {}  {}/{} in flight ({:.0}%)  waiters {}",
        pool.pool,
        pool.in_flight,
        pool.capacity,
        pool.utilization * 100.0,
        pool.waiters
    );
    if pool.recovering_until_ms > pool.now_ms {
        let left = Duration::from_millis((pool.recovering_until_ms - pool.now_ms) as u64);
        let _ = write!(
            out,
            "  recovering, grants resume in {:.1}s",
            left.as_secs_f64()
        );
    }
    match readiness {
        Some(r) if !r.adapter_available => {
            let _ = write!(
                out,
                "  NOT SERVING: synthesis has no {} adapter; every call answers FAILED_PRECONDITION",
                r.provider
            );
        }
        Some(r) if !r.serving => out.push_str(
            "  NOT SERVING: no key has a credential on synthesis; every call answers FAILED_PRECONDITION (set the credentials named below)",
        ),
        _ => {}
    }
    out.push('\n');
    let width = pool
        .keys
        .iter()
        .map(|k| crate::console::width(&k.key_id))
        .max()
        .unwrap_or(0);
    for key in &pool.keys {
        let unusable = readiness
            .and_then(|r| r.keys.iter().find(|k| k.key_id == key.key_id))
            .filter(|k| !k.usable);
        let mut line = key_line(key, width, pool.now_ms, unusable.is_some());
        if let Some(k) = unusable {
            let _ = write!(line, "  ({})", voxpool_domain::untrusted::quote(&k.problem));
        }
        let _ = writeln!(out, "  {line}");
    }
    out
}

/// One key's line; `no_credential` replaces the scheduler's state with `NO_CREDENTIAL`.
fn key_line(key: &KeyStatus, width: usize, now_ms: i64, no_credential: bool) -> String {
    let filled = if key.capacity > 0 {
        ((key.in_flight.max(0) as usize * BAR) / key.capacity as usize).min(BAR)
    } else {
        0
    };
    let state = if no_credential {
        "NO_CREDENTIAL"
    } else {
        KeyState::try_from(key.state).map_or("UNKNOWN", |s| s.as_str_name())
    };
    let mut line = format!(
        "{}  [{}{}] {:>3}/{:<3} {state}",
        crate::console::pad(&key.key_id, width),
        "#".repeat(filled),
        "·".repeat(BAR - filled),
        key.in_flight,
        key.capacity,
    );
    if key.cooldown_until_ms > now_ms && key.cooldown_until_ms > 0 {
        let left = Duration::from_millis((key.cooldown_until_ms - now_ms) as u64);
        let _ = write!(line, " for {:.1}s", left.as_secs_f64());
    }
    if key.consecutive_failures > 0 {
        let _ = write!(line, "  failures {}", key.consecutive_failures);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_render_one_line_per_row_with_use_limit_and_reset() {
        let text = render_budgets(&[BudgetStatus {
            id: "acme-daily".into(),
            subject: "acme".into(),
            per: "day".into(),
            characters_used: 9960,
            characters_reserved: 0,
            characters_limit: 10000,
            resets_at_ms: 1_798_761_600_000,
            currency: "USD".into(),
            ..Default::default()
        }]);
        assert!(text.contains("acme-daily"), "{text}");
        assert!(text.contains("characters 9960/0/10000"), "{text}");
        assert!(text.contains("resets 2027-01-01T00:00:00Z"), "{text}");
        assert!(!text.contains("cost"), "no cost limit: {text}");
        assert!(render_budgets(&[]).is_empty());
        let text = render_budgets(&[BudgetStatus {
            id: "acme-cost".into(),
            subject: "acme".into(),
            per: "month".into(),
            cost_used: 1.0,
            cost_reserved: 0.000_015,
            cost_limit: 1.0,
            currency: "EUR".into(),
            ..Default::default()
        }]);
        assert!(
            text.contains("cost 1.000000/0.000015/1.000000 EUR"),
            "costs with 6 decimals: {text}"
        );
    }

    #[test]
    fn keys_render_as_bars_with_state_cooldown_and_failures() {
        let pool = PoolStatus {
            pool: "p".into(),
            capacity: 20,
            in_flight: 15,
            utilization: 0.75,
            now_ms: 10_000,
            waiters: 2,
            recovering_until_ms: 0,
            store_error: String::new(),
            budgets: Vec::new(),
            keys: vec![
                KeyStatus {
                    key_id: "u/a".into(),
                    capacity: 10,
                    in_flight: 5,
                    state: KeyState::Available as i32,
                    ..KeyStatus::default()
                },
                KeyStatus {
                    key_id: "u/bb".into(),
                    capacity: 10,
                    in_flight: 10,
                    state: KeyState::Cooling as i32,
                    cooldown_until_ms: 12_500,
                    consecutive_failures: 3,
                    ..KeyStatus::default()
                },
            ],
            batch_in_flight: Default::default(),
            batch_limit: Default::default(),
            class_waiters: Default::default(),
        };
        let text = render(&pool, None);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "pool p  15/20 in flight (75%)  waiters 2");
        assert_eq!(
            lines[1],
            format!(
                "  u/a   [{}{}]   5/10  AVAILABLE",
                "#".repeat(10),
                "·".repeat(10)
            )
        );
        assert_eq!(
            lines[2],
            format!(
                "  u/bb  [{}]  10/10  COOLING for 2.5s  failures 3",
                "#".repeat(20)
            )
        );

        let no_credentials = PoolReadiness {
            pool: "p".into(),
            provider: "volcengine".into(),
            adapter_available: true,
            serving: false,
            keys: vec![synthesis_pb::KeyReadiness {
                key_id: "u/a".into(),
                usable: false,
                problem: "environment variable VOLC_TOKEN_APP1 is not set".into(),
            }],
        };
        let text = render(&pool, Some(&no_credentials));
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].ends_with("NOT SERVING: no key has a credential on synthesis; every call answers FAILED_PRECONDITION (set the credentials named below)"), "{text}");
        assert!(
            lines[1].ends_with(
                "5/10  NO_CREDENTIAL  (\"environment variable VOLC_TOKEN_APP1 is not set\")"
            ),
            "{text}"
        );
        assert!(
            lines[2].contains("COOLING"),
            "a key synthesis did not flag keeps its state"
        );
    }
}
