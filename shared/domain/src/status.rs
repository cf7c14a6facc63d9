//! `tonic::Status` builders that attach `google.rpc` error details (AIP-193).
//!
//! Messages are lowercase, concrete and never carry secrets. Details are encoded with
//! `tonic-types`, so clients read them with `tonic_types::StatusExt::get_error_details`.

use std::{collections::HashMap, time::Duration};

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The `ErrorInfo.domain` voxpool uses.
pub const ERROR_DOMAIN: &str = "voxpool.dev";

/// INVALID_ARGUMENT naming `field` (proto field path, e.g. `lease_ttl_ms`) with a
/// `BadRequest.FieldViolation`. The message reads `invalid <field>: <description>`.
pub fn invalid_argument(field: &str, description: impl Into<String>) -> Status {
    let description = description.into();
    Status::with_error_details(
        Code::InvalidArgument,
        format!("invalid {field}: {description}"),
        ErrorDetails::with_bad_request_violation(field, description),
    )
}

/// NOT_FOUND for a resource of `resource_type` named `name`: `ResourceInfo`, and the
/// `ErrorInfo` every voxpool error carries (AIP-193) with the service's typed `reason` and
/// metadata `resource_type`, `resource_name`.
pub fn not_found(
    resource_type: &str,
    name: &str,
    reason: &str,
    message: impl Into<String>,
) -> Status {
    let mut details = ErrorDetails::new();
    details.set_resource_info(resource_type, name, "", "");
    details.set_error_info(
        reason,
        ERROR_DOMAIN,
        HashMap::from([
            ("resource_type".to_owned(), resource_type.to_owned()),
            ("resource_name".to_owned(), name.to_owned()),
        ]),
    );
    Status::with_error_details(Code::NotFound, message, details)
}

/// A status with `ErrorInfo { reason, domain: voxpool.dev, metadata }` and, when given,
/// `RetryInfo { retry_delay }`.
pub fn with_info(
    code: Code,
    message: impl Into<String>,
    reason: &str,
    metadata: HashMap<String, String>,
    retry_after: Option<Duration>,
) -> Status {
    let mut details = ErrorDetails::new();
    details.set_error_info(reason, ERROR_DOMAIN, metadata);
    if let Some(delay) = retry_after {
        details.set_retry_info(Some(delay));
    }
    Status::with_error_details(code, message, details)
}

/// The gRPC code name as the spec spells it (`INVALID_ARGUMENT`): metric attributes, item
/// errors.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_argument_names_the_field_in_message_and_details() {
        let s = invalid_argument("lease_ttl_ms", "must be > 0, got -1");
        assert_eq!(s.code(), Code::InvalidArgument);
        assert_eq!(s.message(), "invalid lease_ttl_ms: must be > 0, got -1");
        let details = s.get_error_details();
        let br = details.bad_request().expect("bad request detail");
        assert_eq!(br.field_violations[0].field, "lease_ttl_ms");
    }

    #[test]
    fn not_found_names_the_resource_and_carries_a_typed_reason() {
        let s = not_found("voxpool.dev/Pool", "p9", "POOL_NOT_FOUND", "no pool p9");
        assert_eq!((s.code(), s.message()), (Code::NotFound, "no pool p9"));
        let d = s.get_error_details();
        let resource = d.resource_info().expect("resource info");
        assert_eq!(
            (
                resource.resource_type.as_str(),
                resource.resource_name.as_str()
            ),
            ("voxpool.dev/Pool", "p9")
        );
        let info = d.error_info().expect("error info");
        assert_eq!(
            (info.reason.as_str(), info.domain.as_str()),
            ("POOL_NOT_FOUND", ERROR_DOMAIN)
        );
        assert_eq!(info.metadata["resource_name"], "p9");
        assert_eq!(info.metadata["resource_type"], "voxpool.dev/Pool");
    }

    #[test]
    fn with_info_carries_reason_metadata_and_retry() {
        let md = HashMap::from([("pool".to_owned(), "p".to_owned())]);
        let s = with_info(
            Code::ResourceExhausted,
            "full",
            "POOL_FULL",
            md,
            Some(Duration::from_millis(250)),
        );
        let d = s.get_error_details();
        assert_eq!(d.error_info().unwrap().reason, "POOL_FULL");
        assert_eq!(d.error_info().unwrap().metadata["pool"], "p");
        assert_eq!(
            d.retry_info().unwrap().retry_delay,
            Some(Duration::from_millis(250))
        );
    }
}
