//! The market filter of ListVoicePacks / ListAllVoicePacks.
//!
//! Grammar: `field=value` terms joined by ` AND ` (a conjunction; spaces around `=` are
//! allowed, a value may be in double quotes). Fields: `tier` (`LITE` .. `PREMIUM`, any case),
//! `provider` (a known adapter), `locale` (BCP 47, matched in canonical casing, so `en-us`
//! finds `en-US`) and `tts_model_id`. Anything else is INVALID_ARGUMENT naming `filter`.

use voxpool_config::is_valid_id;
use voxpool_domain::{provider::Provider, snapshot::Tier, untrusted::quote};

use crate::{error::CatalogError, validate::canonical_locale};

/// The request field every filter error names.
const FIELD: &str = "filter";
/// Longest filter accepted, in characters (the longest useful one is a few hundred).
pub const MAX_FILTER_CHARS: usize = 1024;
/// Most terms a filter may join: a conjunction of more cannot select anything a shorter one
/// does not, and each term is a nested SQL condition (a thousand overflowed the stack).
pub const MAX_FILTER_TERMS: usize = 16;

/// One `field=value` condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Term {
    /// `tier=PRO`
    Tier(Tier),
    /// `provider=volcengine`
    Provider(String),
    /// `locale=en-US` (canonical casing): the pack lists this locale.
    Locale(String),
    /// `tts_model_id=volc-standard`
    TtsModelId(String),
}

impl Term {
    fn canonical(&self) -> String {
        match self {
            Term::Tier(t) => format!("tier={}", t.as_str()),
            Term::Provider(p) => format!("provider={p}"),
            Term::Locale(l) => format!("locale={l}"),
            Term::TtsModelId(m) => format!("tts_model_id={m}"),
        }
    }
}

/// A parsed filter: every term must hold. Empty = no condition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// The conjunction's terms, in request order.
    pub terms: Vec<Term>,
}

impl Filter {
    /// Parses the grammar in the module doc. Errors name `filter` and the offending term.
    pub fn parse(text: &str) -> Result<Self, CatalogError> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(Self::default());
        }
        let chars = text.chars().count();
        if chars > MAX_FILTER_CHARS {
            return Err(CatalogError::invalid(
                FIELD,
                format!("at most {MAX_FILTER_CHARS} characters, got {chars}"),
            ));
        }
        let mut terms: Vec<Term> = Vec::new();
        for term in text.split(" AND ") {
            let term = parse_term(term)?;
            if !terms.contains(&term) {
                terms.push(term);
            }
        }
        if terms.len() > MAX_FILTER_TERMS {
            return Err(CatalogError::invalid(
                FIELD,
                format!(
                    "at most {MAX_FILTER_TERMS} distinct terms joined by ` AND `, got {}",
                    terms.len()
                ),
            ));
        }
        Ok(Self { terms })
    }

    /// A normal form (terms sorted), equal for filters that select the same packs by the
    /// same terms; page tokens are bound to it.
    pub fn canonical(&self) -> String {
        let mut terms: Vec<_> = self.terms.iter().map(Term::canonical).collect();
        terms.sort();
        terms.dedup();
        terms.join(" AND ")
    }
}

fn parse_term(term: &str) -> Result<Term, CatalogError> {
    let term = term.trim();
    let Some((field, value)) = term.split_once('=') else {
        return Err(CatalogError::invalid(
            FIELD,
            format!(
                "expected `field=value` terms joined by ` AND ` (fields: tier, provider, locale, \
                 tts_model_id), got {}",
                quote(term)
            ),
        ));
    };
    let field = field.trim();
    let value = value.trim();
    let value = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value);
    // `provider=espeak and tier=PRO`: a lowercase `and` reads as part of the value.
    let joiner_hint = if value
        .split_whitespace()
        .any(|w| w.eq_ignore_ascii_case("and") || w.eq_ignore_ascii_case("or"))
    {
        " (terms are joined by ` AND `, in capitals; OR is not supported)"
    } else {
        ""
    };
    let bad = |what: &str| {
        CatalogError::invalid(
            FIELD,
            format!("{field}: {what}, got {}{joiner_hint}", quote(value)),
        )
    };
    match field {
        "tier" => ["LITE", "STANDARD", "PRO", "PREMIUM"]
            .iter()
            .zip([Tier::Lite, Tier::Standard, Tier::Pro, Tier::Premium])
            .find(|(name, _)| name.eq_ignore_ascii_case(value))
            .map(|(_, t)| Term::Tier(t))
            .ok_or_else(|| bad("expected LITE, STANDARD, PRO or PREMIUM")),
        "provider" => value
            .parse::<Provider>()
            .map(|p| Term::Provider(p.as_str().to_owned()))
            .map_err(|_| bad(&format!("expected one of {}", Provider::names()))),
        "locale" => canonical_locale(value)
            .map(Term::Locale)
            .ok_or_else(|| bad("expected a BCP 47 tag such as en-US")),
        "tts_model_id" if is_valid_id(value) => Ok(Term::TtsModelId(value.to_owned())),
        "tts_model_id" => Err(bad("expected a pool id")),
        other => Err(CatalogError::invalid(
            FIELD,
            format!(
                "unknown field {}: filter on tier, provider, locale or tts_model_id",
                quote(other)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lowercase_and_is_named_as_the_mistake() {
        let err = Filter::parse("provider=espeak and tier=PRO")
            .expect_err("lowercase and")
            .to_string();
        assert!(err.contains("joined by ` AND `, in capitals"), "{err}");
    }

    #[test]
    fn parses_a_conjunction_with_quotes_and_any_tier_case() {
        let f =
            Filter::parse(r#"tier=pro AND locale = "en-us" AND provider=azure"#).expect("valid");
        assert_eq!(
            f.terms,
            [
                Term::Tier(Tier::Pro),
                Term::Locale("en-US".into()),
                Term::Provider("azure".into())
            ]
        );
        assert_eq!(
            f.canonical(),
            "locale=en-US AND provider=azure AND tier=PRO"
        );
    }

    #[test]
    fn long_filters_are_refused_before_any_query() {
        let many = vec!["tier=PRO"; 1000].join(" AND ");
        let err = Filter::parse(&many).unwrap_err().to_string();
        assert!(err.contains("at most 1024 characters"), "{err}");
        let distinct: Vec<String> = (0..17).map(|i| format!("tts_model_id=p{i}")).collect();
        let err = Filter::parse(&distinct.join(" AND "))
            .unwrap_err()
            .to_string();
        assert!(err.contains("at most 16 distinct terms"), "{err}");
        let repeated = vec!["tier=PRO"; 50].join(" AND ");
        assert_eq!(
            Filter::parse(&repeated).unwrap().terms,
            vec![Term::Tier(Tier::Pro)]
        );
        let huge_value = format!("tts_model_id={}", "x".repeat(900));
        let err = Filter::parse(&huge_value).unwrap_err().to_string();
        assert!(err.len() < 300, "{err}");
    }

    #[test]
    fn empty_filter_selects_everything() {
        assert_eq!(Filter::parse("  ").expect("valid"), Filter::default());
    }

    #[test]
    fn unknown_fields_and_bad_values_name_the_filter() {
        for text in [
            "voice_id=x",
            "tier=GOLD",
            "provider=acme",
            "locale=e",
            "tier",
            "tts_model_id=A B",
        ] {
            match Filter::parse(text) {
                Err(CatalogError::InvalidArgument { violations }) => {
                    assert_eq!(violations[0].field, "filter", "{text}");
                }
                other => panic!("{text}: expected InvalidArgument, got {other:?}"),
            }
        }
    }
}
