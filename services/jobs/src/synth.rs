//! Calls Synthesis for one item, like any client: over the `--synthesis` endpoints (balanced,
//! health-checked: `voxpool_runtime::endpoints`), with the job's class and tenant, so leases,
//! failover, tenant rounds and the audio cache apply to job items unchanged.

use std::{collections::HashMap, time::Duration};

use prost::Message as _;
use tonic::{Code, Status, service::interceptor::InterceptedService, transport::Channel};
use tonic_types::StatusExt as _;
use voxpool_domain::contract::{AuthReason, Retry, SynthesisReason, retry_of};
use voxpool_proto::{
    jobs::v1::{JobItemSpec, job_item_spec},
    scheduler::v1::Outcome,
    synthesis::v1::{
        ListPoolsRequest, SynthesizeRequest, SynthesizeResponse, synthesis_client::SynthesisClient,
        synthesize_request,
    },
};
use voxpool_runtime::{auth::ClientToken, endpoints::Endpoints};

use crate::{
    convert::{
        enums::{format_pb, priority_pb},
        metering,
    },
    model::{Format, ItemError, Priority},
    usage::{BudgetWait, Usage},
};

/// The gRPC metadata that tells synthesis a call speaks a job's item (its usage records
/// such calls with path `job`).
const ORIGIN: (&str, &str) = ("voxpool-origin", "job");

/// What every item of one job is synthesized with.
#[derive(Clone, Debug)]
pub struct JobParams {
    /// Job id (the request ids are `<job>/<item>`).
    pub job: String,
    /// The audio format.
    pub format: Format,
    /// Sample rate, Hz (0 = the vendor's).
    pub sample_rate_hz: i32,
    /// The class its calls run in.
    pub priority: Priority,
    /// Tenant.
    pub tenant: String,
}

/// An item's spec as the store keeps it (encoded at the edge): read only here, so the workers
/// see its text and nothing of the wire.
#[derive(Clone, Debug)]
pub struct ItemSpec(JobItemSpec);

impl ItemSpec {
    /// The spec of the stored bytes. Errors: why they cannot be read.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        JobItemSpec::decode(bytes)
            .map(Self)
            .map_err(|e| e.to_string())
    }

    /// The text to speak.
    pub fn text(&self) -> &str {
        &self.0.text
    }

    /// The same item with `text` instead (one part of a split item).
    pub fn with_text(&self, text: &str) -> Self {
        Self(JobItemSpec {
            text: text.to_owned(),
            ..self.0.clone()
        })
    }
}

/// What one Synthesize call (or the joined calls of a split item) answered.
#[derive(Clone, Debug, Default)]
pub struct Spoken {
    /// The audio.
    pub audio: Vec<u8>,
    /// Chunks served from the audio cache.
    pub cached: u64,
    /// Chunks a vendor spoke (successful attempts).
    pub spoken: u64,
    /// The key that produced the audio (the last part's).
    pub key_id: String,
    /// The reference clip spoken with (the first part's).
    pub reference_digest: String,
    /// What the call spent (the parts' added up); `None` when synthesis reported none.
    pub usage: Option<Usage>,
}

impl Spoken {
    /// Chunks in all (at least one), as `voxpool_domain::contract::chunks_of` counts them.
    pub fn chunks(&self) -> u64 {
        (self.cached + self.spoken).max(1)
    }

    fn of(response: SynthesizeResponse) -> Self {
        let spoken = response
            .attempts
            .iter()
            .filter(|a| a.outcome == Outcome::Success as i32)
            .count() as u64;
        Self {
            cached: u64::try_from(response.cached_chunks).unwrap_or(0),
            spoken,
            audio: response.audio,
            key_id: response.key_id,
            reference_digest: response.reference_digest,
            usage: response.usage.as_ref().map(metering::usage),
        }
    }
}

/// A call's failure that is this replica's, not the item's: no item can succeed here until it
/// clears, so none is failed for it.
#[derive(Clone, Debug)]
pub enum ReplicaFault {
    /// Synthesis was not reached at all (UNAVAILABLE without the `ErrorInfo` every synthesis
    /// answer carries: a refused connection, no endpoint up). The item goes back to the queue
    /// and the replica's workers pause until synthesis answers again (`crate::worker`), so an
    /// outage stalls jobs instead of failing them and a replica that alone cannot reach
    /// synthesis leaves its items to the others.
    Unreachable(String),
    /// Synthesis refuses this replica's worker token (missing, unknown, or not for
    /// synthesis): an operator must fix it. A worker token bound to tenants
    /// (`TENANT_NOT_ALLOWED`) refuses only the items of other tenants: those fail with that
    /// reason and the replica keeps working.
    TokenRefused {
        /// UNAUTHENTICATED or PERMISSION_DENIED.
        code: Code,
        /// Synthesis's message.
        message: String,
    },
}

/// Why a Synthesize call gave no audio, as the workers act on it.
#[derive(Clone, Debug)]
pub enum SynthError {
    /// This replica's fault, not the item's.
    Replica(ReplicaFault),
    /// A budget covering the job's tenant is spent (`BUDGET_EXHAUSTED`): not the item's
    /// failure either; it waits until the budget resets or is raised (`crate::worker`). The
    /// wait as synthesis named it (its `next_try_ms` is left to the worker).
    Budget(BudgetWait),
    /// The item's own failure, as synthesis answered it (or as this worker found it).
    Failed {
        /// The gRPC code (metrics).
        code: Code,
        /// Code, typed reason, message and metadata, as the item records them.
        error: ItemError,
        /// Whether another try may succeed (the one rule every synthesis client applies).
        transient: bool,
        /// The server's `RetryInfo` delay, if it sent one.
        retry_after: Option<Duration>,
        /// `RESPONSE_TOO_LARGE`'s audio size and synthesis's limit (its metadata `bytes`,
        /// `limit`): the item may be spoken in parts.
        too_large: Option<(usize, usize)>,
    },
}

impl SynthError {
    /// A failure of this worker's own making (the parts of an item that cannot be joined):
    /// the item fails INTERNAL with `message`, no reason, not retried.
    pub fn internal(message: String) -> Self {
        Self::Failed {
            code: Code::Internal,
            error: ItemError {
                code: voxpool_domain::status::code_name(Code::Internal).to_owned(),
                message,
                ..ItemError::default()
            },
            transient: false,
            retry_after: None,
            too_large: None,
        }
    }

    /// The gRPC code of the answer (metrics).
    pub fn code(&self) -> Code {
        match self {
            Self::Replica(ReplicaFault::Unreachable(_)) => Code::Unavailable,
            Self::Budget(_) => Code::ResourceExhausted,
            Self::Replica(ReplicaFault::TokenRefused { code, .. }) | Self::Failed { code, .. } => {
                *code
            }
        }
    }

    fn of(status: &Status) -> Self {
        if let Some(fault) = ReplicaFault::of(status) {
            return Self::Replica(fault);
        }
        if let Some(wait) = budget_wait(status) {
            return Self::Budget(wait);
        }
        Self::Failed {
            code: status.code(),
            error: item_error(status),
            transient: retry_of::<SynthesisReason>(status) == Retry::Again,
            retry_after: status.get_details_retry_info().and_then(|r| r.retry_delay),
            too_large: too_large(status),
        }
    }
}

impl ReplicaFault {
    /// The fault `status` shows, if it is this replica's.
    fn of(status: &Status) -> Option<Self> {
        if unreachable(status) {
            Some(Self::Unreachable(status.message().to_owned()))
        } else if refuses_replica(status) {
            Some(Self::TokenRefused {
                code: status.code(),
                message: status.message().to_owned(),
            })
        } else {
            None
        }
    }
}

/// The synthesis client (module doc). Cheap to clone.
#[derive(Clone)]
pub struct Synthesizer {
    client: SynthesisClient<InterceptedService<Channel, ClientToken>>,
    endpoints: Endpoints,
    timeout: Duration,
}

impl Synthesizer {
    /// Balances over `spec` (`URL[,URL...]`, the `--synthesis` flag), presenting `token`;
    /// each call may take `timeout`. Errors: a malformed URL list.
    pub fn new(
        spec: &str,
        token: ClientToken,
        timeout: Duration,
        max_message_bytes: usize,
    ) -> Result<Self, String> {
        let endpoints = Endpoints::start("--synthesis", spec)?;
        let client = SynthesisClient::with_interceptor(endpoints.channel.clone(), token)
            .max_decoding_message_size(max_message_bytes)
            .max_encoding_message_size(max_message_bytes);
        Ok(Self {
            client,
            endpoints,
            timeout,
        })
    }

    /// Synthesizes one item (or one part of it) under request id `<job>/<id>`.
    pub async fn speak(
        &self,
        job: &JobParams,
        id: &str,
        spec: &ItemSpec,
    ) -> Result<Spoken, SynthError> {
        let spec = &spec.0;
        let voice = match spec.voice.clone() {
            Some(job_item_spec::Voice::PackId(p)) => synthesize_request::Voice::PackId(p),
            Some(job_item_spec::Voice::Snapshot(s)) => synthesize_request::Voice::Snapshot(s),
            Some(job_item_spec::Voice::SnapshotJson(j)) => {
                synthesize_request::Voice::SnapshotJson(j)
            }
            None => {
                return Err(SynthError::of(&Status::invalid_argument(
                    "the item has no voice",
                )));
            }
        };
        let mut request = tonic::Request::new(SynthesizeRequest {
            voice: Some(voice),
            text: spec.text.clone(),
            format: format_pb(job.format) as i32,
            sample_rate_hz: job.sample_rate_hz,
            request_id: format!("{}/{id}", job.job),
            priority: priority_pb(job.priority) as i32,
            tenant: job.tenant.clone(),
            emotion: spec.emotion.clone(),
            seed: Some(
                spec.seed
                    .unwrap_or_else(|| voxpool_domain::item::item_seed(id)),
            ),
            ..Default::default()
        });
        request.set_timeout(self.timeout);
        request.metadata_mut().insert(
            ORIGIN.0,
            tonic::metadata::MetadataValue::from_static(ORIGIN.1),
        );
        match self.client.clone().synthesize(request).await {
            Ok(response) => Ok(Spoken::of(response.into_inner())),
            Err(status) => {
                if status.code() == Code::Unavailable {
                    self.endpoints.kick();
                }
                Err(SynthError::of(&status))
            }
        }
    }

    /// Whether synthesis answers and accepts this replica's worker token: one `ListPools`
    /// call. Errors: the replica's fault (any other answer means both are fine).
    pub async fn check_access(&self) -> Result<(), ReplicaFault> {
        let mut request = tonic::Request::new(ListPoolsRequest::default());
        request.set_timeout(Duration::from_secs(5));
        let Err(status) = self.client.clone().list_pools(request).await else {
            return Ok(());
        };
        match ReplicaFault::of(&status) {
            Some(fault @ ReplicaFault::Unreachable(_)) => {
                self.endpoints.kick();
                Err(fault)
            }
            Some(fault) => Err(fault),
            None => Ok(()),
        }
    }
}

/// Whether `status` refuses this replica itself ([`ReplicaFault::TokenRefused`]).
fn refuses_replica(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unauthenticated | Code::PermissionDenied
    ) && AuthReason::of(status) != Some(AuthReason::TenantNotAllowed)
}

/// Whether `status` says synthesis was not reached at all ([`ReplicaFault::Unreachable`]).
fn unreachable(status: &Status) -> bool {
    status.code() == Code::Unavailable && status.get_details_error_info().is_none()
}

/// The wait a `BUDGET_EXHAUSTED` answer names (its `ErrorInfo` metadata `budget`, `subject`,
/// `resets_at_ms`), read from the typed reason, never from the message.
fn budget_wait(status: &Status) -> Option<BudgetWait> {
    if SynthesisReason::of(status) != Some(SynthesisReason::BudgetExhausted) {
        return None;
    }
    let info = status.get_details_error_info()?;
    let text = |k: &str| info.metadata.get(k).cloned().unwrap_or_default();
    Some(BudgetWait {
        budget: text("budget"),
        subject: text("subject"),
        resets_at_ms: text("resets_at_ms").parse().unwrap_or(0),
        next_try_ms: 0,
        message: status.message().to_owned(),
    })
}

/// The audio size and the limit of a `RESPONSE_TOO_LARGE` answer.
fn too_large(status: &Status) -> Option<(usize, usize)> {
    if SynthesisReason::of(status) != Some(SynthesisReason::ResponseTooLarge) {
        return None;
    }
    let details = status.get_error_details();
    let info = details.error_info()?;
    let number = |k: &str| info.metadata.get(k).and_then(|v| v.parse::<usize>().ok());
    Some((number("bytes")?, number("limit")?))
}

/// `status` as an item's failure: code, typed reason and metadata as Synthesize answered
/// (NOT_FOUND's name what is missing as metadata `resource_type`, `resource_name`).
fn item_error(status: &Status) -> ItemError {
    let (reason, metadata) = status.get_details_error_info().map_or_else(
        || (String::new(), HashMap::new()),
        |info| (info.reason, info.metadata),
    );
    ItemError {
        code: voxpool_domain::status::code_name(status.code()).to_owned(),
        reason,
        message: status.message().to_owned(),
        metadata,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use tonic::{Code, Status};

    use super::{ReplicaFault, SynthError, refuses_replica, unreachable};

    #[test]
    fn only_an_unavailable_without_error_info_is_synthesis_unreachable() {
        assert!(unreachable(&Status::unavailable("tcp connect error")));
        let answered = voxpool_domain::status::with_info(
            Code::Unavailable,
            "every key of pool p is cooling down",
            "KEYS_EXHAUSTED",
            HashMap::new(),
            None,
        );
        assert!(
            !unreachable(&answered),
            "synthesis answered: a counted attempt"
        );
        assert!(!unreachable(&Status::deadline_exceeded("slow")));
    }

    #[test]
    fn a_refused_token_refuses_the_replica_a_foreign_tenant_only_the_item() {
        let info = |code, reason: &str| {
            voxpool_domain::status::with_info(code, "refused", reason, HashMap::new(), None)
        };
        assert!(refuses_replica(&info(
            Code::Unauthenticated,
            "CLIENT_TOKEN_REJECTED"
        )));
        assert!(refuses_replica(&Status::permission_denied(
            "no reason given"
        )));
        assert!(!refuses_replica(&info(
            Code::PermissionDenied,
            "TENANT_NOT_ALLOWED"
        )));
    }

    #[test]
    fn an_answer_is_the_replicas_fault_or_the_items_failure_with_its_retry_and_size() {
        assert!(matches!(
            SynthError::of(&Status::unavailable("tcp connect error")),
            SynthError::Replica(ReplicaFault::Unreachable(_))
        ));
        assert!(matches!(
            SynthError::of(&Status::unauthenticated("who are you")),
            SynthError::Replica(ReplicaFault::TokenRefused {
                code: Code::Unauthenticated,
                ..
            })
        ));
        let too_large = voxpool_domain::status::with_info(
            Code::ResourceExhausted,
            "audio over the limit",
            "RESPONSE_TOO_LARGE",
            HashMap::from([
                ("bytes".into(), "300".into()),
                ("limit".into(), "100".into()),
            ]),
            None,
        );
        let SynthError::Failed {
            error,
            transient,
            too_large,
            code,
            ..
        } = SynthError::of(&too_large)
        else {
            panic!("the item's failure");
        };
        assert_eq!(
            (code, transient, too_large),
            (Code::ResourceExhausted, false, Some((300, 100)))
        );
        assert_eq!(
            (error.code.as_str(), error.reason.as_str()),
            ("RESOURCE_EXHAUSTED", "RESPONSE_TOO_LARGE")
        );
        let spent = voxpool_domain::status::with_info(
            Code::ResourceExhausted,
            "budget team-a-daily is spent",
            "BUDGET_EXHAUSTED",
            HashMap::from([
                ("budget".into(), "team-a-daily".into()),
                ("subject".into(), "tenant:team-a".into()),
                ("used".into(), "1000".into()),
                ("limit".into(), "1000".into()),
                ("resets_at_ms".into(), "1700000000000".into()),
            ]),
            Some(std::time::Duration::from_secs(60)),
        );
        let SynthError::Budget(wait) = SynthError::of(&spent) else {
            panic!("a spent budget is no failure of the item");
        };
        assert_eq!(
            (
                wait.budget.as_str(),
                wait.subject.as_str(),
                wait.resets_at_ms
            ),
            ("team-a-daily", "tenant:team-a", 1_700_000_000_000)
        );
        let busy = voxpool_domain::status::with_info(
            Code::ResourceExhausted,
            "pool full",
            "POOL_FULL",
            HashMap::new(),
            Some(std::time::Duration::from_millis(250)),
        );
        let SynthError::Failed {
            transient,
            retry_after,
            ..
        } = SynthError::of(&busy)
        else {
            panic!("the item's failure");
        };
        assert_eq!(
            (transient, retry_after),
            (true, Some(std::time::Duration::from_millis(250)))
        );
    }
}
