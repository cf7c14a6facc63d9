//! One conformance suite, run through gRPC against every lease store: `memory::*`, `redis::*`
//! (a private real redis-server per test), `sentinel::*` (a real Sentinel setup: primary,
//! replica, three sentinels; grants wait for the replica's acknowledgement) and `cluster::*`
//! (a real 3-primary Redis Cluster with a replica per primary). Each test names the behaviour
//! it checks; together they try to break invariants 1-6 and 12 of docs/ARCHITECTURE.md.
//!
//! One file per area (`leases`, `waiting`, `classes`, `cooldown`, `adaptive`, `quota`,
//! `recovery`, `ids`, `input`, `fill`, `budgets`); each lists its tests in [`conformance!`], which runs every one
//! on every backend (`<area>::<backend>::<test>`). Requests are built with [`req`].

#[path = "../common/mod.rs"]
mod common;
mod req;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use common::{Backend, Harness, admin, pool_toml, start, start_with, uniform_pool};
use req::{AcquireExt, RenewExt, ReportExt};
use tonic::Code;
use tonic_types::StatusExt;
use voxpool_proto::scheduler::v1::{self as pb, KeyState, Outcome};

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() { super::$name(super::Backend::Memory).await }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() { super::$name(super::Backend::Redis).await }
            )*
        }
        mod sentinel {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() { super::$name(super::Backend::Sentinel).await }
            )*
        }
        mod cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() { super::$name(super::Backend::Cluster).await }
            )*
        }
    };
}

mod adaptive;
mod budgets;
mod classes;
mod cooldown;
mod fill;
mod ids;
mod input;
mod leases;
mod quota;
mod recovery;
mod waiting;

/// A well-formed lease id on `key` of `pool` that no scheduler signed.
fn made_up_id(pool: &str, key: &str) -> String {
    format!(
        "{pool}/{key}/{:032x}.1764640000000.{:032x}",
        rand::random::<u128>(),
        rand::random::<u128>()
    )
}

fn idempotent(pool: &str, key: &str) -> pb::AcquireRequest {
    req::acquire(pool).idempotency_key(key)
}

fn _assert_harness_is_send(h: Harness) -> impl Send {
    h
}
