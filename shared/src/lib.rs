//! Common crate of the voxpool services.
//!
//! - [`contract`]: outcomes and error reasons shared by the scheduler and its clients.
//! - [`endpoints`]: client-side balancing over a service's replicas (`URL[,URL...]`, DNS).
//! - [`config`]: the pools file (TOML + `VOXPOOL_` environment), validated with path-named errors.
//! - [`limits`]: request timeout, message size, load shedding and TLS flags for servers.
//! - [`provider`]: the provider ids as one enum.
//! - [`secret`]: a string that never prints (vendor credentials, the admin token).
//! - [`audio`]: audio formats, the one sniffer, WAV reader/writer and joiner.
//! - [`auth`]: admin bearer token; data-plane callers by client token or certificate.
//! - [`status`]: `tonic::Status` builders that attach `google.rpc` error details.
//! - [`serve`]: binding, health, reflection and graceful shutdown shared by every binary.
//! - [`startup`]: waiting for a dependency at start-up (capped exponential back-off).
//! - [`snapshot`]: the frozen voice-pack snapshot, its card JSON form and its digest.
//! - [`untrusted`]: caller strings bounded and escaped for messages, logs and labels.
//! - [`text`]: the one sentence splitter (synthesis chunks, voxctl parts).
//! - [`telemetry`]: `tracing` setup (pretty or JSON logs, `RUST_LOG` filter).
//! - `testing` (feature `testing`): real `redis-server` processes for tests.

pub mod audio;
pub mod auth;
pub mod config;
pub mod contract;
pub mod endpoints;
pub mod limits;
pub mod provider;
pub mod secret;
pub mod serve;
pub mod snapshot;
pub mod startup;
pub mod status;
pub mod telemetry;
pub mod text;
pub mod untrusted;

#[cfg(feature = "testing")]
pub mod testing;
