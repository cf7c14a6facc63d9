//! Row <-> domain conversions. Decoding failures (a hand-edited database) become
//! [`CatalogError::CorruptRow`] naming the pack, never a panic.

use sea_orm::ActiveValue::Set;
use serde::{Deserialize, Serialize};
use voxpool_domain::snapshot::{Kind, Params, Tier};

use super::entity::{reference, revision, voice_pack};
use crate::{
    error::CatalogError,
    identity::identity,
    model::{Action, ListedReference, PackReference, PackSpec, Revision, VoicePack, from_micros},
};

/// The JSON a revision row stores: the whole pack as of that version.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StoredPack {
    id: String,
    spec: PackSpec,
    enabled: bool,
    version: i64,
    create_time_us: i64,
    update_time_us: i64,
}

/// Every column of `pack` (identity computed from its spec), for insert or full update.
pub fn active_model(pack: &VoicePack) -> voice_pack::ActiveModel {
    let spec = &pack.spec;
    voice_pack::ActiveModel {
        id: Set(pack.id.clone()),
        display_name: Set(spec.display_name.clone()),
        description: Set(spec.description.clone()),
        provider: Set(spec.provider.clone()),
        model: Set(spec.model.clone()),
        voice_id: Set(spec.voice_id.clone()),
        tts_model_id: Set(spec.tts_model_id.clone()),
        kind: Set(spec.kind.as_str().to_owned()),
        upstream_ids: Set(json(&spec.upstream_ids)),
        params: Set(spec.params.canonical()),
        extra: Set(json(&spec.extra)),
        identity: Set(identity(spec)),
        tier: Set(spec.tier.as_str().to_owned()),
        locales: Set(json(&spec.locales)),
        enabled: Set(pack.enabled),
        version: Set(pack.version),
        create_time_us: Set(pack.create_time.timestamp_micros()),
        update_time_us: Set(pack.update_time.timestamp_micros()),
    }
}

fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// Decodes a `voice_packs` row.
pub fn pack_from_row(m: voice_pack::Model) -> Result<VoicePack, CatalogError> {
    let corrupt = |column: &str, e: &dyn std::fmt::Display| CatalogError::CorruptRow {
        id: m.id.clone(),
        message: format!("column {column}: {e}"),
    };
    let spec = PackSpec {
        kind: parse_kind(&m.kind).ok_or_else(|| corrupt("kind", &m.kind))?,
        tier: parse_tier(&m.tier).ok_or_else(|| corrupt("tier", &m.tier))?,
        upstream_ids: serde_json::from_str(&m.upstream_ids)
            .map_err(|e| corrupt("upstream_ids", &e))?,
        params: serde_json::from_str::<Params>(&m.params).map_err(|e| corrupt("params", &e))?,
        extra: serde_json::from_str(&m.extra).map_err(|e| corrupt("extra", &e))?,
        locales: serde_json::from_str(&m.locales).map_err(|e| corrupt("locales", &e))?,
        display_name: m.display_name,
        description: m.description,
        provider: m.provider,
        model: m.model,
        voice_id: m.voice_id,
        tts_model_id: m.tts_model_id,
        // Attached by the repository from `voice_pack_references`.
        references: Vec::new(),
    };
    Ok(VoicePack {
        id: m.id,
        spec,
        enabled: m.enabled,
        version: m.version,
        create_time: from_micros(m.create_time_us),
        update_time: from_micros(m.update_time_us),
    })
}

/// The row of clip `r` of pack `pack_id`, part of the pack (no removal time).
pub fn reference_model(pack_id: &str, r: &PackReference) -> reference::ActiveModel {
    reference::ActiveModel {
        pack_id: Set(pack_id.to_owned()),
        digest: Set(r.digest.clone()),
        transcript: Set(r.transcript.clone()),
        language: Set(r.language.clone()),
        emotion: Set(r.emotion.clone()),
        weight: Set(i32::try_from(r.weight).unwrap_or(i32::MAX)),
        duration_ms: Set(i64::from(r.duration_ms)),
        media_type: Set(r.media_type.clone()),
        size_bytes: Set(r.size_bytes),
        add_time_us: Set(r.add_time_us),
        remove_time_us: Set(None),
    }
}

/// Decodes a `voice_pack_references` row.
pub fn reference_from_row(m: reference::Model) -> Result<ListedReference, CatalogError> {
    let corrupt = |column: &str, value: i64| CatalogError::CorruptRow {
        id: m.pack_id.clone(),
        message: format!("clip {}: column {column}: {value}", m.digest),
    };
    let weight = u32::try_from(m.weight).map_err(|_| corrupt("weight", i64::from(m.weight)))?;
    let duration_ms =
        u32::try_from(m.duration_ms).map_err(|_| corrupt("duration_ms", m.duration_ms))?;
    Ok(ListedReference {
        reference: PackReference {
            digest: m.digest,
            transcript: m.transcript,
            language: m.language,
            emotion: m.emotion,
            weight,
            duration_ms,
            media_type: m.media_type,
            size_bytes: m.size_bytes,
            add_time_us: m.add_time_us,
        },
        remove_time_us: m.remove_time_us,
    })
}

/// The revision row recording `pack` (at its version) after `action` at `pack.update_time`.
pub fn revision_model(action: Action, pack: &VoicePack) -> revision::ActiveModel {
    let stored = StoredPack {
        id: pack.id.clone(),
        spec: pack.spec.clone(),
        enabled: pack.enabled,
        version: pack.version,
        create_time_us: pack.create_time.timestamp_micros(),
        update_time_us: pack.update_time.timestamp_micros(),
    };
    revision::ActiveModel {
        pack_id: Set(pack.id.clone()),
        version: Set(pack.version),
        action: Set(action.as_str().to_owned()),
        pack: Set(json(&stored)),
        time_us: Set(pack.update_time.timestamp_micros()),
    }
}

/// Decodes a `voice_pack_revisions` row.
pub fn revision_from_row(m: revision::Model) -> Result<Revision, CatalogError> {
    let corrupt = |message: String| CatalogError::CorruptRow {
        id: m.pack_id.clone(),
        message: format!("revision {}: {message}", m.version),
    };
    let action =
        Action::parse(&m.action).ok_or_else(|| corrupt(format!("action {:?}", m.action)))?;
    let stored: StoredPack = serde_json::from_str(&m.pack).map_err(|e| corrupt(e.to_string()))?;
    Ok(Revision {
        action,
        pack: VoicePack {
            id: stored.id,
            spec: stored.spec,
            enabled: stored.enabled,
            version: stored.version,
            create_time: from_micros(stored.create_time_us),
            update_time: from_micros(stored.update_time_us),
        },
        time: from_micros(m.time_us),
    })
}

fn parse_tier(s: &str) -> Option<Tier> {
    [Tier::Lite, Tier::Standard, Tier::Pro, Tier::Premium]
        .into_iter()
        .find(|t| t.as_str() == s)
}

fn parse_kind(s: &str) -> Option<Kind> {
    [Kind::Standard, Kind::Cloned]
        .into_iter()
        .find(|k| k.as_str() == s)
}
