//! `/jobs`: a tenant's jobs (`?tenant=`, default the console's `--jobs-tenant`) with progress
//! bars, per-item failures, and cancel, delete (admin sessions) and download (every
//! succeeded item's audio as one tar archive).

use askama::Template;
use axum::{
    Form, Router,
    extract::{Path, Query, State},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::Deserialize;

use super::{Nav, Shared, Signed, problem, query, render};
use crate::{backend::BackendError, view::JobView};

pub fn routes() -> axum::Router<Shared> {
    Router::new()
        .route("/jobs", get(page))
        .route("/jobs/{id}/cancel", post(cancel))
        .route("/jobs/{id}/delete", post(delete))
        .route("/jobs/{id}/archive.tar", get(archive))
}

#[derive(Deserialize, Default)]
struct Tenant {
    tenant: Option<String>,
}

#[derive(Template)]
#[template(path = "jobs.html")]
struct Jobs {
    nav: Nav,
    tenant: String,
    tenant_query: String,
    jobs: Result<Vec<JobView>, BackendError>,
    done: String,
}

async fn page(
    State(app): State<Shared>,
    Signed(session): Signed,
    Query(t): Query<Tenant>,
) -> Response {
    let tenant = t.tenant.unwrap_or_else(|| app.jobs_tenant.clone());
    let jobs = app.backend.jobs(&tenant).await;
    render(&Jobs {
        nav: Nav::new("jobs", &session),
        tenant_query: query(&tenant),
        tenant,
        jobs,
        done: String::new(),
    })
}

#[derive(Deserialize)]
struct Action {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    tenant: String,
}

async fn act(app: Shared, signed: Signed, id: String, form: Action, cancel: bool) -> Response {
    let session = match signed.admin_with(&form.csrf) {
        Ok(s) => s.clone(),
        Err(refused) => return refused.into_response(),
    };
    let outcome = if cancel {
        app.backend
            .cancel_job(&id)
            .await
            .map(|j| format!("Job {} is {}: no item starts any more.", j.id, j.state))
    } else {
        app.backend
            .delete_job(&id)
            .await
            .map(|()| format!("Job {id} and its results are deleted."))
    };
    let (status, done) = match outcome {
        Ok(done) => (StatusCode::OK, done),
        Err(e) => (StatusCode::CONFLICT, e.summary()),
    };
    let jobs = app.backend.jobs(&form.tenant).await;
    (
        status,
        render(&Jobs {
            nav: Nav::new("jobs", &session),
            tenant_query: query(&form.tenant),
            tenant: form.tenant,
            jobs,
            done,
        }),
    )
        .into_response()
}

async fn cancel(
    State(app): State<Shared>,
    signed: Signed,
    Path(id): Path<String>,
    Form(form): Form<Action>,
) -> Response {
    act(app, signed, id, form, true).await
}

async fn delete(
    State(app): State<Shared>,
    signed: Signed,
    Path(id): Path<String>,
    Form(form): Form<Action>,
) -> Response {
    act(app, signed, id, form, false).await
}

async fn archive(State(app): State<Shared>, Signed(_): Signed, Path(id): Path<String>) -> Response {
    match app.backend.job_archive(&id).await {
        Ok(archive) if archive.items == 0 => problem(
            StatusCode::NOT_FOUND,
            "Nothing to download",
            "no item of this job has succeeded (yet): there is no audio to download",
        ),
        Ok(archive) => {
            let name: String = id
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            let disposition = format!("attachment; filename=\"job-{name}.tar\"");
            (
                [
                    (
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/x-tar"),
                    ),
                    (
                        header::CONTENT_DISPOSITION,
                        HeaderValue::from_str(&disposition)
                            .unwrap_or_else(|_| HeaderValue::from_static("attachment")),
                    ),
                ],
                archive.bytes,
            )
                .into_response()
        }
        Err(e) => problem(StatusCode::BAD_GATEWAY, "Download failed", &e.summary()),
    }
}
