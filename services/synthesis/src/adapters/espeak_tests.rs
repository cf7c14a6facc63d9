//! Tests of the espeak-ng adapter: the param mapping table, refusals, and real processes.

use std::{os::unix::fs::PermissionsExt, sync::Arc, time::Duration};

use voxpool_domain::snapshot::{Params, Snapshot};

use super::*;
use crate::adapters::{KeyCredential, UpstreamTarget, Utterance, VendorAudio};

fn voice(params: Params) -> Snapshot {
    let mut s = Snapshot::from_json(
        r#"{"packId":"vp_t","packVersion":"1","provider":"espeak","model":"espeak-ng","voiceId":"en-us",
            "ttsModelId":"espeak-local","tier":"STANDARD","frozenAt":"2026-01-01T00:00:00Z","digest":""}"#,
    )
    .expect("test snapshot");
    s.params = params;
    s.seal()
}

fn params(pitch_pct: Option<f64>, rate: Option<f64>, volume_pct: Option<f64>) -> Params {
    Params {
        pitch_pct,
        rate,
        volume_pct,
    }
}

#[test]
fn params_map_onto_espeak_flags_as_documented() {
    let table = [
        (params(None, None, None), (50, 175, 100)),
        (params(Some(-50.0), None, None), (0, 175, 100)),
        (params(Some(0.0), None, None), (50, 175, 100)),
        (params(Some(50.0), None, None), (99, 175, 100)),
        (params(Some(10.0), None, None), (59, 175, 100)),
        (params(None, Some(1.2), None), (50, 210, 100)),
        (params(None, Some(0.5), None), (50, 88, 100)),
        (params(None, Some(2.5), None), (50, 438, 100)),
        (params(None, None, Some(-100.0)), (50, 175, 0)),
        (params(None, None, Some(25.0)), (50, 175, 125)),
        (params(None, None, Some(100.0)), (50, 175, 200)),
    ];
    for (p, (pitch, wpm, amplitude)) in table {
        let args = map_voice(&voice(p)).unwrap();
        assert_eq!(
            (args.pitch, args.wpm, args.amplitude),
            (pitch, wpm, amplitude),
            "{p:?}"
        );
    }
}

#[test]
fn out_of_range_params_are_refused_with_their_name_never_clamped() {
    let cases = [
        (params(Some(51.0), None, None), "params.pitchPct"),
        (params(Some(-60.0), None, None), "params.pitchPct"),
        (params(None, Some(0.25), None), "params.rate"),
        (params(None, Some(3.0), None), "params.rate"),
        (params(None, Some(f64::NAN), None), "params.rate"),
        (params(None, None, Some(150.0)), "params.volumePct"),
    ];
    for (p, field) in cases {
        let err = map_voice(&voice(p)).unwrap_err();
        assert_eq!(err.param, field, "{p:?}");
        assert_eq!(err.provider, "espeak");
        assert!(err.to_string().contains(field), "{err}");
    }
}

#[test]
fn extra_options_unknown_models_and_odd_voice_ids_are_refused() {
    let mut v = voice(Params::default());
    v.extra.insert("style".into(), "calm".into());
    assert_eq!(map_voice(&v).unwrap_err().param, "extra.style");
    let mut v = voice(Params::default());
    v.model = "tacotron".into();
    assert_eq!(map_voice(&v).unwrap_err().param, "model");
    for id in ["", "-w", "en us", "en;rm"] {
        let mut v = voice(Params::default());
        v.voice_id = id.into();
        assert_eq!(map_voice(&v).unwrap_err().param, "voice_id", "{id:?}");
    }
}

#[test]
fn only_wav_and_pcm_at_22050_hz_are_offered() {
    let a = EspeakAdapter::new("espeak-ng");
    let v = voice(Params::default());
    assert!(a.check(&v, AudioFormat::Wav, None).is_ok());
    assert!(a.check(&v, AudioFormat::Pcm, Some(22_050)).is_ok());
    assert_eq!(
        a.check(&v, AudioFormat::Mp3, None).unwrap_err().param,
        "format"
    );
    let err = a.check(&v, AudioFormat::OggOpus, None).unwrap_err();
    assert_eq!(err.param, "format");
    // The value as the API spells it, not the Rust variant.
    assert_eq!(err.value, "OGG_OPUS", "{err}");
    let err = a.check(&v, AudioFormat::Wav, Some(16_000)).unwrap_err();
    assert_eq!(err.param, "sample_rate_hz");
    assert!(err.reason.contains("22050"), "{err}");
}

async fn call(
    adapter: &EspeakAdapter,
    v: &Snapshot,
    text: &str,
    format: AudioFormat,
    timeout: Duration,
) -> Result<VendorAudio, VendorFailure> {
    let key = KeyCredential {
        key_id: "local/engine-1".into(),
        app_id: "engine-1".into(),
        secret: None,
    };
    let upstream = UpstreamTarget {
        id: "local".into(),
        ..UpstreamTarget::default()
    };
    adapter
        .synthesize(VendorRequest {
            utterance: &Utterance {
                text: text.to_owned(),
                voice: Arc::new(v.clone()),
                pool_model: "espeak-ng".to_owned(),
                format,
                sample_rate_hz: None,
                reference: None,
                seed: None,
            },
            key: &key,
            upstream: &upstream,
            timeout,
            attempt_id: "t-1",
            gate: Default::default(),
        })
        .await
}

#[tokio::test]
async fn real_engine_streams_its_wav_and_the_joiner_makes_the_sizes_match() {
    let a = EspeakAdapter::new("espeak-ng");
    let audio = call(
        &a,
        &voice(params(Some(10.0), Some(1.2), Some(-20.0))),
        "Hello world.",
        AudioFormat::Wav,
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    // espeak-ng's own stream: placeholder sizes (it cannot seek on stdout).
    let raw = wav::header(&audio.bytes).unwrap().unwrap();
    assert_eq!(raw.data_len, None, "espeak-ng's placeholder data size");
    // What callers get: the joiner's one header, sizes matching the bytes.
    let mut joiner = crate::audio::Joiner::new(AudioFormat::Wav);
    let mut out = joiner.push(&audio).unwrap();
    out.extend(joiner.finish().unwrap());
    let b = &out;
    assert_eq!(&b[0..4], b"RIFF");
    assert_eq!(
        u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as usize,
        b.len() - 8
    );
    assert_eq!(
        u32::from_le_bytes([b[40], b[41], b[42], b[43]]) as usize,
        b.len() - 44
    );
    let reader = hound::WavReader::new(std::io::Cursor::new(b)).unwrap();
    assert_eq!(reader.spec().sample_rate, 22_050);
    assert!(
        reader.duration() > 22_050 / 2,
        "{} samples",
        reader.duration()
    );
}

#[tokio::test]
async fn pcm_is_the_wav_samples_without_header() {
    let a = EspeakAdapter::new("espeak-ng");
    let v = voice(Params::default());
    let wav = call(
        &a,
        &v,
        "Testing.",
        AudioFormat::Wav,
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    let pcm = call(
        &a,
        &v,
        "Testing.",
        AudioFormat::Pcm,
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    assert_eq!(pcm.bytes, wav.bytes[44..]);
    assert_eq!(pcm.sample_rate_hz, Some(22_050));
}

#[tokio::test]
async fn a_missing_binary_is_an_upstream_error() {
    let a = EspeakAdapter::new("/nonexistent/espeak-ng");
    let err = call(
        &a,
        &voice(Params::default()),
        "hi",
        AudioFormat::Wav,
        Duration::from_secs(5),
    )
    .await
    .unwrap_err();
    assert_eq!(err.outcome, Outcome::UpstreamError);
    assert!(
        err.message.contains("cannot start /nonexistent/espeak-ng"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn an_unknown_voice_is_a_client_error() {
    let a = EspeakAdapter::new("espeak-ng");
    let mut v = voice(Params::default());
    v.voice_id = "xx-nope".into();
    let err = call(&a, &v, "hi", AudioFormat::Wav, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(err.outcome, Outcome::ClientError);
    assert!(err.message.contains("xx-nope"), "{}", err.message);
}

#[tokio::test]
async fn a_failing_engine_is_an_upstream_error_with_its_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("espeak-ng");
    std::fs::write(&script, "#!/bin/sh\necho 'engine exploded' >&2\nexit 3\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let err = call(
        &EspeakAdapter::new(&script),
        &voice(Params::default()),
        "hi",
        AudioFormat::Wav,
        Duration::from_secs(5),
    )
    .await
    .unwrap_err();
    assert_eq!(err.outcome, Outcome::UpstreamError);
    assert!(err.message.contains("engine exploded"), "{}", err.message);
}

#[tokio::test]
async fn a_hung_engine_times_out_and_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("espeak-ng");
    let pid_file = dir.path().join("pid");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho $$ > {}\nexec sleep 60\n",
            pid_file.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let err = call(
        &EspeakAdapter::new(&script),
        &voice(Params::default()),
        "hi",
        AudioFormat::Wav,
        Duration::from_millis(300),
    )
    .await
    .unwrap_err();
    assert_eq!(err.outcome, Outcome::Timeout);
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .to_owned();
    // kill_on_drop sends SIGKILL; the zombie is reaped by tokio in the background.
    let gone = (0..200).any(|_| {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let dead = state.is_empty() || state.split_whitespace().nth(2) == Some("Z");
        if !dead {
            std::thread::sleep(Duration::from_millis(10));
        }
        dead
    });
    assert!(
        gone,
        "espeak-ng process {pid} still running after the timeout"
    );
}
