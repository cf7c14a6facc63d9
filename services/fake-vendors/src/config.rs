//! [`FakeConfig`]: how a fake behaves, set before it starts (some knobs change later through
//! the [`FakeVendor`](crate::FakeVendor) handle).

use crate::{
    VendorKind,
    cloning::CloneConfig,
    control::Settings,
    knobs::{FaultRates, Latency, Streaming},
};

/// How a fake behaves.
#[derive(Clone, Debug)]
pub struct FakeConfig {
    /// The wire format.
    pub vendor: VendorKind,
    /// Concurrent requests allowed per key; 0 = unlimited.
    pub cap: u32,
    /// Latency of admitted requests.
    pub latency: Latency,
    /// Random faults.
    pub faults: FaultRates,
    /// `Retry-After` seconds sent with rate-limit answers (cap and random ones).
    pub retry_after_secs: Option<u64>,
    /// When set, only these keys are accepted (others get the vendor's auth error).
    pub valid_keys: Option<Vec<String>>,
    /// Length of the returned audio, in ms.
    pub tone_ms: u32,
    /// Streamed delivery of admitted answers (`None`: the latency, then the whole answer).
    pub streaming: Option<Streaming>,
    /// Start each audio payload with [`audio::marker`] of the request's input text.
    pub markers: bool,
    /// Generation time per character of text, waited before a self-hosted fake's whole
    /// (unstreamed) answer on top of its latency: a GPU server's time grows with its text.
    pub per_char: std::time::Duration,
    /// Voice cloning: the scope of each key, slots, the clone rate limit and lifetimes
    /// ([`CloneConfig`]).
    pub clones: CloneConfig,
}

impl FakeConfig {
    /// Defaults: cap 10 per key, no latency, no faults, any key, 200 ms of audio, no streaming,
    /// no markers.
    pub fn new(vendor: VendorKind) -> Self {
        Self {
            vendor,
            cap: 10,
            latency: Latency::default(),
            faults: FaultRates::default(),
            retry_after_secs: None,
            valid_keys: None,
            tone_ms: 200,
            streaming: None,
            markers: false,
            per_char: std::time::Duration::ZERO,
            clones: CloneConfig::for_vendor(vendor),
        }
    }

    /// Sets the voice-cloning behaviour (scopes, slots, limits, lifetimes).
    pub fn clones(mut self, clones: CloneConfig) -> Self {
        self.clones = clones;
        self
    }

    /// Sets the generation time per character of a self-hosted fake's unstreamed answer.
    pub fn per_char(mut self, per_char: std::time::Duration) -> Self {
        self.per_char = per_char;
        self
    }

    /// Sets the length of the returned audio, in ms.
    pub fn tone_ms(mut self, tone_ms: u32) -> Self {
        self.tone_ms = tone_ms;
        self
    }

    /// Streams admitted answers on this timeline (replaces the latency; see [`Streaming`]).
    pub fn streaming(mut self, streaming: Streaming) -> Self {
        self.streaming = Some(streaming);
        self
    }

    /// Turns the text markers in the audio on or off ([`audio::marker`]).
    pub fn markers(mut self, on: bool) -> Self {
        self.markers = on;
        self
    }

    /// Sets the per-key cap.
    pub fn cap(mut self, cap: u32) -> Self {
        self.cap = cap;
        self
    }

    /// Sets the latency.
    pub fn latency(mut self, latency: Latency) -> Self {
        self.latency = latency;
        self
    }

    /// Sets the random fault rates.
    pub fn faults(mut self, faults: FaultRates) -> Self {
        self.faults = faults;
        self
    }

    /// Sets the `Retry-After` of rate-limit answers.
    pub fn retry_after_secs(mut self, secs: u64) -> Self {
        self.retry_after_secs = Some(secs);
        self
    }

    /// Accepts only these keys.
    pub fn valid_keys<I: IntoIterator<Item = S>, S: Into<String>>(mut self, keys: I) -> Self {
        self.valid_keys = Some(keys.into_iter().map(Into::into).collect());
        self
    }

    pub(crate) fn settings(&self) -> Settings {
        Settings {
            cap: self.cap,
            latency: self.latency,
            faults: self.faults,
            retry_after_secs: self.retry_after_secs,
            valid_keys: self
                .valid_keys
                .as_ref()
                .map(|k| k.iter().cloned().collect()),
            tone_ms: self.tone_ms,
            streaming: self.streaming,
            markers: self.markers,
            per_char: self.per_char,
        }
    }
}
