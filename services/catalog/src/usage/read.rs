//! Reading the daily totals: filtered, grouped (tenant, tier, pack, pool, day or month, and
//! always currency: totals of two currencies are never summed, a group priced in two has one
//! row per currency), summed, in key order, paged by the last row's key (keyset: a page
//! boundary never skips or repeats a group, whatever is added meanwhile).

use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, QueryResult, Value};
use voxpool_domain::snapshot::Tier;

use super::{Group, UsageFilter, UsageRow, sql::stmt};

/// The SQL expression of each listing dimension (tenant, tier, pack, pool, day, currency)
/// under `groups`, `None` when not grouped by it (currency: always grouped by).
fn dimensions(groups: &[Group]) -> [Option<&'static str>; 6] {
    let has = |g| groups.contains(&g);
    let time = if has(Group::Day) {
        Some("day")
    } else if has(Group::Month) {
        Some("substr(day, 1, 7)")
    } else {
        None
    };
    [
        has(Group::Tenant).then_some("tenant"),
        has(Group::Tier).then_some("tier"),
        has(Group::Pack).then_some("pack_id"),
        has(Group::Pool).then_some("pool"),
        time,
        Some("currency"),
    ]
}

/// The tier a column holds (`''` = none).
fn tier_of(s: &str) -> Option<Tier> {
    match s {
        "LITE" => Some(Tier::Lite),
        "STANDARD" => Some(Tier::Standard),
        "PRO" => Some(Tier::Pro),
        "PREMIUM" => Some(Tier::Premium),
        _ => None,
    }
}

/// Up to `limit` groups matching `filter` after `after` (a previous row's
/// [`UsageRow::key`]), in key order.
pub async fn rows(
    db: &DatabaseConnection,
    filter: &UsageFilter,
    after: Option<&[String]>,
    limit: u64,
) -> Result<Vec<UsageRow>, DbErr> {
    let dims = dimensions(&filter.group_by);
    let mut conditions: Vec<String> = Vec::new();
    let mut values: Vec<Value> = Vec::new();
    let mut equal = |column: &str, value: &str| {
        conditions.push(format!("{column} = ?"));
        values.push(value.into());
    };
    if let Some(t) = &filter.tenant {
        equal("tenant", t);
    }
    if let Some(t) = filter.tier {
        equal("tier", t.as_str());
    }
    if let Some(p) = &filter.pack_id {
        equal("pack_id", p);
    }
    if let Some(p) = &filter.pool {
        equal("pool", p);
    }
    if let Some(d) = &filter.from_day {
        conditions.push("day >= ?".to_owned());
        values.push(d.as_str().into());
    }
    if let Some(d) = &filter.to_day {
        conditions.push("day <= ?".to_owned());
        values.push(d.as_str().into());
    }
    let grouped: Vec<(usize, &str)> = dims
        .iter()
        .enumerate()
        .filter_map(|(i, d)| d.map(|d| (i, d)))
        .collect();
    let exprs: Vec<&str> = grouped.iter().map(|(_, e)| *e).collect();
    if let Some(after) = after {
        let marks = vec!["?"; grouped.len()].join(", ");
        conditions.push(format!("({}) > ({marks})", exprs.join(", ")));
        for (i, _) in &grouped {
            values.push(after.get(*i).cloned().unwrap_or_default().into());
        }
    }
    let select_dims: Vec<String> = dims
        .iter()
        .map(|d| d.map_or_else(|| "''".to_owned(), str::to_owned))
        .collect();
    let mut sql = format!(
        "SELECT {}, CAST(SUM(requests) AS BIGINT), CAST(SUM(characters) AS BIGINT), \
         CAST(SUM(billed_characters) AS BIGINT), CAST(SUM(cached_characters) AS BIGINT), \
         CAST(SUM(audio_ms) AS BIGINT), CAST(SUM(gpu_ms) AS BIGINT), \
         CAST(SUM(cost_micros) AS BIGINT), CAST(SUM(failed_attempts) AS BIGINT), \
         CAST(SUM(unsettled_characters) AS BIGINT), \
         CAST(SUM(unsettled_cost_micros) AS BIGINT), CAST(SUM(refused_requests) AS BIGINT) \
         FROM usage_daily",
        select_dims.join(", ")
    );
    if !conditions.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conditions.join(" AND "));
    }
    sql.push_str(&format!(" GROUP BY {0} ORDER BY {0}", exprs.join(", ")));
    sql.push_str(" LIMIT ?");
    values.push(i64::try_from(limit).unwrap_or(i64::MAX).into());
    let found = db
        .query_all_raw(stmt(db.get_database_backend(), &sql, values))
        .await?;
    found.iter().map(row).collect()
}

fn row(r: &QueryResult) -> Result<UsageRow, DbErr> {
    let text = |i| r.try_get_by_index::<String>(i);
    let sum = |i| {
        r.try_get_by_index::<Option<i64>>(i)
            .map(Option::unwrap_or_default)
    };
    Ok(UsageRow {
        tenant: text(0)?,
        tier: tier_of(&text(1)?),
        pack_id: text(2)?,
        pool: text(3)?,
        day: text(4)?,
        currency: text(5)?,
        requests: sum(6)?,
        characters: sum(7)?,
        billed_characters: sum(8)?,
        cached_characters: sum(9)?,
        audio_ms: sum(10)?,
        gpu_ms: sum(11)?,
        cost_micros: sum(12)?,
        failed_attempts: sum(13)?,
        unsettled_characters: sum(14)?,
        unsettled_cost_micros: sum(15)?,
        refused_requests: sum(16)?,
    })
}
