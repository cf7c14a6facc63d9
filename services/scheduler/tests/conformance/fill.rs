//! Fill locks (AcquireFill, RenewFill, ReleaseFill): one holder per key among concurrent
//! callers, waiters woken by a release (on this replica and, over Redis, on another), an
//! expired holder taken over by the store's clock hook, renew and release by the holder only,
//! and bad fields named. Waiters are synchronized with a store probe that signals when a
//! caller found the lock held (it is then armed for the wake-up), never with sleeps.

use async_trait::async_trait;
use tokio::sync::mpsc;
use voxpool_scheduler::{
    model::{
        AcquireParams, AcquireResult, BudgetAmount, BudgetAnswer, BudgetRow, BudgetUse, FillHolder,
        FillId, FillKey, FillState, HealthPolicy, KeyStatus, Lease, LeaseId, LeaseToken, PoolSpec,
        PoolStatus, ReportParams, ReportResult, Settle, TicketState,
    },
    store::{Budgets, FillLocks, Handover, LeaseStore, StoreResult},
};

use super::common::{open_store, start_on, start_wrapped};
use super::*;
use pb::acquire_fill_response::State;

conformance!(
    one_of_many_concurrent_acquirers_is_granted,
    a_waiter_is_woken_by_the_release,
    a_waiter_sees_an_expired_holder_as_released_and_a_short_wait_as_held,
    an_expired_holder_is_taken_over,
    renew_by_a_non_holder_is_not_found,
    release_is_idempotent_and_by_the_holder_only,
    bad_fill_fields_are_invalid_argument_naming_the_field,
    a_release_on_one_replica_wakes_a_waiter_on_another,
);

/// A store that tells the test each time an AcquireFill found the lock held.
struct Probe {
    inner: Arc<dyn LeaseStore>,
    held: mpsc::UnboundedSender<()>,
}

fn probed(
    h: &mut Option<mpsc::UnboundedReceiver<()>>,
) -> impl FnOnce(Arc<dyn LeaseStore>) -> Arc<dyn LeaseStore> {
    let (held, rx) = mpsc::unbounded_channel();
    *h = Some(rx);
    move |inner| Arc::new(Probe { inner, held })
}

#[async_trait]
impl FillLocks for Probe {
    async fn acquire_fill(&self, k: &FillKey, id: &FillId, ttl: u64) -> StoreResult<FillState> {
        let state = self.inner.acquire_fill(k, id, ttl).await?;
        if matches!(state, FillState::Held { .. }) {
            let _ = self.held.send(());
        }
        Ok(state)
    }
    async fn renew_fill(&self, k: &FillKey, id: &FillId, ttl: u64) -> StoreResult<bool> {
        self.inner.renew_fill(k, id, ttl).await
    }
    async fn release_fill(&self, k: &FillKey, id: &FillId) -> StoreResult<bool> {
        self.inner.release_fill(k, id).await
    }
    async fn fill_holder(&self, k: &FillKey) -> StoreResult<Option<FillHolder>> {
        self.inner.fill_holder(k).await
    }
    fn fill_releases(&self) -> Option<mpsc::UnboundedReceiver<FillKey>> {
        self.inner.fill_releases()
    }
    async fn advance_fill_clock(&self, k: &FillKey, ms: u64) -> StoreResult<()> {
        self.inner.advance_fill_clock(k, ms).await
    }
}

#[async_trait]
impl Budgets for Probe {
    async fn reserve_budget(
        &self,
        row: &BudgetRow,
        token: &LeaseToken,
        amount: BudgetAmount,
        ttl_ms: u64,
    ) -> StoreResult<BudgetAnswer> {
        self.inner.reserve_budget(row, token, amount, ttl_ms).await
    }
    async fn settle_budget(
        &self,
        row: &BudgetRow,
        token: &LeaseToken,
        settle: Settle,
    ) -> StoreResult<()> {
        self.inner.settle_budget(row, token, settle).await
    }
    async fn budget_use(&self, row: &BudgetRow) -> StoreResult<BudgetUse> {
        self.inner.budget_use(row).await
    }
    async fn note_budget_rows(
        &self,
        token: &LeaseToken,
        rows: &[(String, String)],
        ttl_ms: u64,
    ) -> StoreResult<()> {
        self.inner.note_budget_rows(token, rows, ttl_ms).await
    }
    async fn take_budget_rows(&self, token: &LeaseToken) -> StoreResult<Vec<(String, String)>> {
        self.inner.take_budget_rows(token).await
    }
    async fn advance_budget_clock(&self, row: &BudgetRow, ms: u64) -> StoreResult<()> {
        self.inner.advance_budget_clock(row, ms).await
    }
}

#[async_trait]
impl LeaseStore for Probe {
    async fn seed(&self, p: &[PoolSpec]) -> StoreResult<()> {
        self.inner.seed(p).await
    }
    async fn acquire(&self, p: &AcquireParams) -> StoreResult<AcquireResult> {
        self.inner.acquire(p).await
    }
    async fn release_granted(&self, id: &LeaseId, at: Option<i64>) -> StoreResult<bool> {
        self.inner.release_granted(id, at).await
    }
    async fn renew_granted(
        &self,
        id: &LeaseId,
        ttl: u64,
        key: Option<&str>,
        at: Option<i64>,
    ) -> StoreResult<Option<Lease>> {
        self.inner.renew_granted(id, ttl, key, at).await
    }
    async fn report(
        &self,
        p: &ReportParams,
        h: &HealthPolicy,
    ) -> StoreResult<Option<ReportResult>> {
        self.inner.report(p, h).await
    }
    async fn status(&self, pool: &str) -> StoreResult<Option<PoolStatus>> {
        self.inner.status(pool).await
    }
    async fn set_capacity(&self, p: &str, k: &str, c: u32) -> StoreResult<Option<KeyStatus>> {
        self.inner.set_capacity(p, k, c).await
    }
    async fn set_disabled(&self, p: &str, k: &str, d: bool) -> StoreResult<Option<KeyStatus>> {
        self.inner.set_disabled(p, k, d).await
    }
    async fn lease_secret(
        &self,
        c: &voxpool_domain::secret::Secret,
    ) -> StoreResult<voxpool_domain::secret::Secret> {
        self.inner.lease_secret(c).await
    }
    async fn ping(&self) -> StoreResult<()> {
        self.inner.ping().await
    }
    async fn claim(&self, p: &str, t: &LeaseToken, ttl: u64) -> StoreResult<TicketState> {
        self.inner.claim(p, t, ttl).await
    }
    async fn keep_waiting(
        &self,
        p: &str,
        t: &[LeaseToken],
        ttl: u64,
    ) -> StoreResult<Vec<TicketState>> {
        self.inner.keep_waiting(p, t, ttl).await
    }
    async fn leave(&self, p: &str, t: &LeaseToken, keep: bool) -> StoreResult<()> {
        self.inner.leave(p, t, keep).await
    }
    fn handovers(&self) -> Option<mpsc::UnboundedReceiver<Handover>> {
        self.inner.handovers()
    }
    async fn advance_clock(&self, p: &str, ms: u64) -> StoreResult<()> {
        self.inner.advance_clock(p, ms).await
    }
    async fn forget_pool(&self, p: &str) -> StoreResult<()> {
        self.inner.forget_pool(p).await
    }
}

fn acquire_fill(key: &str, ttl_ms: u32, wait_ms: u32) -> pb::AcquireFillRequest {
    pb::AcquireFillRequest {
        key: key.into(),
        ttl_ms,
        wait_ms,
    }
}

async fn fill(h: &Harness, req: pb::AcquireFillRequest) -> pb::AcquireFillResponse {
    h.client().acquire_fill(req).await.unwrap().into_inner()
}

async fn release_fill(h: &Harness, key: &str, fill_id: &str) -> bool {
    let req = pb::ReleaseFillRequest {
        key: key.into(),
        fill_id: fill_id.into(),
    };
    h.client()
        .release_fill(req)
        .await
        .unwrap()
        .into_inner()
        .released
}

async fn renew_fill(
    h: &Harness,
    key: &str,
    fill_id: &str,
    ttl_ms: u32,
) -> Result<u32, tonic::Status> {
    let req = pb::RenewFillRequest {
        key: key.into(),
        fill_id: fill_id.into(),
        ttl_ms,
    };
    h.client()
        .renew_fill(req)
        .await
        .map(|r| r.into_inner().ttl_ms)
}

/// An AcquireFill on `key` waiting up to 60 s, in its own task.
fn wait_for(
    mut client: voxpool_proto::scheduler::v1::pool_scheduler_client::PoolSchedulerClient<
        tonic::transport::Channel,
    >,
    key: &'static str,
) -> tokio::task::JoinHandle<Result<pb::AcquireFillResponse, tonic::Status>> {
    tokio::spawn(async move {
        client
            .acquire_fill(acquire_fill(key, 0, 60_000))
            .await
            .map(tonic::Response::into_inner)
    })
}

fn state(r: &pb::AcquireFillResponse) -> State {
    State::try_from(r.state).unwrap()
}

fn not_held(err: &tonic::Status) -> bool {
    err.code() == Code::NotFound
        && voxpool_domain::contract::SchedulerReason::of(err)
            == Some(voxpool_domain::contract::SchedulerReason::FillNotHeld)
}

async fn one_of_many_concurrent_acquirers_is_granted(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let calls = (0..16).map(|_| fill(&h, acquire_fill("tts:v1/abc", 30_000, 0)));
    let answers = futures::future::join_all(calls).await;
    let granted: Vec<_> = answers
        .iter()
        .filter(|r| state(r) == State::Granted)
        .collect();
    assert_eq!(granted.len(), 1, "{answers:?}");
    assert!(
        granted[0].fill_id.len() == 32 && granted[0].ttl_ms == 30_000,
        "{:?}",
        granted[0]
    );
    for r in answers.iter().filter(|r| state(r) != State::Granted) {
        assert_eq!(state(r), State::Held, "{r:?}");
        assert!(
            r.held_ttl_ms > 0 && r.held_ttl_ms <= 30_000 && r.fill_id.is_empty(),
            "{r:?}"
        );
    }
    // Waiting ones too: the one grant stands, everyone else is HELD or RELEASED.
    assert!(release_fill(&h, "tts:v1/abc", &granted[0].fill_id).await);
    let calls = (0..8).map(|i| {
        fill(
            &h,
            acquire_fill("tts:v1/abc", 30_000, if i % 2 == 0 { 0 } else { 50 }),
        )
    });
    let answers = futures::future::join_all(calls).await;
    let granted = answers
        .iter()
        .filter(|r| state(r) == State::Granted)
        .count();
    assert_eq!(granted, 1, "{answers:?}");
    assert!(
        answers
            .iter()
            .all(|r| matches!(state(r), State::Granted | State::Held | State::Released))
    );
}

async fn a_waiter_is_woken_by_the_release(b: Backend) {
    let mut held = None;
    let h = start_wrapped(b, &uniform_pool(1, 1, 1), "", probed(&mut held)).await;
    let mut held = held.unwrap();
    let first = fill(&h, acquire_fill("k1", 60_000, 0)).await;
    assert_eq!(state(&first), State::Granted);
    let client = h.client();
    let waiter = wait_for(client, "k1");
    held.recv().await.expect("the waiter found the lock held");
    let started = tokio::time::Instant::now();
    assert!(release_fill(&h, "k1", &first.fill_id).await);
    let answer = waiter.await.unwrap().unwrap();
    assert_eq!(state(&answer), State::Released, "{answer:?}");
    assert!(answer.fill_id.is_empty());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "woken long before its 60 s wait"
    );
    // RELEASED took nothing: the next caller is granted.
    assert_eq!(
        state(&fill(&h, acquire_fill("k1", 0, 0)).await),
        State::Granted
    );
}

async fn a_waiter_sees_an_expired_holder_as_released_and_a_short_wait_as_held(b: Backend) {
    let mut held = None;
    let h = start_wrapped(b, &uniform_pool(1, 1, 1), "", probed(&mut held)).await;
    let mut held = held.unwrap();
    assert_eq!(
        state(&fill(&h, acquire_fill("k2", 60_000, 0)).await),
        State::Granted
    );
    let short = fill(&h, acquire_fill("k2", 0, 30)).await;
    assert_eq!(state(&short), State::Held, "{short:?}");
    assert!(
        short.held_ttl_ms > 0 && short.held_ttl_ms <= 60_000,
        "{short:?}"
    );
    held.recv().await.unwrap();
    let client = h.client();
    let waiter = wait_for(client, "k2");
    held.recv().await.expect("the waiter found the lock held");
    h.store
        .advance_fill_clock(&FillKey::parse("k2").unwrap(), 60_001)
        .await
        .unwrap();
    let answer = waiter.await.unwrap().unwrap();
    assert_eq!(state(&answer), State::Released, "{answer:?}");
}

async fn an_expired_holder_is_taken_over(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let a = fill(&h, acquire_fill("k3", 1_000, 0)).await;
    assert_eq!(state(&a), State::Granted);
    assert_eq!(
        state(&fill(&h, acquire_fill("k3", 1_000, 0)).await),
        State::Held
    );
    h.store
        .advance_fill_clock(&FillKey::parse("k3").unwrap(), 1_001)
        .await
        .unwrap();
    let b2 = fill(&h, acquire_fill("k3", 5_000, 0)).await;
    assert_eq!(
        state(&b2),
        State::Granted,
        "the expired holder is taken over"
    );
    assert_ne!(a.fill_id, b2.fill_id);
    let err = renew_fill(&h, "k3", &a.fill_id, 0).await.unwrap_err();
    assert!(not_held(&err), "{err:?}");
    assert!(
        !release_fill(&h, "k3", &a.fill_id).await,
        "the old holder releases nothing"
    );
    assert_eq!(
        state(&fill(&h, acquire_fill("k3", 0, 0)).await),
        State::Held
    );
    assert!(release_fill(&h, "k3", &b2.fill_id).await);
}

async fn renew_by_a_non_holder_is_not_found(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let a = fill(&h, acquire_fill("k4", 1_000, 0)).await;
    let stranger = format!("{:032x}", rand::random::<u128>());
    let err = renew_fill(&h, "k4", &stranger, 1_000).await.unwrap_err();
    assert!(not_held(&err), "{err:?}");
    assert!(err.message().contains("\"k4\""), "{}", err.message());
    let err = renew_fill(&h, "other", &a.fill_id, 1_000)
        .await
        .unwrap_err();
    assert!(
        not_held(&err),
        "another key's lock is not the holder's: {err:?}"
    );
    // The holder renews: past its first TTL it still holds the key.
    assert_eq!(
        renew_fill(&h, "k4", &a.fill_id, 10_000).await.unwrap(),
        10_000
    );
    h.store
        .advance_fill_clock(&FillKey::parse("k4").unwrap(), 5_000)
        .await
        .unwrap();
    assert_eq!(
        state(&fill(&h, acquire_fill("k4", 0, 0)).await),
        State::Held
    );
    assert_eq!(
        renew_fill(&h, "k4", &a.fill_id, 0).await.unwrap(),
        30_000,
        "0 = fill_ttl_ms"
    );
}

async fn release_is_idempotent_and_by_the_holder_only(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let a = fill(&h, acquire_fill("k5", 10_000, 0)).await;
    let stranger = format!("{:032x}", rand::random::<u128>());
    assert!(!release_fill(&h, "k5", &stranger).await);
    assert_eq!(
        state(&fill(&h, acquire_fill("k5", 0, 0)).await),
        State::Held,
        "still held"
    );
    assert!(release_fill(&h, "k5", &a.fill_id).await);
    assert!(
        !release_fill(&h, "k5", &a.fill_id).await,
        "a second release is a no-op"
    );
    assert!(!release_fill(&h, "never-held", &a.fill_id).await);
    assert_eq!(
        state(&fill(&h, acquire_fill("k5", 0, 0)).await),
        State::Granted
    );
}

async fn bad_fill_fields_are_invalid_argument_naming_the_field(b: Backend) {
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let long = "k".repeat(257);
    let cases: Vec<(pb::AcquireFillRequest, &str)> = vec![
        (acquire_fill("", 0, 0), "key"),
        (acquire_fill("a b", 0, 0), "key"),
        (acquire_fill("a{b}", 0, 0), "key"),
        (acquire_fill("new\nline", 0, 0), "key"),
        (acquire_fill(&long, 0, 0), "key"),
        (acquire_fill("k", 300_001, 0), "ttl_ms"),
        (acquire_fill("k", 0, 600_001), "wait_ms"),
    ];
    let check = |err: tonic::Status, field: &str| {
        assert_eq!(err.code(), Code::InvalidArgument, "{field}: {err:?}");
        let details = err.get_error_details();
        let v = &details.bad_request().expect("BadRequest").field_violations[0];
        assert_eq!(v.field, field);
        assert!(
            err.message().starts_with(&format!("invalid {field}:")),
            "{}",
            err.message()
        );
        assert!(!err.message().contains('\n'), "{}", err.message());
    };
    for (req, field) in cases {
        check(h.client().acquire_fill(req).await.unwrap_err(), field);
    }
    assert_eq!(
        state(&fill(&h, acquire_fill(&"k".repeat(256), 300_000, 0)).await),
        State::Granted
    );
    check(renew_fill(&h, "k", "zz", 0).await.unwrap_err(), "fill_id");
    let id = format!("{:032x}", 1u128);
    check(
        renew_fill(&h, "k", &id, 300_001).await.unwrap_err(),
        "ttl_ms",
    );
    check(renew_fill(&h, "a b", &id, 0).await.unwrap_err(), "key");
    let err = h
        .client()
        .release_fill(pb::ReleaseFillRequest {
            key: "k".into(),
            fill_id: "NOT-HEX".into(),
        })
        .await
        .unwrap_err();
    check(err, "fill_id");
}

async fn a_release_on_one_replica_wakes_a_waiter_on_another(b: Backend) {
    if matches!(b, Backend::Memory) {
        return; // One process, one replica: the memory store has no other replica.
    }
    let h = start(b, &uniform_pool(1, 1, 1)).await;
    let (tx, mut held) = mpsc::unbounded_channel();
    let other = open_store(b, &h.config, h.redis.as_ref()).await;
    let other: Arc<dyn LeaseStore> = Arc::new(Probe {
        inner: other,
        held: tx,
    });
    let h2 = start_on(other, h.config.clone(), None).await;
    let first = fill(&h, acquire_fill("k6", 60_000, 0)).await;
    assert_eq!(state(&first), State::Granted);
    let client = h2.client();
    let waiter = wait_for(client, "k6");
    held.recv()
        .await
        .expect("the waiter on the other replica found the lock held");
    assert!(release_fill(&h, "k6", &first.fill_id).await);
    let answer = waiter.await.unwrap().unwrap();
    assert_eq!(state(&answer), State::Released, "{answer:?}");
}
