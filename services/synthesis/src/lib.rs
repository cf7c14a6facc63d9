//! The voxpool synthesis service: a frozen voice snapshot and text in, audio out, through
//! leased vendor keys with failover.
//!
//! A request names its voice (a snapshot, its card JSON, or a pack id the catalog freezes);
//! the snapshot's `ttsModelId` picks the pool. Everything that can be refused is refused before
//! a lease is taken ([`request`]; invariant 8: a param the vendor cannot apply fails the request
//! with its name). The text is split at sentence boundaries to the vendor's limit ([`text`]);
//! each chunk leases a key from the scheduler, calls the vendor with that key's credential,
//! reports the outcome and releases ([`failover`], [`attempt`], [`lease`]); retryable outcomes
//! fail over to other keys of the same pool with the same snapshot (invariant 9). The pieces are
//! joined into one output ([`audio`]).
//!
//! Modules:
//! - [`service`] / [`stream`]: the gRPC service (unary and streaming).
//! - [`request`]: request validation into a [`core::Job`].
//! - [`failover`] / [`attempt`]: per-chunk failover and one leased vendor call.
//! - [`lease`] / [`catalog`]: the scheduler and catalog clients.
//! - [`pools`]: the config's pools with resolved credentials (and the credential policy).
//! - [`text`] / [`audio`]: text splitting and audio validation / joining.
//! - [`vendor`]: the `VendorAdapter` trait, the espeak-ng adapter and the registry.
//! - [`error`]: the error enum and its one mapping to `tonic::Status`.
//! - [`metrics`]: OpenTelemetry instruments (requests, vendor attempts).
//! - [`server`]: wiring for the binary and the tests.

pub mod attempt;
pub mod catalog;
pub mod core;
pub mod deadline;
pub mod error;
pub mod failover;
pub mod lease;
pub mod metrics;
pub mod pools;
pub mod record;
pub mod request;
pub mod server;
pub mod service;
pub mod stream;
pub mod vendor;

pub use voxpool_shared::{audio, text};
