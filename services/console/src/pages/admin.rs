//! The packs admin (admin sessions only): `/packs` (every pack, disabled ones too, with
//! enable/disable), `/packs/new` and `/packs/{id}/edit` (the pack form, `packform`, showing
//! the catalog's own messages by their fields), and a pack's reference clips (add by upload,
//! remove). A viewer session gets 403 on every one of these, GET or POST.

use askama::Template;
use axum::{
    Form, Router,
    extract::{DefaultBodyLimit, Multipart, Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::Deserialize;
use voxpool_proto::catalog::v1 as cpb;

use super::{
    Nav, Shared, Signed,
    packform::{FieldMessages, PROVIDERS, PackForm},
    problem, render, see_other,
};
use crate::{
    backend::{BackendError, catalog::MarketFilter},
    view::{ClipView, PackView},
};

/// Largest clip upload (the catalog's limit is 10 MiB of audio).
const MAX_CLIP_BYTES: usize = 10 << 20;

pub fn routes() -> axum::Router<Shared> {
    Router::new()
        .route("/packs", get(list))
        .route("/packs/new", get(new_form).post(create))
        .route("/packs/{id}/edit", get(edit_form).post(update))
        .route("/packs/{id}/enabled", post(set_enabled))
        .route(
            "/packs/{id}/clips",
            post(add_clip).layer(DefaultBodyLimit::max(MAX_CLIP_BYTES + 64 * 1024)),
        )
        .route("/packs/{id}/clips/remove", post(remove_clip))
}

fn viewer_refused() -> Response {
    problem(
        StatusCode::FORBIDDEN,
        "Not allowed",
        "the packs admin needs an admin session: sign in with the admin token (VOXPOOL_ADMIN_TOKEN)",
    )
}

#[derive(Template)]
#[template(path = "packs.html")]
struct Packs {
    nav: Nav,
    packs: Result<Vec<PackView>, BackendError>,
    done: String,
}

async fn list(State(app): State<Shared>, Signed(session): Signed) -> Response {
    if !session.is_admin() {
        return viewer_refused();
    }
    render(&Packs {
        nav: Nav::new("packs", &session),
        packs: app.backend.packs(&MarketFilter::default(), true).await,
        done: String::new(),
    })
}

#[derive(Template)]
#[template(path = "packedit.html")]
struct Edit {
    nav: Nav,
    /// None for a new pack.
    id: Option<String>,
    form: PackForm,
    messages: FieldMessages,
    providers: [&'static str; 8],
    tiers: [&'static str; 4],
    clips: Vec<ClipView>,
    clip_error: String,
    selfhosted: bool,
}

impl Edit {
    fn new(nav: Nav, id: Option<String>, form: PackForm, messages: FieldMessages) -> Self {
        Self {
            nav,
            id,
            selfhosted: form.provider == "selfhosted",
            form,
            messages,
            providers: PROVIDERS,
            tiers: ["LITE", "STANDARD", "PRO", "PREMIUM"],
            clips: Vec::new(),
            clip_error: String::new(),
        }
    }
}

async fn new_form(Signed(session): Signed) -> Response {
    if !session.is_admin() {
        return viewer_refused();
    }
    let form = PackForm {
        tier: "STANDARD".into(),
        kind: "STANDARD".into(),
        ..PackForm::default()
    };
    render(&Edit::new(
        Nav::new("packs", &session),
        None,
        form,
        FieldMessages::default(),
    ))
}

async fn create(State(app): State<Shared>, signed: Signed, Form(form): Form<PackForm>) -> Response {
    let session = match signed.admin_with(&form.csrf) {
        Ok(s) => s.clone(),
        Err(refused) => return refused.into_response(),
    };
    let messages = match form.pack("") {
        Err(own) => FieldMessages::own(own),
        Ok(pack) => match app.backend.create_pack(pack).await {
            Ok(created) => {
                tracing::info!(pack = %created.id, "a pack was created from the console");
                return see_other(&format!("/packs/{}/edit", created.id));
            }
            Err(e) => FieldMessages::catalog(e),
        },
    };
    let page = Edit::new(Nav::new("packs", &session), None, form, messages);
    (StatusCode::UNPROCESSABLE_ENTITY, render(&page)).into_response()
}

/// The edit page of pack `id` with `form` and `messages` (the pack's current form when
/// `form` is `None`).
async fn edit_page(
    app: &Shared,
    nav: Nav,
    id: &str,
    form: Option<PackForm>,
    messages: FieldMessages,
    clip_error: String,
) -> Response {
    let pack = match app.backend.pack(id).await {
        Ok(p) => p,
        Err(e) => return problem(StatusCode::NOT_FOUND, "Pack not shown", &e.summary()),
    };
    let form = form.unwrap_or_else(|| PackForm::of(&pack));
    let mut page = Edit::new(nav, Some(id.to_owned()), form, messages);
    page.selfhosted = pack.provider == "selfhosted";
    page.clips = pack.clips;
    page.clip_error = clip_error;
    render(&page)
}

async fn edit_form(
    State(app): State<Shared>,
    Signed(session): Signed,
    Path(id): Path<String>,
) -> Response {
    if !session.is_admin() {
        return viewer_refused();
    }
    edit_page(
        &app,
        Nav::new("packs", &session),
        &id,
        None,
        FieldMessages::default(),
        String::new(),
    )
    .await
}

async fn update(
    State(app): State<Shared>,
    signed: Signed,
    Path(id): Path<String>,
    Form(form): Form<PackForm>,
) -> Response {
    let session = match signed.admin_with(&form.csrf) {
        Ok(s) => s.clone(),
        Err(refused) => return refused.into_response(),
    };
    let before = match app.backend.pack(&id).await {
        Ok(p) => PackForm::of(&p),
        Err(e) => return problem(StatusCode::NOT_FOUND, "Pack not changed", &e.summary()),
    };
    let paths = form.changed(&before);
    let messages = match form.pack(&id) {
        Err(own) => FieldMessages::own(own),
        Ok(_) if paths.is_empty() => return see_other(&format!("/packs/{id}")),
        Ok(pack) => {
            let version = form.version.trim().parse().unwrap_or(0);
            match app.backend.update_pack(pack, paths, version).await {
                Ok(_) => return see_other(&format!("/packs/{id}")),
                Err(e) => FieldMessages::catalog(e),
            }
        }
    };
    let nav = Nav::new("packs", &session);
    let page = edit_page(&app, nav, &id, Some(form), messages, String::new()).await;
    (StatusCode::UNPROCESSABLE_ENTITY, page).into_response()
}

#[derive(Deserialize)]
struct Toggle {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    enable: bool,
}

async fn set_enabled(
    State(app): State<Shared>,
    signed: Signed,
    Path(id): Path<String>,
    Form(form): Form<Toggle>,
) -> Response {
    let session = match signed.admin_with(&form.csrf) {
        Ok(s) => s.clone(),
        Err(refused) => return refused.into_response(),
    };
    let done = match app.backend.set_pack_enabled(&id, form.enable).await {
        Ok(p) if p.enabled => format!("{} is enabled: the market shows it again.", p.name),
        Ok(p) => format!(
            "{} is disabled: the market hides it; cards bound to it keep their snapshot.",
            p.name
        ),
        Err(e) => e.summary(),
    };
    render(&Packs {
        nav: Nav::new("packs", &session),
        packs: app.backend.packs(&MarketFilter::default(), true).await,
        done,
    })
}

/// The clip upload's fields.
#[derive(Default)]
struct ClipForm {
    csrf: String,
    audio: Vec<u8>,
    transcript: String,
    language: String,
    emotion: String,
    weight: String,
}

async fn clip_form(mut form: Multipart) -> Result<ClipForm, String> {
    let mut clip = ClipForm::default();
    while let Some(field) = form
        .next_field()
        .await
        .map_err(|e| format!("the upload could not be read ({e}); a clip is at most 10 MiB"))?
    {
        let name = field.name().unwrap_or_default().to_owned();
        if name == "audio" {
            clip.audio = field
                .bytes()
                .await
                .map_err(|e| format!("the clip could not be read ({e}); a clip is at most 10 MiB"))?
                .to_vec();
            continue;
        }
        let text = field.text().await.unwrap_or_default();
        match name.as_str() {
            "csrf" => clip.csrf = text,
            "transcript" => clip.transcript = text,
            "language" => clip.language = text,
            "emotion" => clip.emotion = text,
            "weight" => clip.weight = text,
            _ => {}
        }
    }
    Ok(clip)
}

async fn add_clip(
    State(app): State<Shared>,
    signed: Signed,
    Path(id): Path<String>,
    form: Multipart,
) -> Response {
    let clip = match clip_form(form).await {
        Ok(c) => c,
        Err(message) => return problem(StatusCode::BAD_REQUEST, "Clip not added", &message),
    };
    let session = match signed.admin_with(&clip.csrf) {
        Ok(s) => s.clone(),
        Err(refused) => return refused.into_response(),
    };
    let weight = clip.weight.trim();
    let request = cpb::AddReferenceRequest {
        pack_id: id.clone(),
        audio: clip.audio,
        transcript: clip.transcript.trim().to_owned(),
        language: clip.language.trim().to_owned(),
        emotion: clip.emotion.trim().to_owned(),
        weight: if weight.is_empty() {
            0
        } else {
            weight.parse().unwrap_or(u32::MAX)
        },
    };
    let nav = Nav::new("packs", &session);
    match app.backend.add_clip(request).await {
        Ok(_) => see_other(&format!("/packs/{id}/edit")),
        Err(e) => {
            let message = if e.fields.is_empty() {
                e.summary()
            } else {
                e.fields
                    .iter()
                    .map(|(f, d)| format!("{f}: {d}"))
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            let page = edit_page(&app, nav, &id, None, FieldMessages::default(), message).await;
            (StatusCode::UNPROCESSABLE_ENTITY, page).into_response()
        }
    }
}

#[derive(Deserialize)]
struct Remove {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    digest: String,
}

async fn remove_clip(
    State(app): State<Shared>,
    signed: Signed,
    Path(id): Path<String>,
    Form(form): Form<Remove>,
) -> Response {
    let session = match signed.admin_with(&form.csrf) {
        Ok(s) => s.clone(),
        Err(refused) => return refused.into_response(),
    };
    match app.backend.remove_clip(&id, &form.digest).await {
        Ok(_) => see_other(&format!("/packs/{id}/edit")),
        Err(e) => {
            let nav = Nav::new("packs", &session);
            edit_page(&app, nav, &id, None, FieldMessages::default(), e.summary()).await
        }
    }
}
