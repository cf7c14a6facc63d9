use bytes::Bytes;

use super::*;

fn piece(i: usize, len: usize) -> Bytes {
    Bytes::from(vec![u8::try_from(i % 251).unwrap(); len])
}

#[test]
fn a_spool_keeps_a_bounded_amount_in_memory_and_gives_everything_back_in_order() {
    let mut spool = Spool::default();
    let mut sent = Vec::new();
    for i in 0..200 {
        let p = piece(i, 10_000 + i);
        sent.extend_from_slice(&p);
        spool.push(p);
        assert!(
            spool.in_memory() <= MEMORY_BYTES,
            "{} in memory",
            spool.in_memory()
        );
    }
    assert_eq!(spool.len(), sent.len() as u64);
    let mut got = Vec::new();
    while let Some(p) = spool.pop() {
        assert!(p.len() <= 64 * 1024);
        got.extend_from_slice(&p);
    }
    assert_eq!(got, sent);
    assert!(spool.is_empty());
    // Drained, it takes audio in memory again.
    spool.push(piece(1, 100));
    assert_eq!(spool.in_memory(), 100);
}

#[test]
fn pushes_and_pops_interleaved_keep_the_order() {
    let mut spool = Spool::default();
    let (mut sent, mut got) = (Vec::new(), Vec::new());
    for i in 0..300 {
        let p = piece(i, 7_000);
        sent.extend_from_slice(&p);
        spool.push(p);
        if i % 3 == 0
            && let Some(p) = spool.pop()
        {
            got.extend_from_slice(&p);
        }
    }
    while let Some(p) = spool.pop() {
        got.extend_from_slice(&p);
    }
    assert_eq!(got, sent);
}

#[tokio::test]
async fn a_pipe_delivers_cached_then_audio_then_done_and_ends_when_its_senders_are_gone() {
    let (tx, mut rx) = pipe::<&'static str>();
    let other = tx.clone();
    tx.send(ChunkMsg::Cached);
    for i in 0..40 {
        other.send(ChunkMsg::Audio(piece(i, 20_000)));
    }
    tx.send(ChunkMsg::Done("done"));
    assert!(matches!(rx.recv().await, Some(ChunkMsg::Cached)));
    let mut audio = 0;
    let done = loop {
        match rx.recv().await {
            Some(ChunkMsg::Audio(b)) => audio += b.len(),
            Some(ChunkMsg::Done(d)) => break d,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!((audio, done), (40 * 20_000, "done"));
    let waiting = tokio::spawn(async move { rx.recv().await.is_none() });
    drop(tx);
    drop(other);
    assert!(waiting.await.unwrap(), "no message after every sender left");
}

#[tokio::test]
async fn dropping_the_receiver_tells_the_senders() {
    let (tx, rx) = pipe::<()>();
    assert!(!tx.is_closed());
    let closed = tokio::spawn({
        let tx = tx.clone();
        async move { tx.closed().await }
    });
    drop(rx);
    closed.await.unwrap();
    assert!(tx.is_closed());
    tx.send(ChunkMsg::Audio(piece(0, 10))); // dropped, no panic
}
