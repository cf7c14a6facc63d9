//! `voxctl usage`: the usage ledger's totals from the catalog.

use clap::{Args, ValueEnum};

use super::{DEFAULT_CATALOG, ops::AdminToken};

/// `voxctl usage [--tenant T] [--by tier|pack|pool|day] [--month YYYY-MM] [--json]`.
#[derive(Debug, Args)]
pub struct UsageArgs {
    /// Catalog URL (the catalog serves the ledger when started with --usage-store).
    #[arg(long, env = "VOXPOOL_CATALOG", default_value = DEFAULT_CATALOG)]
    pub catalog: String,
    /// Admin bearer token (the Usage service is admin-only).
    #[command(flatten)]
    pub admin: AdminToken,
    /// Only this tenant (`--tenant ''`: requests without a tenant).
    #[arg(long)]
    pub tenant: Option<String>,
    /// Rows per tenant and this dimension (default: per tenant).
    #[arg(long, value_enum)]
    pub by: Option<UsageByArg>,
    /// Only this UTC month, `YYYY-MM` (e.g. 2026-12).
    #[arg(long)]
    pub month: Option<String>,
    /// Print the rows as JSON (one array) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// What `voxctl usage --by` splits each tenant's rows by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum UsageByArg {
    /// The pack's tier.
    Tier,
    /// The pack.
    Pack,
    /// The pool.
    Pool,
    /// The UTC day.
    Day,
}
