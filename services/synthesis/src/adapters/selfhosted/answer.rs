//! Reading a self-hosted server's answer: an error status classified
//! ([`super::profiles::classify`]), CosyVoice's headerless PCM (a WAV header put in front for
//! WAV), every other server's WAV passed on as it arrives (WAV) or stripped of its header
//! (PCM, which must then be 16-bit mono). A streamed answer ([`super::Target::stream`]) is a
//! WAV header whose sizes are 0 or placeholders, then 16-bit samples as they are generated:
//! its samples are relayed piece by piece behind a streaming header of the same layout (WAV)
//! or alone (PCM); one without a header is read as 16-bit mono PCM at the upstream's
//! `sample_rate_hz`, else the model's usual rate ([`profiles::Profile::default_rate`]).

use voxpool_domain::{audio::wav, contract::Outcome, secret::Secret};

use super::{PROVIDER, Target, profiles};
use crate::adapters::{AudioFormat, AudioSink, StreamEnd, VendorFailure, VendorRequest, http};

pub(super) async fn exchange(
    builder: reqwest::RequestBuilder,
    request: &VendorRequest<'_>,
    target: &Target,
    sink: &AudioSink,
    secret: Option<&Secret>,
) -> Result<StreamEnd, VendorFailure> {
    let profile = target.profile;
    let mut opened = http::open(PROVIDER, builder, request.timeout, secret, &request.gate).await?;
    if !opened.status.is_success() {
        let reply = opened.read_all(PROVIDER, secret).await?;
        return Err(profiles::classify(profile, &reply, secret));
    }
    let rate = http::upstream_u32(&request.upstream.params, "sample_rate_hz")
        .unwrap_or(profile.default_rate());
    if target.stream {
        return streamed(&mut opened, request, rate, sink, secret).await;
    }
    if profile.answers_raw_pcm() {
        return raw_pcm(&mut opened, request, rate, Vec::new(), sink, secret).await;
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
        let parsed = wav::header(&head).map_err(|e| not_wav(secret, &e.to_string()))?;
        let Some(found) = parsed else { continue };
        if request.utterance.format == AudioFormat::Pcm {
            if found.spec.channels != 1 || found.spec.bits_per_sample != 16 {
                return Err(not_pcm16(secret, found.spec));
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

/// Headerless 16-bit mono PCM at `rate`, `head` its first bytes already read: relayed as it
/// arrives, behind a streaming WAV header when WAV is asked.
async fn raw_pcm(
    opened: &mut http::Opened,
    request: &VendorRequest<'_>,
    rate: u32,
    head: Vec<u8>,
    sink: &AudioSink,
    secret: Option<&Secret>,
) -> Result<StreamEnd, VendorFailure> {
    if request.utterance.format == AudioFormat::Wav {
        sink.write(http::pcm16_wav_header(PROVIDER, rate)?);
    }
    let mut any = !head.is_empty();
    sink.write(head);
    while let Some(piece) = opened.chunk(PROVIDER, secret).await? {
        any |= !piece.is_empty();
        sink.write(piece);
    }
    if !any {
        return Err(empty_answer(secret));
    }
    Ok(StreamEnd {
        sample_rate_hz: Some(rate),
    })
}

/// A streamed answer (module doc): the server's header, whatever sizes it declares, is
/// replaced by a streaming header of its layout, and every piece after it goes out as it
/// arrives.
async fn streamed(
    opened: &mut http::Opened,
    request: &VendorRequest<'_>,
    rate: u32,
    sink: &AudioSink,
    secret: Option<&Secret>,
) -> Result<StreamEnd, VendorFailure> {
    let mut head = Vec::new();
    loop {
        let Some(piece) = opened.chunk(PROVIDER, secret).await? else {
            // Ended before a whole header: either nothing came, or a few headerless bytes.
            if head.starts_with(b"RIFF") || head.is_empty() {
                return Err(empty_answer(secret));
            }
            sink.write(head);
            return Ok(StreamEnd {
                sample_rate_hz: Some(rate),
            });
        };
        head.extend_from_slice(&piece);
        if head.len() < 4 {
            continue;
        }
        if !head.starts_with(b"RIFF") {
            return raw_pcm(opened, request, rate, head, sink, secret).await;
        }
        let parsed = wav::header(&head).map_err(|e| not_wav(secret, &e.to_string()))?;
        if let Some(found) = parsed {
            return relay_after_header(opened, request, found, head, sink, secret).await;
        }
    }
}

async fn relay_after_header(
    opened: &mut http::Opened,
    request: &VendorRequest<'_>,
    found: wav::Header,
    mut head: Vec<u8>,
    sink: &AudioSink,
    secret: Option<&Secret>,
) -> Result<StreamEnd, VendorFailure> {
    let spec = found.spec;
    if request.utterance.format == AudioFormat::Pcm {
        if spec.channels != 1 || spec.bits_per_sample != 16 {
            return Err(not_pcm16(secret, spec));
        }
    } else {
        sink.write(wav::streaming_header(spec).map_err(|e| not_wav(secret, &e.to_string()))?);
    }
    sink.write(head.split_off(found.data_start));
    while let Some(piece) = opened.chunk(PROVIDER, secret).await? {
        sink.write(piece);
    }
    Ok(StreamEnd {
        sample_rate_hz: Some(spec.sample_rate),
    })
}

fn not_wav(secret: Option<&Secret>, why: &str) -> VendorFailure {
    http::failure(
        PROVIDER,
        Outcome::UpstreamError,
        Some(200),
        None,
        format!("HTTP 200 but not a WAV answer: {why}"),
        secret,
    )
}

fn not_pcm16(secret: Option<&Secret>, spec: wav::WavSpec) -> VendorFailure {
    http::failure(
        PROVIDER,
        Outcome::UpstreamError,
        Some(200),
        None,
        format!(
            "the server answered {}-channel {}-bit audio, which is not PCM (16-bit mono): ask for WAV",
            spec.channels, spec.bits_per_sample
        ),
        secret,
    )
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
