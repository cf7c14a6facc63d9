//! `GET /login`, `POST /login` (form field `token`), `POST /logout`.
//!
//! The sign-in form has no session yet, so no session CSRF token: a post whose `Origin` (or,
//! without one, `Referer`) is another site's is refused instead, and the session cookie is
//! `SameSite=Strict`. A wrong token answers 401 with the form again and says which tokens
//! sign in, never echoing what was typed.

use askama::Template;
use axum::{
    Form, Router,
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use axum_extra::extract::CookieJar;
use serde::Deserialize;

use super::{Shared, Signed, problem, render, see_other};
use crate::session::COOKIE;

pub fn routes() -> axum::Router<Shared> {
    Router::new()
        .route("/login", get(form).post(sign_in))
        .route("/logout", post(sign_out))
}

#[derive(Template)]
#[template(path = "login.html")]
struct Login<'a> {
    error: &'a str,
    unconfigured: bool,
}

async fn form(State(app): State<Shared>) -> Response {
    render(&Login {
        error: "",
        unconfigured: app.sessions.none_configured(),
    })
}

#[derive(Deserialize)]
struct SignIn {
    #[serde(default)]
    token: String,
}

/// True when the post comes from a page of this console (or says nothing of its origin, as
/// non-browser clients do).
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return true;
    };
    let from = headers
        .get(header::ORIGIN)
        .or_else(|| headers.get(header::REFERER))
        .and_then(|v| v.to_str().ok());
    match from {
        None | Some("null") => from.is_none(),
        Some(url) => url
            .split_once("://")
            .map(|(_, rest)| rest.split('/').next().unwrap_or(""))
            .is_some_and(|origin_host| origin_host.eq_ignore_ascii_case(host)),
    }
}

async fn sign_in(
    State(app): State<Shared>,
    headers: HeaderMap,
    jar: CookieJar,
    Form(form): Form<SignIn>,
) -> Response {
    if !same_origin(&headers) {
        return problem(
            StatusCode::FORBIDDEN,
            "Sign-in refused",
            "this sign-in came from another site's page: open the console's own /login page and sign in there",
        );
    }
    match app.sessions.sign_in(&form.token) {
        Some(cookie) => {
            tracing::info!("a console session was opened");
            (jar.add(cookie), see_other("/pools")).into_response()
        }
        None => {
            tracing::info!("a console sign-in was refused: wrong token");
            (
                StatusCode::UNAUTHORIZED,
                render(&Login {
                    error: "that token opens no session: use the admin token (VOXPOOL_ADMIN_TOKEN) or the read-only console token (VOXPOOL_CONSOLE_TOKEN)",
                    unconfigured: app.sessions.none_configured(),
                }),
            )
                .into_response()
        }
    }
}

#[derive(Deserialize)]
struct SignOut {
    #[serde(default)]
    csrf: String,
}

async fn sign_out(
    State(app): State<Shared>,
    signed: Signed,
    jar: CookieJar,
    Form(form): Form<SignOut>,
) -> Response {
    if let Err(refused) = signed.with(&form.csrf) {
        return refused.into_response();
    }
    let Some(id) = jar.get(COOKIE).map(|c| c.value().to_owned()) else {
        return see_other("/login");
    };
    (jar.add(app.sessions.sign_out(&id)), see_other("/login")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(k, v.parse().expect("header"));
        }
        h
    }

    #[test]
    fn a_post_from_another_site_is_not_same_origin() {
        assert!(same_origin(&headers(&[(header::HOST, "127.0.0.1:8090")])));
        assert!(same_origin(&headers(&[
            (header::HOST, "127.0.0.1:8090"),
            (header::ORIGIN, "http://127.0.0.1:8090"),
        ])));
        assert!(!same_origin(&headers(&[
            (header::HOST, "127.0.0.1:8090"),
            (header::ORIGIN, "https://evil.example"),
        ])));
        assert!(!same_origin(&headers(&[
            (header::HOST, "127.0.0.1:8090"),
            (header::ORIGIN, "null"),
        ])));
    }
}
