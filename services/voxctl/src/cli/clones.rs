//! `voxctl pack clone|clones|import`: a managed clone pack's vendor clones per clone scope
//! (the catalog's CloneVoice, ListClones, DeleteClone and ImportClones; admin token).

use clap::Args;

use super::non_empty;

/// Most scopes one CloneVoice names, as the catalog accepts.
const MAX_SCOPES: u32 = 64;

/// `voxctl pack clone PACK_ID [--scope S]... [--max-scopes N] [--json]`.
#[derive(Debug, Args)]
#[command(override_usage = "voxctl pack clone <PACK> [--scope <SCOPE>]... \
    [--max-scopes <MAX_SCOPES>] [--json] [--catalog <CATALOG>] [--admin-token <ADMIN_TOKEN>]")]
pub struct CloneArgs {
    /// The managed clone pack (kind CLONED with reference clips, no voice id, no upstream ids).
    #[arg(value_parser = non_empty)]
    pub pack: String,
    /// A clone scope to clone into: an upstream id, or `upstream/key` where each key is its own
    /// scope (Volcengine); repeatable. Without it the catalog picks scopes with free slots.
    #[arg(long = "scope", value_name = "SCOPE", value_parser = non_empty)]
    pub scopes: Vec<String>,
    /// Most scopes the pack is cloned into at once; stored as the pack's setting (default:
    /// keep it; a new pack's is 1).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_SCOPES)))]
    pub max_scopes: Option<u32>,
    /// Print the pack's clones as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `voxctl pack clones PACK_ID [--delete SCOPE] [--json]`.
#[derive(Debug, Args)]
#[command(
    override_usage = "voxctl pack clones <PACK> [--delete <SCOPE>] [--json] \
    [--catalog <CATALOG>] [--admin-token <ADMIN_TOKEN>]"
)]
pub struct ClonesArgs {
    /// The pack.
    #[arg(value_parser = non_empty)]
    pub pack: String,
    /// Delete the pack's clone in this scope: the vendor's copy is deleted by a synthesis
    /// replica (freeing the slot where the vendor allows), a clone the vendor never made goes
    /// at once.
    #[arg(long, value_name = "SCOPE", value_parser = non_empty)]
    pub delete: Option<String>,
    /// Print the pack's clones as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `voxctl pack import --pool POOL [--scope S] [--json]`.
#[derive(Debug, Args)]
#[command(
    override_usage = "voxctl pack import --pool <POOL> [--scope <SCOPE>] [--json] \
    [--catalog <CATALOG>] [--admin-token <ADMIN_TOKEN>]"
)]
pub struct ImportArgs {
    /// The pool whose clone scopes are read.
    #[arg(long, value_parser = non_empty)]
    pub pool: String,
    /// One clone scope of the pool; default every clone scope of it.
    #[arg(long, value_parser = non_empty)]
    pub scope: Option<String>,
    /// Print the imports as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}
