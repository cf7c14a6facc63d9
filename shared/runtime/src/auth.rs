//! Bearer-token authorization: admin RPCs (this module) and data-plane callers ([`ClientAuth`]:
//! service tokens and client certificates, [`CallerIdentity`], and the tenants a token is
//! bound to, [`TenantBinding`]).
//!
//! The admin token comes from `VOXPOOL_ADMIN_TOKEN` or `--admin-token-file FILE`; callers send
//! `authorization: Bearer <token>` metadata: the scheme is case-insensitive (RFC 7235 §2.1),
//! exactly one `authorization` entry is accepted (two are refused rather than letting one of
//! them decide), and comparison is constant-time. Tokens shorter than [`MIN_TOKEN_CHARS`]
//! are refused at start-up. With no token configured, admin RPCs are refused with a message
//! that says how to configure one.

mod client;
mod layer;
mod peer;
mod tenants;

use std::{collections::HashMap, path::Path};

use subtle::ConstantTimeEq;
use tonic::{Status, metadata::MetadataMap};

pub use self::{
    client::{CallerIdentity, ClientAuth, ClientToken, caller_identity},
    layer::Authenticated,
    tenants::{TenantBinding, resolve_tenant, tenant_binding},
};
use voxpool_domain::{contract::AuthReason, secret::Secret, status::with_info};

/// A refused call: UNAUTHENTICATED (or FAILED_PRECONDITION for [`AuthReason::AdminRpcsDisabled`])
/// with `message` and the typed reason in its `ErrorInfo`, so a client picks its hint from the
/// reason, never from the text.
pub(crate) fn refused(reason: AuthReason, message: impl Into<String>) -> Status {
    let code = match reason {
        AuthReason::AdminRpcsDisabled => tonic::Code::FailedPrecondition,
        AuthReason::TenantNotAllowed => tonic::Code::PermissionDenied,
        _ => tonic::Code::Unauthenticated,
    };
    with_info(code, message, reason.as_str(), HashMap::new(), None)
}

/// Why a request's `authorization` metadata holds no usable bearer token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BearerError {
    /// No `authorization` entry.
    Missing,
    /// More than one `authorization` entry (refused rather than letting one of them decide).
    Repeated,
    /// Not `Bearer <token>` (the scheme is case-insensitive).
    Malformed,
}

/// The token of the one `authorization: Bearer <token>` entry of `headers` (the parsing rules
/// of the module doc, shared by admin and client authentication).
pub(crate) fn bearer_token(headers: &http::HeaderMap) -> Result<&str, BearerError> {
    let mut entries = headers.get_all("authorization").iter();
    let header = match (entries.next(), entries.next()) {
        (None, _) => return Err(BearerError::Missing),
        (Some(_), Some(_)) => return Err(BearerError::Repeated),
        (Some(header), None) => header,
    };
    let header = header.to_str().map_err(|_| BearerError::Malformed)?;
    let (scheme, token) = header.split_once(' ').ok_or(BearerError::Malformed)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(BearerError::Malformed);
    }
    Ok(token.trim())
}

/// Shortest admin token accepted at start-up.
pub const MIN_TOKEN_CHARS: usize = 16;

/// Errors loading the admin token.
#[derive(Debug, thiserror::Error)]
pub enum AdminTokenError {
    /// The token file could not be read.
    #[error("cannot read admin token file {path}: {source}")]
    Read {
        /// The file named by `--admin-token-file`.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The token (from the file or the environment) is empty.
    #[error("admin token from {origin} is empty")]
    Empty {
        /// `VOXPOOL_ADMIN_TOKEN` or the file path.
        origin: String,
    },
    /// The token is too short to resist guessing.
    #[error(
        "admin token from {origin} has {chars} characters; use at least {MIN_TOKEN_CHARS} (e.g. `openssl rand -hex 24`)"
    )]
    TooShort {
        /// `VOXPOOL_ADMIN_TOKEN` or the file path.
        origin: String,
        /// Its length in characters.
        chars: usize,
    },
}

/// The admin bearer token, or its absence (admin RPCs then refused).
#[derive(Clone, Debug)]
pub struct AdminAuth {
    token: Option<Secret>,
}

impl AdminAuth {
    /// Admin RPCs accept `token`.
    pub fn with_token(token: Secret) -> Self {
        Self { token: Some(token) }
    }

    /// No token configured: every admin RPC is refused with FAILED_PRECONDITION.
    pub fn disabled() -> Self {
        Self { token: None }
    }

    /// Loads the token from `file` if given, else from `env_value` (the value of
    /// `VOXPOOL_ADMIN_TOKEN`, if set). Errors: unreadable file, empty token.
    pub fn load(file: Option<&Path>, env_value: Option<&str>) -> Result<Self, AdminTokenError> {
        let (origin, raw) = match (file, env_value) {
            (Some(path), _) => {
                let raw =
                    std::fs::read_to_string(path).map_err(|source| AdminTokenError::Read {
                        path: path.display().to_string(),
                        source,
                    })?;
                (path.display().to_string(), raw)
            }
            (None, Some(value)) => ("VOXPOOL_ADMIN_TOKEN".to_owned(), value.to_owned()),
            (None, None) => return Ok(Self::disabled()),
        };
        let token = Secret::new(raw);
        if token.is_empty() {
            return Err(AdminTokenError::Empty { origin });
        }
        let chars = token.expose().chars().count();
        if chars < MIN_TOKEN_CHARS {
            return Err(AdminTokenError::TooShort { origin, chars });
        }
        Ok(Self::with_token(token))
    }

    /// True when a token is configured.
    pub fn is_enabled(&self) -> bool {
        self.token.is_some()
    }

    /// The token, for a service that calls another's admin RPCs with the deployment's one
    /// admin token (synthesis reading managed clones from the catalog). Never log it.
    pub fn token(&self) -> Option<&Secret> {
        self.token.as_ref()
    }

    /// Checks `authorization: Bearer <token>` in `metadata`.
    ///
    /// Errors: FAILED_PRECONDITION when no token is configured on the server;
    /// UNAUTHENTICATED when the header is missing, malformed or carries another token.
    pub fn authorize(&self, metadata: &MetadataMap) -> Result<(), Status> {
        let Some(expected) = &self.token else {
            return Err(refused(
                AuthReason::AdminRpcsDisabled,
                "admin RPCs are disabled on this server: start it with VOXPOOL_ADMIN_TOKEN set \
                 or --admin-token-file FILE",
            ));
        };
        let presented = match bearer_token(metadata.as_ref()) {
            Ok(token) => token,
            Err(BearerError::Missing | BearerError::Repeated) => {
                return Err(refused(
                    AuthReason::AdminTokenMissing,
                    "admin RPC needs exactly one metadata entry 'authorization: Bearer <admin token>'",
                ));
            }
            Err(BearerError::Malformed) => {
                return Err(refused(
                    AuthReason::AdminTokenMissing,
                    "authorization metadata must be 'Bearer <admin token>'",
                ));
            }
        };
        if bool::from(presented.as_bytes().ct_eq(expected.expose().as_bytes())) {
            Ok(())
        } else {
            Err(refused(
                AuthReason::AdminTokenRejected,
                "admin token rejected",
            ))
        }
    }

    /// Refuses to start when a `[[client_tokens]]` entry's token is this admin token: every
    /// caller given that client token could call admin RPCs. The error names the entry, never
    /// a token; an entry whose reference does not resolve is left to the client tokens' own
    /// error.
    pub fn refuse_shared_with(
        &self,
        client_tokens: &[voxpool_config::ClientTokenConfig],
    ) -> Result<(), String> {
        let Some(admin) = &self.token else {
            return Ok(());
        };
        for (i, entry) in client_tokens.iter().enumerate() {
            let Ok(token) = entry.token.resolve() else {
                continue;
            };
            if bool::from(token.expose().as_bytes().ct_eq(admin.expose().as_bytes())) {
                return Err(format!(
                    "client_tokens[{i}] ({:?}): its token is this server's admin token \
                     (VOXPOOL_ADMIN_TOKEN or --admin-token-file), so every caller given it could \
                     call admin RPCs: give the entry a token of its own",
                    entry.name
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_token_equal_to_the_admin_token_is_refused_by_its_entry() {
        let dir = tempfile::tempdir().unwrap();
        let entry = |name: &str, token: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, format!("{token}\n")).unwrap();
            voxpool_config::ClientTokenConfig {
                name: name.to_owned(),
                token: voxpool_config::CredentialRef::File(path),
                services: Vec::new(),
                tenants: None,
            }
        };
        let tokens = [
            entry("apps", "apps-token-0123456789"),
            entry("ops", "the-admin-token-0123"),
        ];
        let admin = AdminAuth::with_token(Secret::new("the-admin-token-0123"));
        let e = admin.refuse_shared_with(&tokens).unwrap_err();
        assert!(e.starts_with("client_tokens[1] (\"ops\")"), "{e}");
        assert!(
            !e.contains("the-admin-token"),
            "no secret in the error: {e}"
        );
        assert!(admin.refuse_shared_with(&tokens[..1]).is_ok());
        assert!(AdminAuth::disabled().refuse_shared_with(&tokens).is_ok());
    }

    fn md(value: &str) -> MetadataMap {
        let mut m = MetadataMap::new();
        m.insert("authorization", value.parse().unwrap());
        m
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        let auth = AdminAuth::with_token(Secret::new("s3cret"));
        for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
            assert!(
                auth.authorize(&md(&format!("{scheme} s3cret"))).is_ok(),
                "{scheme}"
            );
        }
        assert!(auth.authorize(&md("Basic s3cret")).is_err());
        assert!(auth.authorize(&md("Bearers3cret")).is_err());
    }

    #[test]
    fn two_authorization_entries_are_refused_whichever_comes_first() {
        let auth = AdminAuth::with_token(Secret::new("s3cret"));
        for (a, b) in [
            ("Bearer s3cret", "Bearer nope"),
            ("Bearer nope", "Bearer s3cret"),
        ] {
            let mut m = md(a);
            m.append("authorization", b.parse().unwrap());
            let err = auth.authorize(&m).unwrap_err();
            assert_eq!(err.code(), tonic::Code::Unauthenticated);
            assert!(err.message().contains("exactly one"), "{}", err.message());
        }
    }

    #[test]
    fn accepts_only_the_configured_token() {
        let auth = AdminAuth::with_token(Secret::new("s3cret"));
        assert!(auth.authorize(&md("Bearer s3cret")).is_ok());
        let err = auth.authorize(&md("Bearer nope")).unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unauthenticated);
        assert!(!err.message().contains("s3cret"));
        assert_eq!(
            auth.authorize(&MetadataMap::new()).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        assert_eq!(
            auth.authorize(&md("s3cret")).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
    }

    #[test]
    fn refuses_with_instructions_when_unconfigured() {
        let err = AdminAuth::disabled()
            .authorize(&md("Bearer x"))
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::FailedPrecondition);
        assert!(err.message().contains("VOXPOOL_ADMIN_TOKEN"));
    }

    #[test]
    fn loads_from_file_trimmed_and_rejects_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tok");
        std::fs::write(&path, "0123456789abcdef\n").unwrap();
        let auth = AdminAuth::load(Some(&path), None).unwrap();
        assert!(auth.authorize(&md("Bearer 0123456789abcdef")).is_ok());
        std::fs::write(&path, "abc\n").unwrap();
        let err = AdminAuth::load(Some(&path), None).unwrap_err();
        assert!(
            matches!(err, AdminTokenError::TooShort { chars: 3, .. }),
            "{err}"
        );
        assert!(
            !err.to_string().contains("abc\n"),
            "the token is never echoed"
        );
        assert!(matches!(
            AdminAuth::load(None, Some("x")),
            Err(AdminTokenError::TooShort { .. })
        ));
        std::fs::write(&path, "\n").unwrap();
        assert!(matches!(
            AdminAuth::load(Some(&path), None),
            Err(AdminTokenError::Empty { .. })
        ));
        assert!(!AdminAuth::load(None, None).unwrap().is_enabled());
    }
}
