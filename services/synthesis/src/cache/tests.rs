//! The cache over a real local blob store (a temporary directory): keys, round trips, TTL,
//! corruption, the size bound, purges. The S3 store and the call path (single-flight, hits
//! without a lease) are tested end to end in `tests/cache.rs`.

use std::{sync::Arc, time::Duration};

use object_store::{ObjectStoreExt as _, PutPayload};
use voxpool_domain::{audio::clip::ClipFormat, reference::Reference, snapshot::Snapshot};
use voxpool_runtime::blob::BlobStore;

use super::{Cache, Header, key::EntryKey};
use crate::adapters::{AudioFormat, ReferenceAudio, Utterance};

const DIGEST_A: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const DIGEST_B: &str = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const DAY: Duration = Duration::from_secs(86_400);

/// Pack `pack-1`'s voice, frozen as `digest`.
fn voice(pack_id: &str, digest: &str) -> Arc<Snapshot> {
    let mut voice = voxpool_fake_vendors::snapshot("openai", "tts-1", "alloy");
    voice.pack_id = pack_id.to_owned();
    voice.digest = digest.to_owned();
    Arc::new(voice)
}

/// `text` in pack-1's voice (snapshot A) on tts-1, as MP3 at the vendor's rate.
fn utterance(text: &str) -> Utterance {
    Utterance {
        text: text.to_owned(),
        voice: voice("pack-1", DIGEST_A),
        pool_model: "tts-1".to_owned(),
        format: AudioFormat::Mp3,
        sample_rate_hz: None,
        reference: None,
        seed: None,
    }
}

/// A clip whose digest is `digest`.
fn clip(digest: &str) -> Option<Arc<ReferenceAudio>> {
    Some(Arc::new(ReferenceAudio {
        reference: Reference {
            digest: digest.to_owned(),
            transcript: "hello".to_owned(),
            language: "en".to_owned(),
            emotion: String::new(),
            weight: 1,
            duration_ms: 1_000,
        },
        bytes: bytes::Bytes::from_static(b"clip"),
        format: ClipFormat::Wav,
    }))
}

/// The key of `u` from an openai pool under cache version 1.
fn key_of(u: &Utterance) -> EntryKey {
    EntryKey::of(u, "openai", 1)
}

/// The key of `text` as [`utterance`] says it.
fn key(text: &str) -> EntryKey {
    key_of(&utterance(text))
}

fn header(pool: &str) -> Header {
    Header {
        key: String::new(),
        sha256: String::new(),
        bytes: 0,
        sample_rate_hz: Some(24_000),
        key_id: "acct/k1".into(),
        pool: pool.into(),
        characters: 5,
    }
}

fn local(max_bytes: u64) -> (tempfile::TempDir, BlobStore, Cache) {
    let dir = tempfile::tempdir().unwrap();
    let blobs = BlobStore::open(Some(&format!("file://{}", dir.path().display()))).unwrap();
    let cache = Cache::new(&blobs, 1, max_bytes, Duration::from_secs(10));
    (dir, blobs, cache)
}

#[test]
fn every_part_of_the_identity_changes_the_key_and_nothing_else_does() {
    let base = key("Hello.");
    assert_eq!(base, key("Hello."));
    let variants = [
        EntryKey::of(&utterance("Hello."), "openai", 2),
        key_of(&Utterance {
            voice: voice("pack-1", DIGEST_B),
            ..utterance("Hello.")
        }),
        EntryKey::of(&utterance("Hello."), "azure", 1),
        key_of(&Utterance {
            pool_model: "tts-1-hd".to_owned(),
            ..utterance("Hello.")
        }),
        key("Hello!"),
        key_of(&Utterance {
            format: AudioFormat::Wav,
            ..utterance("Hello.")
        }),
        key_of(&Utterance {
            sample_rate_hz: Some(16_000),
            ..utterance("Hello.")
        }),
        key_of(&Utterance {
            reference: clip(DIGEST_B),
            ..utterance("Hello.")
        }),
        key_of(&Utterance {
            reference: clip(DIGEST_B),
            seed: Some(7),
            ..utterance("Hello.")
        }),
    ];
    for (i, v) in variants.iter().enumerate() {
        assert_ne!(v.hex, base.hex, "variant {i}");
    }
    for (i, v) in variants.iter().enumerate() {
        for w in &variants[i + 1..] {
            assert_ne!(v.hex, w.hex, "variant {i} shares a key with a later one");
        }
    }
    // A seed is no part of the identity of a voice without clips: its audio does not change.
    assert_eq!(
        key_of(&Utterance {
            seed: Some(7),
            ..utterance("Hello.")
        })
        .hex,
        base.hex
    );
    // Whitespace is not part of the identity: engines read these alike.
    assert_eq!(key("  Hello.\n").hex, base.hex);
    // The pack id only names the folder: the digest already seals it.
    assert!(
        base.path.as_ref().starts_with("pack-1/aaaa"),
        "{}",
        base.path
    );
}

#[tokio::test]
async fn an_entry_written_is_read_back_whole() {
    let (_dir, _blobs, cache) = local(1 << 30);
    let key = key("Hello.");
    assert!(cache.get(&key, DAY).await.unwrap().is_none());
    cache.put(&key, header("p"), b"mp3 bytes").await.unwrap();
    let entry = cache.get(&key, DAY).await.unwrap().expect("a hit");
    assert_eq!(&entry.audio[..], b"mp3 bytes");
    assert_eq!(entry.header.key_id, "acct/k1");
    assert_eq!(entry.header.sample_rate_hz, Some(24_000));
    let (counters, _) = cache.counters();
    assert_eq!(counters["p"].fills, 1);
}

#[tokio::test]
async fn an_entry_older_than_its_ttl_is_a_miss() {
    let (_dir, _blobs, cache) = local(1 << 30);
    let key = key("Hello.");
    cache.put(&key, header("p"), b"audio").await.unwrap();
    assert!(cache.get(&key, DAY).await.unwrap().is_some());
    // Written at least zero seconds ago: a TTL of zero has passed.
    assert!(cache.get(&key, Duration::ZERO).await.unwrap().is_none());
}

#[tokio::test]
async fn a_corrupt_or_truncated_entry_is_deleted_never_served() {
    let (dir, blobs, cache) = local(1 << 30);
    let key = key("Hello.");
    cache.put(&key, header("p"), b"0123456789").await.unwrap();
    let file = dir.path().join("cache").join(key.path.as_ref());
    let whole = std::fs::read(&file).unwrap();
    std::fs::write(&file, &whole[..whole.len() - 3]).unwrap();
    assert!(cache.get(&key, DAY).await.unwrap().is_none(), "truncated");
    assert!(!file.exists(), "the truncated entry was deleted");
    blobs
        .folder("cache")
        .put(&key.path, PutPayload::from_static(b"not an entry"))
        .await
        .unwrap();
    assert!(
        cache.get(&key, DAY).await.unwrap().is_none(),
        "foreign bytes"
    );
}

#[tokio::test]
async fn an_entry_copied_over_another_keys_path_is_never_served_for_it() {
    let (dir, _blobs, cache) = local(1 << 30);
    let alpha = key("Alpha one.");
    let bravo = key("Bravo two.");
    cache
        .put(&alpha, header("p"), b"alpha audio")
        .await
        .unwrap();
    cache
        .put(&bravo, header("p"), b"bravo audio")
        .await
        .unwrap();
    let path = |k: &EntryKey| dir.path().join("cache").join(k.path.as_ref());
    std::fs::copy(path(&alpha), path(&bravo)).unwrap();
    assert!(cache.get(&bravo, DAY).await.unwrap().is_none(), "refused");
    assert!(!path(&bravo).exists(), "and deleted, to be filled again");
    assert!(cache.get(&alpha, DAY).await.unwrap().is_some());
}

#[tokio::test]
async fn a_local_store_over_its_bound_evicts_the_oldest_written() {
    let bound = 10_000;
    let (dir, _blobs, cache) = local(bound);
    let audio = vec![7u8; 3_000];
    let texts = ["one", "two", "three", "four"];
    let keys: Vec<EntryKey> = texts.iter().map(|t| key(t)).collect();
    for (i, key) in keys.iter().enumerate() {
        cache.put(key, header("p"), &audio).await.unwrap();
        // Written minutes apart, as far as the store can tell (file clocks are coarse).
        let file = dir.path().join("cache").join(key.path.as_ref());
        let minutes_ago = u64::try_from(keys.len() - i).unwrap() * 60;
        std::fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(std::time::SystemTime::now() - Duration::from_secs(minutes_ago))
            .unwrap();
    }
    let held = cache.holdings().await.unwrap();
    assert!(held.bytes <= bound / 10 * 9, "{held:?}");
    assert!(
        cache.get(&keys[0], DAY).await.unwrap().is_none(),
        "the oldest went"
    );
    assert!(
        cache.get(&keys[3], DAY).await.unwrap().is_some(),
        "the newest stays"
    );
    assert!(cache.counters().1 >= 1);
}

#[tokio::test]
async fn purge_takes_a_pack_or_one_snapshot_and_nothing_else() {
    let (_dir, _blobs, cache) = local(1 << 30);
    let a = key("a");
    let b = key_of(&Utterance {
        voice: voice("pack-1", DIGEST_B),
        ..utterance("b")
    });
    let other = key_of(&Utterance {
        voice: voice("pack-2", DIGEST_A),
        ..utterance("c")
    });
    for key in [&a, &b, &other] {
        cache.put(key, header("p"), b"audio").await.unwrap();
    }
    let gone = cache.purge("", DIGEST_B).await.unwrap();
    assert_eq!(gone.entries, 1);
    assert!(cache.get(&b, DAY).await.unwrap().is_none());
    assert!(cache.get(&a, DAY).await.unwrap().is_some());
    let gone = cache.purge("pack-1", "").await.unwrap();
    assert_eq!(gone.entries, 1);
    assert!(cache.get(&a, DAY).await.unwrap().is_none());
    assert!(
        cache.get(&other, DAY).await.unwrap().is_some(),
        "another pack is untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_fills_leave_a_local_store_within_its_bound_at_rest() {
    let bound = 1 << 20;
    let (_dir, _blobs, cache) = local(bound);
    let cache = std::sync::Arc::new(cache);
    let audio = std::sync::Arc::new(vec![7u8; 16 * 1024]);
    // 64 fillers at once, 8 entries each: 8 MiB written into a 1 MiB bound.
    let fillers: Vec<_> = (0..64)
        .map(|f| {
            let (cache, audio) = (cache.clone(), audio.clone());
            tokio::spawn(async move {
                for i in 0..8 {
                    let text = format!("filler {f} entry {i}");
                    let key = key(&text);
                    cache.put(&key, header("p"), &audio).await.unwrap();
                }
            })
        })
        .collect();
    for filler in fillers {
        filler.await.unwrap();
    }
    let held = cache.holdings().await.unwrap();
    assert!(
        held.bytes <= bound,
        "{} bytes at rest over a bound of {bound} ({:.2}x)",
        held.bytes,
        held.bytes as f64 / bound as f64
    );
}

/// What someone who can write the store but holds no secret can do to an entry: swap its
/// audio and recompute the digest and length its header gives.
fn forge(object: &[u8], audio: &[u8]) -> Vec<u8> {
    let at = object
        .windows(7)
        .position(|w| w == b"{\"key\":")
        .expect("a JSON header");
    let len = u32::from_be_bytes(object[at - 4..at].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&object[at..at + len]).unwrap();
    header["sha256"] = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(audio)).into();
    header["bytes"] = audio.len().into();
    let json = serde_json::to_vec(&header).unwrap();
    let mut out = object[..at - 4].to_vec();
    out.extend_from_slice(&u32::try_from(json.len()).unwrap().to_be_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(audio);
    out
}

#[tokio::test]
async fn an_entry_whose_audio_was_swapped_with_its_digest_recomputed_is_never_served() {
    let (dir, _blobs, cache) = local(1 << 30);
    let key = key("Hello.");
    cache
        .put(&key, header("p"), b"the vendor's audio")
        .await
        .unwrap();
    let file = dir.path().join("cache").join(key.path.as_ref());
    let forged = forge(&std::fs::read(&file).unwrap(), b"someone else's audio");
    std::fs::write(&file, forged).unwrap();
    assert!(
        cache.get(&key, DAY).await.unwrap().is_none(),
        "a forged entry is a miss"
    );
    // The next fill replaces it and serves.
    cache
        .put(&key, header("p"), b"the vendor's audio")
        .await
        .unwrap();
    let entry = cache.get(&key, DAY).await.unwrap().expect("a hit");
    assert_eq!(&entry.audio[..], b"the vendor's audio");
}

#[tokio::test]
async fn an_unsealed_entry_of_the_previous_format_is_a_miss() {
    let (_dir, blobs, cache) = local(1 << 30);
    let key = key("Hello.");
    let audio = b"audio from before entries were sealed";
    let header = serde_json::json!({
        "key": key.hex, "sha256": hex::encode(<sha2::Sha256 as sha2::Digest>::digest(audio)),
        "bytes": audio.len(), "sampleRateHz": null, "keyId": "acct/k1", "pool": "p", "characters": 5,
    });
    let json = serde_json::to_vec(&header).unwrap();
    let mut object = b"voxpool-cache-1\n".to_vec();
    object.extend_from_slice(&u32::try_from(json.len()).unwrap().to_be_bytes());
    object.extend_from_slice(&json);
    object.extend_from_slice(audio);
    blobs
        .folder("cache")
        .put(&key.path, PutPayload::from(object))
        .await
        .unwrap();
    assert!(cache.get(&key, DAY).await.unwrap().is_none());
}
