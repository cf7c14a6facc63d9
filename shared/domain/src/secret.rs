//! [`Secret`]: a credential that never appears in `Debug`, `Display`, logs or errors.

use std::fmt;

/// A secret string (vendor token, admin token). `Debug` and `Display` print `<redacted>`; the
/// value is only reachable through [`Secret::expose`], which callers use at the one place the
/// secret leaves the process (an HTTP header, a constant-time compare).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value. Surrounding whitespace (a trailing newline in a secrets file) is
    /// removed.
    pub fn new(value: impl Into<String>) -> Self {
        let value = value.into();
        Self(value.trim().to_owned())
    }

    /// The secret itself. Never log or format the result.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// True when the secret is the empty string.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_hide_the_value() {
        let s = Secret::new("tok-123\n");
        assert_eq!(s.expose(), "tok-123");
        assert!(!format!("{s:?}").contains("tok-123"));
        assert!(!format!("{s}").contains("tok-123"));
    }
}
