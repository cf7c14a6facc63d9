//! [`CloudVendor`]: the skeleton every cloud adapter shares, written once.
//!
//! A cloud adapter is a mapping (snapshot, format and rate onto the vendor's wire values, or a
//! [`ParamError`] naming the param: invariant 8) and one HTTP exchange with one key's secret.
//! Everything around those two is the same for every vendor and lives here, in the one
//! [`VendorAdapter`] implementation for all of them: `check` is the mapping with its result
//! dropped; `stream` maps again (a refusal there is `CLIENT_ERROR`: the request, not the key,
//! is at fault), requires the key's secret (`KEY_INVALID` when it has none) and hands both to
//! [`CloudVendor::call`]. So a cloud adapter cannot skip the refusal or call without a secret.

use async_trait::async_trait;
use voxpool_shared::{provider::Provider, secret::Secret, snapshot::Snapshot};

use super::{
    AudioFormat, AudioSink, ParamError, StreamEnd, TextLimit, VendorAdapter, VendorFailure,
    VendorRequest, http,
};

/// A cloud TTS vendor: its wire mapping and its call (module doc).
#[async_trait]
pub trait CloudVendor: Send + Sync + 'static {
    /// Provider id.
    const PROVIDER: Provider;
    /// The vendor's per-request text limit.
    const TEXT_LIMIT: TextLimit;
    /// The wire values a request maps to.
    type Wire: Send + Sync;

    /// Maps the voice, format and sample rate onto the vendor's wire values, or refuses what
    /// the vendor cannot apply. `pool_model` is empty when a request is checked before any
    /// lease (`VendorAdapter::check`), the pool's model in a call.
    fn wire(
        voice: &Snapshot,
        pool_model: &str,
        format: AudioFormat,
        sample_rate_hz: Option<u32>,
    ) -> Result<Self::Wire, ParamError>;

    /// The sample rate (Hz) the vendor answers `format` with when none is asked for.
    fn default_rate(format: AudioFormat) -> u32;

    /// The call with the key's `secret`, its audio written into `sink` as it arrives.
    async fn call(
        &self,
        request: &VendorRequest<'_>,
        wire: Self::Wire,
        secret: &Secret,
        sink: &AudioSink,
    ) -> Result<StreamEnd, VendorFailure>;
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
        V::wire(voice, "", format, sample_rate_hz).map(|_| ())
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
        let wire = V::wire(
            request.voice,
            request.pool_model,
            request.format,
            request.sample_rate_hz,
        )
        .map_err(|e| http::param_failure(provider, &e))?;
        let secret = http::require_secret(provider, request.key)?;
        self.call(&request, wire, secret, sink).await
    }
}
