use std::time::Duration;

use super::*;

const BASE: Duration = Duration::from_secs(1);

fn breaker() -> Breaker {
    Breaker::new(BreakerConfig {
        window: 4,
        min_calls: 4,
        failure_ratio: 0.5,
        open_base: BASE,
        open_max: Duration::from_secs(3),
    })
}

async fn feed(b: &Breaker, results: &[Health]) {
    for h in results {
        b.permit().await.record(*h);
    }
}

async fn trip(b: &Breaker) {
    feed(b, &[Health::Down; 4]).await;
    assert_eq!(b.phase(), Phase::Open);
}

#[tokio::test(start_paused = true)]
async fn it_opens_once_half_of_the_recent_window_is_down() {
    let b = breaker();
    feed(&b, &[Health::Up, Health::Up, Health::Up, Health::Down]).await;
    assert_eq!(b.phase(), Phase::Closed, "1 of 4 down");
    feed(&b, &[Health::Down]).await;
    assert_eq!(b.phase(), Phase::Open, "2 of the last 4 down");
    assert_eq!(b.trips(), 1);
}

#[tokio::test(start_paused = true)]
async fn neutral_results_never_open_it() {
    let b = breaker();
    feed(&b, &[Health::Neutral; 50]).await;
    feed(&b, &[Health::Up, Health::Up, Health::Up, Health::Down]).await;
    assert_eq!(b.phase(), Phase::Closed);
}

#[tokio::test(start_paused = true)]
async fn while_open_no_call_passes_until_the_open_period_ends() {
    let b = breaker();
    trip(&b).await;
    let early = tokio::time::timeout(BASE - Duration::from_millis(1), b.permit()).await;
    assert!(early.is_err(), "a permit was granted while open");
    let start = Instant::now();
    let probe = b.permit().await;
    assert!(probe.is_probe());
    assert!(start.elapsed() <= Duration::from_millis(1));
    assert_eq!(b.phase(), Phase::HalfOpen);
}

#[tokio::test(start_paused = true)]
async fn half_open_admits_exactly_one_probe_and_its_success_closes() {
    let b = breaker();
    trip(&b).await;
    let probe = b.permit().await;
    let second = tokio::time::timeout(Duration::from_secs(3600), b.permit()).await;
    assert!(
        second.is_err(),
        "a second caller got through while the probe was out"
    );
    probe.record(Health::Up);
    assert_eq!(b.phase(), Phase::Closed);
    let next = b.permit().await;
    assert!(!next.is_probe());
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_reopens_for_twice_as_long_up_to_the_maximum() {
    let b = breaker();
    trip(&b).await;
    b.permit().await.record(Health::Down);
    assert_eq!(b.phase(), Phase::Open);
    assert_eq!(b.retry_in(), Some(2 * BASE));
    tokio::time::sleep(2 * BASE).await;
    b.permit().await.record(Health::Down);
    assert_eq!(
        b.retry_in(),
        Some(Duration::from_secs(3)),
        "capped at open_max"
    );
    assert_eq!(b.trips(), 1, "re-opening after a probe is not a new trip");
}

#[tokio::test(start_paused = true)]
async fn a_probe_dropped_unused_lets_another_caller_probe() {
    let b = breaker();
    trip(&b).await;
    drop(b.permit().await);
    let again = tokio::time::timeout(Duration::from_millis(1), b.permit())
        .await
        .expect("a new probe is granted at once");
    assert!(again.is_probe());
}

#[tokio::test(start_paused = true)]
async fn results_of_calls_let_through_before_it_opened_are_ignored() {
    let b = breaker();
    let straggler = b.permit().await;
    trip(&b).await;
    straggler.record(Health::Up);
    assert_eq!(
        b.phase(),
        Phase::Open,
        "a stale success must not close the breaker"
    );
}
