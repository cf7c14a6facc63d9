//! Conversions from domain types to `voxpool.catalog.v1` messages (the gRPC edge).
//! The other direction is validation (`validate::pack_spec`).

use voxpool_domain::snapshot::timestamp_pb;
use voxpool_proto::catalog::v1 as pb;

use crate::model::{ListedReference, PackReference, PackSpec, Revision, VoicePack, from_micros};

/// The content of `spec` as a message with output-only fields unset.
pub fn spec_to_pb(spec: &PackSpec) -> pb::VoicePack {
    pb::VoicePack {
        display_name: spec.display_name.clone(),
        description: spec.description.clone(),
        provider: spec.provider.clone(),
        model: spec.model.clone(),
        voice_id: spec.voice_id.clone(),
        tts_model_id: spec.tts_model_id.clone(),
        kind: spec.kind.to_pb() as i32,
        upstream_ids: spec.upstream_ids.clone(),
        params: Some(spec.params.to_pb()),
        extra: spec.extra.clone().into_iter().collect(),
        tier: spec.tier.to_pb() as i32,
        locales: spec.locales.clone(),
        references: spec.references.iter().map(reference_to_pb).collect(),
        ..Default::default()
    }
}

/// A clip of a pack (part of it: no removal time).
pub fn reference_to_pb(r: &PackReference) -> pb::VoicePackReference {
    pb::VoicePackReference {
        digest: r.digest.clone(),
        transcript: r.transcript.clone(),
        language: r.language.clone(),
        emotion: r.emotion.clone(),
        weight: r.weight,
        duration_ms: r.duration_ms,
        media_type: r.media_type.clone(),
        size_bytes: r.size_bytes,
        add_time: Some(timestamp_pb(from_micros(r.add_time_us))),
        remove_time: None,
    }
}

/// A clip as ListReferences shows it (removal time when removed).
pub fn listed_reference_to_pb(r: &ListedReference) -> pb::VoicePackReference {
    pb::VoicePackReference {
        remove_time: r.remove_time_us.map(|us| timestamp_pb(from_micros(us))),
        ..reference_to_pb(&r.reference)
    }
}

/// The full message of a stored pack.
pub fn pack_to_pb(pack: &VoicePack) -> pb::VoicePack {
    pb::VoicePack {
        id: pack.id.clone(),
        enabled: pack.enabled,
        version: pack.version,
        create_time: Some(timestamp_pb(pack.create_time)),
        update_time: Some(timestamp_pb(pack.update_time)),
        ..spec_to_pb(&pack.spec)
    }
}

/// A revision message.
pub fn revision_to_pb(r: &Revision) -> pb::VoicePackRevision {
    pb::VoicePackRevision {
        version: r.pack.version,
        action: r.action.as_str().to_owned(),
        voice_pack: Some(pack_to_pb(&r.pack)),
        time: Some(timestamp_pb(r.time)),
    }
}
