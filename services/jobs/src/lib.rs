//! `voxpool-jobs`: durable batch synthesis jobs (`voxpool.jobs.v1.Jobs`).
//!
//! A job's record and items live in Redis ([`store`]), its items on a stream with a consumer
//! group; every replica serves the API ([`service`]: the gRPC edge, [`convert`] proto ⇄
//! domain, [`error`] the one error enum and its mapping) over one facade ([`domain::Jobs`]),
//! wired by [`server`], and runs workers ([`worker`]) that call
//! Synthesis like any client ([`synth`]) and write each item's audio to the blob store
//! ([`results`]); after a job ends, one replica writes its summary ([`finalize`]) and, apart
//! from it, one with the webhook secret delivers its webhook ([`deliveries`], [`webhook`]).
//!
//! Invariants (docs/JOBS.md): no job state lives only in one replica's memory; an item ends
//! once (its state and the job's counts move together in one script), and an item whose audio
//! is written is not synthesized again; a replica that dies loses nothing: what it held is
//! reclaimed after the visibility timeout.

pub mod convert;
pub mod deliveries;
pub mod domain;
pub mod egress;
pub mod error;
pub mod finalize;
pub mod metrics;
pub mod model;
pub mod results;
pub mod server;
pub mod service;
pub mod store;
pub mod synth;
pub mod usage;
pub mod webhook;
pub mod worker;
