//! [`CloudVendor`]: the skeleton every cloud adapter shares, written once.
//!
//! A cloud adapter is a mapping (snapshot, format and rate onto the vendor's wire values, or a
//! [`ParamError`] naming the param: invariant 8 of docs/ARCHITECTURE.md) and one HTTP exchange with one key's secret.
//! Everything around those two is the same for every vendor and lives here, in the one
//! [`VendorAdapter`] implementation for all of them: `check` is the mapping with its result
//! dropped; `stream` maps again (a refusal there is `CLIENT_ERROR`: the request, not the key,
//! is at fault), requires the key's secret (`KEY_INVALID` when it has none) and hands both to
//! [`CloudVendor::call`]. So a cloud adapter cannot skip the refusal or call without a secret.

use async_trait::async_trait;
use voxpool_domain::{provider::Provider, secret::Secret, snapshot::Snapshot};

use super::{
    AudioFormat, AudioSink, ParamError, StreamEnd, TextLimit, VendorAdapter, VendorFailure,
    VendorRequest, http,
};

/// A cloud adapter's mapping of a request onto its wire values (module doc): the voice, the
/// format and the sample rate, or a refusal naming what the vendor cannot apply.
pub type Mapping<W> = fn(&Snapshot, AudioFormat, Option<u32>) -> Result<W, ParamError>;

/// One call's inputs: the request, its mapped wire values, the key's secret and where the
/// audio goes.
#[derive(Debug)]
pub struct Call<'a, W> {
    /// The vendor request.
    pub request: &'a VendorRequest<'a>,
    /// Its wire values.
    pub wire: W,
    /// The key's credential (present and non-empty).
    pub secret: &'a Secret,
    /// Where the audio is written as it arrives.
    pub sink: &'a AudioSink,
}

impl<'a, W> Call<'a, W> {
    /// The request, the wire values, the secret and the sink.
    pub fn parts(self) -> (&'a VendorRequest<'a>, W, &'a Secret, &'a AudioSink) {
        (self.request, self.wire, self.secret, self.sink)
    }
}

/// A cloud TTS vendor: its wire mapping and its call (module doc).
#[async_trait]
pub trait CloudVendor: Send + Sync + 'static {
    /// Provider id.
    const PROVIDER: Provider;
    /// The vendor's per-request text limit.
    const TEXT_LIMIT: TextLimit;
    /// The sample rate (Hz) the vendor answers with when none is asked for.
    const DEFAULT_RATE: u32;
    /// The wire values a request maps to.
    type Wire: Send + Sync;
    /// The mapping, as a request is checked before any lease (no pool model known).
    const WIRE: Mapping<Self::Wire>;

    /// The mapping in a call, which knows the pool's model (`pool_model`). Default: [`Self::WIRE`].
    fn wire_in_call(
        voice: &Snapshot,
        pool_model: &str,
        format: AudioFormat,
        sample_rate_hz: Option<u32>,
    ) -> Result<Self::Wire, ParamError> {
        let _ = pool_model;
        (Self::WIRE)(voice, format, sample_rate_hz)
    }

    /// The sample rate (Hz) the vendor answers `format` with when none is asked for. Default:
    /// [`Self::DEFAULT_RATE`] for every format.
    fn default_rate(format: AudioFormat) -> u32 {
        let _ = format;
        Self::DEFAULT_RATE
    }

    /// The call itself, its audio written into `call.sink` as it arrives. Never retries.
    async fn call(&self, call: Call<'_, Self::Wire>) -> Result<StreamEnd, VendorFailure>;
}

#[async_trait]
impl<V: CloudVendor> VendorAdapter for V {
    fn provider(&self) -> Provider {
        V::PROVIDER
    }

    fn text_limit(&self) -> TextLimit {
        V::TEXT_LIMIT
    }

    fn check(
        &self,
        voice: &Snapshot,
        format: AudioFormat,
        sample_rate_hz: Option<u32>,
    ) -> Result<(), ParamError> {
        (V::WIRE)(voice, format, sample_rate_hz).map(|_| ())
    }

    fn default_sample_rate_hz(&self, format: AudioFormat) -> Option<u32> {
        Some(V::default_rate(format))
    }

    async fn stream(
        &self,
        request: VendorRequest<'_>,
        sink: &AudioSink,
    ) -> Result<StreamEnd, VendorFailure> {
        let provider = V::PROVIDER.as_str();
        let wire = V::wire_in_call(
            &request.utterance.voice,
            &request.utterance.pool_model,
            request.utterance.format,
            request.utterance.sample_rate_hz,
        )
        .map_err(|e| http::param_failure(provider, &e))?;
        let secret = http::require_secret(provider, request.key)?;
        let call = Call {
            request: &request,
            wire,
            secret,
            sink,
        };
        self.call(call).await
    }
}
