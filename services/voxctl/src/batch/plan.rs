//! Decides, from the checkpoint, which items this run must do and which are settled already.
//!
//! An item is skipped only when its latest record matches its current fingerprint (id, text,
//! voice, format, sample rate): a `done` item whose file is still there, or a `failed` item
//! unless `--retry-failed`. Anything else (never recorded, changed, or a `done` file that went
//! missing) is redone; a redo replaces any stray file atomically.

use std::path::Path;

use sha2::{Digest, Sha256};

use crate::{
    checkpoint::Replayed,
    format::Format,
    manifest::Item,
    report::{ItemReport, Status},
};

/// The identity of an item's output: changes whenever the audio would.
pub fn fingerprint(item: &Item, format: Format, sample_rate_hz: i32) -> String {
    let mut h = Sha256::new();
    for part in [
        item.id.as_str(),
        item.text.as_str(),
        &item.voice.identity(),
        format.as_str(),
        &sample_rate_hz.to_string(),
    ] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    // Only when set, so the fingerprints of items without them stay what they were.
    let seed = item.seed.map(|s| s.to_string()).unwrap_or_default();
    for (name, part) in [("emotion", item.emotion.as_str()), ("seed", seed.as_str())] {
        if !part.is_empty() {
            h.update(name.as_bytes());
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
    }
    hex::encode(&h.finalize()[..16])
}

/// An item to run, with its fingerprint.
#[derive(Clone, Debug)]
pub struct Todo {
    /// The item.
    pub item: Item,
    /// Its fingerprint.
    pub fp: String,
}

/// What this run does.
#[derive(Debug, Default)]
pub struct Plan {
    /// Items to synthesize, in manifest order.
    pub todo: Vec<Todo>,
    /// Items settled by earlier runs (reported as `resumed`).
    pub settled: Vec<ItemReport>,
}

/// Splits `items` into work and settled items (see the module doc).
pub fn plan(
    items: Vec<Item>,
    replayed: &Replayed,
    out: &Path,
    format: Format,
    sample_rate_hz: i32,
    retry_failed: bool,
) -> Plan {
    let mut plan = Plan::default();
    for item in items {
        let fp = fingerprint(&item, format, sample_rate_hz);
        let base = |status| ItemReport {
            id: Some(item.id.clone()),
            line: item.line,
            status,
            resumed: true,
            attempts: 0,
            keys: vec![],
            code: None,
            error: None,
            file: None,
            parts: 0,
            chars: item.chars(),
            chunks: 0,
            cached_chunks: 0,
        };
        if let Some(done) = replayed.done.get(&item.id)
            && done.fp == fp
            && out.join(&done.file).is_file()
        {
            plan.settled.push(ItemReport {
                attempts: done.attempts,
                keys: done.keys.clone(),
                file: Some(done.file.clone()),
                parts: done.parts,
                chunks: done.chunks,
                cached_chunks: done.cached_chunks,
                ..base(Status::Ok)
            });
            continue;
        }
        if let Some(failed) = replayed.failed.get(&item.id)
            && failed.fp == fp
            && !retry_failed
        {
            plan.settled.push(ItemReport {
                attempts: failed.attempts,
                keys: failed.keys.clone(),
                code: Some(failed.code.clone()),
                error: Some(failed.error.clone()),
                ..base(Status::Failed)
            });
            continue;
        }
        plan.todo.push(Todo { item, fp });
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        checkpoint::{DoneRecord, FailedRecord},
        manifest::Voice,
    };

    fn item(id: &str, text: &str) -> Item {
        Item {
            line: 1,
            id: id.into(),
            text: text.into(),
            voice: Voice::PackId("p".into()),
            emotion: String::new(),
            seed: None,
        }
    }

    fn replayed(dir: &Path, done: &Item, failed: &Item) -> Replayed {
        std::fs::write(dir.join("d.wav"), b"x").expect("write");
        let mut r = Replayed::default();
        r.done.insert(
            "d".into(),
            DoneRecord {
                id: "d".into(),
                fp: fingerprint(done, Format::Wav, 0),
                file: "d.wav".into(),
                bytes: 1,
                attempts: 2,
                keys: vec!["u/k".into()],
                parts: 1,
                chars: 1,
                chunks: 1,
                cached_chunks: 1,
            },
        );
        r.failed.insert(
            "f".into(),
            FailedRecord {
                id: "f".into(),
                fp: fingerprint(failed, Format::Wav, 0),
                code: "INVALID_ARGUMENT".into(),
                error: "bad".into(),
                attempts: 1,
                keys: vec![],
            },
        );
        r
    }

    fn todo_ids(p: &Plan) -> Vec<&str> {
        p.todo.iter().map(|t| t.item.id.as_str()).collect()
    }

    #[test]
    fn done_items_are_skipped_and_failed_ones_only_redone_with_retry_failed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (d, f, n) = (item("d", "t"), item("f", "t"), item("n", "t"));
        let r = replayed(dir.path(), &d, &f);
        let items = vec![d.clone(), f.clone(), n.clone()];
        let p = plan(items.clone(), &r, dir.path(), Format::Wav, 0, false);
        assert_eq!(todo_ids(&p), ["n"]);
        assert_eq!(p.settled.len(), 2);
        assert!(p.settled.iter().all(|s| s.resumed));
        let done = p.settled.iter().find(|s| s.id.as_deref() == Some("d"));
        assert_eq!(
            done.map(|d| (d.chunks, d.cached_chunks)),
            Some((1, 1)),
            "a resumed item reports the cache hits its run recorded"
        );
        let p = plan(items, &r, dir.path(), Format::Wav, 0, true);
        assert_eq!(todo_ids(&p), ["f", "n"]);
    }

    #[test]
    fn a_changed_text_or_a_missing_file_makes_a_done_item_run_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (d, f) = (item("d", "t"), item("f", "t"));
        let r = replayed(dir.path(), &d, &f);
        let p = plan(
            vec![item("d", "changed")],
            &r,
            dir.path(),
            Format::Wav,
            0,
            false,
        );
        assert_eq!(todo_ids(&p), ["d"]);
        std::fs::remove_file(dir.path().join("d.wav")).expect("rm");
        let p = plan(vec![d], &r, dir.path(), Format::Wav, 0, false);
        assert_eq!(todo_ids(&p), ["d"]);
    }

    #[test]
    fn the_fingerprint_covers_voice_format_and_sample_rate() {
        let a = item("a", "t");
        let mut b = a.clone();
        b.voice = Voice::PackId("q".into());
        let fp = |i: &Item, f, sr| fingerprint(i, f, sr);
        assert_ne!(fp(&a, Format::Wav, 0), fp(&b, Format::Wav, 0));
        assert_ne!(fp(&a, Format::Wav, 0), fp(&a, Format::Mp3, 0));
        assert_ne!(fp(&a, Format::Wav, 0), fp(&a, Format::Wav, 24_000));
        assert_eq!(fp(&a, Format::Wav, 0), fp(&a.clone(), Format::Wav, 0));
    }
}
