//! `/packs/{id}`: one pack with its revisions, reference clips, frozen snapshot (the JSON a
//! card keeps) and the card binding form; `/packs/{id}/audition.wav`: a short sample spoken
//! by the pack through synthesis (its audio cache serves every audition after the first);
//! `/packs/{id}/clips/{digest}`: one of its reference clips as the catalog keeps it (played on
//! the page);
//! `POST /packs/{id}/bind`: an uploaded character card, answered as a download with the
//! pack's snapshot at `data.extensions.airi.modules.speech.voicePack`.

use askama::Template;
use axum::{
    Router,
    extract::{Multipart, Path, State},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};

use super::{Nav, Shared, Signed, problem, render};
use crate::{
    backend::{BackendError, catalog::PackDetail},
    view::ClipView,
};

/// Largest card accepted (the catalog's own limit).
const MAX_CARD_BYTES: usize = 1 << 20;

pub fn routes() -> axum::Router<Shared> {
    Router::new()
        .route("/packs/{id}", get(page))
        .route("/packs/{id}/audition.wav", get(audition))
        .route("/packs/{id}/clips/{digest}", get(clip))
        .route("/packs/{id}/bind", post(bind))
}

#[derive(Template)]
#[template(path = "pack.html")]
struct PackPage {
    nav: Nav,
    detail: PackDetail,
    error: Option<String>,
}

impl PackPage {
    fn live_clips(clips: &[ClipView]) -> usize {
        clips.iter().filter(|c| !c.removed).count()
    }
}

fn failure_status(e: &BackendError) -> StatusCode {
    match e.code {
        tonic::Code::NotFound => StatusCode::NOT_FOUND,
        tonic::Code::InvalidArgument => StatusCode::BAD_REQUEST,
        tonic::Code::FailedPrecondition => StatusCode::CONFLICT,
        _ => StatusCode::BAD_GATEWAY,
    }
}

async fn page(
    State(app): State<Shared>,
    Signed(session): Signed,
    Path(id): Path<String>,
) -> Response {
    match app.backend.pack_detail(&id).await {
        Ok(detail) => render(&PackPage {
            nav: Nav::new("market", &session),
            detail,
            error: None,
        }),
        Err(e) => problem(failure_status(&e), "Pack not shown", &e.summary()),
    }
}

async fn audition(
    State(app): State<Shared>,
    Signed(_): Signed,
    Path(id): Path<String>,
) -> Response {
    let locale = match app.backend.pack(&id).await {
        Ok(pack) => pack.locales.first().cloned().unwrap_or_default(),
        Err(e) => return (failure_status(&e), e.summary()).into_response(),
    };
    match app.backend.audition(&id, &locale).await {
        Ok(wav) => (
            [(header::CONTENT_TYPE, HeaderValue::from_static("audio/wav"))],
            wav,
        )
            .into_response(),
        Err(e) => (failure_status(&e), e.summary()).into_response(),
    }
}

/// The media types a clip is served as (what the catalog accepts); anything else goes out as
/// bytes the browser does not play.
fn clip_type(content_type: &str) -> HeaderValue {
    match content_type {
        "audio/wav" => HeaderValue::from_static("audio/wav"),
        "audio/mpeg" => HeaderValue::from_static("audio/mpeg"),
        "audio/flac" => HeaderValue::from_static("audio/flac"),
        _ => HeaderValue::from_static("application/octet-stream"),
    }
}

async fn clip(
    State(app): State<Shared>,
    Signed(_): Signed,
    Path((id, digest)): Path<(String, String)>,
) -> Response {
    match app.backend.clip_audio(&id, &digest).await {
        Ok((audio, content_type)) => (
            [
                (header::CONTENT_TYPE, clip_type(&content_type)),
                (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
            ],
            audio,
        )
            .into_response(),
        Err(e) => (failure_status(&e), e.summary()).into_response(),
    }
}

/// The multipart form's `csrf` and `card` fields.
async fn card_form(mut form: Multipart) -> Result<(String, String), String> {
    let (mut csrf, mut card) = (String::new(), None);
    while let Some(field) = form
        .next_field()
        .await
        .map_err(|e| format!("the upload could not be read ({e}): pick the file again"))?
    {
        match field.name() {
            Some("csrf") => csrf = field.text().await.unwrap_or_default(),
            Some("card") => {
                let bytes = field
                    .bytes()
                    .await
                    .map_err(|e| format!("the card could not be read ({e}): pick it again"))?;
                if bytes.len() > MAX_CARD_BYTES {
                    return Err(
                        "the card is over 1 MiB: the catalog binds cards up to 1 MiB".into(),
                    );
                }
                card = Some(String::from_utf8(bytes.to_vec()).map_err(|_| {
                    "the card is not UTF-8 text: upload the card's JSON file".to_owned()
                })?);
            }
            _ => {}
        }
    }
    let card = card
        .filter(|c| !c.trim().is_empty())
        .ok_or("no card was uploaded: choose a character card JSON file")?;
    Ok((csrf, card))
}

async fn bind(
    State(app): State<Shared>,
    signed: Signed,
    Path(id): Path<String>,
    form: Multipart,
) -> Response {
    let (csrf, card) = match card_form(form).await {
        Ok(f) => f,
        Err(message) => return problem(StatusCode::BAD_REQUEST, "Card not bound", &message),
    };
    if let Err(refused) = signed.with(&csrf) {
        return refused.into_response();
    }
    match app.backend.bind(&id, card).await {
        Ok(bound) => {
            let disposition = format!(
                "attachment; filename=\"card-{}.json\"",
                id.chars()
                    .filter(char::is_ascii_alphanumeric)
                    .collect::<String>()
            );
            (
                [
                    (
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    ),
                    (
                        header::CONTENT_DISPOSITION,
                        HeaderValue::from_str(&disposition)
                            .unwrap_or_else(|_| HeaderValue::from_static("attachment")),
                    ),
                ],
                bound,
            )
                .into_response()
        }
        Err(e) => match app.backend.pack_detail(&id).await {
            Ok(detail) => (
                failure_status(&e),
                render(&PackPage {
                    nav: Nav::new("market", &signed.0),
                    detail,
                    error: Some(e.summary()),
                }),
            )
                .into_response(),
            Err(_) => problem(failure_status(&e), "Card not bound", &e.summary()),
        },
    }
}
