//! Domain types of the catalog: a pack's editable content ([`PackSpec`]), its reference
//! clips ([`PackReference`]), a stored pack ([`VoicePack`]) and its audit trail
//! ([`Revision`]).
//!
//! These are what the repository stores and the services reason about; prost messages are
//! converted at the gRPC edge (`convert`). A `PackSpec` that reaches the repository has been
//! validated (`validate`), so every value in it is in range.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use voxpool_domain::{
    reference::Reference,
    snapshot::{Kind, Params, Tier},
};

/// The editable content of a voice pack (everything except id, state, version and times).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PackSpec {
    /// Human name shown in the market, 1..200 characters.
    pub display_name: String,
    /// Free text, at most 2,000 characters.
    #[serde(default)]
    pub description: String,
    /// Provider (adapter) id, one of `voxpool_config::PROVIDERS`.
    pub provider: String,
    /// Vendor model id.
    pub model: String,
    /// Vendor voice id.
    pub voice_id: String,
    /// The tts model id (= scheduler pool id) the pack pins.
    pub tts_model_id: String,
    /// Stock or cloned voice.
    #[serde(default)]
    pub kind: Kind,
    /// Accounts (upstream ids) that hold the voice; required for [`Kind::Cloned`].
    #[serde(default)]
    pub upstream_ids: Vec<String>,
    /// Prosody overrides.
    #[serde(default)]
    pub params: Params,
    /// Vendor options; part of the identity.
    #[serde(default)]
    pub extra: BTreeMap<String, String>,
    /// Price / quality tier.
    pub tier: Tier,
    /// BCP 47 locales in canonical casing (`en-US`).
    #[serde(default)]
    pub locales: Vec<String>,
    /// Reference clips, in the order they were added (AddReference / RemoveReference only:
    /// CreateVoicePack and UpdateVoicePack never set them). Part of the identity.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<PackReference>,
}

/// One reference clip of a pack (its bytes are in the blob store under
/// `references/<digest hex>`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PackReference {
    /// `sha256:<64 hex>` over the bytes.
    pub digest: String,
    /// What the clip says, 1..1000 characters.
    pub transcript: String,
    /// BCP 47 language, canonical casing.
    pub language: String,
    /// Tag a request can pick the clip by; empty = none.
    #[serde(default)]
    pub emotion: String,
    /// Relative weight, 1..=1000.
    pub weight: u32,
    /// Duration in milliseconds.
    pub duration_ms: u32,
    /// `audio/wav`, `audio/mpeg` or `audio/flac`.
    pub media_type: String,
    /// Size in bytes.
    pub size_bytes: i64,
    /// When it was added (microseconds since the Unix epoch).
    pub add_time_us: i64,
}

impl PackReference {
    /// The clip as a snapshot freezes it.
    pub fn frozen(&self) -> Reference {
        Reference {
            digest: self.digest.clone(),
            transcript: self.transcript.clone(),
            language: self.language.clone(),
            emotion: self.emotion.clone(),
            weight: self.weight,
            duration_ms: self.duration_ms,
        }
    }
}

/// A clip row as ListReferences shows it: the clip and, once removed, when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedReference {
    /// The clip.
    pub reference: PackReference,
    /// When RemoveReference took it out of the pack (microseconds); `None` while in it.
    pub remove_time_us: Option<i64>,
}

/// A stored voice pack.
#[derive(Clone, Debug, PartialEq)]
pub struct VoicePack {
    /// Server-assigned id, `vp_` + 24 lowercase hex digits.
    pub id: String,
    /// The content.
    pub spec: PackSpec,
    /// False once disabled: hidden from the market list, refused by FreezeSnapshot.
    pub enabled: bool,
    /// 1 on create, +1 per change.
    pub version: i64,
    /// Creation time (catalog clock, microsecond precision).
    pub create_time: DateTime<Utc>,
    /// Time of the last change (catalog clock, microsecond precision).
    pub update_time: DateTime<Utc>,
}

/// What a revision recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The pack was created (version 1).
    Create,
    /// Content fields changed through UpdateVoicePack.
    Update,
    /// The pack was disabled.
    Disable,
    /// The pack was enabled again.
    Enable,
    /// AddReference added a clip.
    AddReference,
    /// RemoveReference took a clip out.
    RemoveReference,
}

impl Action {
    /// The stored / wire spelling: `create`, `update`, `disable`, `enable`, `add_reference`,
    /// `remove_reference`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Update => "update",
            Action::Disable => "disable",
            Action::Enable => "enable",
            Action::AddReference => "add_reference",
            Action::RemoveReference => "remove_reference",
        }
    }

    /// Parses [`Action::as_str`]'s spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "create" => Some(Action::Create),
            "update" => Some(Action::Update),
            "disable" => Some(Action::Disable),
            "enable" => Some(Action::Enable),
            "add_reference" => Some(Action::AddReference),
            "remove_reference" => Some(Action::RemoveReference),
            _ => None,
        }
    }
}

/// One entry of a pack's audit trail: the full pack as of `pack.version`.
#[derive(Clone, Debug, PartialEq)]
pub struct Revision {
    /// What changed.
    pub action: Action,
    /// The pack right after the change (its `version` is the revision's version).
    pub pack: VoicePack,
    /// When the change was made.
    pub time: DateTime<Utc>,
}

/// The catalog clock: now, truncated to whole microseconds so a time survives a round trip
/// through the database (integer microseconds) unchanged.
pub fn now() -> DateTime<Utc> {
    from_micros(Utc::now().timestamp_micros())
}

/// A time from microseconds since the Unix epoch (out-of-range values clamp to the epoch).
pub fn from_micros(us: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(us).unwrap_or_default()
}
