//! BindVoicePack's card edit: put a snapshot at
//! `data.extensions.airi.modules.speech.voicePack` of a Character Card (V1/V2/V3) JSON.
//!
//! Guarantees: every byte outside the inserted or replaced member is the client's own text
//! (see [`scan`]): unknown keys at every level, V3-only fields, other tools' extensions with
//! odd-typed values, `null` lorebooks, non-ASCII text, number spellings and key order all
//! come back unchanged. Missing objects on the path are created (appended as the last member
//! of their parent); an existing `voicePack` is replaced in place; a `null` on the path is
//! replaced by an object (nothing is lost). Where a key of the path holds anything else (a
//! string, array, number, boolean) the card is refused rather than overwritten. With
//! duplicate keys the last one counts, as in `JSON.parse`.
//!
//! A leading UTF-8 byte order mark is allowed and kept.
//!
//! Errors (INVALID_ARGUMENT naming `card_json`): over [`MAX_CARD_BYTES`], not JSON, not an
//! object, or a non-object on the path.

pub mod scan;

use crate::error::CatalogError;

/// Largest accepted card: 1 MiB of UTF-8 text.
pub const MAX_CARD_BYTES: usize = 1_048_576;

/// The object path under which the snapshot is stored, then its key.
pub const PATH: [&str; 5] = ["data", "extensions", "airi", "modules", "speech"];
/// The member holding the snapshot.
pub const LEAF: &str = "voicePack";

const FIELD: &str = "card_json";

/// Returns `card` with `snapshot_json` (a JSON value's text) stored at [`PATH`].[`LEAF`].
///
/// Errors: see the module doc.
pub fn bind(card: &str, snapshot_json: &str) -> Result<String, CatalogError> {
    Ok(CardEdit::plan(card)?.apply(snapshot_json))
}

/// A checked card and where the snapshot goes: `card[..start] + before + snapshot + after +
/// card[end..]`. Planning does every check, so a bad card is refused before any database
/// work and applying cannot fail.
#[derive(Debug, Clone)]
pub struct CardEdit<'a> {
    card: &'a str,
    start: usize,
    end: usize,
    before: String,
    after: String,
}

impl<'a> CardEdit<'a> {
    /// Checks `card` and finds the spot for the snapshot. Errors: see the module doc.
    pub fn plan(card: &'a str) -> Result<Self, CatalogError> {
        if card.len() > MAX_CARD_BYTES {
            return Err(CatalogError::invalid(
                FIELD,
                format!(
                    "the card is {} bytes; the limit is 1 MiB ({MAX_CARD_BYTES} bytes)",
                    card.len()
                ),
            ));
        }
        // A UTF-8 byte order mark (editors on Windows write one) is not JSON, but RFC 8259
        // lets a parser ignore it: skip it for reading and keep it in the card.
        let body = card.strip_prefix('\u{FEFF}').unwrap_or(card);
        if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(body) {
            return Err(CatalogError::invalid(FIELD, format!("not valid JSON: {e}")));
        }
        let root = scan::skip_ws(card.as_bytes(), card.len() - body.len());
        if card.as_bytes().get(root) != Some(&b'{') {
            return Err(CatalogError::invalid(
                FIELD,
                "must be a JSON object (a character card with spec and data)",
            ));
        }
        let unreadable = || CatalogError::invalid(FIELD, "could not be read as a JSON object");
        let keys: Vec<&str> = PATH.iter().copied().chain([LEAF]).collect();
        let mut open = root;
        for (depth, key) in keys.iter().enumerate() {
            let object = scan::object(card, open).ok_or_else(unreadable)?;
            let rest = &keys[depth + 1..];
            let (prefix, suffix) = nested(rest);
            let Some(member) = object.members.iter().rev().find(|m| m.key == *key) else {
                // Append `"key": {..rest..}` as the object's last member.
                let (at, comma) = match object.members.last() {
                    Some(last) => (last.value.1, ","),
                    None => (object.open + 1, ""),
                };
                let before = format!("{comma}{}:{prefix}", json_key(key));
                return Ok(Self {
                    card,
                    start: at,
                    end: at,
                    before,
                    after: suffix,
                });
            };
            let (start, end) = member.value;
            let replace = Self {
                card,
                start,
                end,
                before: prefix,
                after: suffix,
            };
            match card.as_bytes()[start] {
                _ if rest.is_empty() => return Ok(replace),
                b'{' => open = start,
                b'n' => return Ok(replace),
                other => {
                    return Err(CatalogError::invalid(
                        FIELD,
                        format!(
                            "{} must be a JSON object to hold the voice pack, found {}",
                            keys[..=depth].join("."),
                            kind_name(other)
                        ),
                    ));
                }
            }
        }
        Err(unreadable())
    }

    /// The card with `snapshot_json` in place.
    pub fn apply(&self, snapshot_json: &str) -> String {
        let mut out = String::with_capacity(
            self.card.len() + self.before.len() + snapshot_json.len() + self.after.len(),
        );
        out.push_str(&self.card[..self.start]);
        out.push_str(&self.before);
        out.push_str(snapshot_json);
        out.push_str(&self.after);
        out.push_str(&self.card[self.end..]);
        out
    }
}

/// The text around a value nested under the remaining `keys`:
/// `({"k1":{"k2":, }})`; empty strings when none remain.
fn nested(keys: &[&str]) -> (String, String) {
    let prefix = keys.iter().map(|k| format!("{{{}:", json_key(k))).collect();
    (prefix, "}".repeat(keys.len()))
}

fn json_key(key: &str) -> String {
    format!("\"{key}\"")
}

fn kind_name(first_byte: u8) -> &'static str {
    match first_byte {
        b'"' => "a string",
        b'[' => "an array",
        b't' | b'f' => "a boolean",
        _ => "a number",
    }
}

#[cfg(test)]
mod tests;
