//! The voxpool voice catalog: voice packs, frozen snapshots and card binding.
//!
//! A *voice pack* is provider + model + voice + prosody overrides + tier, pinned to a tts
//! model id (a scheduler pool). Apps freeze a pack into an immutable, digest-sealed
//! *snapshot* and store it in a character card; editing or disabling the pack later never
//! changes a snapshot already frozen (docs/ARCHITECTURE.md invariant 7).
//!
//! Modules:
//! - [`model`]: domain types (pack content, stored pack, revisions).
//! - [`validate`], [`mask`], [`filter`], [`page_token`]: request rules at the gRPC edge.
//! - [`identity`]: the fingerprint that makes "same voice, same params" one pack.
//! - [`freeze`], [`card`]: snapshots and binding them into card JSON.
//! - [`reference`]: reference clips (AddReference rules, their bytes in the blob store).
//! - [`clones`]: managed voice clones per pack and clone scope, and the leased vendor steps
//!   synthesis replicas run for them.
//! - [`clip_gate`]: at most a few AddReference uploads decoded at once (bounded memory).
//! - [`repo`]: the `PackRepository` trait and its sea-orm implementation (SQLite, PostgreSQL).
//! - [`service`]: the `VoiceCatalog` and `VoiceCatalogAdmin` gRPC services.
//! - [`db`]: connecting (pool settings, redacted DSNs) and migrating.
//! - [`pools`]: the configured pools (`--config`), so a pack no pool serves is refused.
//! - [`seed`]: loading packs from a TOML/JSON seed file, idempotent by identity.
//! - [`server`]: wiring for the binary and the tests (health, reflection, shutdown).
//! - [`usage`]: the usage ledger (stream consumer, daily totals, the `Usage` service's reads).
//! - [`error`]: the error enum and its exhaustive mapping to `tonic::Status`.

#![warn(missing_docs)]

pub mod card;
pub mod clip_gate;
pub mod clones;
pub mod convert;
pub mod db;
pub mod error;
pub mod filter;
pub mod freeze;
pub mod identity;
pub mod mask;
pub mod model;
pub mod page_token;
pub mod pools;
pub mod reference;
pub mod repo;
pub mod seed;
pub mod server;
pub mod service;
pub mod usage;
pub mod validate;
