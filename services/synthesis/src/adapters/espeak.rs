//! The local `espeak-ng` engine (provider `espeak`): real speech offline, the default vendor of
//! `make run`. A key's capacity is the number of concurrent engine processes.
//!
//! One call = one process: `espeak-ng -b 1 -v <voice> -s <wpm> -p <pitch> -a <amplitude>
//! --stdout --stdin`, text written to stdin (never argv), WAV read from stdout as espeak-ng
//! writes it and passed on piece by piece (PCM: the samples after the header). The process
//! is killed when the call times out or is cut off (`kill_on_drop`). With `--stdout`
//! espeak-ng cannot seek and writes placeholder RIFF/data sizes (0x7FFFF000); the service's
//! joiner gives the caller a WAV whose sizes match its bytes.
//!
//! # Parameter mapping (applied or refused, never clamped — invariant 8 of docs/ARCHITECTURE.md)
//! | snapshot | espeak-ng | mapping | accepted |
//! |---|---|---|---|
//! | `voiceId` | `-v` | as is (`en-us`, `cmn`, `en-us+f3`; see `espeak-ng --voices`) | `[A-Za-z0-9_+-/]`, 1..64 |
//! | `params.pitchPct` | `-p` 0..99 | `round((pitchPct + 50) × 99 / 100)`: −50 → 0, 0 → 50 (espeak default), +50 → 99 | −50..+50 |
//! | `params.rate` | `-s` words/min | `round(175 × rate)` (175 = espeak default) | 80..450 wpm, i.e. ≈ 0.46..2.57 |
//! | `params.volumePct` | `-a` 0..200 | `round(100 + volumePct)`: −100 → 0 (silent), 0 → 100 (default), +100 → 200 | −100..+100 |
//! | `model` | — | only `""` or `espeak-ng` | |
//! | `extra.*` | — | espeak-ng has no extra options: every key is refused | none |
//! | format | — | `WAV` (fixed header) or `PCM` (the samples, s16le mono) | WAV, PCM |
//! | sample rate | — | espeak-ng renders 22050 Hz only | 0 (default) or 22050 |
//!
//! espeak-ng's `-p` is its own 0..99 pitch scale, not a percentage of frequency: the pitch
//! mapping is linear on that scale, so `pitchPct` is approximate for this engine.
//!
//! # Outcomes
//! Spawn failure (binary missing) and non-zero exit → UPSTREAM_ERROR with the reason and
//! stderr; an unknown voice (espeak-ng says "voice does not exist") → CLIENT_ERROR; the
//! per-attempt timeout → TIMEOUT; output that is not a WAV → UPSTREAM_ERROR.

use std::{path::PathBuf, process::Stdio};

use async_trait::async_trait;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use voxpool_domain::snapshot::Snapshot;
use voxpool_domain::{contract::Outcome, provider::Provider};

use super::{
    AudioFormat, AudioSink, ParamError, StreamEnd, TextLimit, VendorAdapter, VendorFailure,
    VendorRequest,
};
use crate::audio::wav;

/// Provider id.
pub const PROVIDER: &str = Provider::Espeak.as_str();
/// The only sample rate espeak-ng renders (Hz).
pub const SAMPLE_RATE_HZ: u32 = 22_050;
/// espeak-ng's default speed (words per minute) = rate 1.0.
pub const DEFAULT_WPM: f64 = 175.0;
/// Slowest speed espeak-ng accepts (words per minute).
pub const MIN_WPM: u32 = 80;
/// Fastest speed espeak-ng accepts (words per minute).
pub const MAX_WPM: u32 = 450;
/// Characters per process call; longer text is split by the job module (`crate::job`).
pub const TEXT_LIMIT_CHARS: usize = 2_000;
/// Most stderr bytes kept for an error message.
const STDERR_CAP: u64 = 2_048;

/// The espeak-ng command-line values for one voice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EspeakArgs {
    /// `-v`
    pub voice: String,
    /// `-s`, words per minute.
    pub wpm: u32,
    /// `-p`, 0..99.
    pub pitch: u32,
    /// `-a`, 0..200.
    pub amplitude: u32,
}

fn refuse(param: &str, value: impl ToString, reason: impl Into<String>) -> ParamError {
    ParamError {
        param: param.into(),
        value: value.to_string(),
        provider: PROVIDER.into(),
        reason: reason.into(),
    }
}

/// Maps a snapshot onto espeak-ng flags (module doc table) or names the param it cannot apply.
pub fn map_voice(voice: &Snapshot) -> Result<EspeakArgs, ParamError> {
    let id = &voice.voice_id;
    let id_ok = !id.is_empty()
        && id.len() <= 64
        && !id.starts_with('-')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'+' | b'-' | b'/'));
    if !id_ok {
        return Err(refuse(
            "voice_id",
            id,
            "an espeak-ng voice name such as en-us, cmn or en-us+f3 (see espeak-ng --voices)",
        ));
    }
    if !voice.model.is_empty() && voice.model != "espeak-ng" {
        return Err(refuse(
            "model",
            &voice.model,
            "the espeak provider has one model: \"espeak-ng\" (or leave it empty)",
        ));
    }
    if let Some(key) = voice.extra.keys().next() {
        let value = voice.extra.get(key).map_or("", String::as_str);
        return Err(refuse(
            &format!("extra.{key}"),
            value,
            "espeak-ng has no extra options",
        ));
    }
    let p = voice.params;
    let pitch = match p.pitch_pct {
        None => 50,
        Some(v) if (-50.0..=50.0).contains(&v) => ((v + 50.0) * 99.0 / 100.0).round() as u32,
        Some(v) => {
            return Err(refuse(
                "params.pitchPct",
                v,
                "must be -50..+50 (maps to espeak-ng -p 0..99)",
            ));
        }
    };
    let wpm = match p.rate {
        None => DEFAULT_WPM as u32,
        Some(r) if r.is_finite() && r > 0.0 => {
            let wpm = (DEFAULT_WPM * r).round();
            if wpm < f64::from(MIN_WPM) || wpm > f64::from(MAX_WPM) {
                return Err(refuse(
                    "params.rate",
                    r,
                    format!(
                        "{wpm} words/min is outside espeak-ng's {MIN_WPM}..{MAX_WPM} (rate {:.2}..{:.2} at 175 wpm = 1.0)",
                        f64::from(MIN_WPM) / DEFAULT_WPM,
                        f64::from(MAX_WPM) / DEFAULT_WPM
                    ),
                ));
            }
            wpm as u32
        }
        Some(r) => return Err(refuse("params.rate", r, "must be a positive multiplier")),
    };
    let amplitude = match p.volume_pct {
        None => 100,
        Some(v) if (-100.0..=100.0).contains(&v) => (100.0 + v).round() as u32,
        Some(v) => {
            return Err(refuse(
                "params.volumePct",
                v,
                "must be -100..+100 (maps to espeak-ng -a 0..200)",
            ));
        }
    };
    Ok(EspeakArgs {
        voice: id.clone(),
        wpm,
        pitch,
        amplitude,
    })
}

/// Checks the output format and sample rate espeak-ng can produce.
fn check_output(format: AudioFormat, sample_rate_hz: Option<u32>) -> Result<(), ParamError> {
    if !matches!(format, AudioFormat::Wav | AudioFormat::Pcm) {
        return Err(refuse(
            "format",
            format.to_string(),
            "espeak-ng produces WAV or PCM only",
        ));
    }
    match sample_rate_hz {
        None | Some(SAMPLE_RATE_HZ) => Ok(()),
        Some(r) => Err(refuse(
            "sample_rate_hz",
            r,
            format!("espeak-ng renders {SAMPLE_RATE_HZ} Hz only (or pass 0)"),
        )),
    }
}

/// The espeak-ng adapter (module doc).
#[derive(Clone, Debug)]
pub struct EspeakAdapter {
    program: PathBuf,
}

impl EspeakAdapter {
    /// An adapter running `program` (normally `espeak-ng` from `PATH`).
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
        }
    }

    fn failure(outcome: Outcome, message: String) -> VendorFailure {
        VendorFailure {
            outcome,
            http_status: None,
            retry_after_ms: None,
            message,
        }
    }

    /// Runs the process to completion, writing its stdout into `sink` as espeak-ng produces
    /// it (`format` PCM: the samples after the WAV header); the caller bounds it with a
    /// timeout (dropping this future kills the process).
    async fn run(
        &self,
        args: &EspeakArgs,
        text: &str,
        format: AudioFormat,
        sink: &AudioSink,
    ) -> Result<(), VendorFailure> {
        let mut child = tokio::process::Command::new(&self.program)
            .args(["-b", "1", "-v", &args.voice])
            .args([
                "-s",
                &args.wpm.to_string(),
                "-p",
                &args.pitch.to_string(),
                "-a",
                &args.amplitude.to_string(),
            ])
            .args(["--stdout", "--stdin"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // A process group of its own: a terminal's Ctrl-C (SIGINT to the foreground group,
            // `make run`) reaches synthesis, which drains its calls, not the engine mid-call.
            // An abandoned call still kills it (kill_on_drop).
            .process_group(0)
            .spawn()
            .map_err(|e| {
                Self::failure(
                    Outcome::UpstreamError,
                    format!("cannot start {}: {e}", self.program.display()),
                )
            })?;
        let (Some(mut stdin), Some(mut stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(Self::failure(
                Outcome::UpstreamError,
                "espeak-ng pipes were not set up".into(),
            ));
        };
        let write = async move {
            // A write error means the process exited early; its exit status tells why.
            let _ = stdin.write_all(text.as_bytes()).await;
            drop(stdin);
        };
        let read = async {
            // PCM: the WAV header is held back until its end is known, then only samples flow.
            let mut header: Option<Vec<u8>> = (format == AudioFormat::Pcm).then(Vec::new);
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = stdout.read(&mut buf).await?;
                if n == 0 {
                    return Ok::<(), std::io::Error>(());
                }
                let Some(held) = header.as_mut() else {
                    sink.write(buf[..n].to_vec());
                    continue;
                };
                held.extend_from_slice(&buf[..n]);
                match wav::header(held) {
                    Ok(Some(h)) => {
                        sink.write(held.split_off(h.data_start));
                        header = None;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e));
                    }
                }
            }
        };
        let mut err = Vec::new();
        let mut stderr = stderr.take(STDERR_CAP);
        let (_, read_out, _) = tokio::join!(write, read, stderr.read_to_end(&mut err));
        let status = child.wait().await.map_err(|e| {
            Self::failure(
                Outcome::UpstreamError,
                format!("waiting for espeak-ng: {e}"),
            )
        })?;
        let stderr = String::from_utf8_lossy(&err).trim().to_owned();
        if !status.success() {
            if stderr.contains("voice does not exist") {
                return Err(Self::failure(
                    Outcome::ClientError,
                    format!(
                        "espeak-ng has no voice {:?} (see espeak-ng --voices)",
                        args.voice
                    ),
                ));
            }
            return Err(Self::failure(
                Outcome::UpstreamError,
                format!("espeak-ng exited with {status}: {stderr}"),
            ));
        }
        read_out.map_err(|e| {
            Self::failure(
                Outcome::UpstreamError,
                format!("reading espeak-ng output: {e}"),
            )
        })
    }
}

#[async_trait]
impl VendorAdapter for EspeakAdapter {
    fn provider(&self) -> Provider {
        Provider::Espeak
    }

    fn text_limit(&self) -> TextLimit {
        TextLimit::Chars(TEXT_LIMIT_CHARS)
    }

    fn check(
        &self,
        voice: &Snapshot,
        format: AudioFormat,
        sample_rate_hz: Option<u32>,
    ) -> Result<(), ParamError> {
        map_voice(voice)?;
        check_output(format, sample_rate_hz)
    }

    fn default_sample_rate_hz(&self, _format: AudioFormat) -> Option<u32> {
        Some(SAMPLE_RATE_HZ)
    }

    async fn stream(
        &self,
        request: VendorRequest<'_>,
        sink: &AudioSink,
    ) -> Result<StreamEnd, VendorFailure> {
        let args = map_voice(&request.utterance.voice)
            .and_then(|a| {
                check_output(request.utterance.format, request.utterance.sample_rate_hz).map(|()| a)
            })
            .map_err(|e| Self::failure(Outcome::ClientError, e.to_string()))?;
        // Nothing is spoken before the attempt's usage Charge is written.
        if !request.gate.opened().await {
            return Err(Self::failure(
                Outcome::Timeout,
                "not spoken: the call's usage record could not be written".into(),
            ));
        }
        request.gate.mark_sent();
        let run = self.run(
            &args,
            &request.utterance.text,
            request.utterance.format,
            sink,
        );
        tokio::time::timeout(request.timeout, run)
            .await
            .map_err(|_| {
                Self::failure(
                    Outcome::Timeout,
                    format!(
                        "espeak-ng did not finish within {} ms",
                        request.timeout.as_millis()
                    ),
                )
            })??;
        if sink.written() == 0 && request.utterance.format == AudioFormat::Wav {
            // Nothing to say (e.g. punctuation only): an empty WAV, not an error.
            let spec = wav::WavSpec {
                channels: 1,
                sample_rate: SAMPLE_RATE_HZ,
                bits_per_sample: 16,
            };
            sink.write(wav::write(spec, &[]).map_err(|e| {
                Self::failure(Outcome::UpstreamError, format!("espeak-ng output: {e}"))
            })?);
        }
        Ok(StreamEnd {
            sample_rate_hz: Some(SAMPLE_RATE_HZ),
        })
    }
}

#[cfg(test)]
#[path = "espeak_tests.rs"]
mod tests;
