//! The HTTP front's errors in OpenAI's shape, `{"error": {"message", "type", "param",
//! "code"}}`, with the HTTP status an OpenAI client expects. A synthesis failure is mapped from
//! the same `tonic::Status` the gRPC side answers (its code, its `ErrorInfo` reason, its
//! `BadRequest` field, its `RetryInfo`), so both fronts classify a failure once
//! (`crate::error::status`):
//!
//! | gRPC code | HTTP | `type` |
//! |---|---|---|
//! | INVALID_ARGUMENT | 400 | `invalid_request_error` (`param` = the body field) |
//! | UNAUTHENTICATED | 401 | `authentication_error` |
//! | PERMISSION_DENIED | 403 | `permission_error` |
//! | NOT_FOUND, FAILED_PRECONDITION `PACK_UNUSABLE` | 404 | `invalid_request_error` (`param` = `voice`) |
//! | RESOURCE_EXHAUSTED | 429 + `Retry-After` | `rate_limit_error` |
//! | FAILED_PRECONDITION (other), UNAVAILABLE, ABORTED | 503 (+ `Retry-After` when known) | `service_unavailable` |
//! | DEADLINE_EXCEEDED spent waiting for a slot (`waited_for_slot`) | 429 + `Retry-After`, `code` `pool_full` | `rate_limit_error` |
//! | DEADLINE_EXCEEDED (other) | 504 | `timeout` |
//! | INTERNAL and the rest | 500 | `server_error` |
//!
//! `code` is the typed reason in lowercase (`pool_full`, `keys_exhausted`, …) when the status
//! carries one. Messages are the gRPC messages with the field renamed to the body's
//! (`text` → `input`), and never carry a key or a credential.

use axum::{
    Json,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::json;
use tonic::{Code, Status};
use tonic_types::StatusExt;
use voxpool_domain::contract::SynthesisReason;

use crate::error::WAITED_FOR_SLOT;

/// One error answer.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// What went wrong and what to do.
    pub message: String,
    /// OpenAI's error `type`.
    pub kind: &'static str,
    /// The body field at fault, when one is.
    pub param: Option<String>,
    /// A machine-readable code (the typed reason, lowercase), when known.
    pub code: Option<String>,
    /// Seconds for `Retry-After`, when a retry time is known.
    pub retry_after_s: Option<u64>,
}

impl ApiError {
    /// 400 naming `param`.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: format!("invalid {param}: {}", message.into()),
            kind: "invalid_request_error",
            param: Some(param.to_owned()),
            code: Some("invalid_value".to_owned()),
            retry_after_s: None,
        }
    }

    /// 401 with `message`.
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            message: message.into(),
            kind: "authentication_error",
            param: None,
            code: Some("invalid_api_key".to_owned()),
            retry_after_s: None,
        }
    }

    /// 404 for a path no route serves.
    pub fn no_route(method: &str, path: &str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: format!(
                "no route {method} {}: this server answers POST /v1/audio/speech, GET /v1/audio/voices and GET /v1/models",
                voxpool_domain::untrusted::quote(path)
            ),
            kind: "invalid_request_error",
            param: None,
            code: Some("unknown_url".to_owned()),
            retry_after_s: None,
        }
    }

    /// 405 for a served path asked with a method it does not take (`allowed`: the one it
    /// takes, also sent as `Allow`).
    pub fn wrong_method(method: &str, route: &str, allowed: &str) -> Self {
        Self {
            status: StatusCode::METHOD_NOT_ALLOWED,
            message: format!(
                "{route} takes {allowed}, not {}",
                voxpool_domain::untrusted::quote(method)
            ),
            kind: "invalid_request_error",
            param: None,
            code: Some("method_not_allowed".to_owned()),
            retry_after_s: None,
        }
    }

    /// 503 for a connection over `--max-connections`, closing it (`message` says so).
    pub fn too_many_connections(message: &str) -> Response {
        let mut response = Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.to_owned(),
            kind: "service_unavailable",
            param: None,
            code: Some("too_many_connections".to_owned()),
            retry_after_s: Some(1),
        }
        .into_response();
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        response
    }

    /// 408 for a request body that did not arrive whole within `--body-timeout`.
    pub fn body_timeout(timeout: std::time::Duration) -> Self {
        Self {
            status: StatusCode::REQUEST_TIMEOUT,
            message: format!(
                "the request body did not arrive whole within {} (--body-timeout): send the whole body at once",
                humantime::format_duration(timeout)
            ),
            kind: "invalid_request_error",
            param: None,
            code: Some("body_timeout".to_owned()),
            retry_after_s: None,
        }
    }

    /// The answer to a synthesis (or catalog) failure, from its gRPC status (module doc).
    pub fn from_status(status: &Status) -> Self {
        let details = status.get_error_details();
        let reason = details.error_info().map(|i| i.reason.clone());
        // An HTTP caller sends no deadline: a wait for a slot that used all of ours is the
        // pool being full, which an OpenAI client retries after Retry-After.
        let pool_full = status.code() == Code::DeadlineExceeded
            && details
                .error_info()
                .is_some_and(|i| i.metadata.get(WAITED_FOR_SLOT).is_some_and(|v| v == "true"));
        let field = details
            .bad_request()
            .and_then(|b| b.field_violations.first())
            .map(|v| v.field.clone());
        let retry_after_s = details
            .retry_info()
            .and_then(|r| r.retry_delay)
            .map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0));
        let pack_unusable = SynthesisReason::of(status) == Some(SynthesisReason::PackUnusable);
        let (http, kind) = match status.code() {
            Code::InvalidArgument | Code::OutOfRange => {
                (StatusCode::BAD_REQUEST, "invalid_request_error")
            }
            Code::Unauthenticated => (StatusCode::UNAUTHORIZED, "authentication_error"),
            Code::PermissionDenied => (StatusCode::FORBIDDEN, "permission_error"),
            Code::NotFound => (StatusCode::NOT_FOUND, "invalid_request_error"),
            Code::FailedPrecondition if pack_unusable => {
                (StatusCode::NOT_FOUND, "invalid_request_error")
            }
            Code::ResourceExhausted => (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error"),
            Code::DeadlineExceeded if pool_full => {
                (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error")
            }
            Code::FailedPrecondition | Code::Unavailable | Code::Aborted => {
                (StatusCode::SERVICE_UNAVAILABLE, "service_unavailable")
            }
            Code::DeadlineExceeded => (StatusCode::GATEWAY_TIMEOUT, "timeout"),
            Code::Ok
            | Code::Cancelled
            | Code::Unknown
            | Code::AlreadyExists
            | Code::Unimplemented
            | Code::Internal
            | Code::DataLoss => (StatusCode::INTERNAL_SERVER_ERROR, "server_error"),
        };
        let param = match (status.code(), field) {
            (_, Some(field)) => Some(body_field(&field).to_owned()),
            (Code::NotFound, None) => Some("voice".to_owned()),
            (Code::FailedPrecondition, None) if pack_unusable => Some("voice".to_owned()),
            _ => None,
        };
        let mut message = status.message().to_owned();
        if let Some(param) = &param {
            // "invalid text: …" says what the gRPC field is; an HTTP caller sent `input`.
            if let Some(field) = details
                .bad_request()
                .and_then(|b| b.field_violations.first())
                .map(|v| v.field.as_str())
                && let Some(rest) = message.strip_prefix(&format!("invalid {field}:"))
            {
                message = format!("invalid {param}:{rest}");
                if param == "speed" {
                    message.push_str(" (speed multiplies the voice pack's rate)");
                }
            }
        }
        if status.code() == Code::NotFound || pack_unusable {
            // The gRPC message names gRPC's own listing; an HTTP caller has its own (and a
            // `voice` such as "alloy" is an OpenAI voice name, not a pack id).
            message = message.replace(
                "check the packId (ListVoicePacks lists the enabled packs)",
                "voice is a voice pack id: GET /v1/audio/voices lists them",
            );
        }
        let code = if pool_full {
            Some(SynthesisReason::PoolFull.as_str().to_ascii_lowercase())
        } else if status.code() == Code::NotFound {
            // The voice named no pack (or a pool this replica lacks): one code for HTTP.
            Some("voice_not_found".to_owned())
        } else {
            reason.map(|r| r.to_ascii_lowercase())
        };
        let code = code.or_else(|| match status.code() {
            Code::InvalidArgument => Some("invalid_value".to_owned()),
            _ => None,
        });
        // A text too long for its own deadline is refused with no retry hint: waiting cannot
        // help, and the SDKs retry a 429 that names a time.
        let hopeless = SynthesisReason::of(status) == Some(SynthesisReason::DeadlineUnreachable)
            && retry_after_s.is_none();
        let retry_after_s = match http {
            StatusCode::TOO_MANY_REQUESTS if hopeless => None,
            // A client told "too many requests" needs a time: 1 s when the scheduler gave none.
            StatusCode::TOO_MANY_REQUESTS => Some(retry_after_s.unwrap_or(1).max(1)),
            StatusCode::SERVICE_UNAVAILABLE => retry_after_s.map(|s| s.max(1)),
            _ => None,
        };
        Self {
            status: http,
            message,
            kind,
            param,
            code,
            retry_after_s,
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

/// The body field an HTTP caller sent for a gRPC request field or adapter param.
pub fn body_field(grpc_field: &str) -> &str {
    match grpc_field {
        "text" => "input",
        "format" | "sample_rate_hz" | "wav_streaming_header" => "response_format",
        "params.rate" => "speed",
        "extra.instructions" => "instructions",
        "pack_id" | "voice" => "voice",
        // Sent as a header, not in the body.
        "request_id" => "x-request-id",
        other => other,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        if let Some(s) = self.retry_after_s
            && let Ok(v) = HeaderValue::from_str(&s.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use std::{collections::HashMap, time::Duration};

    use voxpool_domain::status::{invalid_argument, not_found, with_info};

    use super::*;

    #[test]
    fn bad_input_is_400_naming_the_body_field() {
        let e = ApiError::from_status(&invalid_argument("text", "must contain something"));
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.param.as_deref(), Some("input"));
        assert_eq!(e.message, "invalid input: must contain something");
        let e = ApiError::from_status(&invalid_argument(
            "params.rate",
            "minimax cannot apply params.rate = 3.6: above 2",
        ));
        assert_eq!(e.param.as_deref(), Some("speed"));
        assert_eq!(
            e.message,
            "invalid speed: minimax cannot apply params.rate = 3.6: above 2 (speed multiplies the voice pack's rate)"
        );
    }

    #[test]
    fn a_full_pool_is_429_with_a_retry_time() {
        let full = with_info(
            Code::ResourceExhausted,
            "pool \"p\" is full",
            SynthesisReason::PoolFull.as_str(),
            HashMap::new(),
            Some(Duration::from_millis(2_300)),
        );
        let e = ApiError::from_status(&full);
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(e.code.as_deref(), Some("pool_full"));
        assert_eq!(e.retry_after_s, Some(3));
        let e = ApiError::from_status(&Status::resource_exhausted("busy"));
        assert_eq!(e.retry_after_s, Some(1), "a 429 always says when");
        let waited = with_info(
            Code::DeadlineExceeded,
            "deadline exceeded while waiting for a free key slot",
            SynthesisReason::DeadlineExceeded.as_str(),
            HashMap::from([(WAITED_FOR_SLOT.to_owned(), "true".to_owned())]),
            None,
        );
        let e = ApiError::from_status(&waited);
        assert_eq!(
            (e.status, e.code.as_deref(), e.retry_after_s),
            (StatusCode::TOO_MANY_REQUESTS, Some("pool_full"), Some(1)),
            "a whole deadline spent waiting for a slot is a full pool"
        );
    }

    #[test]
    fn unknown_or_disabled_voices_are_404_no_key_503_deadline_504() {
        for reason in [SynthesisReason::PackNotFound, SynthesisReason::PoolNotFound] {
            let e = ApiError::from_status(&not_found(
                "voxpool.dev/VoicePack",
                "x",
                reason.as_str(),
                "no pack x",
            ));
            assert_eq!(
                (e.status, e.param.as_deref(), e.code.as_deref()),
                (
                    StatusCode::NOT_FOUND,
                    Some("voice"),
                    Some("voice_not_found")
                )
            );
        }
        let disabled = with_info(
            Code::FailedPrecondition,
            "disabled",
            SynthesisReason::PackUnusable.as_str(),
            HashMap::new(),
            None,
        );
        assert_eq!(
            ApiError::from_status(&disabled).status,
            StatusCode::NOT_FOUND
        );
        let no_key = with_info(
            Code::FailedPrecondition,
            "no key",
            SynthesisReason::CredentialsMissing.as_str(),
            HashMap::new(),
            None,
        );
        assert_eq!(
            ApiError::from_status(&no_key).status,
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            ApiError::from_status(&Status::deadline_exceeded("late")).status,
            StatusCode::GATEWAY_TIMEOUT
        );
    }

    #[test]
    fn a_text_that_cannot_fit_its_own_deadline_is_a_429_without_retry_after() {
        let hopeless = with_info(
            Code::ResourceExhausted,
            "too long for its deadline",
            SynthesisReason::DeadlineUnreachable.as_str(),
            HashMap::new(),
            None,
        );
        let e = ApiError::from_status(&hopeless);
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(e.retry_after_s, None, "waiting cannot help: no Retry-After");
        let behind = with_info(
            Code::ResourceExhausted,
            "behind others",
            SynthesisReason::DeadlineUnreachable.as_str(),
            HashMap::new(),
            Some(Duration::from_secs(4)),
        );
        assert_eq!(ApiError::from_status(&behind).retry_after_s, Some(4));
    }
}
