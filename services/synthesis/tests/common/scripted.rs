//! [`Scripted`]: a `VendorAdapter` whose calls follow a script (fail with an outcome, block
//! until cancelled, panic, or answer), recording every call it receives.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use tokio::sync::mpsc;
use voxpool_domain::snapshot::Snapshot;
use voxpool_proto::scheduler::v1::Outcome;
use voxpool_synthesis::{
    adapters::{
        AudioFormat, AudioSink, ParamError, StreamEnd, TextLimit, VendorAdapter, VendorFailure,
        VendorRequest, registry::Registry,
    },
    audio::wav::{self, WavSpec},
};

/// Sample rate of scripted audio.
pub const RATE: u32 = 24_000;

/// What the next call does.
#[derive(Clone, Debug)]
pub enum Step {
    /// Answer with audio derived from the text.
    Audio,
    /// Fail with this outcome, HTTP status and message (RATE_LIMITED: with a 60 s Retry-After).
    Fail(Outcome, Option<u16>, &'static str),
    /// Fail RATE_LIMITED (429) with a Retry-After of this many milliseconds.
    RateLimitedFor(u64),
    /// Answer HTTP 200 with a JSON body instead of audio.
    JsonBody,
    /// Signal `started`, then hang until the call is dropped (which signals `dropped`).
    Block,
    /// Panic inside the adapter.
    Panic,
    /// Signal `started`, wait until the test calls [`Scripted::open_gate`], then answer audio.
    Gate,
    /// Stream the first half of the audio, signal `started`, wait for
    /// [`Scripted::open_gate`], then stream the rest.
    FirstThenGate,
    /// Stream the first half of the audio, signal `started`, then hang until the call is
    /// dropped (which signals `dropped`).
    FirstThenBlock,
    /// Stream the first half of the audio, then fail with this outcome (a broken stream).
    FirstThenFail(Outcome),
}

/// One call as the adapter saw it.
#[derive(Clone, Debug)]
pub struct Call {
    pub key_id: String,
    pub secret: Option<String>,
    pub upstream: String,
    pub text: String,
    pub voice_id: String,
    pub params: voxpool_domain::snapshot::Params,
    pub sample_rate_hz: Option<u32>,
}

pub struct Scripted {
    provider: &'static str,
    limit: TextLimit,
    steps: Mutex<VecDeque<Step>>,
    pub calls: Mutex<Vec<Call>>,
    started: mpsc::UnboundedSender<()>,
    dropped: mpsc::UnboundedSender<()>,
    gate: tokio::sync::Semaphore,
}

/// Receivers for `Block` steps.
pub struct Signals {
    pub started: mpsc::UnboundedReceiver<()>,
    pub dropped: mpsc::UnboundedReceiver<()>,
}

struct SignalOnDrop(mpsc::UnboundedSender<()>);

impl Drop for SignalOnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

/// Audio bytes derived from `text` (deterministic): 40 samples per byte.
pub fn samples_for(text: &str) -> Vec<u8> {
    text.bytes()
        .flat_map(|b| std::iter::repeat_n(i16::from(b) * 100, 40))
        .flat_map(i16::to_le_bytes)
        .collect()
}

impl Scripted {
    /// A scripted adapter for `provider` with `limit`, following `steps` then answering audio.
    pub fn new(provider: &'static str, limit: TextLimit, steps: Vec<Step>) -> (Arc<Self>, Signals) {
        let (started, started_rx) = mpsc::unbounded_channel();
        let (dropped, dropped_rx) = mpsc::unbounded_channel();
        let me = Arc::new(Self {
            provider,
            limit,
            steps: Mutex::new(steps.into()),
            calls: Mutex::new(Vec::new()),
            started,
            dropped,
            gate: tokio::sync::Semaphore::new(0),
        });
        (
            me,
            Signals {
                started: started_rx,
                dropped: dropped_rx,
            },
        )
    }

    /// A registry serving only this adapter.
    pub fn registry(self: &Arc<Self>) -> Registry {
        let mut r = Registry::new();
        r.insert(self.provider(), self.clone() as Arc<dyn VendorAdapter>);
        r
    }

    /// Lets one `Gate` call answer.
    pub fn open_gate(&self) {
        self.gate.add_permits(1);
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().expect("calls lock").clone()
    }
}

#[async_trait]
impl VendorAdapter for Scripted {
    fn provider(&self) -> voxpool_domain::provider::Provider {
        self.provider
            .parse()
            .expect("a scripted adapter names a real provider")
    }

    fn text_limit(&self) -> TextLimit {
        self.limit
    }

    /// Refuses pitch (like OpenAI speech) and sample rates other than 0 / 24000.
    fn check(
        &self,
        voice: &Snapshot,
        _format: AudioFormat,
        sample_rate_hz: Option<u32>,
    ) -> Result<(), ParamError> {
        if let Some(p) = voice.params.pitch_pct {
            return Err(ParamError {
                param: "params.pitchPct".into(),
                value: p.to_string(),
                provider: self.provider.into(),
                reason: "this vendor has no pitch control".into(),
            });
        }
        match sample_rate_hz {
            None | Some(RATE) => Ok(()),
            Some(r) => Err(ParamError {
                param: "sample_rate_hz".into(),
                value: r.to_string(),
                provider: self.provider.into(),
                reason: "24000 only".into(),
            }),
        }
    }

    fn default_sample_rate_hz(&self, _format: AudioFormat) -> Option<u32> {
        Some(RATE)
    }

    async fn stream(
        &self,
        request: VendorRequest<'_>,
        sink: &AudioSink,
    ) -> Result<StreamEnd, VendorFailure> {
        // A vendor has the request once its body arrives, after the attempt's usage Charge.
        if !request.gate.opened().await {
            return Err(VendorFailure {
                outcome: voxpool_domain::contract::Outcome::Timeout,
                http_status: None,
                retry_after_ms: None,
                message: "not sent: the usage record was not written".into(),
            });
        }
        self.calls.lock().expect("calls lock").push(Call {
            key_id: request.key.key_id.clone(),
            secret: request.key.secret.as_ref().map(|s| s.expose().to_owned()),
            upstream: request.upstream.id.clone(),
            text: request.utterance.text.clone(),
            voice_id: request.utterance.voice.voice_id.clone(),
            params: request.utterance.voice.params,
            sample_rate_hz: request.utterance.sample_rate_hz,
        });
        let step = self
            .steps
            .lock()
            .expect("steps lock")
            .pop_front()
            .unwrap_or(Step::Audio);
        // Steps name the wire outcome (what tests compare attempts with); adapters report the
        // contract's.
        let fail = |outcome: Outcome, http_status, message: &str| VendorFailure {
            outcome: voxpool_domain::contract::Outcome::try_from(outcome as i32)
                .expect("a scripted outcome is a real outcome"),
            http_status,
            retry_after_ms: (outcome == Outcome::RateLimited).then_some(60_000),
            message: message.to_owned(),
        };
        if matches!(step, Step::Gate) {
            let _ = self.started.send(());
            let _permit = self.gate.acquire().await.expect("gate open");
        }
        let audio = || {
            let data = samples_for(&request.utterance.text);
            match request.utterance.format {
                AudioFormat::Pcm => data,
                _ => wav::write(
                    WavSpec {
                        channels: 1,
                        sample_rate: RATE,
                        bits_per_sample: 16,
                    },
                    &data,
                )
                .expect("wav"),
            }
        };
        let end = StreamEnd {
            sample_rate_hz: Some(RATE),
        };
        match step {
            Step::Audio | Step::Gate => {
                sink.write(audio());
                Ok(end)
            }
            Step::FirstThenGate | Step::FirstThenBlock | Step::FirstThenFail(_) => {
                let mut bytes = audio();
                let rest = bytes.split_off(bytes.len() / 2);
                sink.write(bytes);
                match step {
                    Step::FirstThenFail(outcome) => Err(fail(outcome, Some(200), "stream broke")),
                    Step::FirstThenBlock => {
                        let _signal = SignalOnDrop(self.dropped.clone());
                        let _ = self.started.send(());
                        std::future::pending::<()>().await;
                        unreachable!("pending never completes")
                    }
                    _ => {
                        let _ = self.started.send(());
                        let _permit = self.gate.acquire().await.expect("gate open");
                        sink.write(rest);
                        Ok(end)
                    }
                }
            }
            Step::Fail(outcome, status, message) => Err(fail(outcome, status, message)),
            Step::RateLimitedFor(ms) => Err(VendorFailure {
                retry_after_ms: Some(ms),
                ..fail(Outcome::RateLimited, Some(429), "slow down")
            }),
            Step::JsonBody => {
                sink.write(br#"{"error":{"message":"internal"}}"#.to_vec());
                Ok(StreamEnd::default())
            }
            Step::Block => {
                let _signal = SignalOnDrop(self.dropped.clone());
                let _ = self.started.send(());
                std::future::pending::<()>().await;
                unreachable!("pending never completes")
            }
            Step::Panic => panic!("scripted adapter panic"),
        }
    }
}
