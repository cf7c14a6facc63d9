//! Sealed snapshots for tests that call Synthesize without a catalog.

use std::collections::BTreeMap;

use voxpool_domain::snapshot::{Kind, Params, Snapshot, Tier};

/// A sealed snapshot of `voice` from `provider` on pool `pool`, no param overrides.
pub fn snapshot(provider: &str, model: &str, voice: &str, pool: &str) -> Snapshot {
    Snapshot {
        pack_id: "e2e".into(),
        pack_version: 1,
        provider: provider.into(),
        model: model.into(),
        voice_id: voice.into(),
        tts_model_id: pool.into(),
        upstream_ids: vec![],
        params: Params::default(),
        extra: BTreeMap::new(),
        tier: Tier::Standard,
        frozen_at: chrono::Utc::now(),
        digest: String::new(),
        kind: Kind::Standard,
        locales: vec!["en-US".into()],
        references: vec![],
    }
    .seal()
}
