//! The console in a real headless Chromium over WebDriver, against real processes (the
//! stack: `console/stack.rs`; the browser: `console/browser.rs`). Each test signs in and
//! drives the pages as a person would, and saves its page's screenshot (docs/CONSOLE.md).
//!
//! Synchronisation is by polling the page or the services for the awaited condition, bounded
//! by `browser::DEADLINE`; no fixed sleeps.

#[path = "console/stack.rs"]
mod stack;

#[path = "console/browser.rs"]
mod browser;

use browser::Browser;
use stack::*;
use voxpool_proto::scheduler::v1 as spb;

/// The value of the `<meter>` of `key` in `pool` on the pools page.
async fn meter(b: &Browser, pool: &str, key: &str) -> String {
    let css = format!("tr[data-key=\"{pool}|{key}\"] meter");
    b.find(&css).await;
    let value = b
        .client
        .execute(
            "return String(document.querySelector(arguments[0]).value);",
            vec![serde_json::Value::String(css)],
        )
        .await
        .expect("meter value");
    value.as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_bar_rises_while_leases_are_held_and_falls_after_without_a_reload() {
    let stack = Stack::start(false);
    let b = Browser::start().await;
    b.sign_in(&stack.url(""), ADMIN).await;
    assert_eq!(meter(&b, WATCH_POOL, WATCH_KEY).await, "0");
    // A marker a reload would lose: the bar must move by the live feed alone.
    b.client
        .execute("window.notReloaded = true; return true;", vec![])
        .await
        .expect("set marker");
    let mut scheduler = voxpool_e2e::scheduler_client(&stack.scheduler.addr).await;
    let mut leases = Vec::new();
    for i in 0..3 {
        let lease = scheduler
            .acquire(spb::AcquireRequest {
                pool: WATCH_POOL.into(),
                lease_ttl_ms: 120_000,
                request_id: format!("console-test-{i}"),
                ..Default::default()
            })
            .await
            .expect("acquire")
            .into_inner();
        leases.push(lease.lease_id);
    }
    b.until("the bar at 3 leases", || async {
        meter(&b, WATCH_POOL, WATCH_KEY).await == "3"
    })
    .await;
    let sat = b
        .find(&format!(
            "tr[data-key=\"{WATCH_POOL}|{WATCH_KEY}\"] [data-f=sat]"
        ))
        .await
        .text()
        .await
        .expect("text");
    assert_eq!(sat, "3 / 4 / 4", "in flight / effective / capacity");
    b.screenshot("pools").await;
    for lease_id in leases {
        scheduler
            .release(spb::ReleaseRequest {
                lease_id,
                ..Default::default()
            })
            .await
            .expect("release");
    }
    b.until("the bar back at 0", || async {
        meter(&b, WATCH_POOL, WATCH_KEY).await == "0"
    })
    .await;
    let kept = b
        .client
        .execute("return window.notReloaded === true;", vec![])
        .await
        .expect("read marker");
    assert_eq!(kept, serde_json::Value::Bool(true), "the page was reloaded");
}
