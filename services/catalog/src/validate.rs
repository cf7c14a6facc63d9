//! Request validation: turns a `voxpool.catalog.v1.VoicePack` message into a [`PackSpec`]
//! or the complete list of field violations (INVALID_ARGUMENT with `google.rpc.BadRequest`).
//!
//! Rules (the names and ranges of docs/API.md): provider is a known adapter; `pitch_pct` -50..50, `rate`
//! 0.25..4.0, `volume_pct` -100..100, all finite; `model`, `voice_id`, `tts_model_id`
//! non-empty (the latter a pool id); a CLONED pack names its `upstream_ids` with its
//! `voice_id`, or neither (a managed clone, cloned from its reference clips); `display_name`
//! 1..200 characters; `tier` set; `extra` keys `[a-z0-9_]{1,64}` with values of at most 256
//! characters. Locales are brought to canonical BCP 47 casing (`en-us` -> `en-US`), so the
//! market filter matches them the same way on every database.

use std::collections::BTreeSet;

use voxpool_config::is_valid_id;
use voxpool_domain::{
    provider::Provider,
    snapshot::{Kind, Params, Tier},
};
use voxpool_proto::catalog::v1 as pb;

use crate::{
    error::{CatalogError, Violation},
    model::PackSpec,
};

/// Longest `display_name`, in characters.
pub const MAX_DISPLAY_NAME: usize = 200;
/// Longest `description`, in characters.
pub const MAX_DESCRIPTION: usize = 2_000;
/// Longest `model` / `voice_id`, in characters.
pub const MAX_VENDOR_ID: usize = 256;
/// Longest `extra` value, in characters.
pub const MAX_EXTRA_VALUE: usize = 256;
/// Most `extra` entries.
pub const MAX_EXTRA_ENTRIES: usize = 32;
/// Most `locales` / `upstream_ids` entries.
pub const MAX_LIST: usize = 32;

/// Collects violations, each named `<prefix>.<field>`.
struct Check {
    prefix: String,
    violations: Vec<Violation>,
}

impl Check {
    fn fail(&mut self, field: &str, description: impl Into<String>) {
        self.violations.push(Violation {
            field: format!("{}{field}", self.prefix),
            description: description.into(),
        });
    }

    fn required_text(&mut self, field: &str, value: &str, max: usize) {
        let len = value.chars().count();
        if value.trim().is_empty() {
            self.fail(field, "required (non-empty)");
        } else if len > max {
            self.fail(field, format!("at most {max} characters, got {len}"));
        } else if value.chars().any(char::is_control) {
            self.fail(field, "must not contain control characters");
        }
    }

    fn param(&mut self, field: &str, value: Option<f64>, min: f64, max: f64) {
        if let Some(v) = value {
            if !v.is_finite() {
                self.fail(
                    field,
                    format!("must be a finite number in {min}..{max}, got {v}"),
                );
            } else if !(min..=max).contains(&v) {
                self.fail(field, format!("must be in {min}..{max}, got {v}"));
            }
        }
    }
}

/// Validates `p` as a complete pack. Output-only fields (`id`, `enabled`, `version`, times)
/// are ignored. `prefix` names the message in field paths (`voice_pack`).
///
/// Errors: [`CatalogError::InvalidArgument`] listing every violation.
pub fn pack_spec(p: &pb::VoicePack, prefix: &str) -> Result<PackSpec, CatalogError> {
    let mut c = Check {
        prefix: format!("{prefix}."),
        violations: Vec::new(),
    };

    let name_len = p.display_name.chars().count();
    if p.display_name.trim().is_empty() || name_len > MAX_DISPLAY_NAME {
        c.fail(
            "display_name",
            format!("must be 1..{MAX_DISPLAY_NAME} characters, got {name_len}"),
        );
    }
    if p.description.chars().count() > MAX_DESCRIPTION {
        c.fail(
            "description",
            format!("at most {MAX_DESCRIPTION} characters"),
        );
    }
    if let Err(unknown) = p.provider.parse::<Provider>() {
        c.fail("provider", unknown.to_string());
    }
    let kind = match p.kind {
        0 => Some(Kind::Standard),
        k => Kind::from_pb(k),
    };
    // A managed clone names no vendor voice: the catalog clones it per scope from its clips.
    let managed_clone =
        kind == Some(Kind::Cloned) && p.voice_id.is_empty() && p.upstream_ids.is_empty();
    c.required_text("model", &p.model, MAX_VENDOR_ID);
    if !managed_clone {
        c.required_text("voice_id", &p.voice_id, MAX_VENDOR_ID);
    }
    if !is_valid_id(&p.tts_model_id) {
        c.fail(
            "tts_model_id",
            format!(
                "required: a pool id (1..64 of a-z 0-9 . _ -, starting alphanumeric), got {:?}",
                p.tts_model_id
            ),
        );
    }

    if kind.is_none() {
        c.fail(
            "kind",
            format!("must be STANDARD or CLONED, got {}", p.kind),
        );
    }
    upstream_ids(&mut c, &p.upstream_ids);
    if kind == Some(Kind::Cloned) && p.upstream_ids.is_empty() && !managed_clone {
        c.fail(
            "upstream_ids",
            "required for a CLONED pack that names its voice_id: a cloned voice exists only on the \
             account(s) that cloned it (leave voice_id empty too for a managed clone, which the \
             catalog clones from its reference clips)",
        );
    }

    let params = Params::from_pb(p.params.as_ref());
    c.param("params.pitch_pct", params.pitch_pct, -50.0, 50.0);
    c.param("params.rate", params.rate, 0.25, 4.0);
    c.param("params.volume_pct", params.volume_pct, -100.0, 100.0);

    let extra: std::collections::BTreeMap<String, String> = p
        .extra
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if extra.len() > MAX_EXTRA_ENTRIES {
        c.fail(
            "extra",
            format!("at most {MAX_EXTRA_ENTRIES} entries, got {}", extra.len()),
        );
    }
    for (k, v) in &extra {
        if !is_extra_key(k) {
            c.fail(&format!("extra[{k:?}]"), "key must match [a-z0-9_]{1,64}");
        }
        if v.chars().count() > MAX_EXTRA_VALUE {
            c.fail(
                &format!("extra[{k:?}]"),
                format!("value must be at most {MAX_EXTRA_VALUE} characters"),
            );
        }
    }

    let tier = Tier::from_pb(p.tier);
    if tier.is_none() {
        c.fail("tier", "required: LITE, STANDARD, PRO or PREMIUM");
    }
    let locales = locales(&mut c, &p.locales);

    match (kind, tier) {
        (Some(kind), Some(tier)) if c.violations.is_empty() => Ok(PackSpec {
            display_name: p.display_name.clone(),
            description: p.description.clone(),
            provider: p.provider.clone(),
            model: p.model.clone(),
            voice_id: p.voice_id.clone(),
            tts_model_id: p.tts_model_id.clone(),
            kind,
            upstream_ids: p.upstream_ids.clone(),
            params,
            extra,
            tier,
            locales,
            references: vec![],
        }),
        _ => Err(CatalogError::InvalidArgument {
            violations: c.violations,
        }),
    }
}

fn upstream_ids(c: &mut Check, ids: &[String]) {
    if ids.len() > MAX_LIST {
        c.fail(
            "upstream_ids",
            format!("at most {MAX_LIST} entries, got {}", ids.len()),
        );
    }
    let mut seen = BTreeSet::new();
    for (i, id) in ids.iter().enumerate() {
        if !is_valid_id(id) {
            c.fail(
                &format!("upstream_ids[{i}]"),
                format!("not an upstream id: {id:?}"),
            );
        } else if !seen.insert(id.as_str()) {
            c.fail(
                &format!("upstream_ids[{i}]"),
                format!("duplicate upstream id {id:?}"),
            );
        }
    }
}

fn locales(c: &mut Check, raw: &[String]) -> Vec<String> {
    if raw.len() > MAX_LIST {
        c.fail(
            "locales",
            format!("at most {MAX_LIST} entries, got {}", raw.len()),
        );
    }
    let mut out = Vec::with_capacity(raw.len());
    for (i, l) in raw.iter().enumerate() {
        match canonical_locale(l) {
            Some(canon) if out.contains(&canon) => {
                c.fail(
                    &format!("locales[{i}]"),
                    format!("duplicate locale {canon:?}"),
                );
            }
            Some(canon) => out.push(canon),
            None => c.fail(
                &format!("locales[{i}]"),
                format!("not a BCP 47 language tag such as \"en-US\": {l:?}"),
            ),
        }
    }
    out
}

/// `[a-z0-9_]{1,64}`.
pub fn is_extra_key(k: &str) -> bool {
    (1..=64).contains(&k.len())
        && k.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// A BCP 47 tag (`language[-subtag]*`: letters then alphanumeric subtags of 1..8) in
/// canonical casing: language lowercase, 4-letter script Titlecase, 2-letter region
/// uppercase, everything else lowercase. `None` if it is not of that shape.
pub fn canonical_locale(tag: &str) -> Option<String> {
    if tag.len() > 35 {
        return None;
    }
    let mut out = Vec::new();
    for (i, sub) in tag.split('-').enumerate() {
        let ok = (1..=8).contains(&sub.len())
            && sub.bytes().all(|b| b.is_ascii_alphanumeric())
            && (i > 0 || (sub.len() >= 2 && sub.bytes().all(|b| b.is_ascii_alphabetic())));
        if !ok {
            return None;
        }
        let lower = sub.to_ascii_lowercase();
        out.push(
            if i > 0 && sub.len() == 4 && sub.bytes().all(|b| b.is_ascii_alphabetic()) {
                let mut s = lower;
                s[..1].make_ascii_uppercase();
                s
            } else if i > 0 && sub.len() == 2 && sub.bytes().all(|b| b.is_ascii_alphabetic()) {
                lower.to_ascii_uppercase()
            } else {
                lower
            },
        );
    }
    Some(out.join("-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> pb::VoicePack {
        pb::VoicePack {
            display_name: "Calm".into(),
            provider: "espeak".into(),
            model: "espeak-ng".into(),
            voice_id: "en-us".into(),
            tts_model_id: "espeak-local".into(),
            tier: pb::Tier::Lite as i32,
            locales: vec!["en-us".into()],
            ..Default::default()
        }
    }

    fn fields(p: &pb::VoicePack) -> Vec<String> {
        match pack_spec(p, "voice_pack") {
            Err(CatalogError::InvalidArgument { violations }) => {
                violations.into_iter().map(|v| v.field).collect()
            }
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn a_valid_pack_passes_with_canonical_locales() {
        let spec = pack_spec(&good(), "voice_pack").expect("valid");
        assert_eq!(spec.locales, ["en-US"]);
        assert_eq!(spec.kind, Kind::Standard);
    }

    #[test]
    fn every_violation_is_reported_at_once() {
        let mut p = good();
        p.display_name.clear();
        p.tier = 0;
        p.params = Some(pb::VoiceParams {
            pitch_pct: Some(51.0),
            rate: Some(f64::NAN),
            volume_pct: Some(-101.0),
        });
        assert_eq!(
            fields(&p),
            [
                "voice_pack.display_name",
                "voice_pack.params.pitch_pct",
                "voice_pack.params.rate",
                "voice_pack.params.volume_pct",
                "voice_pack.tier"
            ]
        );
    }

    #[test]
    fn param_bounds_are_inclusive() {
        let mut p = good();
        p.params = Some(pb::VoiceParams {
            pitch_pct: Some(-50.0),
            rate: Some(4.0),
            volume_pct: Some(100.0),
        });
        assert!(pack_spec(&p, "voice_pack").is_ok());
        p.params = Some(pb::VoiceParams {
            pitch_pct: Some(50.0),
            rate: Some(0.25),
            volume_pct: Some(-100.0),
        });
        assert!(pack_spec(&p, "voice_pack").is_ok());
    }

    #[test]
    fn cloned_pack_needs_upstream_ids() {
        let mut p = good();
        p.kind = pb::voice_pack::Kind::Cloned as i32;
        assert_eq!(fields(&p), ["voice_pack.upstream_ids"]);
        p.upstream_ids = vec!["acct-a".into()];
        assert!(pack_spec(&p, "voice_pack").is_ok());
    }

    #[test]
    fn a_managed_clone_names_neither_voice_id_nor_upstream_ids() {
        let mut p = good();
        p.kind = pb::voice_pack::Kind::Cloned as i32;
        p.voice_id.clear();
        let spec = pack_spec(&p, "voice_pack").expect("a managed clone");
        assert!(spec.voice_id.is_empty() && spec.upstream_ids.is_empty());
        p.upstream_ids = vec!["acct-a".into()];
        assert_eq!(fields(&p), ["voice_pack.voice_id"]);
        p.kind = pb::voice_pack::Kind::Standard as i32;
        p.upstream_ids.clear();
        assert_eq!(fields(&p), ["voice_pack.voice_id"]);
    }

    #[test]
    fn extra_keys_and_values_are_bounded() {
        let mut p = good();
        p.extra.insert("Style".into(), "x".into());
        p.extra.insert("ok_key".into(), "y".repeat(257));
        assert_eq!(
            fields(&p),
            [
                "voice_pack.extra[\"Style\"]",
                "voice_pack.extra[\"ok_key\"]"
            ]
        );
    }

    #[test]
    fn locales_are_canonicalized_or_refused() {
        assert_eq!(
            canonical_locale("zh-hant-tw").as_deref(),
            Some("zh-Hant-TW")
        );
        assert_eq!(canonical_locale("EN").as_deref(), Some("en"));
        assert_eq!(canonical_locale("es-419").as_deref(), Some("es-419"));
        assert_eq!(canonical_locale("en_US"), None);
        assert_eq!(canonical_locale("e"), None);
        assert_eq!(canonical_locale(""), None);
        let mut p = good();
        p.locales = vec!["en-US".into(), "en-us".into()];
        assert_eq!(fields(&p), ["voice_pack.locales[1]"]);
    }

    #[test]
    fn unknown_provider_and_empty_ids_are_named() {
        let mut p = good();
        p.provider = "acme".into();
        p.model = " ".into();
        p.voice_id.clear();
        p.tts_model_id = "Bad Pool".into();
        assert_eq!(
            fields(&p),
            [
                "voice_pack.provider",
                "voice_pack.model",
                "voice_pack.voice_id",
                "voice_pack.tts_model_id"
            ]
        );
    }
}
