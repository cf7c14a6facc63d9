//! The catalog as synthesis uses it: `FreezeSnapshot(pack_id)` for requests that name a pack.
//! Catalog NOT_FOUND / FAILED_PRECONDITION / INVALID_ARGUMENT pass through with context; a
//! catalog that cannot be reached is UNAVAILABLE naming its URL.

use std::time::Duration;

use tonic::{Code, service::interceptor::InterceptedService, transport::Channel};
use voxpool_proto::catalog::v1::{FreezeSnapshotRequest, voice_catalog_client::VoiceCatalogClient};
use voxpool_shared::{snapshot::Snapshot, telemetry::TraceContextInterceptor};

use crate::error::SynthesisError;

/// The catalog's gRPC client (lazily connected) and its URL for messages.
#[derive(Clone, Debug)]
pub struct Catalog {
    client: VoiceCatalogClient<InterceptedService<Channel, TraceContextInterceptor>>,
    url: String,
}

impl Catalog {
    /// A client for `url` that connects on first use.
    pub fn connect_lazy(url: &str) -> Result<Self, String> {
        let channel = voxpool_shared::limits::client_endpoint("--catalog", url)?
            .connect_timeout(Duration::from_secs(2))
            .connect_lazy();
        Ok(Self {
            client: VoiceCatalogClient::with_interceptor(channel, TraceContextInterceptor),
            url: url.to_owned(),
        })
    }

    /// Freezes `pack_id`'s current values, within `timeout`.
    pub async fn freeze(
        &self,
        pack_id: &str,
        timeout: Duration,
    ) -> Result<Snapshot, SynthesisError> {
        let mut req = tonic::Request::new(FreezeSnapshotRequest {
            pack_id: pack_id.to_owned(),
        });
        req.set_timeout(timeout);
        let mut client = self.client.clone();
        let url = self.url.clone();
        let answer = tokio::time::timeout(timeout, client.freeze_snapshot(req))
            .await
            .map_err(|_| SynthesisError::CatalogUnavailable {
                url: url.clone(),
                message: format!("no answer within {}ms", timeout.as_millis()),
            })?;
        let pb = answer.map_err(|s| {
            let message = s.message().to_owned();
            match s.code() {
                Code::NotFound => SynthesisError::CatalogNotFound {
                    pack_id: pack_id.to_owned(),
                    message,
                },
                Code::FailedPrecondition => SynthesisError::CatalogRefused {
                    pack_id: pack_id.to_owned(),
                    message,
                },
                Code::InvalidArgument => SynthesisError::CatalogInvalid { message },
                Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled => {
                    SynthesisError::CatalogUnavailable {
                        url: url.clone(),
                        message,
                    }
                }
                code => SynthesisError::CatalogFailed {
                    url: url.clone(),
                    message: format!("{code:?}: {message}"),
                },
            }
        })?;
        let snapshot =
            Snapshot::from_pb(&pb.into_inner()).map_err(|e| SynthesisError::CatalogFailed {
                url: url.clone(),
                message: format!("returned an unusable snapshot: {e}"),
            })?;
        Ok(snapshot)
    }
}
