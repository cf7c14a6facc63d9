//! Rule: types and pure functions that two or more processes must agree on; no sockets, no servers.
//!
//! - [`contract`]: outcomes and error reasons shared by the scheduler and its clients.
//! - [`status`]: `tonic::Status` builders that attach `google.rpc` error details (the other
//!   half of [`contract`]: what a server sends and a client reads back).
//! - [`provider`]: the provider ids as one enum.
//! - [`snapshot`]: the frozen voice-pack snapshot, its card JSON form and its digest.
//! - [`reference`]: reference clips as snapshots freeze them, and picking one per request.
//! - [`secret`]: a string that never prints (vendor credentials, the admin token).
//! - [`untrusted`]: caller strings bounded and escaped for messages, logs and labels.
//! - [`audio`]: audio formats, the one sniffer, WAV reader/writer and joiner, reference-clip
//!   inspection.
//! - [`text`]: the one sentence splitter (synthesis chunks, voxctl parts).
//! - [`usage`]: usage records as synthesis writes them and the catalog's ledger reads them,
//!   and each provider's character billing rule.

pub mod audio;
pub mod contract;
pub mod item;
pub mod provider;
pub mod reference;
pub mod secret;
pub mod snapshot;
pub mod status;
pub mod text;
pub mod untrusted;
pub mod usage;
