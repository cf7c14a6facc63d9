//! The voice of an item: a pack id (resolved by synthesis through the catalog) or a frozen
//! snapshot, given inline or read from a character card.
//!
//! Snapshots are checked here (known fields, digest) so a corrupt one is reported with its
//! manifest line instead of failing on the server later. A card read by several items is read
//! once.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use voxpool_domain::snapshot::Snapshot;
use voxpool_proto::synthesis::v1::synthesize_request;

/// Where a card keeps its voice pack snapshot.
pub const CARD_POINTER: &str = "/data/extensions/airi/modules/speech/voicePack";

/// The voice an item is spoken with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Voice {
    /// A catalog pack id; synthesis freezes its current values.
    PackId(String),
    /// A frozen snapshot, as its JSON form.
    Snapshot {
        /// The snapshot's JSON text, exactly as given (compact).
        json: String,
        /// The pack the snapshot was frozen from (for messages).
        pack_id: String,
    },
}

impl Voice {
    /// The request's `voice` field.
    pub fn to_pb(&self) -> synthesize_request::Voice {
        match self {
            Voice::PackId(id) => synthesize_request::Voice::PackId(id.clone()),
            Voice::Snapshot { json, .. } => synthesize_request::Voice::SnapshotJson(json.clone()),
        }
    }

    /// A stable text that changes whenever the voice does (part of an item's fingerprint).
    pub fn identity(&self) -> String {
        match self {
            Voice::PackId(id) => format!("pack:{id}"),
            Voice::Snapshot { json, .. } => format!("snapshot:{json}"),
        }
    }
}

/// Turns `snapshot` and `card` fields into checked [`Voice`]s.
pub(super) struct VoiceResolver {
    base: PathBuf,
    cards: HashMap<PathBuf, Result<Voice, String>>,
}

impl VoiceResolver {
    /// Card paths are relative to `base`.
    pub(super) fn new(base: &Path) -> Self {
        Self {
            base: base.to_owned(),
            cards: HashMap::new(),
        }
    }

    /// An inline snapshot object.
    pub(super) fn snapshot(&mut self, value: &serde_json::Value) -> Result<Voice, String> {
        check_snapshot(value).map_err(|e| format!("invalid snapshot: {e}"))
    }

    /// The snapshot inside the card at `path`.
    pub(super) fn card(&mut self, path: &str) -> Result<Voice, String> {
        let full = self.base.join(path);
        self.cards
            .entry(full.clone())
            .or_insert_with(|| read_card(&full).map_err(|e| format!("card {path}: {e}")))
            .clone()
    }
}

/// The snapshot bound in the card file at `path` (for `voxctl synth --card`).
pub fn from_card_file(path: &Path) -> Result<Voice, String> {
    read_card(path).map_err(|e| format!("card {}: {e}", path.display()))
}

/// A snapshot JSON file (for `voxctl synth --snapshot`).
pub fn from_snapshot_file(path: &Path) -> Result<Voice, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("snapshot {}: cannot read: {e}", path.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("snapshot {}: invalid JSON: {e}", path.display()))?;
    check_snapshot(&value).map_err(|e| format!("snapshot {}: {e}", path.display()))
}

fn read_card(path: &Path) -> Result<Voice, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    let card: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("invalid JSON: {e}"))?;
    let snapshot = card.pointer(CARD_POINTER).ok_or_else(|| {
        "no voice pack at data.extensions.airi.modules.speech.voicePack (bind one first)".to_owned()
    })?;
    check_snapshot(snapshot)
}

fn check_snapshot(value: &serde_json::Value) -> Result<Voice, String> {
    if !value.is_object() {
        return Err("a snapshot must be a JSON object".into());
    }
    let snapshot = Snapshot::from_json(&value.to_string()).map_err(|e| e.to_string())?;
    snapshot.verify_digest().map_err(|e| e.to_string())?;
    Ok(Voice::Snapshot {
        json: value.to_string(),
        pack_id: snapshot.pack_id,
    })
}
