//! Usage records: what synthesis writes to the usage stream and the catalog's ledger reads
//! (docs/OPERATIONS.md#usage-ledger). Both sides agree on this one shape.
//!
//! A request leaves three kinds of entries, each carrying the request's [`UsageContext`] so
//! the ledger never has to join them to count one:
//! - [`UsageEvent::Charge`], written **before** a vendor is sent a chunk's text: if nothing
//!   settles it (the synthesis replica was killed mid-call), the ledger counts it as charged
//!   once its grace has passed, because the vendor did the work;
//! - [`UsageEvent::Settle`], what the vendor actually charged for that attempt (0 for a
//!   refusal before any audio), which replaces its Charge;
//! - [`UsageEvent::Done`], the request's end: cached characters, audio produced, one request.
//!
//! Every entry is idempotent by `(record_id, attempt, kind)`: a record read twice counts once.

use serde::{Deserialize, Serialize};

use crate::{provider::Provider, snapshot::Tier};

/// The Redis Stream usage records travel through (one key: one slot on a Cluster).
pub const USAGE_STREAM: &str = "voxpool:usage:v1";
/// The field of a stream entry holding the record's JSON.
pub const USAGE_FIELD: &str = "r";

/// Who spoke with what: the same on every entry of a request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageContext {
    /// Unique per request, made by synthesis (UUID v7): the ledger's idempotency key.
    pub record_id: String,
    /// The caller's own request id (may repeat, may be empty).
    #[serde(default)]
    pub request_id: String,
    /// Tenant of the request; empty = the shared tenant.
    #[serde(default)]
    pub tenant: String,
    /// Caller identity: client token name, mTLS subject or HTTP key name; empty = anonymous.
    #[serde(default)]
    pub caller: String,
    /// `grpc`, `grpc_stream`, `http` or `job`.
    pub path: String,
    /// The pack spoken with (empty for a snapshot without one).
    #[serde(default)]
    pub pack_id: String,
    /// `sha256:<hex>` of the snapshot spoken with.
    #[serde(default)]
    pub snapshot_digest: String,
    /// The pack's tier, as frozen in the snapshot.
    pub tier: Option<Tier>,
    /// The pool (tts model id) that served it.
    pub pool: String,
    /// The pool's provider.
    pub provider: Provider,
    /// ISO 4217 code of every cost on the entry.
    pub currency: String,
    /// When the request began, ms since the Unix epoch (UTC): the ledger's day.
    pub at_ms: i64,
}

/// One vendor attempt: its charge before the call, its settlement after.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptUsage {
    /// 0, 1, 2, … over the request (every chunk's attempts numbered in one sequence).
    pub attempt: u32,
    /// `upstream/key` (empty on a Charge written before the lease was granted).
    #[serde(default)]
    pub key_id: String,
    /// The key's upstream (account).
    #[serde(default)]
    pub upstream_id: String,
    /// Characters by the provider's billing rule: on a Charge, what the attempt sends; on a
    /// Settle, what the vendor charges for (0 when it refused before any audio).
    pub characters: u64,
    /// What the vendor said it billed, when it says (`character-cost`); 0 otherwise.
    #[serde(default)]
    pub billed_characters: u64,
    /// Audio the attempt produced, ms.
    #[serde(default)]
    pub audio_ms: u64,
    /// Server time (self-hosted pools), ms.
    #[serde(default)]
    pub gpu_ms: u64,
    /// Cost in millionths of the currency (on a Charge: what it would cost if charged).
    pub cost_micros: i64,
    /// The outcome as the scheduler's `Outcome` names it (`SUCCESS`, `TIMEOUT`, …); empty on
    /// a Charge.
    #[serde(default)]
    pub outcome: String,
}

/// A request's end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoneUsage {
    /// Characters served from the audio cache (no vendor cost).
    pub cached_characters: u64,
    /// Audio delivered, ms (vendor audio and cached audio).
    pub audio_ms: u64,
    /// What the cache hits cost the tenant (`[usage] cache_hit_factor`), millionths.
    pub cached_cost_micros: i64,
    /// Attempts that failed.
    pub failed_attempts: u32,
    /// Whether the request delivered all its audio.
    pub ok: bool,
}

/// One entry of the usage stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum UsageEvent {
    /// Before a vendor is sent a chunk's text: counted as charged unless settled.
    Charge {
        /// The request.
        context: UsageContext,
        /// The attempt and what it would be charged.
        attempt: AttemptUsage,
    },
    /// What the vendor charged for an attempt; replaces its Charge.
    Settle {
        /// The request.
        context: UsageContext,
        /// The attempt and what it was charged.
        attempt: AttemptUsage,
    },
    /// The request ended.
    Done {
        /// The request.
        context: UsageContext,
        /// What it produced and served from the cache.
        done: DoneUsage,
    },
}

impl UsageEvent {
    /// The entry's context.
    pub fn context(&self) -> &UsageContext {
        match self {
            UsageEvent::Charge { context, .. }
            | UsageEvent::Settle { context, .. }
            | UsageEvent::Done { context, .. } => context,
        }
    }

    /// `charge`, `settle` or `done`: with the record id and attempt, the idempotency key.
    pub fn kind(&self) -> &'static str {
        match self {
            UsageEvent::Charge { .. } => "charge",
            UsageEvent::Settle { .. } => "settle",
            UsageEvent::Done { .. } => "done",
        }
    }
}

/// Characters `text` bills at `provider`, by that vendor's published rule
/// (docs/VENDORS.md#billing). Whitespace and punctuation count everywhere; what differs is
/// how CJK ideographs count and whether SSML markup does:
/// - `azure`: every Unicode code point, a Han ideograph (Chinese hanzi, Japanese kanji,
///   Korean hanja) counted twice; markup counts except the `<speak>` and `<voice>` tags
///   (<https://learn.microsoft.com/azure/ai-services/speech-service/text-to-speech#pricing-note>);
/// - `dashscope` (CosyVoice): a Han ideograph counts 2, every other character 1, SSML tags
///   not at all (<https://help.aliyun.com/zh/model-studio/cosyvoice-java-api>, 字符计算规则);
/// - every other provider: Unicode scalar values (ElevenLabs: one credit per character of
///   input text, <https://elevenlabs.io/docs/overview/intro>; OpenAI `tts-1`: per character;
///   Volcengine, MiniMax, self-hosted servers and espeak-ng publish no finer rule we could
///   source, so scalars), markup included.
///
/// An emoji is its scalars: U+1F600 is 1 (2 UTF-16 units, 1 scalar), a ZWJ family of three
/// people is 5 (three emoji and two joiners).
pub fn billable_characters(provider: Provider, text: &str) -> u64 {
    match provider {
        Provider::Azure => count(text, true, |tag| is_tag(tag, &["speak", "voice"])),
        Provider::DashScope => count(text, true, |_| true),
        Provider::OpenAi
        | Provider::Volcengine
        | Provider::ElevenLabs
        | Provider::MiniMax
        | Provider::SelfHosted
        | Provider::Espeak => text.chars().count() as u64,
    }
}

/// Counts `text`'s scalars, Han ideographs twice when `han_twice`, leaving out each markup
/// tag (`<…>`) `free` says is not billed.
fn count(text: &str, han_twice: bool, free: impl Fn(&str) -> bool) -> u64 {
    let mut total = 0u64;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c == '<'
            && let Some(len) = tag_len(rest)
        {
            let tag = &rest[..len];
            if !free(tag) {
                total += tag.chars().count() as u64;
            }
            rest = &rest[len..];
            continue;
        }
        total += if han_twice && is_han(c) { 2 } else { 1 };
        rest = &rest[c.len_utf8()..];
    }
    total
}

/// The byte length of the markup tag `s` starts with (`<name …>`, `</name>`, `<name/>`,
/// `<!-- … -->`, `<?…?>`), or `None` when its `<` is text (`a < b`).
fn tag_len(s: &str) -> Option<usize> {
    let after = s[1..].chars().next()?;
    if s.starts_with("<!--") {
        return s.find("-->").map(|i| i + 3);
    }
    if !(after.is_alphabetic() || matches!(after, '/' | '?' | '!')) {
        return None;
    }
    let mut quote = None;
    for (i, c) in s.char_indices().skip(1) {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '>') => return Some(i + 1),
            (None, '<') => return None,
            _ => {}
        }
    }
    None
}

/// Whether `tag` opens or closes one of the elements `names`.
fn is_tag(tag: &str, names: &[&str]) -> bool {
    let name: String = tag
        .trim_start_matches('<')
        .trim_start_matches('/')
        .chars()
        .take_while(|c| c.is_alphanumeric() || matches!(c, ':' | '-' | '_'))
        .collect();
    names.iter().any(|n| name.eq_ignore_ascii_case(n))
}

/// A Han ideograph: the CJK Unified Ideographs blocks and extensions, and the compatibility
/// ideographs (hanzi, kanji and hanja alike).
fn is_han(c: char) -> bool {
    matches!(u32::from(c),
        0x3400..=0x4DBF
        | 0x4E00..=0x9FFF
        | 0xF900..=0xFAFF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2EBEF
        | 0x2F800..=0x2FA1F
        | 0x30000..=0x323AF)
}

#[cfg(test)]
#[path = "usage_tests.rs"]
mod tests;
