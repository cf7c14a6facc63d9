//! The usage ledger: what synthesis spoke, per tenant × tier × pack × pool × UTC day ×
//! currency, read from the usage stream and kept beside the packs (the billing entity) in the
//! catalog's database (docs/OPERATIONS.md#usage-ledger).
//!
//! - [`consumer`]: the stream consumer (a consumer group on
//!   [`voxpool_domain::usage::USAGE_STREAM`], batches, claiming a dead consumer's entries,
//!   trimming what the group acknowledged) and the periodic sweep and retention.
//! - [`store`]: the ledger's tables (`usage_events`, `usage_counted`, `usage_daily`): a batch
//!   applied in one transaction, exactly once by primary keys; the sweep of unsettled
//!   charges; retention of raw records.
//! - [`read`]: grouped, filtered, paged totals for the `Usage` service.
//! - [`Ledger`]: the one facade the `Usage` service calls (no protobuf below it).
//!
//! Counting rules (each applied once, whatever is delivered twice):
//! - an attempt's characters, billed characters, GPU time and cost count from its Settle;
//!   a Charge nobody settles within the grace is counted as charged by the sweep (the
//!   synthesis replica died mid-call and the vendor did the work); a Settle arriving after
//!   that sweep adds the difference between what was charged and what was settled;
//! - what the sweep counted is also kept as unsettled characters and cost until a late
//!   Settle takes it back out: the true figure lies between characters − unsettled and
//!   characters (the vendor may never have received a swept charge's text);
//! - a request counts once, from its Done or (killed before its end) from its first swept
//!   Charge; audio, cached characters, cached cost and failed attempts come from the Done
//!   only (a Settle's audio is kept in the raw record, never added twice);
//! - a request also counts as refused, from its Done, when it ended without its audio, served
//!   nothing from the cache, had no failed attempt and no Charge of it is stored: no vendor
//!   was sent its text (a budget or key quota refused it, no key was free, its caller left
//!   while it waited);
//! - totals are kept and summed per currency (`[usage] currency` when synthesis priced the
//!   request): a change of currency starts new rows, never adds to the old ones.

pub mod consumer;
pub mod entry;
pub mod metrics;
pub mod read;
pub(crate) mod sql;
pub mod store;

use std::sync::{Arc, OnceLock};

use voxpool_domain::snapshot::Tier;

use crate::error::CatalogError;
pub use sql::day_of;
pub use store::UsageStore;

/// A dimension rows are grouped by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Group {
    /// Per tenant.
    Tenant,
    /// Per pack tier.
    Tier,
    /// Per pack.
    Pack,
    /// Per pool.
    Pool,
    /// Per UTC day.
    Day,
    /// Per UTC month (the row's `day` is `YYYY-MM`).
    Month,
}

/// What to read from the ledger (validated at the edge).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsageFilter {
    /// One tenant (`Some("")` = requests without a tenant); `None` = every tenant.
    pub tenant: Option<String>,
    /// One tier; `None` = every tier.
    pub tier: Option<Tier>,
    /// One pack.
    pub pack_id: Option<String>,
    /// One pool.
    pub pool: Option<String>,
    /// First UTC day, `YYYY-MM-DD`, inclusive.
    pub from_day: Option<String>,
    /// Last UTC day, `YYYY-MM-DD`, inclusive.
    pub to_day: Option<String>,
    /// Dimensions grouped by, sorted and without repeats (never empty: the edge fills in the
    /// default).
    pub group_by: Vec<Group>,
}

/// Usage summed over one group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsageRow {
    /// Tenant, or empty when not grouped by tenant.
    pub tenant: String,
    /// Tier when grouped by tier and the pack had one.
    pub tier: Option<Tier>,
    /// Pack, or empty.
    pub pack_id: String,
    /// Pool, or empty.
    pub pool: String,
    /// `YYYY-MM-DD`, `YYYY-MM`, or empty.
    pub day: String,
    /// Requests (every request that reached metering, refused ones included).
    pub requests: i64,
    /// Of `requests`: ended without audio before any vendor was sent their text.
    pub refused_requests: i64,
    /// Vendor characters.
    pub characters: i64,
    /// Characters vendors said they billed.
    pub billed_characters: i64,
    /// Characters served from the audio cache.
    pub cached_characters: i64,
    /// Audio delivered, ms.
    pub audio_ms: i64,
    /// Server time, ms.
    pub gpu_ms: i64,
    /// Cost in millionths of `currency`.
    pub cost_micros: i64,
    /// Failed vendor attempts.
    pub failed_attempts: i64,
    /// ISO 4217 code of every cost on the row (always grouped by: one row per currency).
    pub currency: String,
    /// Of `characters`: counted from charges the sweep found unsettled (the synthesis
    /// replica stopped before the vendor answered; the vendor may never have received them).
    pub unsettled_characters: i64,
    /// Of `cost_micros`: the cost of those charges.
    pub unsettled_cost_micros: i64,
}

impl UsageRow {
    /// The row's position in the listing order: its grouped dimensions, then its currency.
    pub fn key(&self) -> Vec<String> {
        vec![
            self.tenant.clone(),
            self.tier.map(|t| t.as_str().to_owned()).unwrap_or_default(),
            self.pack_id.clone(),
            self.pool.clone(),
            self.day.clone(),
            self.currency.clone(),
        ]
    }
}

/// One page of rows.
#[derive(Clone, Debug, Default)]
pub struct UsagePage {
    /// The rows.
    pub rows: Vec<UsageRow>,
    /// Where the next page starts (the last row's key), `None` on the last page.
    pub next: Option<Vec<String>>,
}

/// Most rows GetUsage answers; more is FAILED_PRECONDITION pointing to ListUsage.
pub const MAX_GET_ROWS: u64 = 10_000;

/// The ledger as the `Usage` service sees it: not served (no `--usage-store`), not open yet,
/// or open. Cheap to clone.
#[derive(Clone, Default)]
pub struct Ledger {
    served: bool,
    store: Arc<OnceLock<UsageStore>>,
}

impl Ledger {
    /// A catalog without `--usage-store`: every read is [`CatalogError::UsageUnavailable`].
    pub fn not_served() -> Self {
        Self::default()
    }

    /// A ledger whose store is put in place by [`Ledger::ready`] once the database is open.
    pub fn pending() -> Self {
        Self {
            served: true,
            store: Arc::new(OnceLock::new()),
        }
    }

    /// A ledger over an open store.
    pub fn open(store: UsageStore) -> Self {
        let ledger = Self::pending();
        ledger.ready(store);
        ledger
    }

    /// Puts the open store in place (once).
    pub fn ready(&self, store: UsageStore) {
        let _ = self.store.set(store);
    }

    /// The open store, `None` until the database is open (or when not served).
    pub fn store_ready(&self) -> Option<UsageStore> {
        self.store.get().cloned()
    }

    fn store(&self) -> Result<&UsageStore, CatalogError> {
        if !self.served {
            return Err(CatalogError::UsageUnavailable {
                why: "this catalog serves no usage ledger: start it with --usage-store \
                      (VOXPOOL_USAGE_STORE), the Redis synthesis writes usage records to"
                    .to_owned(),
            });
        }
        self.store
            .get()
            .ok_or_else(|| CatalogError::UsageUnavailable {
                why: "the usage ledger's database is not open yet; retry after the RetryInfo delay"
                    .to_owned(),
            })
    }

    /// Every row `filter` matches, at most [`MAX_GET_ROWS`].
    ///
    /// Errors: UsageUnavailable, UsageTooManyRows, database errors.
    pub async fn get(&self, filter: &UsageFilter) -> Result<Vec<UsageRow>, CatalogError> {
        let rows = self.store()?.rows(filter, None, MAX_GET_ROWS + 1).await?;
        if rows.len() as u64 > MAX_GET_ROWS {
            return Err(CatalogError::UsageTooManyRows {
                limit: MAX_GET_ROWS,
            });
        }
        Ok(rows)
    }

    /// Up to `limit` rows after `after` (a previous page's last key).
    ///
    /// Errors: UsageUnavailable, database errors.
    pub async fn list(
        &self,
        filter: &UsageFilter,
        after: Option<&[String]>,
        limit: u64,
    ) -> Result<UsagePage, CatalogError> {
        let mut rows = self.store()?.rows(filter, after, limit + 1).await?;
        let next = if rows.len() as u64 > limit {
            rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
            rows.last().map(UsageRow::key)
        } else {
            None
        };
        Ok(UsagePage { rows, next })
    }
}
