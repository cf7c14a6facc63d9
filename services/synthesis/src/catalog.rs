//! The catalog as synthesis uses it: `FreezeSnapshot(pack_id)` for requests that name a pack,
//! and the market listing (`ListVoicePacks`, enabled packs) for the HTTP front's voice list.
//! Catalog NOT_FOUND / FAILED_PRECONDITION / INVALID_ARGUMENT pass through with context; a
//! catalog that cannot be reached is UNAVAILABLE naming its URL. Managed voice clones (which
//! clone is READY in which scope, cloning on need, a clone gone or used) are read and written
//! through the catalog's admin RPCs with the deployment's admin token: [`clones`].

pub mod clones;

use std::time::Duration;

use tonic::{Code, service::interceptor::InterceptedService, transport::Channel};
use voxpool_domain::{
    contract::{CatalogReason, Reason as _, Retry, is_transport},
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
