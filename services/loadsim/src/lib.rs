//! Pool simulation (`benches/poolsim.rs`, run by `make bench`): how much of a pool's
//! concurrency each key-picking strategy really uses, and what the vendor sees while it does.
//!
//! Every strategy drives the same fake OpenAI-compatible vendor
//! ([`voxpool_fake_vendors`]: per-key concurrency cap answered with 429, log-normal service
//! time) over real loopback HTTP; they differ only in how a client picks a key
//! ([`strategy`]):
//! - **voxpool**: Acquire from one of R in-process scheduler replicas sharing one Redis, call
//!   the vendor with the leased key, Report + release.
//! - **rotation**: each replica walks the keys round-robin in a fixed order and fails over to
//!   the next key on 429 (no shared state).
//! - **local least-busy**: each replica counts its own in-flight per key and picks the lowest
//!   (no shared state, so R replicas oversell up to R × cap per key).
//!
//! [`run::run`] drives M closed-loop clients spread over the R replicas for a measured window
//! and reads the vendor's own counters (429s answered, peak concurrency per key, requests per
//! key); [`report`] turns that into the markdown table. Sizes come from the environment
//! ([`config::SimConfig::from_env`]).
//!
//! This crate guards nothing by itself; it measures invariant 1 of docs/ARCHITECTURE.md (never oversell: 0 vendor 429s,
//! peak ≤ cap) and invariant 2 (least utilization first: spread at half load) under load.

pub mod config;
pub mod report;
pub mod run;
pub mod strategy;
pub mod vendor;
