//! Every fake's streamed answer, through a real HTTP client: the first piece arrives while the
//! stream is still under way, the pieces join into the unstreamed audio, a scripted break is
//! seen the vendor's way, and a client that leaves mid-stream is uncounted at once.

#[macro_use]
mod common;

use std::time::Duration;

use common::{KEY, Wire, eventually, read_rest};
use voxpool_fake_vendors::{FakeConfig, FakeVendor, Step, Streaming, audio};

/// First piece after 20 ms, four pieces spread over `rest`.
fn streaming(rest: Duration) -> Streaming {
    Streaming::new(Duration::from_millis(20), rest, 4)
}

async fn fake(wire: Wire, rest: Duration) -> FakeVendor {
    FakeVendor::start(FakeConfig::new(wire.vendor()).streaming(streaming(rest)))
        .await
        .expect("fake starts")
}

/// The whole body of an unstreamed answer to the same request.
async fn unstreamed(wire: Wire, fake: &FakeVendor, text: &str) -> Vec<u8> {
    fake.set_streaming(None);
    let response = wire.request(fake, KEY, text).send().await.expect("sent");
    assert_eq!(response.status(), 200);
    let body = response.bytes().await.expect("whole body").to_vec();
    let decoded = wire.decode(&body);
    assert!(decoded.ended && !decoded.failed, "{wire:?}: {decoded:?}");
    decoded.audio
}

async fn first_piece_comes_before_the_end_and_the_pieces_join_into_the_unstreamed_audio(
    wire: Wire,
) {
    let fake = fake(wire, Duration::from_secs(1)).await;
    let text = "Pieces of one answer.";
    let mut response = wire.request(&fake, KEY, text).send().await.expect("sent");
    assert_eq!(response.status(), 200);
    let first = response
        .chunk()
        .await
        .expect("first chunk")
        .expect("a first chunk before the end");
    // The stream has not ended: the vendor still counts the request and has served nothing.
    let now = fake.key_stats(KEY);
    assert_eq!((now.in_flight, now.successes), (1, 0), "{wire:?}: {now:?}");
    let mut body = first.to_vec();
    read_rest(&mut response, &mut body)
        .await
        .expect("the stream ends cleanly");
    assert!(
        first.len() < body.len(),
        "{wire:?}: the first chunk held everything"
    );
    let streamed = wire.decode(&body);
    assert!(streamed.ended && !streamed.failed, "{wire:?}: {streamed:?}");
    if !wire.is_raw() {
        assert_eq!(streamed.pieces, 4, "{wire:?}: one event or line per piece");
    }
    if wire == Wire::MiniMax {
        assert_eq!(
            streamed.aggregated.as_deref(),
            Some(&streamed.audio[..]),
            "the last MiniMax event repeats the whole audio"
        );
    }
    assert_eq!(
        streamed.audio,
        unstreamed(wire, &fake, text).await,
        "{wire:?}"
    );
    eventually("both requests are uncounted", || {
        fake.key_stats(KEY).in_flight == 0
    })
    .await;
    let end = fake.key_stats(KEY);
    assert_eq!(
        (end.successes, end.peak_concurrency, end.faults_injected),
        (2, 1, 0),
        "{wire:?}: {end:?}"
    );
}
per_wire!(first_piece_comes_before_the_end_and_the_pieces_join_into_the_unstreamed_audio);

async fn a_break_after_the_first_piece_is_seen_the_vendors_way(wire: Wire) {
    let fake = fake(wire, Duration::from_millis(300)).await;
    let text = "This answer breaks.";
    let full = {
        let audio = unstreamed(wire, &fake, text).await;
        fake.set_streaming(Some(streaming(Duration::from_millis(300))));
        audio
    };
    fake.script([Step::BreakAfterFirstPiece]);
    let mut response = wire.request(&fake, KEY, text).send().await.expect("sent");
    assert_eq!(
        response.status(),
        200,
        "{wire:?}: a break comes after a 200"
    );
    let mut body = Vec::new();
    let read = read_rest(&mut response, &mut body).await;
    if wire.is_raw() {
        assert!(read.is_err(), "{wire:?}: the body is aborted, not ended");
        assert!(!body.is_empty() && body.len() < full.len(), "{wire:?}");
        assert_eq!(
            &full[..body.len()],
            &body[..],
            "{wire:?}: a prefix was sent"
        );
    } else {
        read.expect("an SSE or JSON-lines break ends the body normally");
        let d = wire.decode(&body);
        assert!(d.failed && !d.ended, "{wire:?}: {d:?}");
        assert_eq!(d.pieces, 1, "{wire:?}: one piece before the error");
        assert!(
            !d.audio.is_empty() && d.audio.len() < full.len(),
            "{wire:?}"
        );
        assert_eq!(&full[..d.audio.len()], &d.audio[..], "{wire:?}");
    }
    eventually("the broken request is uncounted", || {
        fake.key_stats(KEY).in_flight == 0
    })
    .await;
    let k = fake.key_stats(KEY);
    assert_eq!((k.successes, k.faults_injected), (1, 1), "{wire:?}: {k:?}");
}
per_wire!(a_break_after_the_first_piece_is_seen_the_vendors_way);

async fn a_client_that_drops_the_stream_is_uncounted_at_once(wire: Wire) {
    // The stream would run for a minute: only noticing the drop ends the count in time.
    let fake = fake(wire, Duration::from_secs(60)).await;
    let mut response = wire
        .request(&fake, KEY, "A listener who leaves.")
        .send()
        .await
        .expect("sent");
    response
        .chunk()
        .await
        .expect("first chunk")
        .expect("a first chunk");
    assert_eq!(fake.key_stats(KEY).in_flight, 1);
    drop(response);
    eventually("the dropped stream is uncounted", || {
        fake.key_stats(KEY).in_flight == 0
    })
    .await;
    let k = fake.key_stats(KEY);
    assert_eq!(
        (k.successes, k.admitted_in_flight),
        (0, 0),
        "{wire:?}: {k:?}"
    );
}
per_wire!(a_client_that_drops_the_stream_is_uncounted_at_once);

async fn markers_start_the_audio_with_the_request_text(wire: Wire) {
    let fake = FakeVendor::start(
        FakeConfig::new(wire.vendor())
            .streaming(streaming(Duration::from_millis(100)))
            .markers(true),
    )
    .await
    .expect("fake starts");
    let text = "Première phrase du texte, assez longue pour être coupée à 48 octets.";
    let response = wire.request(&fake, KEY, text).send().await.expect("sent");
    let body = response.bytes().await.expect("body");
    let audio = wire.decode(&body).audio;
    let marker = audio::marker(text);
    assert!(marker.len() <= 53 && marker.len().is_multiple_of(2));
    let at = audio
        .windows(marker.len())
        .position(|w| w == marker)
        .unwrap_or_else(|| panic!("{wire:?}: no marker in the audio"));
    let expected = match wire {
        Wire::OpenAi | Wire::Azure => 44, // after the WAV header
        Wire::MiniMax => 4,               // after the first MP3 frame header
        Wire::ElevenLabs | Wire::DashScope | Wire::VolcengineV3 => 0, // raw PCM
    };
    assert_eq!(at, expected, "{wire:?}");
}
per_wire!(markers_start_the_audio_with_the_request_text);
