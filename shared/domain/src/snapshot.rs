//! The frozen voice-pack snapshot: the one shape the catalog writes, cards store and
//! synthesis reads (invariant 7 of docs/ARCHITECTURE.md: snapshots never drift).
//!
//! # JSON form
//! Exactly the proto3 JSON of `voxpool.catalog.v1.VoicePackSnapshot` (lowerCamelCase keys,
//! enums by name, `packVersion` as a string like every proto3 int64, `frozenAt` RFC 3339 UTC,
//! empty lists and maps omitted). This is what a card keeps at
//! `data.extensions.airi.modules.speech.voicePack`. Parsing refuses unknown keys, so a typo
//! such as `pitch` for `pitchPct` is an error instead of a silently dropped param.
//!
//! # Digest
//! `digest = "sha256:" + hex(sha256(canonical))`, lowercase hex, where `canonical` is this
//! UTF-8 JSON text with no whitespace and keys in byte order at every level:
//!
//! ```text
//! {"extra":{<k>:<v>,...},"kind":"STANDARD"|"CLONED","locales":[...],"model":...,
//!  "packId":...,"packVersion":<integer>,"params":{"pitchPct":n,"rate":n,"volumePct":n},
//!  "provider":...,"tier":"LITE"|"STANDARD"|"PRO"|"PREMIUM","ttsModelId":...,
//!  "upstreamIds":[...],"voiceId":...}
//! ```
//! - `extra`, `locales`, `upstreamIds` and `params` are always present (possibly empty);
//!   inside `params` only the set values appear; list order is kept as stored.
//! - strings are JSON strings escaping only `"`, `\` and control characters (`\n`, `\t`, …,
//!   other controls as `\u00xx`); non-ASCII text is raw UTF-8 (what `JSON.stringify` does).
//! - numbers are the shortest decimal that round-trips the IEEE-754 double, without exponent
//!   and without a trailing `.0` (`10`, `-12.5`, `1.2`; `-0` is written `0`), which is what
//!   JavaScript's `String(n)` gives for the allowed ranges.
//! - `references` (a self-hosted zero-shot pack's clips, `voxpool_domain::reference`) is
//!   present only when the pack has clips, between `provider` and `tier`, as
//!   `"references":[{"digest":..,"durationMs":n,"emotion":..,"language":..,"transcript":..,"weight":n},...]`
//!   in snapshot order (`emotion` always written, possibly `""`): a snapshot without clips
//!   keeps the digest it had before clips existed.
//! - `frozenAt` and `digest` are not part of the content.
//!
//! Another language verifies a snapshot by rebuilding this text from the JSON form and
//! comparing digests.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};
use voxpool_proto::catalog::v1 as pb;

use crate::reference::Reference;

/// Price / quality tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Tier {
    /// `LITE`
    Lite,
    /// `STANDARD`
    Standard,
    /// `PRO`
    Pro,
    /// `PREMIUM`
    Premium,
}

impl Tier {
    /// The proto enum name (`PRO`).
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Lite => "LITE",
            Tier::Standard => "STANDARD",
            Tier::Pro => "PRO",
            Tier::Premium => "PREMIUM",
        }
    }

    /// From the proto enum value; `None` for unspecified or unknown.
    pub fn from_pb(v: i32) -> Option<Self> {
        match pb::Tier::try_from(v).ok()? {
            pb::Tier::Lite => Some(Tier::Lite),
            pb::Tier::Standard => Some(Tier::Standard),
            pb::Tier::Pro => Some(Tier::Pro),
            pb::Tier::Premium => Some(Tier::Premium),
            pb::Tier::Unspecified => None,
        }
    }

    /// To the proto enum.
    pub fn to_pb(self) -> pb::Tier {
        match self {
            Tier::Lite => pb::Tier::Lite,
            Tier::Standard => pb::Tier::Standard,
            Tier::Pro => pb::Tier::Pro,
            Tier::Premium => pb::Tier::Premium,
        }
    }
}

/// Stock voice or cloned voice (which lives only on the accounts in `upstreamIds`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Kind {
    /// `STANDARD`
    #[default]
    Standard,
    /// `CLONED`
    Cloned,
}

impl Kind {
    /// The proto enum name.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Standard => "STANDARD",
            Kind::Cloned => "CLONED",
        }
    }

    /// From the proto enum value; `None` for unspecified or unknown.
    pub fn from_pb(v: i32) -> Option<Self> {
        match pb::voice_pack::Kind::try_from(v).ok()? {
            pb::voice_pack::Kind::Standard => Some(Kind::Standard),
            pb::voice_pack::Kind::Cloned => Some(Kind::Cloned),
            pb::voice_pack::Kind::Unspecified => None,
        }
    }

    /// To the proto enum.
    pub fn to_pb(self) -> pb::voice_pack::Kind {
        match self {
            Kind::Standard => pb::voice_pack::Kind::Standard,
            Kind::Cloned => pb::voice_pack::Kind::Cloned,
        }
    }
}

/// Vendor-neutral prosody overrides; `None` = the vendor's default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Params {
    /// Relative pitch in percent, -50..+50.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pitch_pct: Option<f64>,
    /// Speaking-rate multiplier, 0.25..4.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Relative volume in percent, -100..+100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_pct: Option<f64>,
}

impl Params {
    /// From the proto message (absent message = all unset).
    pub fn from_pb(p: Option<&pb::VoiceParams>) -> Self {
        p.map_or_else(Self::default, |p| Self {
            pitch_pct: p.pitch_pct,
            rate: p.rate,
            volume_pct: p.volume_pct,
        })
    }

    /// To the proto message.
    pub fn to_pb(self) -> pb::VoiceParams {
        pb::VoiceParams {
            pitch_pct: self.pitch_pct,
            rate: self.rate,
            volume_pct: self.volume_pct,
        }
    }

    /// The canonical JSON object (see the module doc).
    pub fn canonical(&self) -> String {
        let mut parts = Vec::new();
        for (name, v) in [
            ("pitchPct", self.pitch_pct),
            ("rate", self.rate),
            ("volumePct", self.volume_pct),
        ] {
            if let Some(v) = v {
                parts.push(format!("\"{name}\":{}", canonical_number(v)));
            }
        }
        format!("{{{}}}", parts.join(","))
    }
}

/// A pack's resolved values frozen at bind time. See the module doc for its JSON form.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Snapshot {
    /// The pack this was frozen from.
    pub pack_id: String,
    /// The pack's version at freeze time.
    #[serde(
        serialize_with = "int64_as_string",
        deserialize_with = "int64_from_any"
    )]
    pub pack_version: i64,
    /// Provider id (adapter).
    pub provider: String,
    /// Vendor model id.
    #[serde(default)]
    pub model: String,
    /// Vendor voice id.
    pub voice_id: String,
    /// The tts model id (= scheduler pool) to synthesize on.
    pub tts_model_id: String,
    /// Accounts that hold the voice; empty = every upstream of the pool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstream_ids: Vec<String>,
    /// Prosody overrides.
    #[serde(default)]
    pub params: Params,
    /// Vendor options (part of the identity).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, String>,
    /// Tier.
    pub tier: Tier,
    /// When the snapshot was frozen (catalog clock, UTC).
    #[serde(serialize_with = "rfc3339")]
    pub frozen_at: DateTime<Utc>,
    /// `sha256:<hex>` over [`Snapshot::canonical`].
    pub digest: String,
    /// Stock or cloned voice.
    #[serde(default)]
    pub kind: Kind,
    /// BCP 47 locales of the voice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub locales: Vec<String>,
    /// Reference clips (self-hosted zero-shot packs), frozen by digest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<Reference>,
}

fn int64_as_string<S: Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&v.to_string())
}

fn int64_from_any<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Any {
        N(i64),
        S(String),
    }
    match Any::deserialize(d)? {
        Any::N(n) => Ok(n),
        Any::S(s) => s.parse().map_err(serde::de::Error::custom),
    }
}

fn rfc3339<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::AutoSi, true))
}

/// Shortest round-trip decimal, no exponent, no trailing `.0`, `-0` as `0`.
pub fn canonical_number(v: f64) -> String {
    if v == 0.0 {
        "0".to_owned()
    } else {
        format!("{v}")
    }
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

fn json_list(items: &[String]) -> String {
    format!(
        "[{}]",
        items
            .iter()
            .map(|s| json_str(s))
            .collect::<Vec<_>>()
            .join(",")
    )
}

/// Why a snapshot is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {message}")]
pub struct SnapshotError {
    /// The offending field (JSON name, e.g. `snapshot.tier`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl Snapshot {
    /// The canonical content text the digest covers (module doc).
    pub fn canonical(&self) -> String {
        let extra = self
            .extra
            .iter()
            .map(|(k, v)| format!("{}:{}", json_str(k), json_str(v)))
            .collect::<Vec<_>>()
            .join(",");
        let references = if self.references.is_empty() {
            String::new()
        } else {
            format!(
                ",\"references\":[{}]",
                self.references
                    .iter()
                    .map(Reference::canonical)
                    .collect::<Vec<_>>()
                    .join(",")
            )
        };
        format!(
            "{{\"extra\":{{{extra}}},\"kind\":\"{}\",\"locales\":{},\"model\":{},\"packId\":{},\"packVersion\":{},\"params\":{},\"provider\":{}{references},\"tier\":\"{}\",\"ttsModelId\":{},\"upstreamIds\":{},\"voiceId\":{}}}",
            self.kind.as_str(),
            json_list(&self.locales),
            json_str(&self.model),
            json_str(&self.pack_id),
            self.pack_version,
            self.params.canonical(),
            json_str(&self.provider),
            self.tier.as_str(),
            json_str(&self.tts_model_id),
            json_list(&self.upstream_ids),
            json_str(&self.voice_id),
        )
    }

    /// `sha256:` + lowercase hex of SHA-256 over [`Snapshot::canonical`].
    pub fn compute_digest(&self) -> String {
        format!(
            "sha256:{}",
            hex::encode(Sha256::digest(self.canonical().as_bytes()))
        )
    }

    /// Sets `digest` from the content.
    pub fn seal(mut self) -> Self {
        self.digest = self.compute_digest();
        self
    }

    /// Checks `digest` against the content. Error names `digest` with both values.
    pub fn verify_digest(&self) -> Result<(), SnapshotError> {
        let expected = self.compute_digest();
        if self.digest == expected {
            Ok(())
        } else {
            Err(SnapshotError {
                field: "digest".into(),
                message: format!(
                    "{:?} does not match the snapshot content ({expected}); the snapshot was edited or corrupted: freeze it again",
                    self.digest
                ),
            })
        }
    }

    /// Parses the JSON form (module doc). Errors name the JSON problem.
    pub fn from_json(text: &str) -> Result<Self, SnapshotError> {
        serde_json::from_str(text).map_err(|e| SnapshotError {
            field: "snapshot_json".into(),
            message: format!("not a voice pack snapshot: {e}"),
        })
    }

    /// The JSON form as a `serde_json::Value` (for embedding into a card).
    pub fn to_json_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// The proto message.
    pub fn to_pb(&self) -> pb::VoicePackSnapshot {
        pb::VoicePackSnapshot {
            pack_id: self.pack_id.clone(),
            pack_version: self.pack_version,
            provider: self.provider.clone(),
            model: self.model.clone(),
            voice_id: self.voice_id.clone(),
            tts_model_id: self.tts_model_id.clone(),
            upstream_ids: self.upstream_ids.clone(),
            params: Some(self.params.to_pb()),
            extra: self.extra.clone().into_iter().collect(),
            tier: self.tier.to_pb() as i32,
            frozen_at: Some(timestamp_pb(self.frozen_at)),
            digest: self.digest.clone(),
            kind: self.kind.to_pb() as i32,
            locales: self.locales.clone(),
            references: self.references.iter().map(Reference::to_pb).collect(),
        }
    }

    /// From the proto message. Errors name the field (`snapshot.tier`, `snapshot.frozen_at`).
    pub fn from_pb(p: &pb::VoicePackSnapshot) -> Result<Self, SnapshotError> {
        let err = |field: &str, message: &str| SnapshotError {
            field: format!("snapshot.{field}"),
            message: message.into(),
        };
        Ok(Self {
            pack_id: p.pack_id.clone(),
            pack_version: p.pack_version,
            provider: p.provider.clone(),
            model: p.model.clone(),
            voice_id: p.voice_id.clone(),
            tts_model_id: p.tts_model_id.clone(),
            upstream_ids: p.upstream_ids.clone(),
            params: Params::from_pb(p.params.as_ref()),
            extra: p.extra.clone().into_iter().collect(),
            tier: Tier::from_pb(p.tier)
                .ok_or_else(|| err("tier", "required: LITE, STANDARD, PRO or PREMIUM"))?,
            frozen_at: p
                .frozen_at
                .as_ref()
                .and_then(|t| DateTime::from_timestamp(t.seconds, u32::try_from(t.nanos).ok()?))
                .ok_or_else(|| err("frozen_at", "required: a valid timestamp"))?,
            digest: p.digest.clone(),
            kind: if p.kind == 0 {
                Kind::Standard
            } else {
                Kind::from_pb(p.kind).ok_or_else(|| err("kind", "must be STANDARD or CLONED"))?
            },
            locales: p.locales.clone(),
            references: p.references.iter().map(Reference::from_pb).collect(),
        })
    }
}

/// A `google.protobuf.Timestamp` for a UTC time.
pub fn timestamp_pb(t: DateTime<Utc>) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: t.timestamp(),
        nanos: i32::try_from(t.timestamp_subsec_nanos()).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Snapshot {
        Snapshot {
            pack_id: "vp_1".into(),
            pack_version: 3,
            provider: "espeak".into(),
            model: "espeak-ng".into(),
            voice_id: "en-us".into(),
            tts_model_id: "espeak-local".into(),
            upstream_ids: vec![],
            params: Params {
                pitch_pct: Some(10.0),
                rate: Some(1.2),
                volume_pct: None,
            },
            extra: BTreeMap::from([("style".into(), "calm \"ü\"".into())]),
            tier: Tier::Pro,
            frozen_at: DateTime::from_timestamp(1_790_000_000, 123_000_000).unwrap(),
            digest: String::new(),
            kind: Kind::Standard,
            locales: vec!["en-US".into()],
            references: vec![],
        }
        .seal()
    }

    #[test]
    fn canonical_form_is_sorted_compact_and_documented() {
        assert_eq!(
            sample().canonical(),
            r#"{"extra":{"style":"calm \"ü\""},"kind":"STANDARD","locales":["en-US"],"model":"espeak-ng","packId":"vp_1","packVersion":3,"params":{"pitchPct":10,"rate":1.2},"provider":"espeak","tier":"PRO","ttsModelId":"espeak-local","upstreamIds":[],"voiceId":"en-us"}"#
        );
        assert!(sample().digest.starts_with("sha256:"));
        assert_eq!(sample().digest.len(), 7 + 64);
    }

    #[test]
    fn json_round_trips_and_keeps_the_digest_valid() {
        let s = sample();
        let text = serde_json::to_string(&s.to_json_value()).unwrap();
        assert!(text.contains("\"packVersion\":\"3\""), "{text}");
        assert!(text.contains("\"frozenAt\":\"2026-09-21T"), "{text}");
        let back = Snapshot::from_json(&text).unwrap();
        assert_eq!(back, s);
        back.verify_digest().unwrap();
        let pb_back = Snapshot::from_pb(&s.to_pb()).unwrap();
        assert_eq!(pb_back, s);
    }

    #[test]
    fn any_content_change_breaks_the_digest() {
        let mut s = sample();
        s.params.pitch_pct = Some(11.0);
        let e = s.verify_digest().unwrap_err();
        assert_eq!(e.field, "digest");
    }

    #[test]
    fn unknown_json_keys_are_refused_not_dropped() {
        let mut v = sample().to_json_value();
        v["params"]["pitch"] = serde_json::json!(5);
        let e = Snapshot::from_json(&v.to_string()).unwrap_err();
        assert!(e.message.contains("pitch"), "{e}");
    }

    #[test]
    fn clips_are_part_of_the_content_only_when_present() {
        let plain = sample();
        let mut with = sample();
        with.references = vec![Reference {
            digest: crate::reference::clip_digest(b"clip"),
            transcript: "Hello \"there\"".into(),
            language: "en-US".into(),
            emotion: String::new(),
            weight: 2,
            duration_ms: 3_250,
        }];
        let with = with.seal();
        assert!(!plain.canonical().contains("references"));
        let text = with.canonical();
        assert!(
            text.contains(r#""provider":"espeak","references":[{"digest":"sha256:"#)
                && text.contains(r#""durationMs":3250,"emotion":"","language":"en-US","transcript":"Hello \"there\"","weight":2}],"tier":"PRO""#),
            "{text}"
        );
        assert_ne!(with.digest, plain.digest);
        let json = serde_json::to_string(&with.to_json_value()).unwrap();
        assert!(
            json.contains(r#""durationMs":3250"#) && !json.contains("emotion"),
            "{json}"
        );
        let back = Snapshot::from_json(&json).unwrap();
        back.verify_digest().unwrap();
        assert_eq!(Snapshot::from_pb(&with.to_pb()).unwrap(), with);
        let mut swapped = back;
        swapped.references[0].digest = crate::reference::clip_digest(b"other clip");
        assert!(
            swapped.verify_digest().is_err(),
            "a swapped clip must break the digest"
        );
    }

    #[test]
    fn numbers_are_written_like_javascript() {
        assert_eq!(canonical_number(10.0), "10");
        assert_eq!(canonical_number(-0.0), "0");
        assert_eq!(canonical_number(-12.5), "-12.5");
        assert_eq!(canonical_number(0.1), "0.1");
    }
}
