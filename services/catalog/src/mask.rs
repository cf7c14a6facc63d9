//! `update_mask` handling for UpdateVoicePack.
//!
//! Paths are snake_case proto field names of `VoicePack`: `display_name`, `description`,
//! `provider`, `model`, `voice_id`, `tts_model_id`, `kind`, `upstream_ids`, `params` (the
//! whole message; `params.pitch_pct`, `params.rate`, `params.volume_pct` change one value),
//! `extra`, `tier`, `locales`. Output-only fields (`id`, `enabled`, `version`, `create_time`,
//! `update_time`, `references`: clips change through AddReference / RemoveReference) and
//! unknown paths are INVALID_ARGUMENT naming `update_mask.paths[i]`; an
//! empty mask is INVALID_ARGUMENT too (a partial update must say what it changes). The
//! merged result is validated as a whole, so an update can never store an invalid pack.

use voxpool_proto::catalog::v1 as pb;

use crate::error::{CatalogError, Violation};

/// Paths that name output-only fields.
const OUTPUT_ONLY: &[&str] = &[
    "id",
    "enabled",
    "version",
    "create_time",
    "update_time",
    "references",
];

/// Checks `paths` (all violations at once).
pub fn check_paths(paths: &[String]) -> Result<(), CatalogError> {
    if paths.is_empty() {
        return Err(CatalogError::invalid(
            "update_mask",
            "required: list the fields to change, e.g. {\"paths\": [\"display_name\"]}",
        ));
    }
    let violations: Vec<_> = paths
        .iter()
        .enumerate()
        .filter_map(|(i, path)| {
            let description = if path == "references" {
                "\"references\" is output only: change clips with AddReference / RemoveReference".to_owned()
            } else if OUTPUT_ONLY.contains(&path.as_str()) {
                format!("{path:?} is output only")
            } else if apply_one(&mut pb::VoicePack::default(), &pb::VoicePack::default(), path) {
                return None;
            } else {
                format!(
                    "unknown field {path:?}: use display_name, description, provider, model, voice_id, \
                     tts_model_id, kind, upstream_ids, params, params.pitch_pct, params.rate, \
                     params.volume_pct, extra, tier or locales"
                )
            };
            Some(Violation { field: format!("update_mask.paths[{i}]"), description })
        })
        .collect();
    if violations.is_empty() {
        Ok(())
    } else {
        Err(CatalogError::InvalidArgument { violations })
    }
}

/// Copies the fields named by `paths` (already checked) from `from` into `into`.
pub fn apply(into: &mut pb::VoicePack, from: &pb::VoicePack, paths: &[String]) {
    for path in paths {
        apply_one(into, from, path);
    }
}

/// Copies one field; false for a path that is not updatable.
fn apply_one(into: &mut pb::VoicePack, from: &pb::VoicePack, path: &str) -> bool {
    let from_params = from.params.unwrap_or_default();
    let params = into.params.get_or_insert_with(Default::default);
    match path {
        "display_name" => into.display_name.clone_from(&from.display_name),
        "description" => into.description.clone_from(&from.description),
        "provider" => into.provider.clone_from(&from.provider),
        "model" => into.model.clone_from(&from.model),
        "voice_id" => into.voice_id.clone_from(&from.voice_id),
        "tts_model_id" => into.tts_model_id.clone_from(&from.tts_model_id),
        "kind" => into.kind = from.kind,
        "upstream_ids" => into.upstream_ids.clone_from(&from.upstream_ids),
        "params" => *params = from_params,
        "params.pitch_pct" => params.pitch_pct = from_params.pitch_pct,
        "params.rate" => params.rate = from_params.rate,
        "params.volume_pct" => params.volume_pct = from_params.volume_pct,
        "extra" => into.extra.clone_from(&from.extra),
        "tier" => into.tier = from.tier,
        "locales" => into.locales.clone_from(&from.locales),
        _ => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(paths: &[&str]) -> Vec<String> {
        let paths: Vec<String> = paths.iter().map(|p| (*p).to_owned()).collect();
        match check_paths(&paths) {
            Err(CatalogError::InvalidArgument { violations }) => {
                violations.into_iter().map(|v| v.field).collect()
            }
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn unknown_and_output_only_paths_are_named_by_index() {
        assert_eq!(
            fields(&["display_name", "voiceId", "version"]),
            ["update_mask.paths[1]", "update_mask.paths[2]"]
        );
        assert_eq!(fields(&[]), ["update_mask"]);
    }

    #[test]
    fn only_masked_fields_change() {
        let mut current = pb::VoicePack {
            display_name: "old".into(),
            description: "keep".into(),
            params: Some(pb::VoiceParams {
                pitch_pct: Some(5.0),
                rate: Some(1.5),
                volume_pct: None,
            }),
            ..Default::default()
        };
        let request = pb::VoicePack {
            display_name: "new".into(),
            params: Some(pb::VoiceParams {
                pitch_pct: None,
                rate: Some(2.0),
                volume_pct: Some(3.0),
            }),
            ..Default::default()
        };
        apply(
            &mut current,
            &request,
            &["display_name".into(), "params.rate".into()],
        );
        assert_eq!(current.display_name, "new");
        assert_eq!(current.description, "keep");
        assert_eq!(
            current.params,
            Some(pb::VoiceParams {
                pitch_pct: Some(5.0),
                rate: Some(2.0),
                volume_pct: None
            })
        );
    }
}
