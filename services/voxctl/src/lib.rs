//! voxctl: voxpool's command-line client.
//!
//! The heart is [`batch`]: a JSON Lines manifest in, one audio file per item out, with a
//! durable checkpoint for resume ([`checkpoint`]), retries of retryable failures only
//! ([`retry`], [`call`]), a client-side circuit breaker ([`breaker`]), a client-side rate limit,
//! splitting (`voxpool_domain::text`, the same splitter synthesis uses) and joining of long items ([`join`]), atomic file writes ([`output`]),
//! progress ([`progress`]) and a report ([`report`]). [`ops`] holds the operator commands and
//! `voxctl job` (durable jobs on `voxpool-jobs`, [`ops::job`]);
//! [`app`] maps the command line onto them.

#![warn(missing_docs)]

pub mod app;
pub mod batch;
pub mod breaker;
pub mod call;
pub mod checkpoint;
pub mod cli;
pub mod connect;
pub mod console;
pub mod format;
pub mod join;
pub mod manifest;
pub mod ops;
pub mod output;
pub mod progress;
pub mod report;
pub mod request;
pub mod retry;
pub mod shutdown;
pub mod stats;
