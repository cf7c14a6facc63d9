//! Durations given as flags (`--request-timeout 90s`, `--idle-timeout 2m`): parsed once here for
//! the server limits and the connection limits alike, refusing zero, which would stop every
//! request (or connection) that has to wait at all.

use std::time::Duration;

/// Parses a duration such as `90s` or `15m` that must be above zero.
pub(crate) fn positive_duration(raw: &str) -> Result<Duration, String> {
    match humantime::parse_duration(raw) {
        Ok(d) if d.is_zero() => Err("must be above zero, e.g. 90s or 15m".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_duration_is_refused_and_a_unit_is_required() {
        assert!(positive_duration("0").is_err());
        assert!(positive_duration("0ms").is_err());
        assert_eq!(positive_duration("300ms"), Ok(Duration::from_millis(300)));
        assert!(positive_duration("300").is_err(), "a unit is required");
    }
}
