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
/// authenticated call carries its [`super::CallerIdentity`] (and, for a bound token, its
/// [`super::TenantBinding`]) in the request extensions and records it as `caller` on the RPC's
/// span; a refused one is answered UNAUTHENTICATED without reaching `inner`.
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
        // `/<service>/<method>` exactly: any other path is not an admin method.
        let mut parts = request.uri().path().split('/');
        let method = match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(""), Some(_), Some(method), None) => method,
            _ => "",
        };
        if !self.auth.is_enabled() || self.open_methods.contains(&method) {
            return Box::pin(self.inner.call(request));
        }
        match self
            .auth
            .authenticate_bound(request.headers(), request.extensions())
        {
            Ok(caller) => {
                let caller = caller.map(|(caller, binding)| {
                    request.extensions_mut().insert(caller.clone());
                    if let Some(binding) = binding {
                        request.extensions_mut().insert(binding);
                    }
                    caller
                });
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

#[cfg(test)]
mod tests {
    use tower::ServiceExt as _;

    use voxpool_domain::secret::Secret;

    use super::*;
    use crate::auth::caller_identity;

    /// Answers OK with the caller identity and tenant binding it was given (as a handler reads
    /// them) in headers.
    fn echo_caller()
    -> tower::util::BoxCloneSyncService<http::Request<Body>, http::Response<Body>, Infallible> {
        tower::util::BoxCloneSyncService::new(tower::service_fn(|r: http::Request<Body>| async {
            let request = tonic::Request::from_http(r);
            let who = caller_identity(&request).map_or("none".to_owned(), ToString::to_string);
            let tenants = crate::auth::tenant_binding(&request)
                .map_or("any".to_owned(), |b| b.tenants().join(","));
            let mut answer = tonic::Status::ok("").into_http::<Body>();
            answer
                .headers_mut()
                .insert("x-caller", who.parse().expect("header"));
            answer
                .headers_mut()
                .insert("x-tenants", tenants.parse().expect("header"));
            Ok::<_, Infallible>(answer)
        }))
    }

    async fn call(auth: ClientAuth, path: &str, bearer: Option<&str>) -> http::Response<Body> {
        let mut request = http::Request::builder().uri(path);
        if let Some(token) = bearer {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        Authenticated::new(echo_caller(), auth, &["DisableKey"])
            .oneshot(request.body(Body::empty()).expect("request"))
            .await
            .expect("infallible")
    }

    fn header<'a>(response: &'a http::Response<Body>, name: &str) -> Option<&'a str> {
        response.headers().get(name).and_then(|v| v.to_str().ok())
    }

    #[tokio::test]
    async fn handlers_see_the_caller_and_refused_calls_never_reach_them() {
        let auth = ClientAuth::with_tokens(
            [(
                "synthesis".to_owned(),
                Secret::new("synthesis-token-0123456789"),
            )],
            false,
        )
        .expect("auth");
        let acquire = "/voxpool.scheduler.v1.PoolScheduler/Acquire";
        let served = call(auth.clone(), acquire, Some("synthesis-token-0123456789")).await;
        assert_eq!(header(&served, "x-caller"), Some("token:synthesis"));
        for bearer in [None, Some("not-a-known-token-0123")] {
            let refused = call(auth.clone(), acquire, bearer).await;
            assert_eq!(header(&refused, "x-caller"), None, "{bearer:?}");
            assert_eq!(
                header(&refused, "grpc-status"),
                Some("16"),
                "UNAUTHENTICATED"
            );
        }
        // An admin method passes untouched (its handler checks the admin token).
        let admin = call(
            auth.clone(),
            "/voxpool.scheduler.v1.PoolScheduler/DisableKey",
            Some("admin"),
        )
        .await;
        assert_eq!(header(&admin, "x-caller"), Some("none"));
        // Only that exact path: a longer one ending in an admin name is guarded.
        let longer = call(
            auth,
            "/voxpool.scheduler.v1.PoolScheduler/Acquire/DisableKey",
            None,
        )
        .await;
        assert_eq!(header(&longer, "grpc-status"), Some("16"));
        // Nothing configured: every call passes, without identity.
        let open = call(ClientAuth::open(), acquire, None).await;
        assert_eq!(header(&open, "x-caller"), Some("none"));
    }

    #[tokio::test]
    async fn handlers_see_a_bound_tokens_tenants_and_no_binding_for_an_unbound_one() {
        let auth = ClientAuth::with_bound_tokens(
            [
                (
                    "apps".to_owned(),
                    Secret::new("apps-token-0123456789"),
                    Some(crate::auth::TenantBinding::new(
                        "apps",
                        vec!["team-a".to_owned(), "team-b".to_owned()],
                    )),
                ),
                ("ops".to_owned(), Secret::new("ops-token-0123456789"), None),
            ],
            false,
        )
        .expect("auth");
        let jobs = "/voxpool.jobs.v1.Jobs/ListJobs";
        let bound = call(auth.clone(), jobs, Some("apps-token-0123456789")).await;
        assert_eq!(header(&bound, "x-caller"), Some("token:apps"));
        assert_eq!(header(&bound, "x-tenants"), Some("team-a,team-b"));
        let unbound = call(auth, jobs, Some("ops-token-0123456789")).await;
        assert_eq!(header(&unbound, "x-caller"), Some("token:ops"));
        assert_eq!(header(&unbound, "x-tenants"), Some("any"));
    }
}
