//! Freezing a pack into the immutable [`Snapshot`] a card keeps (invariant 7 of docs/ARCHITECTURE.md).
//!
//! The snapshot is a copy of the pack's resolved values at one version, sealed with the
//! digest documented in `voxpool_domain::snapshot`. Nothing ties it back to the row: later
//! edits or a disable create new versions and never touch a snapshot already handed out.

use chrono::{DateTime, Utc};
use voxpool_domain::snapshot::Snapshot;

use crate::{
    error::CatalogError,
    model::{PackReference, VoicePack},
};

/// The sealed snapshot of `pack` at `frozen_at`.
///
/// Errors: [`CatalogError::PackDisabled`] when the pack is disabled.
pub fn freeze(pack: &VoicePack, frozen_at: DateTime<Utc>) -> Result<Snapshot, CatalogError> {
    if !pack.enabled {
        return Err(CatalogError::PackDisabled {
            id: pack.id.clone(),
        });
    }
    let spec = &pack.spec;
    Ok(Snapshot {
        pack_id: pack.id.clone(),
        pack_version: pack.version,
        provider: spec.provider.clone(),
        model: spec.model.clone(),
        voice_id: spec.voice_id.clone(),
        tts_model_id: spec.tts_model_id.clone(),
        upstream_ids: spec.upstream_ids.clone(),
        params: spec.params,
        extra: spec.extra.clone(),
        tier: spec.tier,
        frozen_at,
        digest: String::new(),
        kind: spec.kind,
        locales: spec.locales.clone(),
        references: spec.references.iter().map(PackReference::frozen).collect(),
    }
    .seal())
}

/// The snapshot's JSON text as a card stores it: the proto3 JSON form
/// (`voxpool_domain::snapshot`), fields in proto order, numbers written as JavaScript writes
/// them (`-5`, not `-5.0`), so the card holds exactly what FreezeSnapshot returns over
/// proto3 JSON and what a JavaScript client would write.
pub fn card_json(s: &Snapshot) -> String {
    let q = |v: &str| serde_json::to_string(v).unwrap_or_default();
    let list = |items: &[String]| {
        format!(
            "[{}]",
            items.iter().map(|i| q(i)).collect::<Vec<_>>().join(",")
        )
    };
    let mut out = format!(
        "{{\"packId\":{},\"packVersion\":\"{}\",\"provider\":{},\"model\":{},\"voiceId\":{},\"ttsModelId\":{}",
        q(&s.pack_id),
        s.pack_version,
        q(&s.provider),
        q(&s.model),
        q(&s.voice_id),
        q(&s.tts_model_id),
    );
    if !s.upstream_ids.is_empty() {
        out.push_str(&format!(",\"upstreamIds\":{}", list(&s.upstream_ids)));
    }
    out.push_str(&format!(",\"params\":{}", s.params.canonical()));
    if !s.extra.is_empty() {
        let extra: Vec<_> = s
            .extra
            .iter()
            .map(|(k, v)| format!("{}:{}", q(k), q(v)))
            .collect();
        out.push_str(&format!(",\"extra\":{{{}}}", extra.join(",")));
    }
    out.push_str(&format!(
        ",\"tier\":\"{}\",\"frozenAt\":{},\"digest\":{},\"kind\":\"{}\"",
        s.tier.as_str(),
        q(&s.frozen_at
            .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)),
        q(&s.digest),
        s.kind.as_str(),
    ));
    if !s.locales.is_empty() {
        out.push_str(&format!(",\"locales\":{}", list(&s.locales)));
    }
    if !s.references.is_empty() {
        let clips: Vec<String> = s
            .references
            .iter()
            .map(|r| {
                let mut clip = format!(
                    "{{\"digest\":{},\"transcript\":{},\"language\":{}",
                    q(&r.digest),
                    q(&r.transcript),
                    q(&r.language)
                );
                if !r.emotion.is_empty() {
                    clip.push_str(&format!(",\"emotion\":{}", q(&r.emotion)));
                }
                clip.push_str(&format!(
                    ",\"weight\":{},\"durationMs\":{}}}",
                    r.weight, r.duration_ms
                ));
                clip
            })
            .collect();
        out.push_str(&format!(",\"references\":[{}]", clips.join(",")));
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use voxpool_domain::snapshot::{Kind, Params, Tier};

    use super::*;
    use crate::model::{PackSpec, VoicePack};

    fn pack(
        upstreams: Vec<String>,
        extra: BTreeMap<String, String>,
        locales: Vec<String>,
    ) -> VoicePack {
        let t = chrono::DateTime::from_timestamp(1_790_000_000, 120_000_000).unwrap_or_default();
        VoicePack {
            id: "vp_1".into(),
            spec: PackSpec {
                display_name: "n".into(),
                description: String::new(),
                provider: "azure".into(),
                model: "neural".into(),
                voice_id: "en-US-Jenny\"Neural\"".into(),
                tts_model_id: "azure-neural".into(),
                kind: Kind::Cloned,
                upstream_ids: upstreams,
                params: Params {
                    pitch_pct: Some(-5.0),
                    rate: Some(0.7),
                    volume_pct: Some(100.0),
                },
                extra,
                tier: Tier::Pro,
                locales,
                references: vec![],
            },
            enabled: true,
            version: 7,
            create_time: t,
            update_time: t,
        }
    }

    /// Numbers as f64 (JSON does not distinguish `-5` from `-5.0`; serde_json::Value does).
    fn numbers_as_f64(v: serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        match v {
            Value::Number(n) => n.as_f64().map_or(Value::Null, Value::from),
            Value::Array(a) => Value::Array(a.into_iter().map(numbers_as_f64).collect()),
            Value::Object(o) => {
                Value::Object(o.into_iter().map(|(k, v)| (k, numbers_as_f64(v))).collect())
            }
            other => other,
        }
    }

    #[test]
    fn card_json_is_the_snapshot_json_form_with_javascript_numbers() {
        for p in [
            pack(
                vec!["acct-a".into()],
                BTreeMap::from([("style".into(), "冷静 🌙".into())]),
                vec!["en-US".into()],
            ),
            pack(vec![], BTreeMap::new(), vec![]),
        ] {
            let s = freeze(&p, p.create_time).expect("freeze");
            let text = card_json(&s);
            let ours: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
            let serde_form = serde_json::to_value(&s).expect("serde form");
            assert_eq!(numbers_as_f64(ours), numbers_as_f64(serde_form), "{text}");
            assert_eq!(Snapshot::from_json(&text).expect("parse"), s);
            assert!(
                text.contains(r#""params":{"pitchPct":-5,"rate":0.7,"volumePct":100}"#),
                "{text}"
            );
            assert!(
                text.starts_with(r#"{"packId":"vp_1","packVersion":"7","#),
                "{text}"
            );
        }
    }

    #[test]
    fn clips_are_frozen_into_the_card_json_form() {
        let mut p = pack(vec![], BTreeMap::new(), vec![]);
        p.spec.references = vec![crate::model::PackReference {
            digest: voxpool_domain::reference::clip_digest(b"a"),
            transcript: "Hi \"you\"".into(),
            language: "en-US".into(),
            emotion: "calm".into(),
            weight: 3,
            duration_ms: 2_000,
            media_type: "audio/wav".into(),
            size_bytes: 1,
            add_time_us: 0,
        }];
        let s = freeze(&p, p.create_time).expect("freeze");
        let text = card_json(&s);
        let ours: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(
            numbers_as_f64(ours),
            numbers_as_f64(serde_json::to_value(&s).unwrap())
        );
        let back = Snapshot::from_json(&text).expect("parse");
        assert_eq!(back, s);
        back.verify_digest().expect("digest");
        assert_eq!(back.references[0].emotion, "calm");
    }

    #[test]
    fn a_disabled_pack_cannot_be_frozen() {
        let mut p = pack(vec![], BTreeMap::new(), vec![]);
        p.enabled = false;
        assert!(
            matches!(freeze(&p, p.create_time), Err(CatalogError::PackDisabled { id }) if id == "vp_1")
        );
    }
}
