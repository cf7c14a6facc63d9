//! The synthesis client's fill locks over a real in-process scheduler (memory store): one
//! holder, HELD for the others, renewal past the TTL, `lost()` once the lock is taken over, and
//! release by `release()` or by drop.

mod common;

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use voxpool_config::Config;
use voxpool_runtime::auth::ClientToken;
use voxpool_scheduler::model::FillKey;
use voxpool_synthesis::lease::{FillOutcome, Scheduler};

async fn scheduler() -> (
    Scheduler,
    std::sync::Arc<dyn voxpool_scheduler::store::LeaseStore>,
    CancellationToken,
) {
    let toml = format!(
        "{}\n[scheduler]\nrecovery_window_ms = 0\n",
        common::pool_toml("p", "espeak", 1, 1, 1)
    );
    let config = Config::from_toml_str(&toml).expect("config");
    let shutdown = CancellationToken::new();
    let (addr, store) = common::start_scheduler(&config, shutdown.clone()).await;
    let client = Scheduler::connect_lazy(
        &format!("http://{addr}"),
        ClientToken::none(),
        Duration::from_secs(5),
        voxpool_runtime::endpoints::PROBE_INTERVAL,
    )
    .expect("client");
    (client, store, shutdown)
}

/// Polls `pred` until it holds (a readiness signal, bounded to 10 s).
async fn eventually(what: &str, mut pred: impl AsyncFnMut() -> bool) {
    let end = tokio::time::Instant::now() + Duration::from_secs(10);
    while !pred().await {
        assert!(
            tokio::time::Instant::now() < end,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_holder_the_others_held_until_it_releases() {
    let (s, _store, _stop) = scheduler().await;
    let Ok(FillOutcome::Granted(lock)) = s
        .acquire_fill("tts:a", Duration::ZERO, Duration::ZERO)
        .await
    else {
        panic!("the first caller is granted");
    };
    assert_eq!(lock.key(), "tts:a");
    match s
        .acquire_fill("tts:a", Duration::ZERO, Duration::from_millis(20))
        .await
    {
        Ok(FillOutcome::Held { held }) => {
            assert!(held > Duration::ZERO && held <= Duration::from_secs(30));
        }
        other => panic!("expected HELD, got {other:?}"),
    }
    lock.release().await;
    let Ok(FillOutcome::Granted(next)) = s
        .acquire_fill("tts:a", Duration::ZERO, Duration::ZERO)
        .await
    else {
        panic!("granted again after the release");
    };
    // Dropped unreleased: released in the background.
    drop(next);
    eventually("the dropped lock is released", async || {
        matches!(
            s.acquire_fill("tts:a", Duration::ZERO, Duration::ZERO)
                .await,
            Ok(FillOutcome::Granted(_))
        )
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_is_renewed_past_its_ttl_and_lost_once_taken_over() {
    let (s, store, _stop) = scheduler().await;
    let ttl = Duration::from_millis(300);
    let Ok(FillOutcome::Granted(lock)) = s.acquire_fill("tts:b", ttl, Duration::ZERO).await else {
        panic!("granted");
    };
    // Three TTLs later it is still ours: the renewals kept it.
    tokio::time::sleep(ttl * 3).await;
    assert!(!lock.lost());
    assert!(matches!(
        s.acquire_fill("tts:b", ttl, Duration::ZERO).await,
        Ok(FillOutcome::Held { .. })
    ));
    // Its TTL ends on the store's clock and another caller takes it over.
    let key = FillKey::parse("tts:b").expect("key");
    store
        .advance_fill_clock(&key, 60_000)
        .await
        .expect("advance");
    let Ok(FillOutcome::Granted(other)) = s
        .acquire_fill("tts:b", Duration::from_secs(30), Duration::ZERO)
        .await
    else {
        panic!("the expired lock is taken over");
    };
    eventually("the first holder learns it lost the lock", async || {
        lock.lost()
    })
    .await;
    lock.release().await;
    assert!(!other.lost());
    assert!(
        matches!(
            s.acquire_fill("tts:b", ttl, Duration::ZERO).await,
            Ok(FillOutcome::Held { .. })
        ),
        "the old holder's release freed nothing of the new holder's"
    );
    other.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_key_or_ttl_names_the_scheduler_s_field() {
    let (s, _store, _stop) = scheduler().await;
    for (key, ttl, field) in [
        ("a b", Duration::ZERO, "key"),
        ("k", Duration::from_secs(301), "ttl_ms"),
    ] {
        match s.acquire_fill(key, ttl, Duration::ZERO).await {
            Err(voxpool_synthesis::error::SynthesisError::InvalidArgument { field: f, .. }) => {
                assert_eq!(f, field);
            }
            other => panic!("{field}: expected INVALID_ARGUMENT, got {other:?}"),
        }
    }
}
