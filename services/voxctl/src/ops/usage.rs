//! `voxctl usage`: the usage ledger (`voxpool.catalog.v1.Usage/ListUsage`, every page) as a
//! table with aligned columns, or `--json`. Every row is in one currency (its own: the
//! catalog never sums two), so a tenant priced in two has two rows.

use chrono::NaiveDate;
use serde::Serialize;
use tonic::{codegen::InterceptedService, transport::Channel};
use voxpool_proto::catalog::v1::{
    Tier, UsageGroup, UsageQuery, UsageRow, usage_client::UsageClient,
};

use super::OpError;
use crate::{
    cli::UsageByArg,
    connect::{self, AdminToken},
};

/// What to ask the ledger for.
#[derive(Clone, Debug, Default)]
pub struct Ask {
    /// `Some("")` = requests without a tenant.
    pub tenant: Option<String>,
    /// The second dimension after the tenant.
    pub by: Option<UsageByArg>,
    /// `YYYY-MM`.
    pub month: Option<String>,
}

/// `--month` checked: `YYYY-MM` with a month 01..12 (a usage error, exit 2, otherwise).
pub fn check_month(month: &str) -> Result<(), OpError> {
    let digits = month.bytes().enumerate().all(|(i, b)| {
        if i == 4 {
            b == b'-'
        } else {
            b.is_ascii_digit()
        }
    });
    let valid = month.len() == 7
        && digits
        && NaiveDate::parse_from_str(&format!("{month}-01"), "%Y-%m-%d").is_ok();
    if valid {
        return Ok(());
    }
    Err(OpError::usage(format!(
        "--month {month:?}: must be a UTC month written YYYY-MM (month 01..12), e.g. 2026-12; \
         leave --month out for every month"
    )))
}

/// The error of `what` answered by `status` from `service` at `url`: an UNIMPLEMENTED answer
/// says the address serves no usage ledger (another service, e.g. synthesis, answered).
fn failure(what: &str, service: &str, url: &str, status: &tonic::Status) -> OpError {
    if status.code() == tonic::Code::Unimplemented {
        return OpError::failed(format!(
            "{what} ({service}): UNIMPLEMENTED: {url} does not serve voxpool.catalog.v1.Usage \
             (is --catalog / VOXPOOL_CATALOG the catalog's address? make run's is {})",
            crate::cli::DEFAULT_CATALOG
        ));
    }
    OpError::status(what, service, status)
}

/// Every row of `ask`, all pages, from the catalog at `url`.
///
/// Errors: a malformed `--month` (usage, before any call); the catalog's refusals.
pub async fn fetch(url: &str, token: Option<&str>, ask: &Ask) -> Result<Vec<UsageRow>, OpError> {
    if let Some(month) = &ask.month {
        check_month(month)?;
    }
    let channel = connect::channel(url)?;
    let token = AdminToken::new(token).map_err(OpError::usage)?;
    let mut client: UsageClient<InterceptedService<Channel, AdminToken>> =
        UsageClient::with_interceptor(channel, token);
    let service = format!("catalog at {url}");
    let mut group_by = vec![UsageGroup::Tenant as i32];
    group_by.extend(ask.by.map(|b| {
        (match b {
            UsageByArg::Tier => UsageGroup::Tier,
            UsageByArg::Pack => UsageGroup::Pack,
            UsageByArg::Pool => UsageGroup::Pool,
            UsageByArg::Day => UsageGroup::Day,
        }) as i32
    }));
    let mut rows = Vec::new();
    let mut page_token = String::new();
    loop {
        let query = UsageQuery {
            tenant: ask.tenant.clone().unwrap_or_default(),
            tenant_is_empty: ask.tenant.as_deref() == Some(""),
            group_by: group_by.clone(),
            month: ask.month.clone().unwrap_or_default(),
            page_size: 1000,
            page_token: page_token.clone(),
            ..UsageQuery::default()
        };
        let page = client
            .list_usage(query)
            .await
            .map_err(|s| failure("ListUsage", &service, url, &s))?
            .into_inner();
        rows.extend(page.rows);
        if page.next_page_token.is_empty() {
            return Ok(rows);
        }
        page_token = page.next_page_token;
    }
}

fn tier_name(t: i32) -> &'static str {
    match Tier::try_from(t) {
        Ok(Tier::Lite) => "LITE",
        Ok(Tier::Standard) => "STANDARD",
        Ok(Tier::Pro) => "PRO",
        Ok(Tier::Premium) => "PREMIUM",
        _ => "",
    }
}

/// The rows as a table: TENANT, the `--by` column when given, then the figures (REFUSED:
/// of REQUESTS, those no vendor was sent; FAILED: vendor attempts that failed; COST in the
/// row's own currency; UNSETTLED, the characters counted from charges no vendor answer
/// settled, only when any row has some).
pub fn render_table(rows: &[UsageRow], by: Option<UsageByArg>) -> String {
    let unsettled = rows
        .iter()
        .any(|r| r.unsettled_characters != 0 || r.unsettled_cost != 0.0);
    let by_header = by.map(|b| match b {
        UsageByArg::Tier => "TIER",
        UsageByArg::Pack => "PACK",
        UsageByArg::Pool => "POOL",
        UsageByArg::Day => "DAY",
    });
    let mut header = vec!["TENANT"];
    header.extend(by_header);
    header.extend([
        "REQUESTS",
        "REFUSED",
        "CHARACTERS",
        "CACHED",
        "AUDIO S",
        "FAILED",
        "COST",
    ]);
    if unsettled {
        header.push("UNSETTLED");
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut row = vec![if r.tenant.is_empty() {
                "(none)".to_owned()
            } else {
                r.tenant.clone()
            }];
            row.extend(by.map(|b| match b {
                UsageByArg::Tier => tier_name(r.tier).to_owned(),
                UsageByArg::Pack => r.pack_id.clone(),
                UsageByArg::Pool => r.pool.clone(),
                UsageByArg::Day => r.day.clone(),
            }));
            row.extend([
                r.requests.to_string(),
                r.refused_requests.to_string(),
                r.characters.to_string(),
                r.cached_characters.to_string(),
                format!("{:.1}", r.audio_ms as f64 / 1000.0),
                r.failed_attempts.to_string(),
                format!("{:.6} {}", r.cost, r.currency).trim().to_owned(),
            ]);
            if unsettled {
                row.push(r.unsettled_characters.to_string());
            }
            row
        })
        .collect();
    crate::console::table(&header, &cells)
}

/// One row as `--json` prints it: camelCase, as every other `--json` of voxctl and the
/// usage API's JSON mapping (`billedCharacters`, `unsettledCost`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonRow<'a> {
    tenant: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    tier: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pack_id: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pool: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    day: &'a str,
    requests: i64,
    /// Of `requests`: those no vendor was sent (refused before any attempt).
    refused_requests: i64,
    characters: i64,
    billed_characters: i64,
    cached_characters: i64,
    audio_ms: i64,
    gpu_ms: i64,
    failed_attempts: i64,
    cost: f64,
    currency: &'a str,
    /// Of `characters` / `cost`: counted from charges no vendor answer settled.
    unsettled_characters: i64,
    unsettled_cost: f64,
}

/// The rows as one JSON array.
pub fn render_json(rows: &[UsageRow]) -> String {
    let rows: Vec<JsonRow<'_>> = rows
        .iter()
        .map(|r| JsonRow {
            tenant: &r.tenant,
            tier: tier_name(r.tier),
            pack_id: &r.pack_id,
            pool: &r.pool,
            day: &r.day,
            requests: r.requests,
            refused_requests: r.refused_requests,
            characters: r.characters,
            billed_characters: r.billed_characters,
            cached_characters: r.cached_characters,
            audio_ms: r.audio_ms,
            gpu_ms: r.gpu_ms,
            failed_attempts: r.failed_attempts,
            cost: r.cost,
            currency: &r.currency,
            unsettled_characters: r.unsettled_characters,
            unsettled_cost: r.unsettled_cost,
        })
        .collect();
    serde_json::to_string_pretty(&rows).unwrap_or_else(|_| "[]".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(tenant: &str, pool: &str, characters: i64) -> UsageRow {
        UsageRow {
            tenant: tenant.to_owned(),
            pool: pool.to_owned(),
            requests: 2,
            characters,
            audio_ms: 1500,
            cost: 0.25,
            currency: "USD".to_owned(),
            ..UsageRow::default()
        }
    }

    #[test]
    fn the_table_aligns_its_columns_and_names_the_by_dimension() {
        let rows = [row("acme", "openai-tts", 12345), row("", "volc", 7)];
        let table = render_table(&rows, Some(UsageByArg::Pool));
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("TENANT"), "{table}");
        assert!(lines[0].contains("POOL"), "{table}");
        assert!(
            lines[1].contains("openai-tts") && lines[1].contains("12345"),
            "{table}"
        );
        assert!(lines[2].contains("(none)"), "{table}");
        let column = |l: &str| l.find("CHARACTERS").or_else(|| l.find("12345"));
        assert_eq!(column(lines[0]), column(lines[1]), "{table}");
        assert!(
            !lines[0].contains("UNSETTLED"),
            "no unsettled column when nothing is unsettled: {table}"
        );
    }

    #[test]
    fn the_table_shows_unsettled_characters_when_any_row_has_some() {
        let mut swept = row("acme", "openai-tts", 12345);
        swept.unsettled_characters = 345;
        swept.unsettled_cost = 0.005;
        let rows = [swept, row("", "volc", 7)];
        let table = render_table(&rows, Some(UsageByArg::Pool));
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].trim_end().ends_with("UNSETTLED"), "{table}");
        assert!(lines[1].trim_end().ends_with("345"), "{table}");
        assert!(lines[2].trim_end().ends_with('0'), "{table}");
        let column = |l: &str| {
            l.find("UNSETTLED")
                .or_else(|| l.find(" 345").map(|i| i + 1))
        };
        assert_eq!(column(lines[0]), column(lines[1]), "{table}");
    }

    #[test]
    fn each_row_shows_its_own_currency_and_its_refused_requests() {
        let mut eur = row("acme", "", 30);
        eur.currency = "EUR".to_owned();
        eur.cost = 0.44;
        eur.refused_requests = 1;
        let table = render_table(&[eur, row("acme", "", 120)], None);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].contains("REQUESTS  REFUSED"), "{table}");
        assert!(lines[1].trim_end().ends_with("0.440000 EUR"), "{table}");
        assert!(lines[2].trim_end().ends_with("0.250000 USD"), "{table}");
        let refused = |l: &str| l.split_whitespace().nth(2).map(str::to_owned);
        assert_eq!(refused(lines[1]).as_deref(), Some("1"), "{table}");
        assert_eq!(refused(lines[2]).as_deref(), Some("0"), "{table}");
    }

    #[test]
    fn month_must_be_yyyy_mm_with_a_real_month() {
        for good in ["2026-01", "2026-12"] {
            assert!(check_month(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "2026-13",
            "2026-00",
            "2026-1",
            "2026/12",
            "26-12",
            "2026-12-01",
            "+202-12",
        ] {
            let e = check_month(bad).expect_err(bad);
            assert_eq!(e.exit_code, 2, "{bad}");
            assert!(e.message.contains("YYYY-MM"), "{}", e.message);
        }
    }

    #[test]
    fn json_lists_every_row_with_its_figures() {
        let json = render_json(&[row("acme", "p", 10)]);
        let parsed: serde_json::Value = serde_json::from_str(&json).expect("json");
        assert_eq!(parsed[0]["tenant"], "acme");
        assert_eq!(parsed[0]["characters"], 10);
        assert_eq!(parsed[0]["currency"], "USD");
        assert_eq!(
            parsed[0]["audioMs"], 1500,
            "camelCase, as voxctl's other --json"
        );
        assert_eq!(parsed[0]["unsettledCharacters"], 0, "always present");
        assert_eq!(parsed[0]["refusedRequests"], 0, "always present");
        assert_eq!(parsed[0]["unsettledCost"], 0.0);
        let mut swept = row("acme", "p", 10);
        swept.unsettled_characters = 4;
        swept.unsettled_cost = 0.25;
        let json = render_json(&[swept]);
        let parsed: serde_json::Value = serde_json::from_str(&json).expect("json");
        assert_eq!(parsed[0]["unsettledCharacters"], 4);
        assert_eq!(parsed[0]["unsettledCost"], 0.25);
        assert!(
            parsed[0].get("tier").is_none(),
            "ungrouped dimensions are left out"
        );
    }
}
