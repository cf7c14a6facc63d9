//! Request validation: from a [`Request`] to a [`Job`], refusing everything that can
//! be refused before a lease is taken (text, format, voice, digest, pool, provider, adapter
//! params — invariant 8 of docs/ARCHITECTURE.md), so a bad request never holds a key.
//!
//! Order: request id, priority and tenant, text (empty / whitespace-only / over `max_text_chars`), format,
//! `wav_streaming_header` (WAV only) and sample rate, the voice (`snapshot` | `snapshot_json` | `pack_id` via the catalog), its
//! digest, the request's overrides (sealed anew), its provider, its pool (`ttsModelId`), provider = pool provider, the adapter and the
//! credentials, the snapshot's upstreams, the adapter's `check` (before any clone is asked
//! for), a managed clone's READY scopes ([`clone_route`]: CLONE_PENDING while none is; the
//! `check` again with a READY scope's vendor id), then the split of the text
//! (and, for text of several chunks without a rate, the adapter's default rate asked of all).
//!
//! Short first chunk: when a key the request may use answers whole
//! ([`crate::adapters::VendorAdapter::streams`] false: a self-hosted server that cannot
//! stream, or told not to), the first chunk ends at the text's first sentence, at most
//! [`FIRST_CHUNK_CHARS`] ([`text::split_short_first`]), so the first audio comes after one
//! short sentence's time while the rest runs beside it as usual. BATCH requests, which nobody
//! listens to as they play, keep the usual split.

use std::sync::Arc;

use voxpool_domain::{provider::Provider, snapshot::Snapshot};

use super::{Core, Job, Overrides, Request, Unknown, VoiceSource, clone_route};
use crate::{adapters::AudioFormat, deadline::Deadline, error::SynthesisError, text, usage::Meter};
use voxpool_domain::usage::UsageContext;

/// Longest accepted `request_id`.
pub const MAX_REQUEST_ID_CHARS: usize = 128;
/// Longest accepted `snapshot_json` (bytes).
pub const MAX_SNAPSHOT_JSON_BYTES: usize = 64 * 1024;
/// Highest accepted `sample_rate_hz`.
pub const MAX_SAMPLE_RATE_HZ: i32 = 384_000;
/// Longest short first chunk (module doc), in characters.
pub const FIRST_CHUNK_CHARS: usize = 160;

/// The format asked for, or the refusal of a number that names none.
fn check_format(format: Result<AudioFormat, Unknown>) -> Result<AudioFormat, SynthesisError> {
    format.map_err(|Unknown(raw)| {
        SynthesisError::invalid(
            "format",
            format!("{raw} is not a format: use WAV, MP3, OGG_OPUS or PCM"),
        )
    })
}

fn check_text(text: &str, max_chars: usize) -> Result<(), SynthesisError> {
    if text.trim().is_empty() {
        return Err(SynthesisError::invalid(
            "text",
            "must contain something to say (it is empty or whitespace only)",
        ));
    }
    // Refused rather than billed as a vendor call for a pause.
    if !voxpool_domain::text::has_speech(text) {
        return Err(SynthesisError::invalid(
            "text",
            "has nothing to speak: it holds no letter or digit (only punctuation, symbols or spaces); send words",
        ));
    }
    let chars = text.chars().count();
    if chars > max_chars {
        return Err(SynthesisError::invalid(
            "text",
            format!(
                "{chars} characters is over the limit of {max_chars} (synthesis.max_text_chars); send shorter requests"
            ),
        ));
    }
    Ok(())
}

fn new_request_id() -> String {
    format!("syn-{:032x}", rand::random::<u128>())
}

/// Validates `r` and resolves its voice (module doc). Every error is a refusal made before any
/// lease.
pub(super) async fn prepare(
    core: &Core,
    r: Request,
    deadline: Deadline,
) -> Result<Job, SynthesisError> {
    // Checked first: the request id goes into every log line of the request, and a
    // control character in it would forge one.
    if let Err(problem) =
        voxpool_domain::untrusted::check_field(&r.request_id, MAX_REQUEST_ID_CHARS)
    {
        return Err(SynthesisError::invalid("request_id", problem.to_string()));
    }
    let priority = match r.priority {
        Ok(priority) => priority,
        Err(Unknown(raw)) => {
            return Err(SynthesisError::invalid(
                "priority",
                format!("unknown value {raw}: use INTERACTIVE, STANDARD or BATCH"),
            ));
        }
    };
    if let Err(problem) = voxpool_domain::contract::check_tenant(&r.tenant) {
        return Err(SynthesisError::invalid("tenant", problem.to_string()));
    }
    check_text(&r.text, core.settings.max_text_chars)?;
    let format = check_format(r.format)?;
    let cache_policy = r.cache_policy.map_err(|Unknown(raw)| {
        SynthesisError::invalid(
            "cache_policy",
            format!("unknown value {raw}: use USE, REFRESH or BYPASS"),
        )
    })?;
    if r.wav_streaming_header && format != AudioFormat::Wav {
        return Err(SynthesisError::invalid(
            "wav_streaming_header",
            format!(
                "applies to WAV only, and the format is {format}: leave it false (PCM, MP3 and OGG_OPUS stream as they are)"
            ),
        ));
    }
    let sample_rate_hz = match r.sample_rate_hz {
        0 => None,
        hz @ 1..=MAX_SAMPLE_RATE_HZ => u32::try_from(hz).ok(),
        hz => {
            return Err(SynthesisError::invalid(
                "sample_rate_hz",
                format!("must be 0 (vendor default) or 1..={MAX_SAMPLE_RATE_HZ} Hz, got {hz}"),
            ));
        }
    };
    let voice = resolve_voice(core, r.voice, deadline).await?;
    voice
        .verify_digest()
        .map_err(|e| SynthesisError::invalid(&e.field, e.message))?;
    let voice = apply_overrides(voice, &r.overrides);
    let provider: Provider =
        voice
            .provider
            .parse()
            .map_err(|_| SynthesisError::UnknownProvider {
                provider: voice.provider.clone(),
                known: Provider::names(),
            })?;
    let pool = core
        .pools
        .get(&voice.tts_model_id)
        .cloned()
        .ok_or_else(|| SynthesisError::UnknownPool {
            tts_model_id: voice.tts_model_id.clone(),
            known: core.pools.names().to_owned(),
        })?;
    if provider != pool.provider {
        return Err(SynthesisError::ProviderMismatch {
            pool: pool.id.clone(),
            pool_provider: pool.provider.to_string(),
            provider: voice.provider.clone(),
        });
    }
    let adapter =
        core.adapters
            .get(&pool.provider)
            .cloned()
            .ok_or_else(|| SynthesisError::NoAdapter {
                pool: pool.id.clone(),
                provider: pool.provider.to_string(),
            })?;
    if !pool.has_usable_key() {
        return Err(SynthesisError::NoCredentials {
            pool: pool.id.clone(),
            problems: pool.credential_problems(),
        });
    }
    if let Some(upstream) = voice
        .upstream_ids
        .iter()
        .find(|u| !pool.upstream_ids.contains(u))
    {
        return Err(SynthesisError::UnknownUpstream {
            pool: pool.id.clone(),
            upstream: upstream.clone(),
            known: pool.upstream_ids.join(", "),
        });
    }
    // Checked before any clone routing, so a request the adapter refuses never asks for a
    // clone. A managed clone is spoken with a vendor id per scope, known once routed: it is
    // checked with a stand-in id first, then as a READY scope's key sends it; its clips are
    // what it was cloned from, not spoken.
    let check = |route| {
        let checked = clone_route::checked(&voice, route);
        adapter
            .check(&checked, format, sample_rate_hz)
            .map_err(SynthesisError::Param)
    };
    check(None)?;
    let clone = clone_route::resolve(core, &voice, &pool).await?;
    if let Some(route) = &clone {
        check(Some(route))?;
    }
    let reference = match clone {
        Some(_) => None,
        None => pick_reference(core, &voice, &r.emotion, r.seed, adapter.as_ref()).await?,
    };
    let answers_whole = priority != crate::lease::Priority::Batch
        && pool
            .keys
            .values()
            .filter(|k| {
                voice.upstream_ids.is_empty() || voice.upstream_ids.contains(&k.upstream.id)
            })
            .any(|k| !adapter.streams(&k.upstream, &voice));
    let split = if answers_whole {
        text::split_short_first(
            &r.text,
            text::TextLimit::Chars(FIRST_CHUNK_CHARS),
            adapter.text_limit(),
        )
    } else {
        text::split(&r.text, adapter.text_limit())
    };
    let chunks: Vec<String> = split
        .into_iter()
        .filter(|c| !c.trim().is_empty())
        .map(str::to_owned)
        .collect();
    if format == AudioFormat::OggOpus && chunks.len() > 1 {
        return Err(SynthesisError::invalid(
            "format",
            format!(
                "OGG_OPUS audio cannot be joined, and this text needs {} vendor calls (at most {} per call); ask for WAV, PCM or MP3, or send shorter text",
                chunks.len(),
                adapter.text_limit()
            ),
        ));
    }
    // Chunks run side by side, possibly on upstreams with different defaults: each asks
    // for one explicit rate (the vendor's default) so the pieces join.
    let sample_rate_hz = sample_rate_hz.or_else(|| {
        (chunks.len() > 1)
            .then(|| adapter.default_sample_rate_hz(format))
            .flatten()
            .filter(|r| adapter.check(&voice, format, Some(*r)).is_ok())
    });
    let request_id = if r.request_id.is_empty() {
        new_request_id()
    } else {
        r.request_id
    };
    let context = UsageContext {
        record_id: crate::usage::record_id(),
        request_id: request_id.clone(),
        tenant: r.tenant.clone(),
        caller: r.caller,
        path: r.path.as_str().to_owned(),
        pack_id: voice.pack_id.clone(),
        snapshot_digest: voice.digest.clone(),
        tier: Some(voice.tier),
        pool: pool.id.clone(),
        provider: pool.provider,
        currency: core.usage.currency.clone(),
        at_ms: crate::usage::now_ms(),
    };
    let meter = Arc::new(Meter::new(context, pool.price.clone(), &core.usage));
    let first_leased = Arc::new(tokio::sync::watch::channel(chunks.len() <= 1).0);
    Ok(Job {
        pool,
        adapter,
        voice: Arc::new(voice),
        chunks,
        format,
        sample_rate_hz,
        wav_streaming_header: r.wav_streaming_header,
        request_id,
        priority,
        tenant: r.tenant,
        deadline,
        cache_policy,
        reference,
        seed: r.seed,
        meter,
        first_leased,
        clone,
    })
}

/// The clip the request speaks with ([`voxpool_domain::reference::select`]), fetched and
/// checked: `None` for a voice without clips. Errors: clips on an adapter that speaks none
/// (INVALID_ARGUMENT `snapshot.references`), an `emotion` no clip has (INVALID_ARGUMENT
/// `emotion`), no blob store or the clip not in it (FAILED_PRECONDITION), the store down.
async fn pick_reference(
    core: &Core,
    voice: &Snapshot,
    emotion: &str,
    seed: Option<u64>,
    adapter: &dyn crate::adapters::VendorAdapter,
) -> Result<Option<Arc<crate::adapters::ReferenceAudio>>, SynthesisError> {
    if !emotion.is_empty() && !voxpool_domain::reference::is_tag(emotion) {
        return Err(SynthesisError::invalid(
            "emotion",
            format!(
                "must match [a-z0-9_-]{{1,32}}, got {}",
                voxpool_domain::untrusted::quote(emotion)
            ),
        ));
    }
    if !voice.references.is_empty() && !adapter.takes_references() {
        return Err(SynthesisError::invalid(
            "snapshot.references",
            format!(
                "the {} adapter speaks no reference audio; only selfhosted voices carry clips",
                voice.provider
            ),
        ));
    }
    let Some(picked) = voxpool_domain::reference::select(&voice.references, emotion, seed)
        .map_err(|e| SynthesisError::invalid("emotion", e.0))?
    else {
        return Ok(None);
    };
    let clips = core
        .references
        .as_ref()
        .ok_or_else(|| SynthesisError::ReferenceMissing {
            digest: picked.digest.clone(),
            location: "(none: this replica runs without a blob store)".into(),
        })?;
    clips.fetch(picked).await.map(Some)
}

/// `voice` with `overrides` applied and sealed anew; unchanged without any.
fn apply_overrides(mut voice: Snapshot, overrides: &Overrides) -> Snapshot {
    let scale = overrides
        .rate_scale
        .filter(|s| (*s - 1.0).abs() > f64::EPSILON);
    if scale.is_none() && overrides.instructions.is_none() {
        return voice;
    }
    if let Some(scale) = scale {
        // Four decimals: 0.9 × 4 is the rate 3.6 a caller can read in a refusal, not
        // 3.5999999999999996.
        let rate = voice.params.rate.unwrap_or(1.0) * scale;
        voice.params.rate = Some((rate * 1e4).round() / 1e4);
    }
    if let Some(instructions) = &overrides.instructions {
        voice
            .extra
            .insert("instructions".to_owned(), instructions.clone());
    }
    voice.seal()
}

async fn resolve_voice(
    core: &Core,
    voice: Option<VoiceSource>,
    deadline: Deadline,
) -> Result<Snapshot, SynthesisError> {
    match voice {
        None => Err(SynthesisError::invalid(
            "voice",
            "set one of snapshot, snapshot_json or pack_id",
        )),
        Some(VoiceSource::Snapshot(snapshot)) => Ok(*snapshot),
        Some(VoiceSource::Malformed(e)) => Err(SynthesisError::invalid(&e.field, e.message)),
        Some(VoiceSource::Json(json)) => {
            if json.trim().is_empty() {
                return Err(SynthesisError::invalid(
                    "snapshot_json",
                    "empty: pass the snapshot's JSON form as stored in a card",
                ));
            }
            if json.len() > MAX_SNAPSHOT_JSON_BYTES {
                return Err(SynthesisError::invalid(
                    "snapshot_json",
                    format!("{} bytes, at most {MAX_SNAPSHOT_JSON_BYTES}", json.len()),
                ));
            }
            Snapshot::from_json(&json)
                .map_err(|e| SynthesisError::invalid("snapshot_json", e.message))
        }
        Some(VoiceSource::PackId(id)) => {
            if id.trim().is_empty() {
                return Err(SynthesisError::invalid(
                    "pack_id",
                    "empty: pass a voice pack id",
                ));
            }
            match core.catalog.freeze(&id, deadline.remaining()).await {
                // The caller's own deadline ran out while the catalog froze the pack: that is
                // the deadline, not a catalog outage (which callers retry and alerts count).
                Err(SynthesisError::CatalogUnavailable { .. }) if deadline.passed() => {
                    Err(SynthesisError::DeadlineExceeded {
                        pool: None,
                        budget_ms: deadline.budget_ms(),
                        attempts: Vec::new(),
                        in_call: false,
                    })
                }
                frozen => frozen,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_must_be_non_blank_and_within_the_limit() {
        assert!(check_text("hi", 10).is_ok());
        for bad in ["", "   \n\t "] {
            let e = check_text(bad, 10).unwrap_err().to_string();
            assert!(e.starts_with("invalid text:"), "{e}");
        }
        let e = check_text("ééééééééééé", 10).unwrap_err().to_string();
        assert!(e.contains("11 characters is over the limit of 10"), "{e}");
    }

    #[test]
    fn a_rate_scale_multiplies_the_rate_to_four_decimals_and_reseals() {
        let mut voice = voxpool_fake_vendors::snapshot("openai", "tts-1", "alloy");
        voice.params.rate = Some(0.9);
        let voice = voice.seal();
        let scaled = apply_overrides(
            voice.clone(),
            &Overrides {
                rate_scale: Some(4.0),
                instructions: None,
            },
        );
        assert_eq!(scaled.params.rate, Some(3.6), "not 3.5999999999999996");
        assert_ne!(
            scaled.digest, voice.digest,
            "a changed voice is sealed anew"
        );
        let same = apply_overrides(voice.clone(), &Overrides::default());
        assert_eq!(same, voice);
    }

    #[test]
    fn unknown_formats_are_refused_naming_the_field() {
        assert_eq!(
            check_format(Ok(AudioFormat::Pcm)).unwrap(),
            AudioFormat::Pcm
        );
        assert!(
            check_format(Err(Unknown(99)))
                .unwrap_err()
                .to_string()
                .starts_with("invalid format: 99 is not a format")
        );
    }
}
