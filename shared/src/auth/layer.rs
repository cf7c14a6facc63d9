//! [`Authenticated`]: a data-plane gRPC service behind [`ClientAuth`]. Only the wrapped
//! service is guarded: health and reflection, added beside it, stay open, and its admin
//! methods (which check the admin token themselves) are let through.

use std::{
    convert::Infallible,
    task::{Context, Poll},
};

use futures::future::BoxFuture;
use tonic::{body::Body, server::NamedService};
use tower::Service;

use super::ClientAuth;

/// `inner` answering only authenticated callers, except for `open_methods` (method names such
/// as `DisableKey`: the admin RPCs, whose `authorization` carries the admin token). An
/// authenticated call carries its [`super::CallerIdentity`] in the request extensions and
/// records it as `caller` on the RPC's span; a refused one is answered UNAUTHENTICATED
/// without reaching `inner`.
#[derive(Clone, Debug)]
pub struct Authenticated<S> {
    inner: S,
    auth: ClientAuth,
    open_methods: &'static [&'static str],
}

impl<S> Authenticated<S> {
    /// Guards `inner` with `auth` (module doc).
    pub fn new(inner: S, auth: ClientAuth, open_methods: &'static [&'static str]) -> Self {
        Self {
            inner,
            auth,
            open_methods,
        }
    }
}

impl<S: NamedService> NamedService for Authenticated<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<http::Request<Body>> for Authenticated<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        let method = request.uri().path().rsplit('/').next().unwrap_or_default();
        if !self.auth.is_enabled() || self.open_methods.contains(&method) {
            return Box::pin(self.inner.call(request));
        }
        match self
            .auth
            .authenticate(request.headers(), request.extensions())
        {
            Ok(caller) => {
                if let Some(caller) = &caller {
                    request.extensions_mut().insert(caller.clone());
                }
                let answer = self.inner.call(request);
                // The RPC's span is entered while this future runs, not during `call`.
                Box::pin(async move {
                    if let Some(caller) = caller {
                        tracing::Span::current().record("caller", caller.as_str());
                        tracing::debug!(%caller, "caller authenticated");
                    }
                    answer.await
                })
            }
            Err(status) => {
                let rpc = request.uri().path().to_owned();
                Box::pin(async move {
                    tracing::info!(%rpc, reason = %status.message(), "refused an unauthenticated call");
                    Ok(status.into_http())
                })
            }
        }
    }
}
