//! The catalog's `CloneWork` as the worker uses it: `Claim` and `Report` with the admin token,
//! protobuf converted to and from [`Task`] and [`Outcome`] here and nowhere below.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tonic::{Code, service::interceptor::InterceptedService, transport::Channel};
use voxpool_domain::contract::CatalogReason;
use voxpool_proto::catalog::v1::{
    self as pb, clone_task::Work as PbWork, clone_work_client::CloneWorkClient,
    report_clone_work_request::Outcome as PbOutcome,
};
use voxpool_runtime::auth::ClientToken;

use super::{Outcome, Sample, Task, Work};

/// Longest a Claim or Report may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a call to the catalog did not work.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The report's lease token is no longer the step's (`CLONE_LEASE_LOST`) or its row is
    /// gone: the result is dropped.
    #[error("the step was handed on or is gone: {0}")]
    Stale(String),
    /// Anything else (the catalog away, refusing the token, …): logged, and retried later.
    #[error("{0}")]
    Failed(String),
}

/// A `CloneWork` client presenting the admin token (lazily connected).
#[derive(Clone, Debug)]
pub struct CloneWorkClientHandle {
    client: CloneWorkClient<InterceptedService<Channel, ClientToken>>,
    url: String,
}

impl CloneWorkClientHandle {
    /// A client for the catalog at `url` sending `token` (the admin token).
    pub fn connect_lazy(url: &str, token: ClientToken) -> Result<Self, String> {
        let channel = voxpool_runtime::limits::client_endpoint("--catalog", url)?
            .connect_timeout(Duration::from_secs(2))
            .connect_lazy();
        Ok(Self {
            client: CloneWorkClient::with_interceptor(channel, token),
            url: url.to_owned(),
        })
    }

    /// The catalog's URL, for messages.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Up to `max` due steps in `scopes`, leased to `worker` for `lease`.
    pub async fn claim(
        &self,
        worker: &str,
        scopes: &[String],
        max: u32,
        lease: Duration,
    ) -> Result<Vec<Task>, ClientError> {
        let mut req = tonic::Request::new(pb::ClaimCloneWorkRequest {
            worker: worker.to_owned(),
            scopes: scopes.to_vec(),
            max,
            lease_ms: u32::try_from(lease.as_millis()).unwrap_or(u32::MAX),
        });
        req.set_timeout(CALL_TIMEOUT);
        let answer = self
            .client
            .clone()
            .claim(req)
            .await
            .map_err(|s| self.failed(&s))?;
        Ok(answer
            .into_inner()
            .tasks
            .into_iter()
            .filter_map(task_of)
            .collect())
    }

    /// Reports `outcome` of `task`.
    pub async fn report(&self, task: &Task, outcome: &Outcome) -> Result<(), ClientError> {
        let mut req = tonic::Request::new(pb::ReportCloneWorkRequest {
            pack_id: task.pack_id.clone(),
            scope: task.scope.clone(),
            lease_token: task.lease_token.clone(),
            outcome: Some(outcome_to_pb(outcome)),
        });
        req.set_timeout(CALL_TIMEOUT);
        match self.client.clone().report(req).await {
            Ok(_) => Ok(()),
            Err(s)
                if CatalogReason::of(&s) == Some(CatalogReason::CloneLeaseLost)
                    || s.code() == Code::NotFound =>
            {
                Err(ClientError::Stale(escaped(&s)))
            }
            Err(s) => Err(self.failed(&s)),
        }
    }

    fn failed(&self, s: &tonic::Status) -> ClientError {
        ClientError::Failed(format!(
            "the catalog at {} answered {:?}: {}",
            self.url,
            s.code(),
            escaped(s)
        ))
    }
}

/// The status's message, escaped (it may carry text the catalog got from elsewhere).
fn escaped(s: &tonic::Status) -> String {
    voxpool_domain::untrusted::quote(s.message())
}

fn work_of(raw: i32) -> Option<Work> {
    Some(match PbWork::try_from(raw).ok()? {
        PbWork::Create => Work::Create,
        PbWork::Poll => Work::Poll,
        PbWork::Delete => Work::Delete,
        PbWork::Keepalive => Work::KeepAlive,
        PbWork::Import => Work::Import,
        PbWork::Unspecified => return None,
    })
}

fn time_of(ts: Option<&voxpool_proto::prost_types::Timestamp>) -> SystemTime {
    ts.and_then(|t| {
        let secs = u64::try_from(t.seconds).ok()?;
        let nanos = u32::try_from(t.nanos).ok()?;
        UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
    })
    .unwrap_or(UNIX_EPOCH)
}

fn timestamp(t: SystemTime) -> voxpool_proto::prost_types::Timestamp {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    voxpool_proto::prost_types::Timestamp {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// A task of the wire, `None` for a work this build does not know (left to its lease).
fn task_of(t: pb::CloneTask) -> Option<Task> {
    let work = work_of(t.work)?;
    Some(Task {
        work,
        lease_until: time_of(t.lease_until.as_ref()),
        vendor_voice_id: (!t.vendor_voice_id.is_empty()).then_some(t.vendor_voice_id),
        samples: t
            .samples
            .into_iter()
            .map(|s| Sample {
                digest: s.digest,
                content_type: s.content_type,
                transcript: s.transcript,
                language: s.language,
            })
            .collect(),
        pack_id: t.pack_id,
        scope: t.scope,
        attempt: t.attempt,
        lease_token: t.lease_token,
        provider: t.provider,
        model: t.model,
        target_model: t.target_model,
        pool: t.pool,
    })
}

fn ms(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

fn outcome_to_pb(outcome: &Outcome) -> PbOutcome {
    match outcome {
        Outcome::Training {
            vendor_voice_id,
            poll_after,
        } => PbOutcome::Training(pb::CloneTraining {
            vendor_voice_id: vendor_voice_id.clone(),
            poll_after_ms: ms(*poll_after),
        }),
        Outcome::Ready {
            vendor_voice_id,
            expires_at,
        } => PbOutcome::Ready(pb::CloneReady {
            vendor_voice_id: vendor_voice_id.clone(),
            expires_at: expires_at.map(timestamp),
        }),
        Outcome::Failed(error) => PbOutcome::Failed(pb::CloneFailure {
            error: error.clone(),
            reclaimed: false,
        }),
        Outcome::Retry { after, error } => PbOutcome::Retry(pb::CloneRetry {
            after_ms: ms(*after),
            error: error.clone(),
        }),
        Outcome::Deleted => PbOutcome::Deleted(pb::CloneDeleted {}),
        Outcome::Expired { error, reclaimed } => PbOutcome::Expired(pb::CloneFailure {
            error: error.clone(),
            reclaimed: *reclaimed,
        }),
        Outcome::Imported(voices) => PbOutcome::Imported(pb::CloneListing {
            voices: voices
                .iter()
                .map(|(id, name)| pb::ListedVendorVoice {
                    vendor_voice_id: id.clone(),
                    name: name.clone(),
                })
                .collect(),
        }),
    }
}
