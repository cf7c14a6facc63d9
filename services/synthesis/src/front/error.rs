//! The HTTP front's errors in OpenAI's shape, `{"error": {"message", "type", "param",
//! "code"}}`, with the HTTP status an OpenAI client expects. A synthesis failure is mapped from
//! the domain error's own classification (`SynthesisError::code`, `reason`, `field`,
//! `retry_after`: `crate::error`), the one the gRPC status is built from, so both fronts
//! classify a failure once:
//!
//! | gRPC code | HTTP | `type` |
//! |---|---|---|
//! | INVALID_ARGUMENT | 400 | `invalid_request_error` (`param` = the body field) |
//! | UNAUTHENTICATED | 401 | `authentication_error` |
//! | PERMISSION_DENIED | 403 | `permission_error` |
//! | NOT_FOUND, FAILED_PRECONDITION `PACK_UNUSABLE` | 404 | `invalid_request_error` (`param` = `voice`) |
//! | RESOURCE_EXHAUSTED `BUDGET_EXHAUSTED` | 429 + `Retry-After` (until the reset), `code` `insufficient_quota` | `insufficient_quota` |
//! | RESOURCE_EXHAUSTED | 429 + `Retry-After` | `rate_limit_error` |
//! | FAILED_PRECONDITION (other), UNAVAILABLE, ABORTED | 503 (+ `Retry-After` when known) | `service_unavailable` |
//! | DEADLINE_EXCEEDED spent waiting for a slot (`SynthesisError::waited_for_slot`) | 429 + `Retry-After`, `code` `pool_full` | `rate_limit_error` |
//! | DEADLINE_EXCEEDED (other) | 504 | `timeout` |
//! | INTERNAL and the rest | 500 | `server_error` |
//!
//! `code` is the typed reason in lowercase (`pool_full`, `keys_exhausted`, …) when the error
//! has one. Messages are the gRPC messages with the field named as the body names it
//! (`text` → `input`) and an unknown pack pointing to this front's listing, and never carry a
//! key or a credential.

use axum::{
    Json,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::json;
use tonic::Code;
use voxpool_domain::contract::SynthesisReason;

use crate::error::{SynthesisError, not_found_text};

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

    /// The answer to a synthesis (or catalog) failure (module doc).
    pub fn of(error: &SynthesisError) -> Self {
        let code = error.code();
        let reason = error.reason();
        // An HTTP caller sends no deadline: a wait for a slot that used all of ours is the
        // pool being full, which an OpenAI client retries after Retry-After.
        let pool_full = code == Code::DeadlineExceeded && error.waited_for_slot();
        let retry_after_s = error
            .retry_after()
            .map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0));
        let pack_unusable = reason == Some(SynthesisReason::PackUnusable);
        let budget = reason == Some(SynthesisReason::BudgetExhausted);
        let (http, kind) = match code {
            Code::ResourceExhausted if budget => {
                (StatusCode::TOO_MANY_REQUESTS, "insufficient_quota")
            }
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
        let param = match (code, error.field()) {
            (_, Some(field)) => Some(body_field(field).to_owned()),
            (Code::NotFound, None) => Some("voice".to_owned()),
            (Code::FailedPrecondition, None) if pack_unusable => Some("voice".to_owned()),
            _ => None,
        };
        let code_name = if budget {
            Some("insufficient_quota".to_owned())
        } else if pool_full {
            Some(SynthesisReason::PoolFull.as_str().to_ascii_lowercase())
        } else if code == Code::NotFound {
            // The voice named no pack (or a pool this replica lacks): one code for HTTP.
            Some("voice_not_found".to_owned())
        } else {
            reason.map(|r| r.as_str().to_ascii_lowercase())
        };
        let code_name = code_name.or_else(|| match code {
            Code::InvalidArgument => Some("invalid_value".to_owned()),
            _ => None,
        });
        // A text too long for its own deadline is refused with no retry hint: waiting cannot
        // help, and the SDKs retry a 429 that names a time.
        let hopeless =
            reason == Some(SynthesisReason::DeadlineUnreachable) && retry_after_s.is_none();
        let retry_after_s = match http {
            StatusCode::TOO_MANY_REQUESTS if hopeless => None,
            // A client told "too many requests" needs a time: 1 s when the scheduler gave none.
            StatusCode::TOO_MANY_REQUESTS => Some(retry_after_s.unwrap_or(1).max(1)),
            StatusCode::SERVICE_UNAVAILABLE => retry_after_s.map(|s| s.max(1)),
            _ => None,
        };
        Self {
            status: http,
            message: message(error),
            kind,
            param,
            code: code_name,
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

/// `error`'s message for an HTTP caller: a field named as the body names it (an adapter's
/// refusal of the rate says that `speed` multiplies the pack's), an unknown pack pointing to
/// `GET /v1/audio/voices`; otherwise the gRPC message.
fn message(error: &SynthesisError) -> String {
    match error {
        SynthesisError::InvalidArgument { field, message } => {
            field_message(body_field(field), message)
        }
        SynthesisError::Param(p) => field_message(body_field(&p.param), &p.to_string()),
        SynthesisError::CatalogInvalid { message } => {
            format!("invalid {}: {message}", body_field("pack_id"))
        }
        // A `voice` such as "alloy" is an OpenAI voice name, not a pack id.
        SynthesisError::CatalogNotFound { pack_id, message } => not_found_text(
            pack_id,
            message,
            "voice is a voice pack id: GET /v1/audio/voices lists them",
        ),
        other => other.to_string(),
    }
}

/// `invalid <param>: <description>`, saying what `speed` is when it is at fault.
fn field_message(param: &str, description: &str) -> String {
    let mut message = format!("invalid {param}: {description}");
    if param == "speed" {
        message.push_str(" (speed multiplies the voice pack's rate)");
    }
    message
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
        if self.hopeless() {
            // OpenAI's SDKs obey this header before their own retry rules (a 429 would
            // otherwise be retried twice, each time refused the same way).
            response
                .headers_mut()
                .insert("x-should-retry", HeaderValue::from_static("false"));
        }
        response
    }
}

impl ApiError {
    /// A refusal no retry of the same request can turn: a text too long for its own
    /// deadline (no retry time, as nothing ahead of it is in the way).
    fn hopeless(&self) -> bool {
        self.code.as_deref() == Some("deadline_unreachable") && self.retry_after_s.is_none()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::adapters::ParamError;

    fn pool_full(retry_after: Option<Duration>) -> SynthesisError {
        SynthesisError::PoolFull {
            pool: "p".into(),
            message: "pool \"p\" is full".into(),
            retry_after,
            attempts: Vec::new(),
        }
    }

    fn deadline(pool: Option<&str>, in_call: bool) -> SynthesisError {
        SynthesisError::DeadlineExceeded {
            pool: pool.map(str::to_owned),
            budget_ms: 1_000,
            attempts: Vec::new(),
            in_call,
        }
    }

    fn unreachable(retry_after: Option<Duration>) -> SynthesisError {
        SynthesisError::DeadlineUnreachable {
            pool: "p".into(),
            characters: 9_000,
            estimate_ms: 60_000,
            deadline_ms: 10_000,
            backlog_characters: 0,
            retry_after,
            endangers_admitted: false,
        }
    }

    #[test]
    fn bad_input_is_400_naming_the_body_field() {
        let e = ApiError::of(&SynthesisError::invalid("text", "must contain something"));
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.param.as_deref(), Some("input"));
        assert_eq!(e.message, "invalid input: must contain something");
        assert_eq!(e.code.as_deref(), Some("invalid_value"));
        let e = ApiError::of(&SynthesisError::Param(ParamError {
            param: "params.rate".into(),
            value: "3.6".into(),
            provider: "minimax".into(),
            reason: "above 2".into(),
        }));
        assert_eq!(e.param.as_deref(), Some("speed"));
        assert_eq!(
            e.message,
            "invalid speed: minimax cannot apply params.rate = 3.6: above 2 (speed multiplies the voice pack's rate)"
        );
        let e = ApiError::of(&SynthesisError::CatalogInvalid {
            message: "must not be empty".into(),
        });
        assert_eq!(
            (e.param.as_deref(), e.message.as_str()),
            (Some("voice"), "invalid voice: must not be empty")
        );
    }

    #[test]
    fn a_full_pool_is_429_with_a_retry_time() {
        let e = ApiError::of(&pool_full(Some(Duration::from_millis(2_300))));
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(e.code.as_deref(), Some("pool_full"));
        assert_eq!(e.retry_after_s, Some(3));
        let e = ApiError::of(&pool_full(None));
        assert_eq!(e.retry_after_s, Some(1), "a 429 always says when");
        let e = ApiError::of(&deadline(Some("p"), false));
        assert_eq!(
            (e.status, e.code.as_deref(), e.retry_after_s),
            (StatusCode::TOO_MANY_REQUESTS, Some("pool_full"), Some(1)),
            "a whole deadline spent waiting for a slot is a full pool"
        );
    }

    #[test]
    fn unknown_or_disabled_voices_are_404_no_key_503_deadline_504() {
        let unknown = [
            SynthesisError::CatalogNotFound {
                pack_id: "alloy".into(),
                message: "voice pack \"alloy\" not found".into(),
            },
            SynthesisError::UnknownPool {
                tts_model_id: "x".into(),
                known: "p".into(),
            },
        ];
        for error in &unknown {
            let e = ApiError::of(error);
            assert_eq!(
                (e.status, e.param.as_deref(), e.code.as_deref()),
                (
                    StatusCode::NOT_FOUND,
                    Some("voice"),
                    Some("voice_not_found")
                )
            );
        }
        assert_eq!(
            ApiError::of(&unknown[0]).message,
            "voice pack \"alloy\" not found in the catalog: voice is a voice pack id: GET /v1/audio/voices lists them"
        );
        let disabled = ApiError::of(&SynthesisError::CatalogRefused {
            pack_id: "vp".into(),
            message: "disabled".into(),
        });
        assert_eq!(
            (disabled.status, disabled.param.as_deref()),
            (StatusCode::NOT_FOUND, Some("voice"))
        );
        let no_key = SynthesisError::NoCredentials {
            pool: "p".into(),
            problems: vec!["a/k: environment variable X is not set".into()],
        };
        assert_eq!(
            ApiError::of(&no_key).status,
            StatusCode::SERVICE_UNAVAILABLE
        );
        for late in [deadline(None, false), deadline(Some("p"), true)] {
            assert_eq!(ApiError::of(&late).status, StatusCode::GATEWAY_TIMEOUT);
        }
    }

    #[test]
    fn a_text_that_cannot_fit_its_own_deadline_is_a_429_without_retry_after() {
        let e = ApiError::of(&unreachable(None));
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(e.retry_after_s, None, "waiting cannot help: no Retry-After");
        let response = e.into_response();
        assert_eq!(response.headers()["x-should-retry"], "false");
        let behind = unreachable(Some(Duration::from_secs(4)));
        assert_eq!(ApiError::of(&behind).retry_after_s, Some(4));
        let response = ApiError::of(&behind).into_response();
        assert!(response.headers().get("x-should-retry").is_none());
    }

    #[test]
    fn a_stream_interrupted_keeps_its_causes_class_and_says_what_was_delivered() {
        let interrupted = SynthesisError::Interrupted {
            delivered_bytes: 10,
            delivered_messages: 1,
            complete_chunks: 0,
            chunks: 2,
            cause: Box::new(deadline(Some("p"), false)),
        };
        let e = ApiError::of(&interrupted);
        assert_eq!(
            (e.status, e.code.as_deref()),
            (StatusCode::TOO_MANY_REQUESTS, Some("pool_full"))
        );
        assert!(
            e.message.starts_with("stream interrupted after 10 bytes"),
            "{}",
            e.message
        );
    }
}
