//! The voxpool pool scheduler: leases on TTS vendor keys.
//!
//! A *pool* is the set of keys (vendor app ids) serving one TTS model; each key has a
//! *capacity* (the vendor's concurrency cap). [`PoolScheduler`](service::SchedulerService)
//! hands out *leases*, picking the available key with the lowest *utilization*
//! (in-flight / capacity) and never exceeding a key's capacity, across every replica that
//! shares one [`LeaseStore`](store::LeaseStore).
//!
//! Modules:
//! - [`model`]: domain types (keys, leases, outcomes, key states, pool status).
//! - [`store`]: the `LeaseStore` trait and its two backends (in-process memory; Redis + Lua on
//!   one server, Sentinel or Cluster), recovery after the store loses data, and fill locks
//!   (`store::fill`: single-flight locks on content keys, for synthesis' audio cache).
//! - [`domain`]: the one entry every RPC goes through ([`domain::Scheduler`]), holding the one
//!   pool table: how an Acquire becomes a lease ([`domain::admission`]: FIFO waiting,
//!   undo-on-cancel, waiting out a recovery window), Release, Report, Renew, status, the admin
//!   calls, re-seeding a pool the store lost, and waiting for fill locks ([`domain::fill`])
//!   (domain types only).
//! - [`service`]: the gRPC edge: thin handlers over request validation and the domain.
//! - [`signing`]: lease ids as capabilities: the signed id callers hold, its MAC, the fleet's
//!   lease secret (configured, or kept in the store).
//! - [`convert`]: domain types to and from their protobuf forms.
//! - [`metrics`]: OpenTelemetry instruments (per-key in-flight, utilization, acquires, cooldowns).
//! - [`error`]: the service error enum and its exhaustive mapping to `tonic::Status`.
//! - [`server`]: wiring used by the binary and by tests (config -> store -> gRPC server).

pub mod convert;
pub mod domain;
pub mod error;
pub mod metrics;
pub mod model;
pub mod server;
pub mod service;
pub mod signing;
pub mod store;
mod waiters;
