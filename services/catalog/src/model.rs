//! Domain types of the catalog: a pack's editable content ([`PackSpec`]), a stored pack
//! ([`VoicePack`]) and its audit trail ([`Revision`]).
//!
//! These are what the repository stores and the services reason about; prost messages are
//! converted at the gRPC edge (`convert`). A `PackSpec` that reaches the repository has been
//! validated (`validate`), so every value in it is in range.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use voxpool_domain::snapshot::{Kind, Params, Tier};

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
}

impl Action {
    /// The stored / wire spelling: `create`, `update`, `disable`, `enable`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Update => "update",
            Action::Disable => "disable",
            Action::Enable => "enable",
        }
    }

    /// Parses [`Action::as_str`]'s spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "create" => Some(Action::Create),
            "update" => Some(Action::Update),
            "disable" => Some(Action::Disable),
            "enable" => Some(Action::Enable),
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
