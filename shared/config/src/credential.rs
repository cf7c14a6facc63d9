//! Credential references of the config: an environment variable or a file, never an inline
//! value (a secret must not sit in a file kept in git). Resolved only by synthesis.

use std::{fmt, path::PathBuf};

use serde::{Deserialize, Serialize};

use voxpool_domain::secret::Secret;

/// A reference to a credential: an environment variable or a file. Never the value itself.
///
/// Written `{ env = "NAME" }` or `{ file = "/path" }`: exactly one of the two, no other field.
/// A string in its place (a secret pasted inline) is refused without echoing it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CredentialRef {
    /// `{ env = "NAME" }`: the value of environment variable NAME.
    Env(String),
    /// `{ file = "/run/secrets/x" }`: the file's contents, trimmed.
    File(PathBuf),
}

impl<'de> Deserialize<'de> for CredentialRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Reference;
        impl<'de> serde::de::Visitor<'de> for Reference {
            type Value = CredentialRef;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#"a credential reference { env = "NAME" } or { file = "/path" }"#)
            }

            fn visit_str<E: serde::de::Error>(self, _secret: &str) -> Result<Self::Value, E> {
                Err(E::custom(
                    r#"credential must be a reference, { env = "NAME" } or { file = "/path" }, never the secret itself (the value is not shown)"#,
                ))
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                use serde::de::Error;
                let (mut env, mut file) = (None, None);
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "env" => env = Some(map.next_value::<String>()?),
                        "file" => file = Some(map.next_value::<PathBuf>()?),
                        other => {
                            return Err(A::Error::custom(format!(
                                "unknown credential field {other:?}: expected env or file"
                            )));
                        }
                    }
                }
                match (env, file) {
                    (Some(e), None) => Ok(CredentialRef::Env(e)),
                    (None, Some(f)) => Ok(CredentialRef::File(f)),
                    (Some(_), Some(_)) => Err(A::Error::custom(
                        "credential sets both env and file: keep one",
                    )),
                    (None, None) => Err(A::Error::custom(
                        r#"empty credential: set env = "NAME" or file = "/path""#,
                    )),
                }
            }
        }
        d.deserialize_any(Reference)
    }
}

impl CredentialRef {
    /// Reads the credential. The error names the variable or file, never a value.
    pub fn resolve(&self) -> Result<Secret, String> {
        match self {
            CredentialRef::Env(name) => match std::env::var(name) {
                Ok(v) if !v.trim().is_empty() => Ok(Secret::new(v)),
                Ok(_) => Err(format!("environment variable {name} is empty")),
                Err(_) => Err(format!("environment variable {name} is not set")),
            },
            CredentialRef::File(path) => match std::fs::read_to_string(path) {
                Ok(v) if !v.trim().is_empty() => Ok(Secret::new(v)),
                Ok(_) => Err(format!("credential file {} is empty", path.display())),
                Err(e) => Err(format!(
                    "cannot read credential file {}: {e}",
                    path.display()
                )),
            },
        }
    }
}
