//! The voxpool synthesis service: a frozen voice snapshot and text in, audio out, through
//! leased vendor keys with failover.
//!
//! A request names its voice (a snapshot, its card JSON, or a pack id the catalog freezes);
//! the snapshot's `ttsModelId` picks the pool. Everything that can be refused is refused before
//! a lease is taken ([`job::prepare`]; invariant 8 of docs/ARCHITECTURE.md: a param the vendor cannot apply fails the
//! request with its name). The text is split at sentence boundaries to the vendor's limit
//! ([`text`]); up to `max_parallel_chunks` chunks at once ([`job::chunks`]) each lease a key
//! from the scheduler, call the vendor with that key's credential (audio passed on as the
//! vendor streams it), report the outcome and release ([`job::failover`], [`job::attempt`],
//! [`lease`]); retryable outcomes before any audio went out fail over to other keys of the same
//! pool with the same snapshot (invariant 9). The pieces are joined into one output in text
//! order ([`audio`]).
//!
//! Modules, from the edge in:
//! - [`service`] / [`stream`]: the gRPC service (unary and streaming), and [`convert`]: the
//!   one place a request's protobuf becomes the domain [`job::Request`] and results go back.
//! - [`front`]: the OpenAI-compatible HTTP front (`--http-listen`), beside the gRPC edge: the
//!   same job path as `SynthesizeStream` ([`job::delivery`]), OpenAI's body and error shapes
//!   (mapped from the domain error, [`error`]), callers known by API key.
//! - [`job`]: a job's life, owned by [`job::Core`] and its methods: [`job::prepare`]
//!   (validation into a [`job::Job`]), [`job::chunks`] (chunks side by side, emitted in order),
//!   [`job::failover`] / [`job::attempt`] (per-chunk failover and one leased vendor call, its
//!   audio streamed on as the vendor sends it), [`job::delivery`] (a job's audio to a caller
//!   as it is produced, in pieces, with the stalled-reader cut-off; both fronts read it). No
//!   prost type below the edge.
//! - [`lease`] / [`catalog`]: the scheduler and catalog clients, each converting to and from
//!   protobuf at its own edge; the lease client decides "retry or not" from typed reasons.
//! - [`adapters`]: the `VendorAdapter` trait and the [`adapters::Utterance`] one vendor call
//!   speaks (also the cache's identity of its audio), the cloud adapters' one skeleton
//!   ([`adapters::cloud`]), the espeak-ng adapter and the registry.
//! - [`cache`]: the audio cache (entries by content in the blob store); its call path is
//!   [`job::cached`] (hits without a lease, single-flight fills across replicas).
//! - [`references`]: reference clips fetched by digest from the blob store, checked, cached.
//! - [`pools`]: the config's pools with resolved credentials (and the credential policy).
//! - [`text`] / [`audio`]: text splitting and audio validation / joining.
//! - [`record`] / [`deadline`]: one attempt's record, a request's time budget.
//! - [`error`]: the error enum, its classification (read by both fronts) and its one mapping
//!   to `tonic::Status`.
//! - [`metrics`]: OpenTelemetry instruments (requests, vendor attempts).
//! - [`admin`]: `SynthesisAdmin` (cache purge and stats, behind the admin token).
//! - [`clones`]: the clone worker, which runs the vendor steps of managed voice clones that
//!   it claims from the catalog's `CloneWork`.
//! - [`server`]: wiring for the binary and the tests.

pub mod adapters;
pub mod admin;
pub mod cache;
pub mod catalog;
pub mod clones;
pub mod convert;
pub mod deadline;
pub mod error;
pub mod front;
pub mod job;
pub mod lease;
pub mod metrics;
pub mod pools;
pub mod record;
pub mod references;
pub mod server;
pub mod service;
pub mod stream;
pub mod usage;

pub use voxpool_domain::{audio, text};
