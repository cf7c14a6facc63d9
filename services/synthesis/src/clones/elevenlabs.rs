//! ElevenLabs instant voice cloning, in the workspace of the step's key (docs/VENDORS.md,
//! "Voice cloning", ElevenLabs; <https://elevenlabs.io/docs/api-reference/voices/ivc/create>):
//! - CREATE: `POST /v1/voices/add`, multipart `name` = the pack id (so `ImportClones` binds it
//!   back) and one `files` part per clip → `voice_id`, ready at once (no training, no expiry
//!   rule). A full workspace (`voice_limit_reached`) is `failed` naming the scope and the
//!   vendor's count.
//! - DELETE: `DELETE /v1/voices/{id}`, which frees the slot; `voice_not_found` means it is
//!   gone already: `deleted`.
//! - IMPORT: `GET /v1/voices`, the `cloned` ones with their names.
//! - POLL, KEEPALIVE: `ready` (nothing to wait for, nothing to keep alive).

use reqwest::multipart::{Form, Part};
use serde_json::Value;
use voxpool_domain::{provider::Provider, secret::Secret};

use super::{
    Outcome, Work,
    step::{self, Context, Step},
};
use crate::adapters::{
    gate::Gate,
    http::{self, HttpReply},
};

const PROVIDER: &str = Provider::ElevenLabs.as_str();
const DEFAULT_BASE: &str = "https://api.elevenlabs.io";

/// Runs the step (module doc).
pub async fn run(ctx: &Context, step: Step<'_>) -> Outcome {
    let secret = match http::require_secret(PROVIDER, step.key) {
        Ok(s) => s,
        Err(f) => return step::from_failure(f),
    };
    let result = match step.task.work {
        Work::Create => create(ctx, step, secret).await,
        Work::Delete => delete(ctx, step, secret).await,
        Work::Import => import(ctx, step, secret).await,
        Work::Poll | Work::KeepAlive => step.voice_id().map(|id| Outcome::Ready {
            vendor_voice_id: id.to_owned(),
            expires_at: None,
        }),
    };
    result.unwrap_or_else(|o| o)
}

/// `{base}/v1/voices` and then `segments`, each one path segment.
fn url(step: &Step<'_>, segments: &[&str]) -> Result<reqwest::Url, Outcome> {
    let base = http::base_url(step.upstream.base_url.as_deref(), DEFAULT_BASE);
    let bad = |why: String| step::from_failure(http::upstream_config_failure(PROVIDER, why));
    let mut url = reqwest::Url::parse(&base)
        .map_err(|e| bad(format!("upstream base_url is not a URL: {e}")))?;
    url.path_segments_mut()
        .map_err(|()| bad("upstream base_url cannot take a path".to_owned()))?
        .pop_if_empty()
        .extend(["v1", "voices"])
        .extend(segments);
    Ok(url)
}

/// `detail.status` (or `detail.code`) and `detail.message` of an error answer.
fn detail(reply: &HttpReply) -> (String, String) {
    let doc: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    let d = &doc["detail"];
    let code = d["status"].as_str().or_else(|| d["code"].as_str());
    let message = d["message"].as_str().or_else(|| d.as_str());
    (
        code.unwrap_or_default().to_owned(),
        message.unwrap_or_default().to_owned(),
    )
}

/// An error answer as a report: `voice_limit_reached` names the scope; the rest by status.
fn refusal(step: &Step<'_>, reply: &HttpReply, secret: &Secret) -> Outcome {
    let (code, message) = detail(reply);
    if code == "voice_limit_reached" {
        return Outcome::Failed(http::scrub(
            &format!(
                "scope {} is full at ElevenLabs (HTTP {} {code}: {message}); delete a clone \
                 there or clone into another scope",
                step.scope.id,
                reply.status.as_u16()
            ),
            Some(secret),
        ));
    }
    let outcome =
        (code == "rate_limit_exceeded").then_some(voxpool_domain::contract::Outcome::RateLimited);
    step::from_failure(
        http::ErrorAnswer::of(reply, code, &message, outcome).failure(PROVIDER, Some(secret)),
    )
}

async fn send(
    step: &Step<'_>,
    builder: reqwest::RequestBuilder,
    secret: &Secret,
) -> Result<HttpReply, Outcome> {
    let builder = builder.header("xi-api-key", secret.expose());
    http::send(
        PROVIDER,
        builder,
        step.timeout,
        Some(secret),
        &Gate::default(),
    )
    .await
    .map_err(step::from_failure)
}

async fn create(ctx: &Context, step: Step<'_>, secret: &Secret) -> Result<Outcome, Outcome> {
    let clips = step::clips(ctx, step.task).await?;
    let mut form = Form::new().text("name", step.task.pack_id.clone());
    for (i, clip) in clips.iter().enumerate() {
        let part = Part::bytes(clip.bytes.to_vec())
            .file_name(step::file_name(i, clip))
            .mime_str(step::media_type(clip))
            .map_err(|e| Outcome::Failed(format!("clip {i}: {e}")))?;
        form = form.part("files", part);
    }
    let url = url(&step, &["add"])?;
    let reply = send(&step, ctx.http.post(url).multipart(form), secret).await?;
    if !reply.status.is_success() {
        return Ok(refusal(&step, &reply, secret));
    }
    let doc: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    match doc["voice_id"].as_str().filter(|id| !id.is_empty()) {
        Some(id) => Ok(Outcome::Ready {
            vendor_voice_id: id.to_owned(),
            expires_at: None,
        }),
        None => Ok(Outcome::Retry {
            after: std::time::Duration::ZERO,
            error: "elevenlabs: voices/add answered without a voice_id".into(),
        }),
    }
}

async fn delete(ctx: &Context, step: Step<'_>, secret: &Secret) -> Result<Outcome, Outcome> {
    let id = step.voice_id()?;
    let url = url(&step, &[id])?;
    let reply = send(&step, ctx.http.delete(url), secret).await?;
    if reply.status.is_success() || detail(&reply).0 == "voice_not_found" {
        return Ok(Outcome::Deleted);
    }
    Ok(refusal(&step, &reply, secret))
}

async fn import(ctx: &Context, step: Step<'_>, secret: &Secret) -> Result<Outcome, Outcome> {
    let url = url(&step, &[])?;
    let reply = send(&step, ctx.http.get(url), secret).await?;
    if !reply.status.is_success() {
        return Ok(refusal(&step, &reply, secret));
    }
    let doc: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    let voices = doc["voices"].as_array().map_or(&[][..], Vec::as_slice);
    Ok(Outcome::Imported(
        voices
            .iter()
            .filter(|v| v["category"].as_str() == Some("cloned"))
            .filter_map(|v| {
                let id = v["voice_id"].as_str()?;
                Some((id.to_owned(), v["name"].as_str().unwrap_or("").to_owned()))
            })
            .collect(),
    ))
}
