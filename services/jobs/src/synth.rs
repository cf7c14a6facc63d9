//! Calls Synthesis for one item, like any client: over the `--synthesis` endpoints (balanced,
//! health-checked: `voxpool_runtime::endpoints`), with the job's class and tenant, so leases,
//! failover, tenant rounds and the audio cache apply to job items unchanged.

use std::{collections::HashMap, time::Duration};

use tonic::{Code, Status, service::interceptor::InterceptedService, transport::Channel};
use tonic_types::StatusExt as _;
use voxpool_domain::contract::{AuthReason, Retry, SynthesisReason, retry_of};
use voxpool_proto::{
    jobs::v1::{JobItemSpec, job_item_spec},
    synthesis::v1::{
        ListPoolsRequest, SynthesizeRequest, SynthesizeResponse, synthesis_client::SynthesisClient,
        synthesize_request,
    },
};
use voxpool_runtime::{auth::ClientToken, endpoints::Endpoints};

use crate::model::ItemError;

/// What every item of one job is synthesized with.
#[derive(Clone, Debug)]
pub struct JobParams {
    /// Job id (the request ids are `<job>/<item>`).
    pub job: String,
    /// `voxpool.synthesis.v1.AudioFormat` number.
    pub format: i32,
    /// Sample rate, Hz (0 = the vendor's).
    pub sample_rate_hz: i32,
    /// `voxpool.scheduler.v1.Priority` number.
    pub priority: i32,
    /// Tenant.
    pub tenant: String,
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

    /// Synthesizes one item.
    pub async fn speak(
        &self,
        job: &JobParams,
        id: &str,
        spec: &JobItemSpec,
    ) -> Result<SynthesizeResponse, Status> {
        let voice = match spec.voice.clone() {
            Some(job_item_spec::Voice::PackId(p)) => synthesize_request::Voice::PackId(p),
            Some(job_item_spec::Voice::Snapshot(s)) => synthesize_request::Voice::Snapshot(s),
            Some(job_item_spec::Voice::SnapshotJson(j)) => {
                synthesize_request::Voice::SnapshotJson(j)
            }
            None => return Err(Status::invalid_argument("the item has no voice")),
        };
        let mut request = tonic::Request::new(SynthesizeRequest {
            voice: Some(voice),
            text: spec.text.clone(),
            format: job.format,
            sample_rate_hz: job.sample_rate_hz,
            request_id: format!("{}/{id}", job.job),
            priority: job.priority,
            tenant: job.tenant.clone(),
            emotion: spec.emotion.clone(),
            seed: Some(
                spec.seed
                    .unwrap_or_else(|| voxpool_domain::item::item_seed(id)),
            ),
            ..Default::default()
        });
        request.set_timeout(self.timeout);
        let answer = self.client.clone().synthesize(request).await;
        if let Err(status) = &answer
            && status.code() == Code::Unavailable
        {
            self.endpoints.kick();
        }
        answer.map(tonic::Response::into_inner)
    }

    /// Whether synthesis answers and accepts this replica's worker token: one `ListPools`
    /// call. Errors: its status when synthesis is [`unreachable`] or [`refuses_replica`]
    /// (any other answer means both are fine).
    pub async fn check_access(&self) -> Result<(), Status> {
        let mut request = tonic::Request::new(ListPoolsRequest::default());
        request.set_timeout(Duration::from_secs(5));
        match self.client.clone().list_pools(request).await {
            Err(status) if unreachable(&status) => {
                self.endpoints.kick();
                Err(status)
            }
            Err(status) if refuses_replica(&status) => Err(status),
            _ => Ok(()),
        }
    }
}

/// Whether `status` refuses this replica itself (its worker token: missing, unknown, or not
/// for synthesis), not the item: no item can succeed here until an operator fixes it. A worker
/// token bound to tenants (`TENANT_NOT_ALLOWED`) refuses only the items of other tenants: those
/// fail with that reason, naming the token and the tenant, and the replica keeps working.
pub fn refuses_replica(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unauthenticated | Code::PermissionDenied
    ) && AuthReason::of(status) != Some(AuthReason::TenantNotAllowed)
}

/// Whether another try of a call that failed with `status` may succeed (the one rule every
/// synthesis client applies: `voxpool_domain::contract::retry_of`).
pub fn is_transient(status: &Status) -> bool {
    retry_of::<SynthesisReason>(status) == Retry::Again
}

/// Whether `status` says synthesis was not reached at all (UNAVAILABLE without the
/// `ErrorInfo` every synthesis answer carries: a refused connection, no endpoint up). Such a
/// call fails no item: the item goes back to the queue and the replica's workers pause until
/// synthesis answers again (`crate::worker`), so an outage stalls jobs instead of failing them
/// and a replica that alone cannot reach synthesis leaves its items to the others.
pub fn unreachable(status: &Status) -> bool {
    status.code() == Code::Unavailable && status.get_details_error_info().is_none()
}

/// The server's `RetryInfo` delay, if it sent one.
pub fn retry_after(status: &Status) -> Option<Duration> {
    status.get_details_retry_info().and_then(|r| r.retry_delay)
}

/// `status` as an item's failure: code, typed reason and metadata as Synthesize answered
/// (NOT_FOUND's name what is missing as metadata `resource_type`, `resource_name`).
pub fn item_error(status: &Status) -> ItemError {
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

    use super::{refuses_replica, unreachable};

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
}
