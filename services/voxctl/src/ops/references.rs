//! `voxctl packs add-reference|references|remove-reference`: a selfhosted pack's reference
//! clips (admin RPCs AddReference, ListReferences, RemoveReference).

use std::path::Path;

use voxpool_proto::catalog::v1::{
    AddReferenceRequest, ListReferencesRequest, RemoveReferenceRequest, VoicePackReference,
};

use super::{OpError, packs::Catalog};
use crate::console::table;

/// The catalog's clip size limit, checked before reading a file (the catalog checks again).
pub const MAX_CLIP_BYTES: u64 = 10 * 1024 * 1024;

/// A clip to add, as given on the command line.
#[derive(Clone, Debug)]
pub struct NewClip<'a> {
    /// The clip file.
    pub file: &'a Path,
    /// What it says.
    pub transcript: &'a str,
    /// BCP 47 language or empty.
    pub language: &'a str,
    /// Tag or empty.
    pub emotion: &'a str,
    /// Weight.
    pub weight: u32,
}

impl Catalog {
    /// Sends `clip` to pack `pack`; answers the stored clip (with its digest).
    pub async fn add_reference(
        &mut self,
        pack: &str,
        clip: &NewClip<'_>,
    ) -> Result<VoicePackReference, OpError> {
        let shown = clip.file.display();
        let size = std::fs::metadata(clip.file)
            .map_err(|e| OpError::usage(format!("{shown}: {e}")))?
            .len();
        if size > MAX_CLIP_BYTES {
            return Err(OpError::usage(format!(
                "{shown} is {size} bytes, over the catalog's limit of {MAX_CLIP_BYTES} bytes (10 MiB): send a shorter or more compressed clip"
            )));
        }
        let audio =
            std::fs::read(clip.file).map_err(|e| OpError::usage(format!("{shown}: {e}")))?;
        self.admin
            .add_reference(AddReferenceRequest {
                pack_id: pack.to_owned(),
                audio,
                transcript: clip.transcript.to_owned(),
                language: clip.language.to_owned(),
                emotion: clip.emotion.to_owned(),
                weight: clip.weight,
            })
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| OpError::status("AddReference", &self.service, &s))
    }

    /// The pack's clips (removed ones too with `removed`).
    pub async fn references(
        &mut self,
        pack: &str,
        removed: bool,
    ) -> Result<Vec<VoicePackReference>, OpError> {
        self.admin
            .list_references(ListReferencesRequest {
                pack_id: pack.to_owned(),
                show_removed: removed,
            })
            .await
            .map(|r| r.into_inner().references)
            .map_err(|s| OpError::status("ListReferences", &self.service, &s))
    }

    /// Takes clip `digest` out of pack `pack`.
    pub async fn remove_reference(
        &mut self,
        pack: &str,
        digest: &str,
    ) -> Result<VoicePackReference, OpError> {
        self.admin
            .remove_reference(RemoveReferenceRequest {
                pack_id: pack.to_owned(),
                digest: digest.to_owned(),
            })
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| OpError::status("RemoveReference", &self.service, &s))
    }
}

/// One line for a clip: digest, seconds, media type, language, emotion.
pub fn describe(r: &VoicePackReference) -> String {
    let emotion = if r.emotion.is_empty() {
        String::new()
    } else {
        format!(", emotion {}", r.emotion)
    };
    format!(
        "{} ({:.2} s, {}, {}{emotion}, weight {})",
        r.digest,
        f64::from(r.duration_ms) / 1000.0,
        r.media_type,
        r.language,
        r.weight
    )
}

/// A table of clips with a header.
pub fn render(clips: &[VoicePackReference]) -> String {
    let rows: Vec<Vec<String>> = clips
        .iter()
        .map(|r| {
            let transcript: String = r.transcript.chars().take(40).collect();
            vec![
                r.digest.clone(),
                format!("{:.2}", f64::from(r.duration_ms) / 1000.0),
                r.language.clone(),
                r.emotion.clone(),
                r.weight.to_string(),
                if r.remove_time.is_some() {
                    "removed".into()
                } else {
                    "in pack".into()
                },
                transcript,
            ]
        })
        .collect();
    table(
        &[
            "DIGEST",
            "SECONDS",
            "LANGUAGE",
            "EMOTION",
            "WEIGHT",
            "STATE",
            "TRANSCRIPT",
        ],
        &rows,
    )
}
