//! Strings that come from callers, made safe for messages, logs and metric labels.
//!
//! Invariant guarded (docs/ARCHITECTURE.md, "Invariant 10": no one caller can keep the
//! service from answering): no caller-supplied string reaches an error message, a log line or
//! a metric label unbounded or with control characters. [`quote`] shows at most [`QUOTE_CHARS`]
//! characters of a value, escaped; [`check_field`] refuses over-long values and control
//! characters (a newline in a request id would forge a log line) so the handler can answer
//! INVALID_ARGUMENT naming the field.

use std::fmt::Write as _;

/// Most characters of an untrusted value that [`quote`] shows.
pub const QUOTE_CHARS: usize = 64;

/// `value` as a quoted, escaped string of at most [`QUOTE_CHARS`] characters; a longer value
/// is cut and its full length said (`"abc…" (1048576 bytes)`). Safe in messages and logs.
pub fn quote(value: &str) -> String {
    quote_within(value, QUOTE_CHARS)
}

/// [`quote`] showing up to `max_chars` characters: for a longer message a service of ours
/// wrote (a catalog refusal passed on), whose sense would be lost in [`QUOTE_CHARS`].
pub fn quote_within(value: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(value.len().min(max_chars * 2) + 24);
    let mut chars = value.chars();
    let head: String = chars.by_ref().take(max_chars).collect();
    let _ = write!(out, "{head:?}");
    if chars.next().is_some() {
        out.pop();
        let _ = write!(out, "…\" ({} bytes)", value.len());
    }
    out
}

/// Why [`check_field`] refused a value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FieldProblem {
    /// Longer than allowed.
    #[error("at most {max} characters, got {got}")]
    TooLong {
        /// The limit.
        max: usize,
        /// The value's length in characters.
        got: usize,
    },
    /// Holds a control character (newline, tab, NUL, escape, …) or an invisible formatting
    /// character that changes how a log line reads (line and paragraph separators,
    /// bidirectional overrides, zero-width characters, the byte order mark).
    #[error(
        "must not contain control or invisible formatting characters (found {found:?} at character {at})"
    )]
    ControlCharacter {
        /// The character.
        found: char,
        /// Its index, in characters.
        at: usize,
    },
}

/// Checks that `value` has at most `max_chars` characters and no control character. Cost is
/// one pass over at most `max_chars + 1` characters, whatever the value's size.
pub fn check_field(value: &str, max_chars: usize) -> Result<(), FieldProblem> {
    for (at, c) in value.chars().enumerate() {
        if at >= max_chars {
            return Err(FieldProblem::TooLong {
                max: max_chars,
                got: value.chars().count(),
            });
        }
        if c.is_control() || is_invisible_format(c) {
            return Err(FieldProblem::ControlCharacter { found: c, at });
        }
    }
    Ok(())
}

/// Unicode format (Cf) and separator (Zl, Zp) characters that reorder, hide or break text in
/// a terminal or log viewer.
fn is_invisible_format(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}'
        | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{206F}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_escapes_and_bounds_any_input() {
        assert_eq!(quote("volc"), "\"volc\"");
        assert_eq!(quote("a\nb"), "\"a\\nb\"");
        let huge = "x".repeat(1 << 20);
        let q = quote(&huge);
        assert!(q.len() < 100, "{q}");
        assert!(q.ends_with("…\" (1048576 bytes)"), "{q}");
        assert!(!quote(&"\n".repeat(10_000)).contains('\n'));
    }

    #[test]
    fn quote_within_shows_up_to_its_bound_escaped() {
        let message = format!(
            "clone scope \"s\" holds 3 clones{}",
            ", all in use".repeat(10)
        );
        assert_eq!(quote_within(&message, 1024), format!("{message:?}"));
        let cut = quote_within(&"y\n".repeat(2000), 1024);
        assert!(
            !cut.contains('\n') && cut.ends_with("…\" (4000 bytes)"),
            "{cut}"
        );
    }

    #[test]
    fn check_field_refuses_control_characters_and_length() {
        assert_eq!(check_field("req-1", 128), Ok(()));
        assert_eq!(check_field("", 128), Ok(()));
        assert_eq!(
            check_field("a\nb", 128),
            Err(FieldProblem::ControlCharacter { found: '\n', at: 1 })
        );
        assert!(matches!(
            check_field("\u{1b}[31m", 128),
            Err(FieldProblem::ControlCharacter { .. })
        ));
        assert_eq!(
            check_field("abcd", 3),
            Err(FieldProblem::TooLong { max: 3, got: 4 })
        );
        assert_eq!(check_field("abc", 3), Ok(()));
        for sneaky in [
            "a\u{2028}b",
            "\u{202E}gnp.exe",
            "zero\u{200B}width",
            "\u{FEFF}bom",
        ] {
            assert!(
                matches!(
                    check_field(sneaky, 128),
                    Err(FieldProblem::ControlCharacter { .. })
                ),
                "{sneaky:?}"
            );
        }
        assert_eq!(check_field("日本語", 3), Ok(()));
    }
}
