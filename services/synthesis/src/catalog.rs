//! The catalog as synthesis uses it: `FreezeSnapshot(pack_id)` for requests that name a pack,
//! and the market listing (`ListVoicePacks`, enabled packs) for the HTTP front's voice list.
//! Catalog NOT_FOUND / FAILED_PRECONDITION / INVALID_ARGUMENT pass through with context; a
//! catalog that cannot be reached is UNAVAILABLE naming its URL. Answers of clone calls map by
//! their typed reason first: only PACK_NOT_FOUND is a pack not found. Managed voice clones (which
//! clone is READY in which scope, cloning on need, a clone gone or used) are read and written
//! through the catalog's admin RPCs with the deployment's admin token: [`clones`].

pub mod clones;

use std::time::Duration;

use tonic::{Code, Status, service::interceptor::InterceptedService, transport::Channel};
use voxpool_domain::{
    contract::{CatalogReason, Reason as _, Retry, is_transport},
    secret::Secret,
    snapshot::Snapshot,
};
use voxpool_proto::catalog::v1::{
    FreezeSnapshotRequest, ListVoicePacksRequest, clone_work_client::CloneWorkClient,
    voice_catalog_admin_client::VoiceCatalogAdminClient, voice_catalog_client::VoiceCatalogClient,
};
use voxpool_runtime::telemetry::TraceContextInterceptor;

use crate::error::SynthesisError;

/// Most packs [`Catalog::market`] reads (100 pages of 100).
pub const MAX_MARKET_PACKS: usize = 10_000;

/// One enabled pack of the market listing, as the HTTP front shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct MarketPack {
    /// Pack id (what a request names as its voice).
    pub id: String,
    /// Display name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Provider id.
    pub provider: String,
    /// The pool (tts model id) the pack pins.
    pub tts_model_id: String,
    /// Tier name (`LITE`, `STANDARD`, `PRO`, `PREMIUM`).
    pub tier: String,
    /// BCP 47 locales.
    pub locales: Vec<String>,
}

/// The catalog's gRPC client (lazily connected) and its URL for messages.
#[derive(Clone, Debug)]
pub struct Catalog {
    client: VoiceCatalogClient<InterceptedService<Channel, TraceContextInterceptor>>,
    admin: VoiceCatalogAdminClient<InterceptedService<Channel, TraceContextInterceptor>>,
    work: CloneWorkClient<InterceptedService<Channel, TraceContextInterceptor>>,
    health: tonic_health::pb::health_client::HealthClient<Channel>,
    url: String,
    /// What this replica knows of managed clones ([`clones::CloneBook`]).
    book: std::sync::Arc<clones::CloneBook>,
}

impl Catalog {
    /// A client for `url` that connects on first use.
    pub fn connect_lazy(url: &str) -> Result<Self, String> {
        let channel = voxpool_runtime::limits::client_endpoint("--catalog", url)?
            .connect_timeout(Duration::from_secs(2))
            .connect_lazy();
        Ok(Self {
            client: VoiceCatalogClient::with_interceptor(channel.clone(), TraceContextInterceptor),
            admin: VoiceCatalogAdminClient::with_interceptor(
                channel.clone(),
                TraceContextInterceptor,
            ),
            work: CloneWorkClient::with_interceptor(channel.clone(), TraceContextInterceptor),
            health: tonic_health::pb::health_client::HealthClient::new(channel),
            url: url.to_owned(),
            book: std::sync::Arc::default(),
        })
    }

    /// The catalog's URL, for messages.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// True when the catalog answers its health check with SERVING within `timeout`.
    pub async fn is_serving(&self, timeout: Duration) -> bool {
        let mut health = self.health.clone();
        let check = health.check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        });
        matches!(
            tokio::time::timeout(timeout, check).await,
            Ok(Ok(r)) if r.get_ref().status == tonic_health::pb::health_check_response::ServingStatus::Serving as i32
        )
    }

    /// Every enabled pack (the market listing), in the catalog's order, within `timeout` for
    /// all pages; at most [`MAX_MARKET_PACKS`]. Errors: the catalog unreachable or failing
    /// (UNAVAILABLE naming its URL).
    pub async fn market(&self, timeout: Duration) -> Result<Vec<MarketPack>, SynthesisError> {
        let url = self.url.clone();
        let unavailable = |message: String| SynthesisError::CatalogUnavailable {
            url: url.clone(),
            message,
        };
        let read = async {
            let mut packs = Vec::new();
            let mut page_token = String::new();
            loop {
                let mut client = self.client.clone();
                let page = client
                    .list_voice_packs(ListVoicePacksRequest {
                        page_size: 100,
                        page_token: page_token.clone(),
                        filter: String::new(),
                    })
                    .await
                    .map_err(|s| unavailable(format!("{:?}: {}", s.code(), s.message())))?
                    .into_inner();
                packs.extend(page.voice_packs.into_iter().filter(|p| p.enabled).map(|p| {
                    MarketPack {
                        tier: voxpool_proto::catalog::v1::Tier::try_from(p.tier)
                            .map_or("TIER_UNSPECIFIED", |t| t.as_str_name())
                            .to_owned(),
                        id: p.id,
                        name: p.display_name,
                        description: p.description,
                        provider: p.provider,
                        tts_model_id: p.tts_model_id,
                        locales: p.locales,
                    }
                }));
                if page.next_page_token.is_empty() || packs.len() >= MAX_MARKET_PACKS {
                    packs.truncate(MAX_MARKET_PACKS);
                    return Ok(packs);
                }
                page_token = page.next_page_token;
            }
        };
        tokio::time::timeout(timeout, read)
            .await
            .map_err(|_| unavailable(format!("no answer within {}ms", timeout.as_millis())))?
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
            // The catalog's typed reason decides first; the code only where it sent none.
            match (CatalogReason::of(&s), s.code()) {
                (Some(reason), _) if reason.retry() == Retry::Again => {
                    SynthesisError::CatalogUnavailable {
                        url: url.clone(),
                        message,
                    }
                }
                (_, Code::NotFound) => SynthesisError::CatalogNotFound {
                    pack_id: pack_id.to_owned(),
                    message,
                },
                (Some(CatalogReason::PackDisabled), _) | (_, Code::FailedPrecondition) => {
                    SynthesisError::CatalogRefused {
                        pack_id: pack_id.to_owned(),
                        message,
                    }
                }
                (_, Code::InvalidArgument) => SynthesisError::CatalogInvalid { message },
                // A connection that broke under the call (the catalog died mid-request) comes
                // as UNKNOWN "transport error": the catalog is away, not failing.
                (_, code)
                    if is_transport(&s)
                        || matches!(
                            code,
                            Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled
                        ) =>
                {
                    SynthesisError::CatalogUnavailable {
                        url: url.clone(),
                        message,
                    }
                }
                (_, code) => SynthesisError::CatalogFailed {
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

/// Answers of the catalog's clone RPCs ([`clones`]) as synthesis errors.
impl Catalog {
    /// A catalog answer to a clone call, as a synthesis error.
    fn clone_refusal(&self, pack_id: &str, s: &Status) -> SynthesisError {
        // The catalog's own words, escaped: whole enough to say what to do (which scope, its
        // slots, when to retry).
        let message = voxpool_domain::untrusted::quote_within(s.message(), 1024);
        let url = self.url.clone();
        let scope = tonic_types::StatusExt::get_error_details(s)
            .error_info()
            .and_then(|i| i.metadata.get("scope").cloned())
            .unwrap_or_default();
        match (CatalogReason::of(s), s.code()) {
            (Some(reason), _) if reason.retry() == Retry::Again => {
                SynthesisError::CatalogUnavailable { url, message }
            }
            // Only the pack itself missing is PACK_NOT_FOUND: a clone call's other NOT_FOUND
            // (CLONE_NOT_FOUND: no clone row in the scope) says nothing of the pack.
            (Some(CatalogReason::PackNotFound), _) => SynthesisError::CatalogNotFound {
                pack_id: pack_id.to_owned(),
                message,
            },
            (_, Code::FailedPrecondition | Code::ResourceExhausted | Code::InvalidArgument) => {
                SynthesisError::CloneFailed {
                    pack_id: pack_id.to_owned(),
                    scope,
                    message,
                }
            }
            (_, Code::Unauthenticated | Code::PermissionDenied) => SynthesisError::CloneFailed {
                pack_id: pack_id.to_owned(),
                scope,
                message: format!(
                    "the catalog refused this replica's admin token ({message}): synthesis and \
                     the catalog must share VOXPOOL_ADMIN_TOKEN"
                ),
            },
            (_, code)
                if is_transport(s)
                    || matches!(
                        code,
                        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled
                    ) =>
            {
                SynthesisError::CatalogUnavailable { url, message }
            }
            (_, code) => SynthesisError::CatalogFailed {
                url,
                message: format!("{code:?}: {message}"),
            },
        }
    }

    fn no_answer(&self, timeout: Duration) -> SynthesisError {
        SynthesisError::CatalogUnavailable {
            url: self.url.clone(),
            message: format!("no answer within {}ms", timeout.as_millis()),
        }
    }

    fn unusable_token(&self, pack_id: &str, message: String) -> SynthesisError {
        SynthesisError::CloneFailed {
            pack_id: pack_id.to_owned(),
            scope: String::new(),
            message,
        }
    }
}

/// What clone calls are asked with: the admin token as bearer metadata, and a deadline.
fn request<T>(message: T, token: &Secret, timeout: Duration) -> Result<tonic::Request<T>, String> {
    let mut req = tonic::Request::new(message);
    req.set_timeout(timeout);
    let value = format!("Bearer {}", token.expose())
        .parse()
        .map_err(|_| "the admin token is not valid metadata".to_owned())?;
    req.metadata_mut().insert("authorization", value);
    Ok(req)
}

#[cfg(test)]
mod tests {
    use tonic_types::{ErrorDetails, StatusExt as _};

    use super::*;

    async fn refusal(reason: CatalogReason) -> SynthesisError {
        let status = Status::with_error_details(
            Code::NotFound,
            "not found",
            ErrorDetails::with_error_info(
                reason.as_str(),
                "voxpool.dev",
                std::collections::HashMap::new(),
            ),
        );
        Catalog::connect_lazy("http://127.0.0.1:1")
            .unwrap()
            .clone_refusal("p1", &status)
    }

    #[tokio::test]
    async fn a_clone_call_answers_pack_not_found_only_for_the_reason_pack_not_found() {
        assert!(matches!(
            refusal(CatalogReason::PackNotFound).await,
            SynthesisError::CatalogNotFound { .. }
        ));
        let clone = refusal(CatalogReason::CloneNotFound).await;
        assert!(
            !matches!(clone, SynthesisError::CatalogNotFound { .. }),
            "{clone:?}"
        );
    }
}
