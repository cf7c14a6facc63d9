//! `voxpool.catalog.v1.Usage`: the usage ledger, read (admin token, as VoiceCatalogAdmin).
//! The edge: the query is checked and converted into a [`UsageFilter`], the [`Ledger`]
//! answers, its rows are converted back; no protobuf below.

use chrono::{Datelike, NaiveDate};
use tonic::{Request, Response, Status};
use voxpool_domain::snapshot::Tier;
use voxpool_proto::catalog::v1::{self as pb, usage_server::Usage};
use voxpool_runtime::auth::AdminAuth;

use crate::{
    error::CatalogError,
    page_token::{self, Cursor},
    usage::{Group, Ledger, UsageFilter, UsageRow},
};

/// Rows per ListUsage page when the request says 0.
pub const DEFAULT_USAGE_PAGE: i32 = 100;
/// Largest ListUsage page.
pub const MAX_USAGE_PAGE: i32 = 1000;
/// Longest tenant, pack id or pool accepted in a query.
const MAX_NAME_CHARS: usize = 256;

/// The ledger's read service.
#[derive(Clone)]
pub struct UsageService {
    ledger: Ledger,
    auth: AdminAuth,
}

impl UsageService {
    /// A service over `ledger` guarded by `auth`.
    pub fn new(ledger: Ledger, auth: AdminAuth) -> Self {
        Self { ledger, auth }
    }

    /// The tonic server wrapping this service.
    pub fn into_server(self) -> pb::usage_server::UsageServer<Self> {
        pb::usage_server::UsageServer::new(self)
    }
}

#[tonic::async_trait]
impl Usage for UsageService {
    async fn get_usage(
        &self,
        request: Request<pb::UsageQuery>,
    ) -> Result<Response<pb::UsageRows>, Status> {
        self.auth.authorize(request.metadata())?;
        let filter = filter_of(request.get_ref())?;
        let rows = self.ledger.get(&filter).await?;
        Ok(Response::new(pb::UsageRows {
            rows: rows.iter().map(row_to_pb).collect(),
            next_page_token: String::new(),
        }))
    }

    async fn list_usage(
        &self,
        request: Request<pb::UsageQuery>,
    ) -> Result<Response<pb::UsageRows>, Status> {
        self.auth.authorize(request.metadata())?;
        let q = request.get_ref();
        let filter = filter_of(q)?;
        let size = match q.page_size {
            0 => DEFAULT_USAGE_PAGE,
            n if (1..=MAX_USAGE_PAGE).contains(&n) => n,
            n => {
                return Err(CatalogError::invalid(
                    "page_size",
                    format!("must be 1..{MAX_USAGE_PAGE} (0 = {DEFAULT_USAGE_PAGE}), got {n}"),
                )
                .into());
            }
        };
        let binding = page_token::binding("usage", &format!("{filter:?}"));
        let after = if q.page_token.is_empty() {
            None
        } else {
            let cursor = page_token::decode(&q.page_token, &binding)?;
            Some(serde_json::from_str::<Vec<String>>(&cursor.id).map_err(|_| {
                CatalogError::invalid(
                    "page_token",
                    "not a token from a previous ListUsage answer; start again without page_token",
                )
            })?)
        };
        let limit = u64::try_from(size).unwrap_or(100);
        let page = self.ledger.list(&filter, after.as_deref(), limit).await?;
        let next_page_token = page
            .next
            .map(|key| {
                let cursor = Cursor {
                    create_time_us: 0,
                    id: serde_json::to_string(&key).unwrap_or_default(),
                };
                page_token::encode(&cursor, &binding)
            })
            .unwrap_or_default();
        Ok(Response::new(pb::UsageRows {
            rows: page.rows.iter().map(row_to_pb).collect(),
            next_page_token,
        }))
    }
}

/// A tenant, pack id or pool filter: `None` when empty.
fn name(field: &str, value: &str) -> Result<Option<String>, CatalogError> {
    if value.is_empty() {
        return Ok(None);
    }
    voxpool_domain::untrusted::check_field(value, MAX_NAME_CHARS)
        .map_err(|problem| CatalogError::invalid(field, problem.to_string()))?;
    Ok(Some(value.to_owned()))
}

/// `YYYY-MM-DD`, or `None` when empty.
fn day(field: &str, value: &str) -> Result<Option<NaiveDate>, CatalogError> {
    if value.is_empty() {
        return Ok(None);
    }
    match NaiveDate::parse_from_str(value, "%Y-%m-%d") {
        Ok(d) if value.len() == 10 => Ok(Some(d)),
        _ => Err(CatalogError::invalid(
            field,
            "must be a UTC day written YYYY-MM-DD, e.g. 2026-12-01",
        )),
    }
}

/// The query as a ledger filter.
///
/// Errors: INVALID_ARGUMENT naming the field: a malformed day or month, a month given with
/// days, a range that ends before it starts, an unknown tier or group, DAY with MONTH.
pub fn filter_of(q: &pb::UsageQuery) -> Result<UsageFilter, CatalogError> {
    let tenant = match (q.tenant_is_empty, q.tenant.is_empty()) {
        (true, true) => Some(String::new()),
        (true, false) => {
            return Err(CatalogError::invalid(
                "tenant_is_empty",
                "asks for requests without a tenant: leave tenant empty with it",
            ));
        }
        (false, _) => name("tenant", &q.tenant)?,
    };
    let tier = match q.tier {
        0 => None,
        v => Some(Tier::from_pb(v).ok_or_else(|| {
            CatalogError::invalid(
                "tier",
                format!("unknown tier {v}; use LITE, STANDARD, PRO or PREMIUM"),
            )
        })?),
    };
    let (mut from, mut to) = (day("from_day", &q.from_day)?, day("to_day", &q.to_day)?);
    if !q.month.is_empty() {
        if from.is_some() || to.is_some() {
            return Err(CatalogError::invalid(
                "month",
                "is shorthand for from_day and to_day: give either the month or the days",
            ));
        }
        let first = NaiveDate::parse_from_str(&format!("{}-01", q.month), "%Y-%m-%d")
            .ok()
            .filter(|_| q.month.len() == 7)
            .ok_or_else(|| CatalogError::invalid("month", "must be YYYY-MM, e.g. 2026-12"))?;
        let next = if first.month() == 12 {
            NaiveDate::from_ymd_opt(first.year() + 1, 1, 1)
        } else {
            NaiveDate::from_ymd_opt(first.year(), first.month() + 1, 1)
        };
        from = Some(first);
        to = next.and_then(|n| n.pred_opt());
    }
    if let (Some(f), Some(t)) = (from, to)
        && t < f
    {
        return Err(CatalogError::invalid(
            "to_day",
            "ends before from_day; the range is inclusive on both days",
        ));
    }
    let mut group_by = Vec::new();
    for (i, g) in q.group_by.iter().enumerate() {
        let group = match pb::UsageGroup::try_from(*g) {
            Ok(pb::UsageGroup::Tenant) => Group::Tenant,
            Ok(pb::UsageGroup::Tier) => Group::Tier,
            Ok(pb::UsageGroup::Pack) => Group::Pack,
            Ok(pb::UsageGroup::Pool) => Group::Pool,
            Ok(pb::UsageGroup::Day) => Group::Day,
            Ok(pb::UsageGroup::Month) => Group::Month,
            Ok(pb::UsageGroup::Unspecified) | Err(_) => {
                return Err(CatalogError::invalid(
                    format!("group_by[{i}]"),
                    "use TENANT, TIER, PACK, POOL, DAY or MONTH",
                ));
            }
        };
        if !group_by.contains(&group) {
            group_by.push(group);
        }
    }
    if group_by.contains(&Group::Day) && group_by.contains(&Group::Month) {
        return Err(CatalogError::invalid(
            "group_by",
            "DAY and MONTH exclude each other: group by one of them",
        ));
    }
    if group_by.is_empty() {
        group_by = vec![
            Group::Tenant,
            Group::Tier,
            Group::Pack,
            Group::Pool,
            Group::Day,
        ];
    }
    group_by.sort();
    Ok(UsageFilter {
        tenant,
        tier,
        pack_id: name("pack_id", &q.pack_id)?,
        pool: name("pool", &q.pool)?,
        from_day: from.map(|d| d.format("%Y-%m-%d").to_string()),
        to_day: to.map(|d| d.format("%Y-%m-%d").to_string()),
        group_by,
    })
}

fn tier_to_pb(t: Option<Tier>) -> i32 {
    (match t {
        None => pb::Tier::Unspecified,
        Some(Tier::Lite) => pb::Tier::Lite,
        Some(Tier::Standard) => pb::Tier::Standard,
        Some(Tier::Pro) => pb::Tier::Pro,
        Some(Tier::Premium) => pb::Tier::Premium,
    }) as i32
}

/// A ledger row on the wire (cost in currency units).
pub fn row_to_pb(r: &UsageRow) -> pb::UsageRow {
    pb::UsageRow {
        tenant: r.tenant.clone(),
        tier: tier_to_pb(r.tier),
        pack_id: r.pack_id.clone(),
        pool: r.pool.clone(),
        day: r.day.clone(),
        requests: r.requests,
        refused_requests: r.refused_requests,
        characters: r.characters,
        billed_characters: r.billed_characters,
        cached_characters: r.cached_characters,
        audio_ms: r.audio_ms,
        cost: r.cost_micros as f64 / 1_000_000.0,
        currency: r.currency.clone(),
        gpu_ms: r.gpu_ms,
        failed_attempts: r.failed_attempts,
        unsettled_characters: r.unsettled_characters,
        unsettled_cost: r.unsettled_cost_micros as f64 / 1_000_000.0,
    }
}
