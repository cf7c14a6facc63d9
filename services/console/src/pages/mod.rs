//! The console's routes: server-rendered pages (askama templates under `templates/`), the
//! pools page's live feed, the static assets, and the security headers on every answer.
//!
//! Every page but `/login` needs a session (`crate::session`); without one it redirects to
//! `/login`. Admin actions answer 403 to a viewer session, and every form post is checked
//! for the session's CSRF token first. A service that fails shows as an error box naming it
//! on the part of the page it feeds; the rest of the page renders.

mod admin;
mod assets;
mod cache;
mod jobs;
mod login;
mod market;
mod pack;
mod packform;
mod pools;

use std::sync::Arc;

use askama::Template;
use axum::{
    Router,
    extract::{FromRequestParts, Request, State},
    http::{HeaderValue, StatusCode, header, request::Parts},
    middleware::{self, Next},
    response::{Html, IntoResponse, Redirect, Response},
    routing::get,
};
use axum_extra::extract::CookieJar;

use crate::{
    backend::Backend,
    live::Hub,
    session::{COOKIE, Session, Sessions},
};

/// What every handler shares.
#[derive(Debug)]
pub struct App {
    /// The four services.
    pub backend: Backend,
    /// Who is signed in.
    pub sessions: Sessions,
    /// The pools' live feed.
    pub hub: Arc<Hub>,
    /// Tenant whose jobs the jobs page lists when the page names none.
    pub jobs_tenant: String,
}

/// The shared state handlers receive.
pub type Shared = Arc<App>;

/// The Content-Security-Policy of every answer: this origin's scripts, styles and media
/// only, no inline script or style, no framing, forms posting only here.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
media-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The console's routes over `app`.
pub fn router(app: Shared) -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::to("/pools") }))
        // Liveness for probes: the process serves (each page says which service is down).
        .route("/healthz", get(|| async { "ok" }))
        .merge(login::routes())
        .merge(pools::routes())
        .merge(market::routes())
        .merge(pack::routes())
        .merge(admin::routes())
        .merge(jobs::routes())
        .merge(cache::routes())
        .merge(assets::routes())
        .fallback(not_found)
        .layer(middleware::from_fn(headers))
        .with_state(app)
}

/// Security headers on every answer; pages are never cached.
async fn headers(request: Request, next: Next) -> Response {
    let is_asset = request.uri().path().starts_with("/assets/");
    let mut response = next.run(request).await;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if !is_asset {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// The navigation bar's facts, on every page.
#[derive(Debug)]
pub struct Nav {
    /// The page's name (its link is marked current).
    pub page: &'static str,
    /// True for an admin session (admin actions shown).
    pub admin: bool,
    /// The session's CSRF token, for the page's forms.
    pub csrf: String,
}

impl Nav {
    /// For `session` on `page`.
    pub fn new(page: &'static str, session: &Session) -> Self {
        Self {
            page,
            admin: session.is_admin(),
            csrf: session.csrf.clone(),
        }
    }

    /// `aria-current` for the link of `page`.
    pub fn current(&self, page: &str) -> &'static str {
        if self.page == page { "page" } else { "false" }
    }
}

/// The signed-in session of a request; without one the request is redirected to `/login`.
#[derive(Debug)]
pub struct Signed(pub Session);

impl FromRequestParts<Shared> for Signed {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &Shared) -> Result<Self, Response> {
        let jar = CookieJar::from_headers(&parts.headers);
        jar.get(COOKIE)
            .and_then(|c| app.sessions.get(c.value()))
            .map(Signed)
            .ok_or_else(|| Redirect::to("/login").into_response())
    }
}

impl Signed {
    /// The session if it may take admin actions and `csrf` is its token; else why not.
    pub fn admin_with(&self, csrf: &str) -> Result<&Session, Refused> {
        self.with(csrf)?;
        if self.0.is_admin() {
            Ok(&self.0)
        } else {
            Err(Refused(
                "this action needs an admin session: sign in with the admin token (VOXPOOL_ADMIN_TOKEN)",
            ))
        }
    }

    /// The session if `csrf` is its token; else why not.
    pub fn with(&self, csrf: &str) -> Result<&Session, Refused> {
        if self.0.check_csrf(csrf) {
            Ok(&self.0)
        } else {
            Err(Refused(
                "the form's security token is missing or stale: reload the page and submit it again",
            ))
        }
    }
}

/// A post refused before it reached a service: answered 403 with the reason.
#[derive(Debug)]
pub struct Refused(&'static str);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        forbidden(self.0)
    }
}

#[derive(Template)]
#[template(path = "problem.html")]
struct Problem<'a> {
    title: &'a str,
    message: &'a str,
}

/// A plain error page with `status` (no session details, no token).
pub fn problem(status: StatusCode, title: &str, message: &str) -> Response {
    (status, render(&Problem { title, message })).into_response()
}

fn forbidden(message: &str) -> Response {
    problem(StatusCode::FORBIDDEN, "Not allowed", message)
}

async fn not_found() -> Response {
    problem(
        StatusCode::NOT_FOUND,
        "No such page",
        "the console has no page at this address: use the navigation to find yours",
    )
}

/// A template rendered as HTML; a template failure is a 500 naming no detail of the data.
pub fn render(template: &impl Template) -> Response {
    match template.render() {
        Ok(html) => Html(html).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "a template failed to render");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the console could not render this page; its log says why",
            )
                .into_response()
        }
    }
}

/// `value` percent-encoded for a query string.
pub fn query(value: &str) -> String {
    url::form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

/// Redirect after a successful post (303: the browser then GETs).
pub fn see_other(to: &str) -> Response {
    Redirect::to(to).into_response()
}

/// The state extractor, re-exported for the page modules.
pub type AppState = State<Shared>;
