//! Rule: what every binary needs to serve or call gRPC and to reach the blob store; nothing the processes must agree on.
//!
//! Types and reasons the processes agree on live in `voxpool-domain`, the pools file in
//! `voxpool-config`; this crate builds on both.
//!
//! - [`allocator`]: the servers' allocator told to return freed memory promptly.
//! - [`serve`]: binding, health, reflection and graceful shutdown shared by every binary.
//! - [`conn`]: connection limits every listener shares (head, idle and body timeouts, cap).
//! - [`limits`]: request timeout, message size, load shedding and TLS flags for servers.
//! - [`tls`]: the gRPC listeners' TLS handshakes (a refused client certificate reaches its client).
//! - [`auth`]: admin bearer token; data-plane callers by client token or certificate.
//! - [`telemetry`]: `tracing` setup (pretty or JSON logs, `RUST_LOG` filter), OTLP export.
//! - [`startup`]: waiting for a dependency at start-up (capped exponential back-off).
//! - [`endpoints`]: client-side balancing over a service's replicas (`URL[,URL...]`, DNS).
//! - [`blob`]: the one blob store audio lives in (`--blob-store URL`: local, S3, GCS, Azure).

pub mod allocator;
pub mod auth;
pub mod blob;
pub mod conn;
mod duration;
pub mod endpoints;
pub mod limits;
pub mod serve;
pub mod startup;
pub mod telemetry;
pub mod tls;
