//! gRPC channels to the voxpool services, the client token (`--token`, `VOXPOOL_CLIENT_TOKEN`)
//! sent to synthesis, the scheduler and jobs, and the admin bearer token.
//!
//! Channels connect lazily (the first call connects; a later call reconnects after a failure),
//! so a service that is down when voxctl starts is handled by the retry/breaker logic instead
//! of failing the whole run up front.

use tonic::{
    Request, Status,
    metadata::MetadataValue,
    service::{Interceptor, interceptor::InterceptedService},
    transport::Channel,
};
use voxpool_runtime::auth::ClientToken;

/// A channel whose calls carry the client token: for synthesis, the scheduler and jobs, whose
/// data-plane RPCs need one when they are configured with `[[client_tokens]]`.
pub type Authed = InterceptedService<Channel, ClientToken>;

/// Largest response accepted (long items produce large audio).
pub const MAX_MESSAGE_BYTES: usize = 256 << 20;

/// A service URL list that is not valid.
#[derive(Debug, thiserror::Error)]
#[error("invalid service URL {url:?}: {reason}")]
pub struct UrlError {
    /// The value given.
    pub url: String,
    /// Why.
    pub reason: String,
}

/// A channel to `spec`: one URL (`http://host:port`), a list (`URL,URL,...`) or a DNS name
/// standing for several replicas, balanced over the healthy ones
/// (`voxpool_runtime::endpoints`). Connects lazily. Needs a Tokio runtime.
pub fn channel(spec: &str) -> Result<Channel, UrlError> {
    voxpool_runtime::endpoints::Endpoints::start("service URL", spec)
        .map(|e| e.channel)
        .map_err(|reason| UrlError {
            url: spec.to_owned(),
            reason,
        })
}

/// [`channel`] with `token` sent on every call.
pub fn authed(spec: &str, token: &ClientToken) -> Result<Authed, UrlError> {
    Ok(InterceptedService::new(channel(spec)?, token.clone()))
}

/// The client token from `--token` / `VOXPOOL_CLIENT_TOKEN` (none when unset).
pub fn client_token(value: Option<&str>) -> Result<ClientToken, String> {
    ClientToken::load(None, "--token / VOXPOOL_CLIENT_TOKEN", value)
}

/// Adds `authorization: Bearer <token>` to every request.
#[derive(Clone)]
pub struct AdminToken(Option<MetadataValue<tonic::metadata::Ascii>>);

impl AdminToken {
    /// From the token text (`VOXPOOL_ADMIN_TOKEN`); `None` sends no header (the server then
    /// answers UNAUTHENTICATED, which names the variable).
    pub fn new(token: Option<&str>) -> Result<Self, String> {
        match token.map(str::trim).filter(|t| !t.is_empty()) {
            None => Ok(Self(None)),
            Some(t) => format!("Bearer {t}")
                .parse()
                .map(|v| Self(Some(v)))
                .map_err(|_| "VOXPOOL_ADMIN_TOKEN holds characters not allowed in a header".into()),
        }
    }
}

impl Interceptor for AdminToken {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "AdminToken(set)"
        } else {
            "AdminToken(none)"
        })
    }
}
