//! Conversions from domain types to `voxpool.catalog.v1` messages (the gRPC edge).
//! The other direction is validation (`validate::pack_spec`).

use voxpool_domain::snapshot::timestamp_pb;
use voxpool_proto::catalog::v1 as pb;

use crate::model::{PackSpec, Revision, VoicePack};

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
        ..Default::default()
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
