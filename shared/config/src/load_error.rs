//! Load errors (unknown fields, wrong types) in the words of the layer that caused them.
//!
//! figment reports a path like `default.pools.0.upstreams.0.keys.0.capcity` and names its
//! source only at the end; a wrong environment variable would read as a config-file problem.
//! Here every problem starts with where it came from (`config file deploy/x.toml` or
//! `environment variable VOXPOOL_SCHEDULER__WAIT_POL_MS`), then the path in the same form as
//! validation problems (`pools[0].upstreams[0].keys[0].capcity`), then what is wrong, with the
//! closest known name when a field is misspelt (Jaro-Winkler similarity ≥ 0.8, from `strsim`).

use figment::error::Kind;

/// Similarity above which an unknown name is taken for a typo of a known one.
const TYPO_SIMILARITY: f64 = 0.8;

/// Every problem of `error`, one per line; `file` names the TOML layer (`config file x.toml`).
pub(super) fn describe(error: figment::Error, file: &str) -> String {
    error
        .into_iter()
        .map(|e| one(&e, file))
        .collect::<Vec<_>>()
        .join("\n")
}

fn one(error: &figment::Error, file: &str) -> String {
    let from_env = error
        .metadata
        .as_ref()
        .is_some_and(|m| m.name.contains("environment variable"));
    let what = kind(&error.kind);
    if from_env {
        let var = format!("VOXPOOL_{}", error.path.join("__").to_ascii_uppercase());
        let hint = match &error.kind {
            Kind::UnknownField(found, expected) => closest(found, expected)
                .map(|near| {
                    let mut path = error.path.clone();
                    path.pop();
                    path.push(near.to_owned());
                    format!(
                        " (did you mean VOXPOOL_{}?)",
                        path.join("__").to_ascii_uppercase()
                    )
                })
                .unwrap_or_default(),
            _ => String::new(),
        };
        return format!("environment variable {var}: {what}{hint}");
    }
    let source = match error.metadata.as_ref().map(|m| m.name.as_ref()) {
        Some(name) if !name.contains("TOML") => name.to_owned(),
        _ => file.to_owned(),
    };
    let hint = match &error.kind {
        Kind::UnknownField(found, expected) => closest(found, expected)
            .map(|near| format!(" (did you mean `{near}`?)"))
            .unwrap_or_default(),
        _ => String::new(),
    };
    if error.path.is_empty() {
        format!("{source}: {what}{hint}")
    } else {
        format!("{source}: {}: {what}{hint}", path(&error.path))
    }
}

/// `["pools", "0", "keys", "1", "id"]` → `pools[0].keys[1].id`.
fn path(keys: &[String]) -> String {
    let mut out = String::new();
    for key in keys {
        if !key.is_empty() && key.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{key}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(key);
        }
    }
    out
}

fn kind(kind: &Kind) -> String {
    let list = |names: &[&str]| {
        names
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match kind {
        Kind::UnknownField(found, expected) => {
            format!("unknown field `{found}`; known fields: {}", list(expected))
        }
        Kind::UnknownVariant(found, expected) => {
            format!(
                "unknown value `{found}`; expected one of {}",
                list(expected)
            )
        }
        Kind::InvalidType(actual, expected) => format!("expected {expected}, found {actual}"),
        Kind::InvalidValue(actual, expected) => format!("expected {expected}, found {actual}"),
        Kind::MissingField(name) => format!("missing field `{name}`"),
        other => other.to_string(),
    }
}

fn closest<'a>(found: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (*k, strsim::jaro_winkler(found, k)))
        .filter(|(_, score)| *score >= TYPO_SIMILARITY)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(k, _)| k)
}

// Tested in `tests/config_errors.rs`: those tests set environment variables, so they
// run in their own process, not beside the unit tests that load configs.
