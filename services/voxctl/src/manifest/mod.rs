//! The batch manifest: JSON Lines, one item per line (`{"id", "text"}` plus exactly one of
//! `packId`, `snapshot` or `card`; optional `emotion` and `seed` for voices with reference
//! clips). Any other key is a problem of its line, never ignored: a misspelt option would
//! otherwise change the audio without a word.
//!
//! Parsing never stops at a bad line: every problem is kept with its 1-based line number and
//! the valid items still run (the caller decides whether `--strict` stops first). Blank lines
//! are skipped. Ids double as file names, so they are restricted to a safe alphabet and may not
//! start with `.` (the prefix of voxctl's own temporary and checkpoint files): a final file can
//! never be mistaken for a temporary one.

mod voice;

pub mod packs;

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use serde::Deserialize;
use sha2::{Digest, Sha256};
use voice::VoiceResolver;
pub use voice::{Voice, from_card_file, from_snapshot_file};

/// One valid manifest item.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    /// 1-based line number in the manifest.
    pub line: usize,
    /// The item id (also the output file stem).
    pub id: String,
    /// Text to speak (non-empty).
    pub text: String,
    /// The voice to speak it with.
    pub voice: Voice,
    /// Voices with reference clips: the clip tag to speak with; empty = none.
    pub emotion: String,
    /// Voices with reference clips: the seed of the pick; `None` = the item id's seed.
    pub seed: Option<u64>,
}

impl Item {
    /// Characters of text (Unicode scalar values), the unit of `--max-chars` and of throughput.
    pub fn chars(&self) -> usize {
        self.text.chars().count()
    }
}

/// A manifest line that cannot run, with the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line number.
    pub line: usize,
    /// The item id when the line had a readable one.
    pub id: Option<String>,
    /// What is wrong (lowercase, concrete).
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.id {
            Some(id) => write!(f, "line {} (id {id:?}): {}", self.line, self.message),
            None => write!(f, "line {}: {}", self.line, self.message),
        }
    }
}

/// A parsed manifest.
#[derive(Clone, Debug, Default)]
pub struct Manifest {
    /// Valid items, in manifest order.
    pub items: Vec<Item>,
    /// Invalid lines, in manifest order.
    pub problems: Vec<Problem>,
    /// `sha256:` + hex of the manifest bytes (the manifest's identity in the checkpoint).
    pub digest: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawItem {
    id: Option<serde_json::Value>,
    text: Option<String>,
    pack_id: Option<String>,
    snapshot: Option<serde_json::Value>,
    card: Option<String>,
    #[serde(default)]
    emotion: String,
    seed: Option<u64>,
}

/// Why the manifest file itself could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read manifest {path}: {source}")]
pub struct ReadError {
    /// The manifest path.
    pub path: PathBuf,
    /// The I/O error.
    #[source]
    pub source: std::io::Error,
}

impl Manifest {
    /// Reads and parses the manifest at `path`; card paths are relative to its directory.
    pub fn load(path: &Path) -> Result<Self, ReadError> {
        let bytes = std::fs::read(path).map_err(|source| ReadError {
            path: path.to_owned(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Ok(Self::parse(&bytes, base))
    }

    /// Parses manifest bytes; `base` is the directory card paths are relative to.
    pub fn parse(bytes: &[u8], base: &Path) -> Self {
        let mut manifest = Manifest {
            digest: format!("sha256:{}", hex::encode(Sha256::digest(bytes))),
            ..Default::default()
        };
        let mut resolver = VoiceResolver::new(base);
        let mut first_line: HashMap<String, usize> = HashMap::new();
        for (index, raw) in bytes.split(|b| *b == b'\n').enumerate() {
            let line = index + 1;
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            if raw.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match parse_line(raw, &mut resolver) {
                Ok(item) => {
                    if let Some(first) = first_line.get(&item.id) {
                        manifest.problems.push(Problem {
                            line,
                            message: format!("duplicate id (first on line {first})"),
                            id: Some(item.id),
                        });
                        continue;
                    }
                    first_line.insert(item.id.clone(), line);
                    manifest.items.push(Item { line, ..item });
                }
                Err((id, message)) => manifest.problems.push(Problem { line, id, message }),
            }
        }
        manifest
    }
}

fn parse_line(raw: &[u8], resolver: &mut VoiceResolver) -> Result<Item, (Option<String>, String)> {
    let text = std::str::from_utf8(raw).map_err(|e| (None, format!("not UTF-8 text: {e}")))?;
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| (None, format!("invalid JSON: {e}")))?;
    if !value.is_object() {
        return Err((None, "not a JSON object".into()));
    }
    let raw: RawItem =
        serde_json::from_value(value).map_err(|e| (None, format!("invalid item: {e}")))?;
    let id = match raw.id {
        None => return Err((None, "missing id".into())),
        Some(serde_json::Value::String(s)) => s,
        Some(other) => return Err((None, format!("id must be a string, got {other}"))),
    };
    voxpool_domain::item::check_item_id(&id).map_err(|m| (None, m))?;
    let fail = |message: String| (Some(id.clone()), message);
    let text = match raw.text {
        None => return Err(fail("missing text".into())),
        Some(t) if t.trim().is_empty() => return Err(fail("text is empty".into())),
        Some(t) if !voxpool_domain::text::has_speech(&t) => {
            return Err(fail(
                "text has nothing to speak: no letter or digit (only punctuation, symbols or spaces)"
                    .into(),
            ));
        }
        Some(t) => t,
    };
    let voice = match (raw.pack_id, raw.snapshot, raw.card) {
        (Some(pack), None, None) if !pack.trim().is_empty() => Voice::PackId(pack),
        (Some(_), None, None) => return Err(fail("packId is empty".into())),
        (None, Some(snapshot), None) => resolver.snapshot(&snapshot).map_err(fail)?,
        (None, None, Some(card)) => resolver.card(&card).map_err(fail)?,
        (None, None, None) => {
            return Err(fail(
                "missing voice: give one of packId, snapshot, card".into(),
            ));
        }
        _ => return Err(fail("give only one of packId, snapshot, card".into())),
    };
    if !raw.emotion.is_empty() && !voxpool_domain::reference::is_tag(&raw.emotion) {
        return Err(fail(format!(
            "emotion {:?} is not a clip tag: use [a-z0-9_-]{{1,32}}",
            raw.emotion
        )));
    }
    Ok(Item {
        line: 0,
        id,
        text,
        voice,
        emotion: raw.emotion,
        seed: raw.seed,
    })
}

#[cfg(test)]
mod tests;
