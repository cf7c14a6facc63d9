use super::*;

fn identity(manifest: &str) -> RunIdentity {
    RunIdentity {
        manifest: manifest.into(),
        format: "WAV".into(),
        sample_rate_hz: 0,
    }
}

fn done(id: &str) -> Record {
    Record::Done(DoneRecord {
        id: id.into(),
        fp: format!("fp-{id}"),
        file: format!("{id}.wav"),
        bytes: 10,
        attempts: 1,
        keys: vec!["u/k".into()],
        parts: 1,
        chars: 5,
        chunks: 1,
        cached_chunks: 0,
    })
}

fn failed(id: &str) -> Record {
    Record::Failed(FailedRecord {
        id: id.into(),
        fp: format!("fp-{id}"),
        code: "INVALID_ARGUMENT".into(),
        error: "bad".into(),
        attempts: 1,
        keys: vec![],
    })
}

#[test]
fn records_survive_a_reopen_and_the_latest_record_of_an_item_wins() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let cp = Checkpoint::open(dir.path(), identity("m1"), false).expect("open");
        for r in [done("a"), failed("b"), failed("c"), done("c")] {
            cp.journal.append_blocking(r).expect("append");
        }
        cp.journal.close();
    }
    let cp = Checkpoint::open(dir.path(), identity("m1"), false).expect("reopen");
    let r = &cp.replayed;
    assert_eq!(r.identity, Some(identity("m1")));
    let mut done_ids: Vec<_> = r.done.keys().cloned().collect();
    done_ids.sort();
    assert_eq!(done_ids, ["a", "c"]);
    assert_eq!(r.failed.keys().collect::<Vec<_>>(), ["b"]);
}

#[test]
fn a_torn_last_line_is_ignored_and_cut_before_the_next_append() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let cp = Checkpoint::open(dir.path(), identity("m1"), false).expect("open");
        cp.journal.append_blocking(done("a")).expect("append");
    }
    let path = dir.path().join(JOURNAL_NAME);
    let mut bytes = std::fs::read(&path).expect("read");
    bytes.extend_from_slice(br#"{"kind":"done","id":"b","fp":"#);
    std::fs::write(&path, &bytes).expect("tear");

    let seen = read(&path).expect("read");
    assert!(seen.torn_tail);
    assert!(seen.done.contains_key("a") && !seen.done.contains_key("b"));
    assert!(seen.corrupt_lines.is_empty());

    let cp = Checkpoint::open(dir.path(), identity("m1"), false).expect("reopen");
    cp.journal.append_blocking(done("c")).expect("append");
    cp.journal.close();
    let after = read(&path).expect("read");
    assert!(!after.torn_tail && after.corrupt_lines.is_empty());
    assert!(after.done.contains_key("a") && after.done.contains_key("c"));
}

#[test]
fn another_manifest_is_refused_unless_forced() {
    let dir = tempfile::tempdir().expect("tempdir");
    drop(Checkpoint::open(dir.path(), identity("m1"), false).expect("open"));
    let err = Checkpoint::open(dir.path(), identity("m2"), false)
        .err()
        .expect("mismatch refused");
    assert!(matches!(err, CheckpointError::Mismatch { .. }));
    assert!(err.to_string().contains("--force"), "{err}");
    let cp = Checkpoint::open(dir.path(), identity("m2"), true).expect("forced");
    drop(cp);
    // The forced run's identity is now the directory's identity.
    drop(Checkpoint::open(dir.path(), identity("m2"), false).expect("same as forced"));
}

#[test]
fn a_second_run_on_the_same_directory_is_refused_while_the_first_holds_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = Checkpoint::open(dir.path(), identity("m1"), false).expect("open");
    let err = Checkpoint::open(dir.path(), identity("m1"), false)
        .err()
        .expect("locked");
    assert!(matches!(err, CheckpointError::Locked(_)), "{err}");
    drop(first);
    drop(Checkpoint::open(dir.path(), identity("m1"), false).expect("free again"));
}
