//! Opaque page tokens for the keyset-paged lists.
//!
//! Lists are ordered by `(create_time, id)`, a total and stable order, so a page boundary is
//! the last item's `(create_time_us, id)`. The token is base64url (no padding) of
//! `{"t":<create_time_us>,"i":<id>,"f":<binding>}` where `binding` is a hash of the list's
//! scope (market or admin) and canonical filter: a token presented with another filter or to
//! the other list is INVALID_ARGUMENT naming `page_token` instead of silently skipping or
//! repeating packs. Tokens do not expire; a pack created later with an earlier clock reading
//! than the boundary would not appear on later pages of a walk already under way.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::CatalogError;

/// The position after which the next page starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    /// `create_time` of the last item returned, microseconds since the Unix epoch.
    pub create_time_us: i64,
    /// `id` of the last item returned.
    pub id: String,
}

#[derive(Serialize, Deserialize)]
struct Token {
    t: i64,
    i: String,
    f: String,
}

/// The binding of a token to one list scope and filter (16 hex digits).
pub fn binding(scope: &str, canonical_filter: &str) -> String {
    let digest = Sha256::digest(format!("{scope}\n{canonical_filter}").as_bytes());
    hex::encode(&digest[..8])
}

/// Encodes `cursor` bound to `binding`.
pub fn encode(cursor: &Cursor, binding: &str) -> String {
    let token = Token {
        t: cursor.create_time_us,
        i: cursor.id.clone(),
        f: binding.to_owned(),
    };
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(&token).unwrap_or_default())
}

/// Decodes a token issued by [`encode`] with the same `binding`.
///
/// Errors: INVALID_ARGUMENT naming `page_token` when it is not such a token or was issued
/// for another filter or list.
pub fn decode(token: &str, binding: &str) -> Result<Cursor, CatalogError> {
    let parsed: Option<Token> = URL_SAFE_NO_PAD
        .decode(token)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok());
    match parsed {
        None => Err(CatalogError::invalid(
            "page_token",
            "not a token from a previous response of this list; start again without page_token",
        )),
        Some(t) if t.f != binding => Err(CatalogError::invalid(
            "page_token",
            "was issued for another filter or list; repeat the first request's filter or start again \
             without page_token",
        )),
        Some(t) => Ok(Cursor {
            create_time_us: t.t,
            id: t.i,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_round_trips_under_its_binding_only() {
        let c = Cursor {
            create_time_us: 1_700_000_000_000_001,
            id: "vp_1".into(),
        };
        let b = binding("market", "tier=PRO");
        let t = encode(&c, &b);
        assert_eq!(decode(&t, &b).expect("same binding"), c);
        assert!(decode(&t, &binding("market", "tier=LITE")).is_err());
        assert!(decode(&t, &binding("admin", "tier=PRO")).is_err());
        assert!(decode("garbage!", &b).is_err());
    }
}
