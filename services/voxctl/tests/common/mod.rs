//! Shared test helpers: the fake servers, manifests, and output checks.
#![allow(dead_code)]

pub mod fake_catalog;
pub mod fake_jobs;
pub mod fake_synthesis;
pub mod proxy;
pub mod stack;

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use voxctl::{
    batch::BatchConfig, breaker::BreakerConfig, checkpoint::JOURNAL_NAME, output::TEMP_PREFIX,
    progress::ProgressMode, retry::RetryPolicy,
};

/// Writes a manifest of `(id, text)` items, all with pack `vp_test`, and returns its path.
pub fn write_manifest(dir: &Path, name: &str, items: &[(String, String)]) -> PathBuf {
    let lines: Vec<String> = items
        .iter()
        .map(|(id, text)| {
            serde_json::json!({"id": id, "text": text, "packId": "vp_test"}).to_string()
        })
        .collect();
    let path = dir.join(name);
    std::fs::write(&path, lines.join("\n") + "\n").expect("write manifest");
    path
}

/// `n` items `item-000..` with short ASCII texts that name the item.
pub fn items(n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| (format!("item-{i:03}"), format!("Text of item {i}.")))
        .collect()
}

/// A config for tests: no catalog check, quiet progress, fast retries, breaker as given.
pub fn config(manifest: &Path, out: &Path, url: &str) -> BatchConfig {
    let mut c = BatchConfig::new(manifest, out);
    c.synthesis = url.to_owned();
    c.catalog = None;
    c.progress = ProgressMode::Quiet;
    c.deadline = Duration::from_secs(10);
    // What the real stack accepts (stack.rs); the fake servers ignore it.
    c.token = voxctl::connect::client_token(Some(stack::CLIENT_TOKEN)).expect("token");
    c.retry = RetryPolicy {
        max_attempts: 5,
        base: Duration::from_millis(1),
        cap: Duration::from_millis(20),
        ..RetryPolicy::default()
    };
    c
}

/// A breaker that never opens (for tests about retries, not about the breaker).
pub fn no_breaker() -> BreakerConfig {
    BreakerConfig {
        min_calls: usize::MAX,
        ..BreakerConfig::default()
    }
}

/// Names in `dir`, sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The final audio files in `dir` (no checkpoint, lock or temporary files).
pub fn audio_files(dir: &Path) -> Vec<String> {
    names(dir)
        .into_iter()
        .filter(|n| !n.starts_with('.'))
        .collect()
}

/// Temporary files left in `dir`.
pub fn temp_files(dir: &Path) -> Vec<String> {
    names(dir)
        .into_iter()
        .filter(|n| n.starts_with(TEMP_PREFIX))
        .collect()
}

/// Ids whose `done` record is in the checkpoint of `dir`.
pub fn done_ids(dir: &Path) -> std::collections::HashSet<String> {
    voxctl::checkpoint::read(&dir.join(JOURNAL_NAME))
        .expect("read checkpoint")
        .done
        .into_keys()
        .collect()
}
