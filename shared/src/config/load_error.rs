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

#[cfg(test)]
mod tests {
    use crate::config::Config;

    /// Loads `toml` through [`Config::from_toml_str`] with `env` set (figment's `Jail`
    /// serializes the tests that touch the environment and restores it after).
    #[allow(
        clippy::result_large_err,
        reason = "Jail's closure returns figment's own error type"
    )]
    fn load(toml: &str, env: &[(&str, &str)]) -> String {
        let mut text = String::new();
        figment::Jail::expect_with(|jail| {
            for (k, v) in env {
                jail.set_env(k, v);
            }
            if let Err(e) = Config::from_toml_str(toml) {
                text = e.to_string();
            }
            Ok(())
        });
        text
    }

    const KEY_TYPO: &str = "[[pools]]\nid = 'a'\nprovider = 'espeak'\n[[pools.upstreams]]\nid = 'u'\n[[pools.upstreams.keys]]\nid = 'k'\ncapcity = 3\n";

    #[test]
    fn a_file_typo_names_the_file_the_indexed_path_and_the_intended_field() {
        let text = load(KEY_TYPO, &[]);
        assert_eq!(
            text,
            "config text: pools[0].upstreams[0].keys[0].capcity: unknown field `capcity`; \
             known fields: `id`, `capacity`, `credential` (did you mean `capacity`?)"
        );
    }

    #[test]
    fn an_environment_typo_names_the_variable_not_the_file() {
        let text = load("", &[("VOXPOOL_SCHEDULER__WAIT_POL_MS", "3")]);
        assert!(
            text.starts_with(
                "environment variable VOXPOOL_SCHEDULER__WAIT_POL_MS: unknown field `wait_pol_ms`"
            ),
            "{text}"
        );
        assert!(
            text.ends_with("(did you mean VOXPOOL_SCHEDULER__WAIT_POLL_MS?)"),
            "{text}"
        );
        assert!(!text.contains("config text"), "{text}");
    }

    #[test]
    fn a_wrong_type_says_what_was_expected_and_found() {
        let text = load("[scheduler]\nwait_poll_ms = 'soon'\n", &[]);
        assert!(
            text.starts_with("config text: scheduler.wait_poll_ms: expected u64, found string"),
            "{text}"
        );
        let env = load("", &[("VOXPOOL_SYNTHESIS__MAX_ATTEMPTS", "many")]);
        assert!(
            env.starts_with("environment variable VOXPOOL_SYNTHESIS__MAX_ATTEMPTS: expected u32"),
            "{env}"
        );
    }

    #[test]
    fn a_name_far_from_every_field_gets_no_guess() {
        let text = load("[scheduler]\nzebra = 1\n", &[]);
        assert!(
            text.contains("unknown field `zebra`") && !text.contains("did you mean"),
            "{text}"
        );
    }
}
