//! Operator commands: pool status, voice packs, their reference clips and vendor clones, one-off
//! synthesis, the audio cache, durable batch jobs, the usage ledger.

pub mod cache;
pub mod clones;
pub mod job;
pub mod packs;
pub mod pool;
pub mod references;
pub mod synth;
pub mod usage;

use voxpool_domain::contract::AuthReason;

/// A failed operator command: the message to print and the exit code.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct OpError {
    /// One line, lowercase, concrete.
    pub message: String,
    /// Exit code (1 = the server refused or is unreachable, 2 = bad usage).
    pub exit_code: u8,
}

impl OpError {
    /// A server-side or I/O failure (exit 1).
    pub fn failed(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            exit_code: 1,
        }
    }

    /// A usage error (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            exit_code: 2,
        }
    }

    /// From a gRPC status of `what` (e.g. `GetVoicePack`) sent to `service` (e.g. `catalog at
    /// http://127.0.0.1:50052`), which the message names so the operator knows which URL
    /// failed.
    pub fn status(what: &str, service: &str, status: &tonic::Status) -> Self {
        const ADMIN: &str = "voxctl sends the admin token from --admin-token or VOXPOOL_ADMIN_TOKEN; make run uses dev-admin-token-local";
        let hint = match (AuthReason::of(status), status.code()) {
            // The server's own answer to a caller that sent nothing already names voxctl's
            // flag and variable (voxpool_runtime::auth): say it once.
            (Some(AuthReason::ClientTokenMissing | AuthReason::ClientTokenRejected), _)
                if status.message().contains("VOXPOOL_CLIENT_TOKEN") =>
            {
                " (make run's is dev-client-token-voxctl)".to_owned()
            }
            (Some(AuthReason::ClientTokenMissing | AuthReason::ClientTokenRejected), _) => {
                " (voxctl sends the client token from --token or VOXPOOL_CLIENT_TOKEN; make run's is dev-client-token-voxctl)".to_owned()
            }
            // The server has no admin token of its own (voxpool_runtime::auth::AdminAuth).
            (Some(AuthReason::AdminRpcsDisabled), _) => {
                format!(" (the server needs its own admin token before it answers admin RPCs; {ADMIN})")
            }
            (Some(AuthReason::AdminTokenMissing | AuthReason::AdminTokenRejected), _)
            | (None, tonic::Code::Unauthenticated | tonic::Code::PermissionDenied) => {
                format!(" ({ADMIN})")
            }
            _ if std::error::Error::source(status).is_some() => {
                " (the service did not answer: check the URL flag and that it runs)".to_owned()
            }
            _ => String::new(),
        };
        Self::failed(format!(
            "{what} ({service}): {}: {}{hint}",
            crate::retry::code_name(status.code()),
            status.message()
        ))
    }
}

impl From<crate::connect::UrlError> for OpError {
    fn from(e: crate::connect::UrlError) -> Self {
        Self::usage(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use voxpool_domain::{contract::AuthReason, status::with_info};

    use super::OpError;

    /// A refusal as `voxpool_runtime::auth` sends it: the code, the message, the typed reason.
    fn refused(code: tonic::Code, reason: AuthReason, message: &str) -> tonic::Status {
        with_info(code, message, reason.as_str(), HashMap::new(), None)
    }

    #[test]
    fn an_unauthenticated_answer_points_at_the_token_it_is_about() {
        let client = OpError::status(
            "GetPoolStatus",
            "scheduler at http://127.0.0.1:50051",
            &refused(
                tonic::Code::Unauthenticated,
                AuthReason::ClientTokenMissing,
                "this RPC needs an authenticated caller",
            ),
        );
        assert!(
            client.message.starts_with(
                "GetPoolStatus (scheduler at http://127.0.0.1:50051): UNAUTHENTICATED"
            ),
            "{}",
            client.message
        );
        assert!(
            client.message.contains("--token or VOXPOOL_CLIENT_TOKEN"),
            "{}",
            client.message
        );
        let admin = OpError::status(
            "DisableVoicePack",
            "catalog at http://127.0.0.1:50052",
            &refused(
                tonic::Code::Unauthenticated,
                AuthReason::AdminTokenRejected,
                "rejected",
            ),
        );
        assert!(
            admin.message.contains("VOXPOOL_ADMIN_TOKEN"),
            "{}",
            admin.message
        );
        let server_without_token = OpError::status(
            "PurgeCache",
            "synthesis at http://127.0.0.1:50053",
            &refused(
                tonic::Code::FailedPrecondition,
                AuthReason::AdminRpcsDisabled,
                "disabled",
            ),
        );
        assert!(
            server_without_token.message.contains(
                "--admin-token or VOXPOOL_ADMIN_TOKEN; make run uses dev-admin-token-local"
            ),
            "{}",
            server_without_token.message
        );
        let other = OpError::status(
            "Synthesize",
            "synthesis at http://127.0.0.1:50053",
            &tonic::Status::failed_precondition("pack vp_1 is disabled"),
        );
        assert!(!other.message.contains("admin"), "{}", other.message);
        // The message text never picks the hint: a client-token reason worded like an admin
        // refusal still points at --token.
        let worded_otherwise = OpError::status(
            "GetPoolStatus",
            "scheduler at http://127.0.0.1:50051",
            &refused(
                tonic::Code::Unauthenticated,
                AuthReason::ClientTokenRejected,
                "admin token rejected",
            ),
        );
        assert!(
            worded_otherwise
                .message
                .contains("--token or VOXPOOL_CLIENT_TOKEN")
                && !worded_otherwise.message.contains("--admin-token"),
            "{}",
            worded_otherwise.message
        );
    }

    #[test]
    fn the_client_token_hint_is_given_once_whatever_the_server_already_said() {
        use voxpool_domain::secret::Secret;
        use voxpool_runtime::auth::ClientAuth;
        let auth = ClientAuth::with_tokens(
            [("voxctl".to_owned(), Secret::new("voxctl-token-0123456789"))],
            false,
        )
        .expect("auth");
        let headers = |value: Option<&str>| {
            let mut map = tonic::codegen::http::HeaderMap::new();
            if let Some(v) = value {
                map.insert("authorization", v.parse().expect("header"));
            }
            map
        };
        let none = tonic::codegen::http::Extensions::new();
        // What the real server answers a caller that sent nothing, a malformed header, and
        // another token.
        for sent in [
            None,
            Some("Basic abc"),
            Some("Bearer another-token-0123456789"),
        ] {
            let refused = auth
                .authenticate(&headers(sent), &none)
                .expect_err("refused");
            let error = OpError::status("GetJob", "jobs at http://127.0.0.1:50054", &refused);
            assert_eq!(
                error.message.matches("VOXPOOL_CLIENT_TOKEN").count(),
                1,
                "{sent:?}: {}",
                error.message
            );
            assert!(
                error
                    .message
                    .contains("make run's is dev-client-token-voxctl"),
                "{sent:?}: {}",
                error.message
            );
        }
    }
}
