//! Property test: random Acquire / Release / Renew / Report / clock-advance sequences run
//! against each store and against a plain model; after every step the store must agree with
//! the model (in-flight per key, key state, which keys could have been picked, whether a
//! lease was live).
//!
//! Times: every TTL, cooldown and advance is a multiple of 500 ms, so the few real
//! milliseconds a case takes never move a lease or cooldown across a boundary.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc, OnceLock,
        atomic::{AtomicUsize, Ordering},
    },
};

use proptest::prelude::*;
use voxpool_scheduler::{
    model::{
        AcquireParams, AcquireResult, HealthPolicy, KeySpec, KeyState, LeaseId, LeaseToken,
        Outcome, PoolSpec, Priority, Refusal, ReportParams,
    },
    store::{
        LeaseStore,
        memory::MemoryStore,
        redis::{RedisOptions, RedisStore},
    },
};
use voxpool_testkit::{RedisCluster, RedisSentinel, RedisServer};

const KEYS: [(&str, u32); 3] = [("u0/k0", 1), ("u0/k1", 2), ("u1/k0", 3)];
const POLICY: HealthPolicy = HealthPolicy {
    rate_limit_cooldown_ms: 1_000,
    failure_threshold: 2,
    failure_backoff_base_ms: 1_000,
    failure_backoff_max_ms: 4_000,
    credential_cooldown_ms: 5_000,
    adaptive_decrease: 0.5,
    adaptive_hold_ms: 0,
    adaptive_increase_ms: 2_000,
    adaptive_increase_max_ms: 8_000,
};

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        exclude: [bool; 3],
        ttl: i64,
    },
    Release(usize),
    Renew(usize, i64),
    Report {
        lease: usize,
        outcome: Outcome,
        retry_after: i64,
        release: bool,
    },
    Advance(i64),
}

fn op() -> impl Strategy<Value = Op> {
    let ttl = prop_oneof![Just(1_000i64), Just(2_000), Just(3_000)];
    let outcome = prop_oneof![
        Just(Outcome::Success),
        Just(Outcome::RateLimited),
        Just(Outcome::UpstreamError),
        Just(Outcome::Timeout),
        Just(Outcome::KeyInvalid),
        Just(Outcome::QuotaExhausted),
        Just(Outcome::ClientError),
    ];
    prop_oneof![
        4 => (any::<[bool; 3]>(), ttl.clone()).prop_map(|(exclude, ttl)| Op::Acquire { exclude, ttl }),
        2 => (0usize..16).prop_map(Op::Release),
        1 => (0usize..16, ttl).prop_map(|(i, t)| Op::Renew(i, t)),
        2 => (0usize..16, outcome, prop_oneof![Just(0i64), Just(500), Just(1_500)], any::<bool>())
            .prop_map(|(lease, outcome, retry_after, release)| Op::Report { lease, outcome, retry_after, release }),
        2 => prop_oneof![Just(500i64), Just(1_000), Just(1_500)].prop_map(Op::Advance),
    ]
}

#[derive(Clone, Debug, Default)]
struct MKey {
    cap: u32,
    in_flight: u32,
    cool_until: i64,
    credential: bool,
    failures: u32,
}

#[derive(Debug)]
struct Model {
    now: i64,
    keys: BTreeMap<String, MKey>,
    /// lease index -> (id, key, expiry); removed when released or reaped
    leases: HashMap<usize, (LeaseId, String, i64)>,
    ids: Vec<LeaseId>,
    /// Leases reported on (an outcome counts once per lease).
    reported: std::collections::HashSet<usize>,
}

impl Model {
    fn reap(&mut self) {
        let now = self.now;
        let keys = &mut self.keys;
        self.leases.retain(|_, (_, key, exp)| {
            if *exp > now {
                return true;
            }
            keys.get_mut(key).unwrap().in_flight -= 1;
            false
        });
    }

    fn state(&self, k: &MKey) -> KeyState {
        if k.cool_until > self.now {
            if k.credential {
                KeyState::Disabled
            } else {
                KeyState::Cooling
            }
        } else {
            KeyState::Available
        }
    }

    fn cool(&mut self, key: &str, until: i64, credential: bool) {
        let k = self.keys.get_mut(key).unwrap();
        if until > k.cool_until {
            k.cool_until = until;
            k.credential = credential;
        }
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

fn run_case(store: Arc<dyn LeaseStore>, ops: Vec<Op>) -> Result<(), TestCaseError> {
    static CASE: AtomicUsize = AtomicUsize::new(0);
    let pool = format!("case-{}", CASE.fetch_add(1, Ordering::SeqCst));
    runtime().block_on(async move {
        let spec = PoolSpec {
            pool: pool.clone(),
            keys: KEYS
                .iter()
                .map(|(k, c)| KeySpec {
                    key_id: (*k).into(),
                    capacity: *c,
                    quota: None,
                })
                .collect(),
            batch_max_share: 1.0,
            // Fixed capacities: on an adaptive pool RATE_LIMITED also lowers the effective
            // capacity, which the conformance suite's adaptation tests cover.
            adaptive: false,
        };
        store.seed(&[spec]).await.unwrap();
        let base = store.status(&pool).await.unwrap().unwrap().now_ms;
        let mut m = Model {
            now: base,
            keys: KEYS
                .iter()
                .map(|(k, c)| {
                    (
                        (*k).to_owned(),
                        MKey {
                            cap: *c,
                            ..Default::default()
                        },
                    )
                })
                .collect(),
            leases: HashMap::new(),
            ids: Vec::new(),
            reported: Default::default(),
        };
        for op in ops {
            m.reap();
            match op {
                Op::Acquire { exclude, ttl } => {
                    let excluded: Vec<String> = KEYS
                        .iter()
                        .zip(exclude)
                        .filter(|(_, e)| *e)
                        .map(|((k, _), _)| (*k).to_owned())
                        .collect();
                    let token = LeaseToken::random();
                    let got = store
                        .acquire(&AcquireParams {
                            pool: pool.clone(),
                            token: token.clone(),
                            idempotent: false,
                            exclude_keys: excluded.clone(),
                            upstream_ids: vec![],
                            ttl_ms: ttl as u64,
                            priority: Priority::Standard,
                            tenant: String::new(),
                            join_line: false,
                            ticket_ttl_ms: 0,
                            characters: 0,
                        })
                        .await
                        .unwrap();
                    let eligible: Vec<&String> =
                        m.keys.keys().filter(|k| !excluded.contains(k)).collect();
                    let avail: Vec<&String> = eligible
                        .iter()
                        .copied()
                        .filter(|k| m.state(&m.keys[*k]) == KeyState::Available)
                        .collect();
                    let with_room: Vec<&String> = avail
                        .iter()
                        .copied()
                        .filter(|k| m.keys[*k].in_flight < m.keys[*k].cap)
                        .collect();
                    let best = with_room
                        .iter()
                        .map(|k| m.keys[*k].in_flight as f64 / m.keys[*k].cap as f64)
                        .fold(f64::INFINITY, f64::min);
                    let candidates: Vec<&String> = with_room
                        .iter()
                        .copied()
                        .filter(|k| (m.keys[*k].in_flight as f64 / m.keys[*k].cap as f64) == best)
                        .collect();
                    match got {
                        AcquireResult::Granted(lease) => {
                            prop_assert!(
                                candidates.contains(&&lease.key_id),
                                "granted {} but least-utilized candidates were {candidates:?}",
                                lease.key_id
                            );
                            let k = m.keys.get_mut(&lease.key_id).unwrap();
                            k.in_flight += 1;
                            prop_assert!(k.in_flight <= k.cap);
                            let idx = m.ids.len();
                            m.ids.push(lease.id.clone());
                            m.leases.insert(idx, (lease.id, lease.key_id, m.now + ttl));
                        }
                        AcquireResult::Refused(Refusal::Full { .. }) => {
                            prop_assert!(
                                with_room.is_empty() && !avail.is_empty(),
                                "Full but model {m:?}"
                            );
                        }
                        AcquireResult::Refused(Refusal::Unavailable { .. }) => {
                            prop_assert!(
                                avail.is_empty() && !eligible.is_empty(),
                                "Unavailable but model {m:?}"
                            );
                        }
                        AcquireResult::Refused(Refusal::NoEligibleKey) => {
                            prop_assert!(eligible.is_empty());
                        }
                        AcquireResult::Queued(refusal) => {
                            prop_assert!(false, "queued without join_line: {refusal:?}");
                        }
                        AcquireResult::Refused(
                            refusal @ (Refusal::Recovering { .. }
                            | Refusal::BatchShare { .. }),
                        ) => {
                            prop_assert!(
                                false,
                                "no recovery window, no BATCH acquires, one replica here: {refusal:?}"
                            );
                        }
                    }
                }
                Op::Release(i) => {
                    let Some(id) = m.ids.get(i).cloned() else {
                        continue;
                    };
                    let live = m.leases.remove(&i);
                    if let Some((_, key, _)) = &live {
                        m.keys.get_mut(key).unwrap().in_flight -= 1;
                    }
                    prop_assert_eq!(store.release(&id).await.unwrap(), live.is_some());
                }
                Op::Renew(i, ttl) => {
                    let Some(id) = m.ids.get(i).cloned() else {
                        continue;
                    };
                    let got = store.renew(&id, ttl as u64, None).await.unwrap();
                    let now = m.now;
                    match m.leases.get_mut(&i) {
                        Some(entry) => {
                            prop_assert!(got.is_some(), "live lease {i} not renewed");
                            entry.2 = now + ttl;
                        }
                        None => prop_assert!(got.is_none(), "dead lease {i} was renewed"),
                    }
                }
                Op::Report {
                    lease,
                    outcome,
                    retry_after,
                    release,
                } => {
                    let Some(id) = m.ids.get(lease).cloned() else {
                        continue;
                    };
                    let got = store
                        .report(
                            &ReportParams {
                                id,
                                key_id: None,
                                outcome,
                                retry_after_ms: retry_after as u64,
                                release,
                                characters: 0,
                                granted_at_ms: None,
                            },
                            &POLICY,
                        )
                        .await
                        .unwrap();
                    let Some((_, key, _)) = m.leases.get(&lease).cloned() else {
                        prop_assert!(
                            got.is_none(),
                            "report on a dead lease without key_id must find no key"
                        );
                        continue;
                    };
                    let now = m.now;
                    let applied = m.reported.insert(lease);
                    match outcome {
                        _ if !applied => {}
                        Outcome::Success => m.keys.get_mut(&key).unwrap().failures = 0,
                        Outcome::RateLimited => {
                            let wait = if retry_after > 0 {
                                retry_after
                            } else {
                                POLICY.rate_limit_cooldown_ms as i64
                            };
                            m.cool(&key, now + wait, false);
                        }
                        Outcome::UpstreamError | Outcome::Timeout => {
                            let k = m.keys.get_mut(&key).unwrap();
                            k.failures += 1;
                            if let Some(wait) = POLICY.failure_cooldown_ms(k.failures) {
                                m.cool(&key, now + wait as i64, false);
                            }
                        }
                        Outcome::KeyInvalid | Outcome::QuotaExhausted => {
                            m.cool(&key, now + POLICY.credential_cooldown_ms as i64, true);
                        }
                        Outcome::ClientError => {}
                        // Not generated: adaptation has its own conformance tests.
                        Outcome::ConcurrencyLimited => {}
                    }
                    if release {
                        m.leases.remove(&lease);
                        m.keys.get_mut(&key).unwrap().in_flight -= 1;
                    }
                    let got = got.expect("live lease names its key");
                    prop_assert_eq!(&got.key_id, &key);
                    prop_assert_eq!(got.released, release);
                    prop_assert_eq!(got.applied, applied, "an outcome counts once per lease");
                    prop_assert_eq!(got.state, m.state(&m.keys[&key]));
                }
                Op::Advance(ms) => {
                    store.advance_clock(&pool, ms as u64).await.unwrap();
                    m.now += ms;
                }
            }
            m.reap();
            let status = store.status(&pool).await.unwrap().unwrap();
            for k in &status.keys {
                let mk = &m.keys[&k.key_id];
                prop_assert_eq!(k.in_flight, mk.in_flight, "in-flight of {}", k.key_id);
                prop_assert!(k.in_flight <= k.capacity, "over capacity: {:?}", k);
                prop_assert_eq!(k.state, m.state(mk), "state of {}", k.key_id);
                prop_assert_eq!(
                    k.consecutive_failures,
                    mk.failures,
                    "failures of {}",
                    k.key_id
                );
            }
        }
        Ok(())
    })
}

/// 96 cases per store.
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 96,
        ..ProptestConfig::default()
    }
}

/// Random op sequences of 1 to 47 steps.
fn op_sequences() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 1..48)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn memory_store_matches_the_model(ops in op_sequences()) {
        run_case(Arc::new(MemoryStore::new()), ops)?;
    }
}

/// Store options for the model: no recovery window (every case seeds a fresh pool), the
/// topology's default replica acknowledgements.
fn options() -> RedisOptions {
    RedisOptions {
        // Generous: under `make test` two cores also run the other suites and the topologies'
        // eleven Redis processes, and a starved replica acknowledges late.
        timeout: std::time::Duration::from_secs(5),
        reap_batch: 64,
        replica_acks: None,
        replica_ack_timeout: std::time::Duration::from_millis(2_500),
        recovery_window_ms: 0,
        key_prefix: "model".into(),
        recovery_lease_ttl_ms: 30_000,
    }
}

/// Runs the property against the Redis store at `url`.
fn redis_matches_the_model(url: &str) {
    let store: Arc<dyn LeaseStore> = Arc::new(
        runtime()
            .block_on(RedisStore::connect(url, options()))
            .unwrap(),
    );
    let mut runner = proptest::test_runner::TestRunner::new(config());
    if let Err(e) = runner.run(&op_sequences(), |ops| run_case(store.clone(), ops)) {
        panic!("{e}");
    }
}

/// The same property against a real redis-server. The server is owned by this test (not a
/// static), so it is stopped when the test ends instead of outliving the test binary.
#[test]
fn redis_store_matches_the_model() {
    let server = RedisServer::start();
    redis_matches_the_model(&server.url());
}

/// Against a real Sentinel setup: every grant also waits for the replica's acknowledgement.
#[test]
fn sentinel_store_matches_the_model() {
    redis_matches_the_model(&RedisSentinel::shared().url());
}

/// Against a real 3-primary Redis Cluster (a replica per primary): the pools of the cases
/// land on every shard.
#[test]
fn cluster_store_matches_the_model() {
    redis_matches_the_model(&RedisCluster::shared().url());
}
