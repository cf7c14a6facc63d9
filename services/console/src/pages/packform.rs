//! The pack form of the packs admin (create and edit): its fields as typed, turned into the
//! catalog's pack with the fields that changed, and back into a form from a pack. The form
//! checks only what it must to build the request (a number field that is not a number); the
//! catalog validates everything else, and its messages show by their fields.

use serde::Deserialize;
use voxpool_proto::catalog::v1::{self as cpb, voice_pack::Kind};

use crate::{backend::BackendError, view::PackView};

/// Providers the catalog knows (docs/CATALOG.md).
pub const PROVIDERS: [&str; 8] = [
    "espeak",
    "selfhosted",
    "openai",
    "azure",
    "volcengine",
    "elevenlabs",
    "minimax",
    "dashscope",
];

/// The form as posted (every field text, as typed).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct PackForm {
    /// The session's CSRF token.
    pub csrf: String,
    /// The version the form was read at (edit only).
    pub version: String,
    pub display_name: String,
    pub description: String,
    pub provider: String,
    pub model: String,
    pub voice_id: String,
    pub tts_model_id: String,
    pub tier: String,
    pub kind: String,
    /// Comma-separated.
    pub locales: String,
    /// Comma-separated.
    pub upstream_ids: String,
    pub pitch_pct: String,
    pub rate: String,
    pub volume_pct: String,
}

/// The form's own refusals, by field, before anything is sent.
pub type FormErrors = Vec<(String, String)>;

fn list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn number(errors: &mut FormErrors, field: &str, text: &str) -> Option<f64> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    match text.parse::<f64>() {
        Ok(v) => Some(v),
        Err(_) => {
            errors.push((field.to_owned(), format!("must be a number, got {text:?}")));
            None
        }
    }
}

impl PackForm {
    /// The form showing `pack`.
    pub fn of(pack: &PackView) -> Self {
        let param = |name: &str| {
            pack.params
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        Self {
            csrf: String::new(),
            version: pack.version.to_string(),
            display_name: pack.name.clone(),
            description: pack.description.clone(),
            provider: pack.provider.clone(),
            model: pack.model.clone(),
            voice_id: pack.voice_id.clone(),
            tts_model_id: pack.tts_model_id.clone(),
            tier: pack.tier.clone(),
            kind: pack.kind.clone(),
            locales: pack.locales.join(", "),
            upstream_ids: pack.upstream_ids.join(", "),
            pitch_pct: param("pitch_pct"),
            rate: param("rate"),
            volume_pct: param("volume_pct"),
        }
    }

    /// The catalog's pack of this form; the form's own refusals when a number is not one.
    pub fn pack(&self, id: &str) -> Result<cpb::VoicePack, FormErrors> {
        let mut errors = FormErrors::new();
        let params = cpb::VoiceParams {
            pitch_pct: number(&mut errors, "pitch_pct", &self.pitch_pct),
            rate: number(&mut errors, "rate", &self.rate),
            volume_pct: number(&mut errors, "volume_pct", &self.volume_pct),
        };
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(cpb::VoicePack {
            id: id.to_owned(),
            display_name: self.display_name.trim().to_owned(),
            description: self.description.trim().to_owned(),
            provider: self.provider.trim().to_owned(),
            model: self.model.trim().to_owned(),
            voice_id: self.voice_id.trim().to_owned(),
            tts_model_id: self.tts_model_id.trim().to_owned(),
            kind: Kind::from_str_name(self.kind.trim()).map_or(0, |k| k as i32),
            upstream_ids: list(&self.upstream_ids),
            params: Some(params),
            tier: cpb::Tier::from_str_name(self.tier.trim()).map_or(0, |t| t as i32),
            locales: list(&self.locales),
            ..Default::default()
        })
    }

    /// The update mask's paths: the fields whose text differs from `before`'s.
    pub fn changed(&self, before: &Self) -> Vec<String> {
        let pairs: [(&str, &str, &str); 11] = [
            ("display_name", &self.display_name, &before.display_name),
            ("description", &self.description, &before.description),
            ("provider", &self.provider, &before.provider),
            ("model", &self.model, &before.model),
            ("voice_id", &self.voice_id, &before.voice_id),
            ("tts_model_id", &self.tts_model_id, &before.tts_model_id),
            ("tier", &self.tier, &before.tier),
            ("kind", &self.kind, &before.kind),
            ("locales", &self.locales, &before.locales),
            ("upstream_ids", &self.upstream_ids, &before.upstream_ids),
            ("params", "", ""),
        ];
        let mut paths: Vec<String> = pairs
            .iter()
            .filter(|(_, now, was)| now.trim() != was.trim())
            .map(|(name, _, _)| (*name).to_owned())
            .collect();
        let params_changed = [
            (&self.pitch_pct, &before.pitch_pct),
            (&self.rate, &before.rate),
            (&self.volume_pct, &before.volume_pct),
        ]
        .iter()
        .any(|(now, was)| now.trim() != was.trim());
        if params_changed {
            paths.push("params".to_owned());
        }
        paths
    }
}

/// The messages shown by the form's fields: the form's own, or the catalog's by field.
#[derive(Debug, Default)]
pub struct FieldMessages {
    own: FormErrors,
    catalog: Option<BackendError>,
}

impl FieldMessages {
    /// The form's own refusals.
    pub fn own(errors: FormErrors) -> Self {
        Self {
            own: errors,
            catalog: None,
        }
    }

    /// The catalog's refusal.
    pub fn catalog(e: BackendError) -> Self {
        Self {
            own: Vec::new(),
            catalog: Some(e),
        }
    }

    /// The message by field `name`; empty when none.
    pub fn of(&self, name: &str) -> String {
        if let Some((_, m)) = self.own.iter().find(|(f, _)| f == name) {
            return m.clone();
        }
        self.catalog
            .as_ref()
            .map(|e| e.field(name))
            .unwrap_or_default()
    }

    /// The summary above the form; empty when there is nothing to say.
    pub fn summary(&self) -> String {
        match (&self.catalog, self.own.is_empty()) {
            (Some(e), _) if !e.fields.is_empty() => {
                "the catalog refused the pack: see the messages by the fields".to_owned()
            }
            (Some(e), _) => e.summary(),
            (None, false) => "some fields need correcting: see the messages by them".to_owned(),
            (None, true) => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_field_that_is_not_a_number_is_named() {
        let form = PackForm {
            rate: "fast".into(),
            ..PackForm::default()
        };
        let errors = form.pack("").expect_err("refused");
        assert_eq!(errors[0].0, "rate");
    }

    #[test]
    fn only_changed_fields_are_in_the_mask() {
        let before = PackForm {
            display_name: "A".into(),
            locales: "en-US".into(),
            ..PackForm::default()
        };
        let after = PackForm {
            display_name: "B".into(),
            locales: " en-US ".into(),
            rate: "1.5".into(),
            ..before.clone()
        };
        assert_eq!(after.changed(&before), vec!["display_name", "params"]);
    }

    #[test]
    fn the_catalogs_messages_show_by_their_fields() {
        let e = BackendError {
            service: crate::backend::Service::Catalog,
            code: tonic::Code::InvalidArgument,
            message: "bad".into(),
            fields: vec![
                ("voice_pack.tts_model_id".into(), "no pool".into()),
                ("voice_pack.locales[1]".into(), "not BCP 47".into()),
                ("voice_pack.params.rate".into(), "too fast".into()),
            ],
        };
        let m = FieldMessages::catalog(e);
        assert_eq!(m.of("tts_model_id"), "no pool");
        assert_eq!(m.of("locales"), "not BCP 47");
        assert_eq!(m.of("rate"), "too fast");
        assert_eq!(m.of("model"), "");
    }
}
