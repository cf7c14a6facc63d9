//! The identity fingerprint of a pack: what makes two packs "the same voice".
//!
//! `identity = "sha256:" + hex(sha256(text))` where `text` is compact JSON with keys in byte
//! order, written the same way as the snapshot's canonical form (see
//! `voxpool_domain::snapshot`; params use `Params::canonical`):
//!
//! ```text
//! {"extra":{<k>:<v>,...},"model":<s>,"params":{"pitchPct":n,"rate":n,"volumePct":n},
//!  "provider":<s>[,"references":[<clip digest>,...]],"voiceId":<s>}
//! ```
//! `references` (the clip digests, sorted) is there only when the pack has clips, so packs
//! without clips keep the identity they always had, and a changed clip set is another voice.
//!
//! The database holds a unique index on it, so "same provider + model + voice + params +
//! extra" is one pack on every backend, while the same voice with other params is another
//! pack. Display name, tier, locales, tts model id and kind are not part of the identity.

use sha2::{Digest, Sha256};

use crate::model::PackSpec;

/// The canonical identity text of `spec` (module doc).
pub fn identity_text(spec: &PackSpec) -> String {
    let s = |v: &str| serde_json::to_string(v).unwrap_or_default();
    let extra = spec
        .extra
        .iter()
        .map(|(k, v)| format!("{}:{}", s(k), s(v)))
        .collect::<Vec<_>>()
        .join(",");
    let references = if spec.references.is_empty() {
        String::new()
    } else {
        let mut digests: Vec<String> = spec.references.iter().map(|r| s(&r.digest)).collect();
        digests.sort_unstable();
        format!(",\"references\":[{}]", digests.join(","))
    };
    format!(
        "{{\"extra\":{{{extra}}},\"model\":{},\"params\":{},\"provider\":{}{references},\"voiceId\":{}}}",
        s(&spec.model),
        spec.params.canonical(),
        s(&spec.provider),
        s(&spec.voice_id),
    )
}

/// `sha256:` + lowercase hex of SHA-256 over [`identity_text`].
pub fn identity(spec: &PackSpec) -> String {
    format!(
        "sha256:{}",
        hex::encode(Sha256::digest(identity_text(spec).as_bytes()))
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use voxpool_domain::snapshot::{Kind, Params, Tier};

    use super::*;

    fn spec() -> PackSpec {
        PackSpec {
            display_name: "A".into(),
            description: String::new(),
            provider: "espeak".into(),
            model: "espeak-ng".into(),
            voice_id: "en-us".into(),
            tts_model_id: "espeak-local".into(),
            kind: Kind::Standard,
            upstream_ids: vec![],
            params: Params {
                pitch_pct: Some(-0.0),
                rate: Some(1.5),
                volume_pct: None,
            },
            extra: BTreeMap::from([("b".into(), "2".into()), ("a".into(), "é".into())]),
            tier: Tier::Lite,
            locales: vec![],
            references: vec![],
        }
    }

    #[test]
    fn identity_text_is_sorted_compact_json() {
        assert_eq!(
            identity_text(&spec()),
            r#"{"extra":{"a":"é","b":"2"},"model":"espeak-ng","params":{"pitchPct":0,"rate":1.5},"provider":"espeak","voiceId":"en-us"}"#
        );
    }

    #[test]
    fn presentation_fields_do_not_change_identity_but_params_do() {
        let a = spec();
        let mut b = spec();
        b.display_name = "Other".into();
        b.tier = Tier::Premium;
        b.locales = vec!["en-US".into()];
        assert_eq!(identity(&a), identity(&b));
        b.params.rate = Some(1.25);
        assert_ne!(identity(&a), identity(&b));
    }
}
