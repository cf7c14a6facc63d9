//! Reading a self-hosted server's answer: an error status classified
//! ([`super::profiles::classify`]), CosyVoice's headerless PCM (a WAV header put in front for
//! WAV), every other server's WAV passed on as it arrives (WAV) or stripped of its header
//! (PCM, which must then be 16-bit mono).

use voxpool_domain::{audio::wav, contract::Outcome, secret::Secret};

use super::{
    COSYVOICE_DEFAULT_RATE, PROVIDER,
    profiles::{self, Profile},
};
use crate::adapters::{AudioFormat, AudioSink, StreamEnd, VendorFailure, VendorRequest, http};

pub(super) async fn exchange(
    builder: reqwest::RequestBuilder,
    request: &VendorRequest<'_>,
    profile: Profile,
    sink: &AudioSink,
    secret: Option<&Secret>,
) -> Result<StreamEnd, VendorFailure> {
    let mut opened = http::open(PROVIDER, builder, request.timeout, secret).await?;
    if !opened.status.is_success() {
        let reply = opened.read_all(PROVIDER, secret).await?;
        return Err(profiles::classify(profile, &reply, secret));
    }
    if profile.answers_raw_pcm() {
        let rate = http::upstream_u32(&request.upstream.params, "sample_rate_hz")
            .unwrap_or(COSYVOICE_DEFAULT_RATE);
        if request.utterance.format == AudioFormat::Wav {
            sink.write(http::pcm16_wav_header(PROVIDER, rate)?);
        }
        let mut any = false;
        while let Some(piece) = opened.chunk(PROVIDER, secret).await? {
            any |= !piece.is_empty();
            sink.write(piece);
        }
        if !any {
            return Err(empty_answer(secret));
        }
        return Ok(StreamEnd {
            sample_rate_hz: Some(rate),
        });
    }
    // A WAV answer: passed on as it arrives (WAV), or its samples after the header (PCM).
    let mut head = Vec::new();
    let mut header: Option<wav::Header> = None;
    while let Some(piece) = opened.chunk(PROVIDER, secret).await? {
        if header.is_some() {
            sink.write(piece);
            continue;
        }
        head.extend_from_slice(&piece);
        let parsed = wav::header(&head).map_err(|e| {
            http::failure(
                PROVIDER,
                Outcome::UpstreamError,
                Some(200),
                None,
                format!("HTTP 200 but not a WAV answer: {e}"),
                secret,
            )
        })?;
        let Some(found) = parsed else { continue };
        if request.utterance.format == AudioFormat::Pcm {
            if found.spec.channels != 1 || found.spec.bits_per_sample != 16 {
                return Err(http::failure(
                    PROVIDER,
                    Outcome::UpstreamError,
                    Some(200),
                    None,
                    format!(
                        "the server answered {}-channel {}-bit audio, which is not PCM (16-bit mono): ask for WAV",
                        found.spec.channels, found.spec.bits_per_sample
                    ),
                    secret,
                ));
            }
            sink.write(head.split_off(found.data_start));
        } else {
            sink.write(std::mem::take(&mut head));
        }
        header = Some(found);
    }
    let header = header.ok_or_else(|| empty_answer(secret))?;
    Ok(StreamEnd {
        sample_rate_hz: Some(header.spec.sample_rate),
    })
}

fn empty_answer(secret: Option<&Secret>) -> VendorFailure {
    http::failure(
        PROVIDER,
        Outcome::UpstreamError,
        Some(200),
        None,
        "HTTP 200 without audio",
        secret,
    )
}
